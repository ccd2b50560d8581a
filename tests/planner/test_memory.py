"""Memory limits and engine KV-sizing rules, derived by hand."""

import math

import pytest

from planner import estimate
from planner.architecture import load_model
from planner.memory import engine_kv
from planner.quantization import weight_format

W_7B = 6_738_415_616 * 2  # Llama-2-7B fp16 weights, bytes
KV_TOK_7B = 524_288       # bytes per token
OVH = 1.0e9               # runtime overhead of a GPU (hardware_specs/defaults/efficiency.yaml)


def test_vllm_blocks_by_hand():
    # A100 80GB: the runtime sees 85.38e9 B (visible_gb: nvidia-smi 81920 MiB x 0.994), x 0.9 = 76.84e9 usable by
    # vLLM; profiling run of 8192 tokens: MLP live set 8192 x (2 x 4096 +
    # 3 x 11008) x 2 B + logits 32000 x 4 B; blocks of 16 tokens x 524,288 B
    act = 8192 * (2 * 4096 + 3 * 11008) * 2 + 32000 * 4
    pool = 85.38e9 * 0.9 - W_7B - act - OVH
    blocks = int(pool // (16 * KV_TOK_7B))
    e = estimate("llama-2-7b", "a100-80gb-sxm", batch=1, prompt=1024, output=1024, engine="vllm")
    assert e.engine.blocks == blocks == 7353
    # requests of 2048 tokens need 128 blocks each
    assert e.engine.max_concurrency == pytest.approx(blocks / 128)


def test_trtllm_sglang_llamacpp_rules():
    m, f = load_model("llama-2-7b"), weight_format("fp16")
    cap = 80e9
    t = engine_kv("trtllm", m, f, "fp16", 1, 1000, 24, cap, OVH)
    act = 1000 * (2 * 4096 + 3 * 11008) * 2 + 32000 * 4
    assert t.kv_pool_bytes == pytest.approx(0.9 * (cap - W_7B - act - OVH))
    s = engine_kv("sglang", m, f, "fp16", 1, 1000, 24, cap, OVH)
    assert s.kv_pool_bytes == pytest.approx(0.88 * cap - W_7B)
    assert s.max_concurrency == pytest.approx((0.88 * cap - W_7B) / (1024 * KV_TOK_7B))
    ll = engine_kv("llamacpp", m, f, "fp16", 4, 1000, 24, cap, OVH)
    assert ll.kv_pool_bytes == 4 * 1024 * KV_TOK_7B and ll.fits


def test_max_batch_and_context_by_hand():
    # A100 40GB: the runtime sees 42.30e9 B (visible_gb: deviceQuery 42,298,834,944 B)
    e = estimate("llama-2-7b", "a100-40gb-sxm", batch=1, prompt=1024, output=1024)
    act1 = 1024 * (2 * 4096 + 3 * 11008) * 2 + 32000 * 4
    assert e.memory.max_batch_at_context == math.floor((42.30e9 - W_7B - OVH) / (2048 * KV_TOK_7B + act1))
    # longest context at batch 1: weights + overhead + c x 524,288 + activations(c) <= 42.30e9
    c = e.memory.max_context_at_batch
    need = lambda c: W_7B + OVH + c * KV_TOK_7B + c * (2 * 4096 + 3 * 11008) * 2 + 32000 * 4  # noqa: E731
    assert need(c) <= 42.30e9 < need(c + 1)


def test_unified_memory_usable_fraction():
    e = estimate("llama-2-7b", "apple-m2-max", batch=1)
    from planner.hardware import load_hardware
    s = load_hardware("apple-m2-max")
    # 96 GB of LPDDR5 is 96 GiB = 103.08e9 B as macOS reports it (visible_gb), x usable_fraction 0.75
    assert e.memory.capacity_gb == pytest.approx(103.08 * 0.75)
    assert s.memory.visible_gb * s.memory.usable_fraction == pytest.approx(103.08 * 0.75)
    assert s.memory.usable_fraction < 1


def test_breakdown_adds_up():
    e = estimate("mixtral-8x7b", "h100-sxm", "int4-g128", batch=4, prompt=4096, output=512)
    m = e.memory
    assert m.total_gb == pytest.approx(m.weights_gb + m.kv_cache_gb + m.activations_gb + m.overhead_gb, rel=1e-12)


@pytest.mark.parametrize("engine", ["none", "vllm", "trtllm", "sglang", "llamacpp"])
def test_engine_rules_never_report_negative_pools(engine):
    # Llama-3.1-70B fp16 (141 GB of weights) on a 24 GB card: every engine says it does not fit, with an empty pool
    e = estimate("llama-3.1-70b", "rtx-4090", batch=8, engine=engine)
    assert not e.memory.fits and e.engine.kv_pool_gb >= 0 and e.engine.max_concurrency >= 0
