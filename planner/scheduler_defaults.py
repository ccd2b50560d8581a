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
  sglang  python/sglang/srt/server_args.py ServerArgs.__post_init__: chunked_prefill_size from the GPU memory in MiB:
          < 35 x 1024 -> 2048, < 160 x 1024 -> 8192 (H100, H200, A100), else 16384 (B200, MI300X); chunked prefill
          is on (a size of -1 turns it off). Its running-request limit follows the KV pool (max_total_num_tokens),
          which the simulator's KV pool bounds already: max_num_seqs keeps the planner's default.
  others  (TensorRT-LLM, llama.cpp, none): the planner's defaults, PLANNER_DEFAULTS (vLLM V0's max_num_seqs 256 and
          an 8,192-token step budget, whole prompts per step).

A flag the user gives always wins over these (resolve_scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass

from .units import GB, GIB, MIB

VLLM_LARGE_DEVICE_BYTES = 70 * GIB   # get_batch_defaults: device_memory >= 70 * GiB_bytes
VLLM_LARGE = (8192, 1024)            # (max_num_batched_tokens, max_num_seqs) there
VLLM_SMALL = (2048, 256)             # and below it, or on an A100
SGLANG_TIERS_MIB = ((35 * 1024, 2048), (160 * 1024, 8192))  # gpu_mem < bound -> chunked_prefill_size
SGLANG_LARGEST_CHUNK = 16384
SCHEDULER_ENGINES = ("vllm", "sglang")  # engines whose own scheduler defaults this module knows


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


def sglang_defaults(spec) -> SchedulerDefaults:
    """SGLang server defaults on this device (module docstring)."""
    mib = device_memory_bytes(spec) / MIB
    chunk = next((size for bound, size in SGLANG_TIERS_MIB if mib < bound), SGLANG_LARGEST_CHUNK)
    return SchedulerDefaults(PLANNER_DEFAULTS.max_num_seqs, chunk, True,
                             f"SGLang server defaults: chunked_prefill_size {chunk} at {mib / 1024:,.0f} GiB, "
                             f"max_num_seqs the planner's (SGLang sizes it from the KV pool)")


# the CLI's help for the flags these defaults fill (planner/cli.py, planner/cli_serving.py): the numbers above, once
SEQS_HELP = (f"vLLM V1 serve: {VLLM_LARGE[1]} on >= 70 GiB devices other than A100, else {VLLM_SMALL[1]}; otherwise "
             f"{PLANNER_DEFAULTS.max_num_seqs}")
TOKENS_HELP = (f"vLLM V1 serve: {VLLM_LARGE[0]} on >= 70 GiB devices other than A100, else {VLLM_SMALL[0]}; SGLang "
               f"chunked_prefill_size {'/'.join(str(s) for _, s in SGLANG_TIERS_MIB)}/{SGLANG_LARGEST_CHUNK} by "
               f"device memory")


def scheduler_defaults(engine: str | None, spec) -> SchedulerDefaults:
    """The scheduler an engine starts with on `spec` when no flag overrides it; PLANNER_DEFAULTS for an engine this
    module has no rule for (or None)."""
    if engine == "vllm":
        return vllm_defaults(spec)
    if engine == "sglang":
        return sglang_defaults(spec)
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
