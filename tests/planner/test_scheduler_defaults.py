"""Engine scheduler defaults (planner/scheduler_defaults.py) against the rules in each engine's source, by hand.

vLLM V1 `vllm serve` (vllm/engine/arg_utils.py get_batch_defaults): >= 70 GiB of device memory and no "a100" in the
name -> 8192 tokens per step and 1024 sequences, else 2048 and 256; chunked prefill on.
SGLang (server_args.py): chunked_prefill_size 2048 below 35 GiB, 8192 below 160 GiB, else 16384; running requests
(model_runner) min(max(pool / context_len x 512, 2048), 4096), whose floor is 2048.
TensorRT-LLM (llmapi/llm_args.py): max_batch_size 2048, max_num_tokens 8192, no context chunking.
The device memory is what the runtime reports (memory.visible_gb, decimal GB).
"""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from planner.hardware import load_hardware
from planner.scheduler_defaults import (PLANNER_DEFAULTS, resolve_scheduler, scheduler_defaults, scheduler_engine,
                                        sglang_mem_fraction_static, step_policy)
from planner.serving import make_config


@pytest.mark.parametrize("hw, gib, tokens, seqs", [
    ("h100-sxm", 85.0e9 / 2**30, 8192, 1024),       # 79.2 GiB >= 70
    ("h200-sxm", 149.85e9 / 2**30, 8192, 1024),
    ("mi300x", 205.82e9 / 2**30, 8192, 1024),       # "For GPUs like H100 and MI300x"
    ("a100-80gb-sxm", 84.99e9 / 2**30, 2048, 256),  # 79.2 GiB, but an A100 (PR #17885)
    ("l40s", 47.62e9 / 2**30, 2048, 256),           # 44.3 GiB < 70
    ("rtx-4090", 25.39e9 / 2**30, 2048, 256),
])
def test_vllm_v1_serve_defaults_by_device(hw, gib, tokens, seqs):
    spec = load_hardware(hw)
    assert spec.memory.visible_or_marketed_gb * 1e9 / 2**30 == pytest.approx(gib)
    d = scheduler_defaults("vllm", spec)
    assert (d.max_num_batched_tokens, d.max_num_seqs, d.chunked_prefill) == (tokens, seqs, True)


@pytest.mark.parametrize("hw, chunk", [
    ("t4", 2048),         # 15,097 MiB < 20 x 1024
    ("rtx-4090", 2048),   # 24,214 MiB < 35 x 1024
    ("l40s", 4096),       # 45,414 MiB < 60 x 1024 (PR #10975's "A100 (40GB), L40" tier)
    ("a100-40gb-sxm", 4096),
    ("h100-sxm", 8192),   # 81,062 MiB
    ("h200-sxm", 8192),   # 142,908 MiB < 160 x 1024 = 163,840
    ("b200", 16384),      # 182,257 MiB
    ("mi300x", 16384),
])
def test_sglang_chunked_prefill_size_by_device_memory(hw, chunk):
    d = scheduler_defaults("sglang", load_hardware(hw))
    assert d.max_num_batched_tokens == chunk and d.chunked_prefill
    assert d.max_num_seqs == 2048   # the floor of max(pool / context_len x 512, 2048); <= every chunk size


@pytest.mark.parametrize("hw, tp, fraction", [
    # round((M - R) / M, 3), M = CUDA total in MiB, R = 512 + 1.5 x max(chunk, 2048) + 2 x cuda_graph_max_bs + 128 x TP
    ("h100-sxm", 1, 0.834),   # M 81,062: R = 512 + 12,288 + 512 + 128 = 13,440 (above the 10,240 floor)
    ("h100-sxm", 8, 0.817),   # TP >= 4: 512 CUDA-graph batches; R = 512 + 12,288 + 1,024 + 1,024 = 14,848
    ("rtx-4090", 1, 0.845),   # M 24,214: R = 512 + 3,072 + 48 + 128 = 3,760
    ("l40s", 1, 0.849),       # M 45,414 (no floor below 60 GiB): R = 512 + 6,144 + 64 + 128 = 6,848
    ("b200", 8, 0.851),       # M 182,257: R = 512 + 24,576 + 1,024 + 1,024 = 27,136
])
def test_sglang_mem_fraction_static_by_device_and_tp(hw, tp, fraction):
    assert sglang_mem_fraction_static(load_hardware(hw), tp) == fraction


@pytest.mark.parametrize("hw, seqs", [
    ("a100-80gb-sxm", 384), ("a100-40gb-sxm", 384), ("h100-sxm", 1024), ("h200-sxm", 1024), ("l40s", 128),
    ("rtx-4090", 128),
])
def test_lmdeploy_max_batch_size_by_device_name(hw, seqs):
    # lmdeploy/utils.py get_max_batch_size('cuda'): a100/a800 384, h100/h800/l20y/h200 1024, else 128; a forward
    # holds max_prefill_token_num (8192) prompt tokens + one token per running sequence (max_forward_token_num)
    d = scheduler_defaults("lmdeploy", load_hardware(hw))
    assert (d.max_num_seqs, d.max_num_batched_tokens, d.chunked_prefill) == (seqs, 8192 + seqs, True)
    assert scheduler_engine(None, "lmdeploy") == "lmdeploy"


def test_other_engines_and_given_flags():
    spec = load_hardware("h100-sxm")
    for engine in (None, "none", "llamacpp"):
        assert scheduler_defaults(engine, spec) == PLANNER_DEFAULTS
    t = scheduler_defaults("trtllm", spec)
    assert (t.max_num_seqs, t.max_num_batched_tokens, t.chunked_prefill) == (2048, 8192, False)
    assert (PLANNER_DEFAULTS.max_num_seqs, PLANNER_DEFAULTS.max_num_batched_tokens) == (256, 8192)
    r = resolve_scheduler("vllm", spec, max_num_seqs=64, chunked_prefill=False)
    assert (r.max_num_seqs, r.max_num_batched_tokens, r.chunked_prefill) == (64, 8192, False)
    assert "given: max_num_seqs, chunked prefill" in r.source
    # whose scheduler: --engine first, else a --runtime that names an engine with rules
    assert scheduler_engine("sglang", "vllm") == "sglang"
    assert scheduler_engine("none", "vllm") == "vllm" and scheduler_engine("none", "trtllm") == "trtllm"
    assert scheduler_engine("none", "llamacpp") is None
    assert scheduler_engine("none", None) is None


def test_serving_config_takes_the_engine_defaults_and_keeps_given_values():
    c = make_config(hardware="h100-sxm", engine="vllm")
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.chunked_prefill) == (1024, 8192, True)
    c = make_config(hardware="a100-80gb-sxm", runtime="vllm")
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.chunked_prefill) == (256, 2048, True)
    c = make_config(hardware="h100-sxm")
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.chunked_prefill) == (256, 8192, False)
    c = make_config(hardware="h100-sxm", engine="vllm", max_num_batched_tokens=4096, chunked_prefill=False)
    assert (c.max_num_seqs, c.max_num_batched_tokens, c.chunked_prefill) == (1024, 4096, False)
    with pytest.raises(Exception, match="max_num_seqs"):
        make_config(hardware="h100-sxm", engine="vllm", max_num_seqs=0)


def test_cli_simulate_prints_the_scheduler_it_ran(capsys):
    assert main(["simulate", "-m", "llama-3.1-8b", "-H", "l40s", "--engine", "vllm", "--requests", "200"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert ("max_num_seqs 256, 2048 tokens/step, chunked prefill (vLLM V1 serve defaults, < 70 GiB or an A100; "
            "chunked prefill beside the decodes)") in head
    assert main(["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "sglang", "--requests", "200"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "max_num_seqs 2048, 8192 tokens/step, chunked prefill" in head and "SGLang: prefill steps first" in head
    assert main(["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "vllm", "--no-chunked-prefill",
                 "--max-num-seqs", "32", "--requests", "200", "--json"]) == 0
    cfg = json.loads(capsys.readouterr().out)["config"]
    assert (cfg["max_num_seqs"], cfg["max_num_batched_tokens"], cfg["chunked_prefill"]) == (32, 8192, False)


def test_step_policy_per_engine():
    """vLLM mixes prompt work into the decode steps exactly when it chunks (V1 / V0); SGLang runs its prefill steps
    apart whether it chunks or not (mixed chunks are its --enable-mixed-chunk, off); TensorRT-LLM's in-flight batching
    puts whole prompts beside the decodes and reserves every request's output (GUARANTEED_NO_EVICT)."""
    for chunked in (True, False):
        assert (step_policy("vllm", chunked).mixed_prefill, step_policy("vllm", chunked).reserve_output) == (chunked, False)
        assert (step_policy(None, chunked).mixed_prefill, step_policy(None, chunked).reserve_output) == (chunked, False)
        assert (step_policy("sglang", chunked).mixed_prefill, step_policy("sglang", chunked).reserve_output) == (False, False)
        assert (step_policy("trtllm", chunked).mixed_prefill, step_policy("trtllm", chunked).reserve_output) == (True, True)
