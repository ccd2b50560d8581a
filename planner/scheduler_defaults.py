"""The scheduler limits a serving engine starts with when its flags are not given: running sequences, tokens per step
and chunked prefill. `planner simulate --engine vllm` (or `--runtime vllm`) should run vLLM's scheduler as a user who
types `vllm serve` gets it, not the planner's generic one.

Sources (the code that sets each default; the device memory each rule reads is HardwareSpec.memory
visible_or_marketed_gb, what the runtime reports as total device memory):

  vllm    V1 engine (`vllm serve`, usage context OPENAI_API_SERVER), vllm/engine/arg_utils.py EngineArgs
          _set_default_args / get_batch_defaults (2025 releases): chunked prefill is on for generative models; on a
          device with >= 70 GiB of memory whose name does not contain "a100" ("For GPUs like H100 and MI300x"; A100
          excluded after PR #17885 measured lower throughput there) max_num_batched_tokens = 8192 and max_num_seqs =
          1024, else 2048 and 256; max_num_seqs is at most max_num_batched_tokens.
  sglang  python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings (PR #10975, 2025-09-27; v0.5.3 and
          later): from the GPU memory in MiB, chunked_prefill_size and cuda_graph_max_bs: < 20 x 1024 -> 2048 / 8
          (T4, 4080); < 35 x 1024 -> 2048 / 24, 80 at TP >= 4 (A10, 4090, 5090); < 60 x 1024 -> 4096 / 32, 160 at
          TP >= 4 (A100 40GB, L40); < 160 x 1024 -> 8192 / 256, 512 at TP >= 4 (A100 80GB, H100, H20, H200); else
          16384 / 512 (B200, MI300X); chunked prefill is on (a size of -1 turns it off). Then mem_fraction_static
          (the weights + KV pool's share of the device) = round((gpu_mem - reserved) / gpu_mem, 3) with reserved
          (MiB) = 512 + 1.5 max(chunk, 2048) (prefill activations) + 2 cuda_graph_max_bs (graph buffers) + 1024 TP x
          PP / 8, at least 10,240 on a device above 60 x 1024 MiB (sglang_mem_fraction_static; an H100 at TP1: 0.834,
          where the v0.3-0.4 rule, 0.88 at TP1 falling to 0.81 at TP8, gave more). Its running-request limit follows
          the KV pool (model_runner: max_num_reqs
          = min(max(pool / context_len x 512, 2048), 4096), then at most pool / 2): max_num_seqs is that rule's floor,
          2,048, below which it never goes for a pool of 4,096 tokens or more; the pool binds first for any request
          longer than pool / 2,048 tokens.
  trtllm  TensorRT-LLM's LLM API / trtllm-serve (tensorrt_llm/llmapi/llm_args.py): max_batch_size 2048, max_num_tokens
          8192, context chunking off (enable_chunked_prefill False).
  lmdeploy  LMDeploy TurboMind (lmdeploy/utils.py get_max_batch_size, TurbomindEngineConfig): max_batch_size by
          the CUDA device name, 384 on an A100 / A800, 1024 on an H100 / H800 / H200 / L20Y, else 128;
          max_prefill_token_num 8192 tokens of prompt per iteration, and a forward of up to max_forward_token_num =
          max_prefill_token_num + max_batch_size tokens (src/turbomind/turbomind.cc): prompt chunks beside one token
          of every running sequence.
  others  (llama.cpp, none): the planner's defaults, PLANNER_DEFAULTS (vLLM V0's max_num_seqs 256 and an 8,192-token
          step budget, whole prompts per step).

How a step is built (step_policy; planner/serving/simulator.py runs it):
  vllm    a step with prompt work carries every running decode with chunked prefill (V1, Sarathi-Serve), and runs
          whole prompts alone without it (V0's prefill-first);
  sglang  prefill steps of their own, before any decode (scheduler.get_next_batch_to_run, "Run prefill first if
          possible"; --enable-mixed-chunk, off by default, would mix them);
  trtllm  in-flight batching: whole prompts (context phase) beside every running decode (generation phase) in one
          step, and the GUARANTEED_NO_EVICT capacity policy (the default; docs "Useful Runtime Options"): a request
          starts only when the KV pool holds it to its last token, so none is ever paused.

A flag the user gives always wins over these (resolve_scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass

from .units import GB, GIB, MIB

VLLM_LARGE_DEVICE_BYTES = 70 * GIB   # get_batch_defaults: device_memory >= 70 * GiB_bytes
VLLM_LARGE = (8192, 1024)            # (max_num_batched_tokens, max_num_seqs) there
VLLM_SMALL = (2048, 256)             # and below it, or on an A100
# gpu_mem < bound (MiB) -> (chunked_prefill_size, cuda_graph_max_bs below TP 4, at TP >= 4); above the last bound:
# SGLANG_LARGEST = (16384, 512, 512)
SGLANG_TIERS_MIB = ((20 * 1024, (2048, 8, 8)), (35 * 1024, (2048, 24, 80)), (60 * 1024, (4096, 32, 160)),
                    (160 * 1024, (8192, 256, 512)))
SGLANG_LARGEST = (16384, 512, 512)
SGLANG_LARGEST_CHUNK = SGLANG_LARGEST[0]
SGLANG_RESERVED_BASE_MIB = 512          # reserved_mem: constant metadata (attention backends)
SGLANG_RESERVED_PER_CHUNK_TOKEN_MIB = 1.5  # x max(chunked_prefill_size, 2048): prefill activations
SGLANG_RESERVED_PER_GRAPH_BS_MIB = 2    # x cuda_graph_max_bs: CUDA-graph buffers
SGLANG_RESERVED_PER_RANK_MIB = 1024 / 8  # x TP x PP
SGLANG_RESERVED_FLOOR_MIB = 10 * 1024   # on a device with more than SGLANG_FLOOR_ABOVE_MIB
SGLANG_FLOOR_ABOVE_MIB = 60 * 1024
SGLANG_MIN_RUNNING = 2048            # model_runner max_num_reqs floor: min(max(pool / context_len x 512, 2048), 4096)
TRTLLM = (8192, 2048)                # llm_args: (max_num_tokens, max_batch_size)
LMDEPLOY_MAX_BATCH = (("a100", 384), ("a800", 384), ("h100", 1024), ("h800", 1024), ("l20y", 1024), ("h200", 1024))
LMDEPLOY_OTHER_MAX_BATCH = 128
LMDEPLOY_PREFILL_TOKENS = 8192
SCHEDULER_ENGINES = ("vllm", "sglang", "trtllm", "lmdeploy")  # engines whose own scheduler defaults this module knows


@dataclass(frozen=True)
class SchedulerDefaults:
    """Scheduler limits of one engine on one device, and where they come from."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    source: str


# vLLM V0's SchedulerConfig.max_num_seqs (256) and an 8,192-token step without chunking; also what planner/memory.py
# sizes vLLM V0's profiling run with
PLANNER_DEFAULTS = SchedulerDefaults(256, 8192, False, "planner defaults")


def device_memory_bytes(spec) -> float:
    """Total memory of one device as its runtime reports it (memory.visible_gb, else the marketed capacity)."""
    return float(spec.memory.visible_or_marketed_gb) * GB


def vllm_defaults(spec) -> SchedulerDefaults:
    """vLLM V1 `vllm serve` defaults on this device (module docstring)."""
    large = device_memory_bytes(spec) >= VLLM_LARGE_DEVICE_BYTES and "a100" not in spec.name.lower()
    tokens, seqs = VLLM_LARGE if large else VLLM_SMALL
    tier = ">= 70 GiB, not an A100" if large else "< 70 GiB or an A100"
    return SchedulerDefaults(min(seqs, tokens), tokens, True, f"vLLM V1 serve defaults, {tier}")


def _sglang_tier(spec) -> tuple[float, tuple[int, int, int]]:
    """(GPU memory in MiB, (chunked_prefill_size, cuda_graph_max_bs below TP 4, at TP >= 4)) on this device."""
    mib = device_memory_bytes(spec) / MIB
    return mib, next((tier for bound, tier in SGLANG_TIERS_MIB if mib < bound), SGLANG_LARGEST)


def sglang_mem_fraction_static(spec, tp: int = 1, pp: int = 1) -> float:
    """SGLang's default mem_fraction_static on this device (module docstring, v0.5.3+):
    round((M - R) / M, 3), M = GPU memory in MiB, R = 512 + 1.5 max(chunk, 2048) + 2 cuda_graph_max_bs + 128 TP x PP,
    R >= 10,240 where M > 61,440. H100 SXM (M = 81,062) at TP1: R = 512 + 12,288 + 512 + 128 = 13,440 -> 0.834."""
    mib, (chunk, graphs_small_tp, graphs_large_tp) = _sglang_tier(spec)
    graphs = graphs_small_tp if tp < 4 else graphs_large_tp
    reserved = (SGLANG_RESERVED_BASE_MIB + SGLANG_RESERVED_PER_CHUNK_TOKEN_MIB * max(chunk, 2048)
                + SGLANG_RESERVED_PER_GRAPH_BS_MIB * graphs + SGLANG_RESERVED_PER_RANK_MIB * tp * pp)
    if mib > SGLANG_FLOOR_ABOVE_MIB:
        reserved = max(reserved, SGLANG_RESERVED_FLOOR_MIB)
    return round(max(mib - reserved, 0.0) / mib, 3)


def sglang_defaults(spec) -> SchedulerDefaults:
    """SGLang server defaults on this device (module docstring)."""
    mib, (chunk, _, _) = _sglang_tier(spec)
    return SchedulerDefaults(SGLANG_MIN_RUNNING, chunk, True,
                             f"SGLang server defaults: chunked_prefill_size {chunk} at {mib / 1024:,.0f} GiB, "
                             f"max_running_requests {SGLANG_MIN_RUNNING:,} (its KV-pool rule's floor)")


def trtllm_defaults() -> SchedulerDefaults:
    """TensorRT-LLM LLM API / trtllm-serve defaults (module docstring)."""
    tokens, seqs = TRTLLM
    return SchedulerDefaults(seqs, tokens, False, f"TensorRT-LLM defaults: max_batch_size {seqs:,}, max_num_tokens "
                                                  f"{tokens:,}, no context chunking")


def lmdeploy_defaults(spec) -> SchedulerDefaults:
    """LMDeploy TurboMind defaults on this device (module docstring): get_max_batch_size matches a substring of the
    CUDA device name, as the spec's name carries it ("NVIDIA A100 80GB SXM4" -> a100)."""
    name = spec.name.lower()
    seqs = next((n for key, n in LMDEPLOY_MAX_BATCH if key in name), LMDEPLOY_OTHER_MAX_BATCH)
    return SchedulerDefaults(seqs, LMDEPLOY_PREFILL_TOKENS + seqs, True,
                             f"LMDeploy TurboMind defaults: max_batch_size {seqs:,} on this device, "
                             f"max_prefill_token_num {LMDEPLOY_PREFILL_TOKENS:,} (+ one token per running sequence "
                             f"per forward)")


@dataclass(frozen=True)
class StepPolicy:
    """How an engine builds a step (module docstring): whether prompt work rides beside the running decodes, and
    whether admission reserves a request's whole output."""

    mixed_prefill: bool
    reserve_output: bool
    source: str


def step_policy(engine: str | None, chunked_prefill: bool) -> StepPolicy:
    """The step-building rules of `engine` with chunked prefill on or off (module docstring)."""
    if engine == "sglang":
        return StepPolicy(False, False, "SGLang: prefill steps first, decodes wait (mixed chunks off)")
    if engine == "trtllm":
        return StepPolicy(True, True, "TensorRT-LLM: in-flight batching, GUARANTEED_NO_EVICT")
    return StepPolicy(bool(chunked_prefill), False,
                      "chunked prefill beside the decodes" if chunked_prefill else "whole prompts first, decodes wait")


# the CLI's help for the flags these defaults fill (planner/cli.py, planner/cli_serving.py): the numbers above, once
SEQS_HELP = (f"vLLM V1 serve: {VLLM_LARGE[1]} on >= 70 GiB devices other than A100, else {VLLM_SMALL[1]}; SGLang "
             f"{SGLANG_MIN_RUNNING}; TensorRT-LLM {TRTLLM[1]}; LMDeploy "
             f"{', '.join(f'{n} ({key.upper()})' for key, n in LMDEPLOY_MAX_BATCH)}, else {LMDEPLOY_OTHER_MAX_BATCH}; "
             f"otherwise {PLANNER_DEFAULTS.max_num_seqs}")
TOKENS_HELP = (f"vLLM V1 serve: {VLLM_LARGE[0]} on >= 70 GiB devices other than A100, else {VLLM_SMALL[0]}; SGLang "
               f"chunked_prefill_size {'/'.join(str(t[0]) for _, t in SGLANG_TIERS_MIB)}/{SGLANG_LARGEST_CHUNK} by "
               f"device memory; TensorRT-LLM max_num_tokens {TRTLLM[0]}; LMDeploy "
               f"max_prefill_token_num {LMDEPLOY_PREFILL_TOKENS} + max_batch_size")


def scheduler_defaults(engine: str | None, spec) -> SchedulerDefaults:
    """The scheduler an engine starts with on `spec` when no flag overrides it; PLANNER_DEFAULTS for an engine this
    module has no rule for (or None)."""
    if engine == "vllm":
        return vllm_defaults(spec)
    if engine == "sglang":
        return sglang_defaults(spec)
    if engine == "trtllm":
        return trtllm_defaults()
    if engine == "lmdeploy":
        return lmdeploy_defaults(spec)
    return PLANNER_DEFAULTS


def resolve_scheduler(engine: str | None, spec, max_num_seqs: int | None = None,
                      max_num_batched_tokens: int | None = None,
                      chunked_prefill: bool | None = None) -> SchedulerDefaults:
    """The engine's defaults with every limit the user gave in its place; `source` says which is which."""
    d = scheduler_defaults(engine, spec)
    given = [name for name, v in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens),
                                  ("chunked prefill", chunked_prefill)) if v is not None]
    # an unset max_num_seqs follows a given budget down (vLLM: max_num_seqs = min(default, max_num_batched_tokens))
    seqs = d.max_num_seqs if max_num_batched_tokens is None else min(d.max_num_seqs, int(max_num_batched_tokens))
    return SchedulerDefaults(seqs if max_num_seqs is None else int(max_num_seqs),
                             d.max_num_batched_tokens if max_num_batched_tokens is None else int(max_num_batched_tokens),
                             d.chunked_prefill if chunked_prefill is None else bool(chunked_prefill),
                             d.source if not given else f"{d.source}; given: {', '.join(given)}")


def scheduler_engine(engine: str | None, runtime: str | None) -> str | None:
    """Whose scheduler a configuration runs: its --engine (KV sizing rules) where that names one, else its --runtime
    profile where that is an engine this module knows (`--runtime vllm` serves with vLLM)."""
    if engine and engine != "none":
        return engine
    return runtime if runtime in SCHEDULER_ENGINES else None
