"""Serving-runtime profiles: how much of the hardware a runtime reaches, fitted to published measurements.

A profile (hardware_specs/runtimes/<id>.yaml) holds, per hardware class ('<vendor>-<unit kind>', derived from the
spec so that it carries to devices the fit never saw), one Efficiency with the few physically meaningful
parameters the roofline uses (planner/roofline.py):

  bandwidth_fraction    achievable share of datasheet memory bandwidth
  compute_fraction      achievable share of the matmul peak for large GEMMs
  compute_half_rows     GEMM rows R at which a weight GEMM reaches half of that: fraction x R / (R + R_half)
  kernel_overhead_us    fixed cost per operator launch (per layer and op)
  step_overhead_ms      fixed cost per forward step (sampling, host sync, graph launch)
  dequant_overhead      per weight format: extra GEMM compute time for dequantizing weights (fraction)
  dequant_tile_tokens   not fitted: tokens per tile over which the kernel dequantizes each weight once (llama.cpp on
                        Metal: 32), so dequant_overhead is the per-token share of its mat-vec kernels (R <= 8)
                        and an R-token GEMM above that pays ceil(R / tile) / R of it; 0 = the same share at any R
  format_compute_fraction  per weight format without a dequant cost: its own compute fraction, where the engine's
                        rows hold two such formats (vLLM on ROCm: fp8 and bf16 GEMMs run different kernels)
  sm_bandwidth_gbs      bandwidth one SM sustains in the engine's memory-bound kernels (Little's law): effective
                        bandwidth = min(bandwidth x bandwidth_fraction, SMs x this); 0 = no cap (llama.cpp CUDA ~9)
  kv_reread_share       DRAM cost of each pass after the first that a decode attention op makes over a K/V head
                        (a materialized attention's broadcast matmul, a kernel with one CTA per query head):
                        passes = 1 + (query heads per K/V head - 1) x this; llama.cpp without flash attention
                        ~0.4 on NVIDIA GPUs (the L2 holds the head between passes), ~1.8 on Apple GPUs; 1 elsewhere
  weight_only_regime    not fitted: the engine's weight-only quantized GEMMs are Marlin-style mixed-input kernels
                        (vLLM, SGLang, TGI), so they take the 16-bit GEMM regime curve with the format's bytes
  sync_mma              not fitted: the engine's tensor-core kernels are warp-level mma.sync ones (llama.cpp), so
                        on Hopper they reach the unit's mma_sync_share (0.5) of the listed matmul/attention peaks

and the prediction interval per regime (decode at batch 1 / prefill / batched decode and throughput): the p10 and
p90 of measured / predicted speed over leave-one-source-out residuals, so that an estimate can say "p10-p90: a-b
tok/s"; '<regime>_multi_gpu', '<regime>_moe' and '<regime>_served' the same over the rows of tensor-parallel groups,
of mixture-of-experts models and of runs through a server under load (bursts, waves, steady queues: the ranges
the serving commands print once more than one request runs at a time), never narrower than the regime's
(interval_regime). Every profile records its provenance: data files, sources and devices used, the level the
parameters come from (this engine, this engine on other hardware, its pooled engine family, or a documented
default), the date and the command that wrote it (`planner accuracy --fit`). Engines: vllm (CUDA and ROCm
classes), sglang, tgi, lmdeploy, trtllm, llamacpp, gpt-fast, exllamav2, hf-eager, deepspeed-mii
(planner/accuracy/benchmark.py ENGINES).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .catalog_index import by_identity
from .errors import PlannerError
from .hardware import (EFFICIENCY_DEFAULTS_PATH, ID_PATTERN, SPECS_DIR, ComputeUnit, Efficiency, HardwareSpec,
                       UnitKind, efficiency_defaults)
from .io import read_yaml, validated

RUNTIMES_DIR = Path(os.environ.get("PLANNER_RUNTIMES_DIR", SPECS_DIR / "runtimes"))
Regime = Literal["decode", "prefill", "throughput", "decode_multi_gpu", "prefill_multi_gpu", "throughput_multi_gpu",
                 "decode_moe", "prefill_moe", "throughput_moe", "decode_served", "prefill_served", "throughput_served"]
MULTI_GPU_SUFFIX = "_multi_gpu"  # an interval for tensor-parallel groups (planner/accuracy/benchmark.profile_intervals)
MOE_SUFFIX = "_moe"  # an interval for mixture-of-experts models (the same)
# an interval for figures of a server under load (requests queued, admitted and interleaved by the engine's scheduler:
# the serving commands' simulations, a served benchmark's bursts and waves), the same
SERVED_SUFFIX = "_served"
REGIMES: tuple[str, ...] = ("decode", "prefill", "throughput")
_ALIASES = {"llama.cpp": "llamacpp", "llama-cpp": "llamacpp", "tensorrt-llm": "trtllm", "trt-llm": "trtllm",
            "gptfast": "gpt-fast", "torch.compile": "gpt-fast", "vllm-rocm": "vllm", "vllm-cuda": "vllm",
            "turbomind": "lmdeploy", "lmdeploy-turbomind": "lmdeploy", "text-generation-inference": "tgi",
            "hf": "hf-eager", "transformers": "hf-eager", "hf-transformers": "hf-eager", "exllama": "exllamav2",
            "deepspeed": "deepspeed-mii", "mii": "deepspeed-mii", "fastgen": "deepspeed-mii",
            "deepspeed-fastgen": "deepspeed-mii"}


def canonical_id(name: str) -> str:
    """The profile id an engine name stands for: lower case, aliases resolved (_ALIASES: 'llama.cpp' -> 'llamacpp',
    'turbomind' -> 'lmdeploy')."""
    key = str(name).lower()
    return _ALIASES.get(key, key)


# The request path of an engine's OpenAI-compatible HTTP server: what a served request's TTFT holds beyond the GPU's
# prefill (the HTTP request, the chat template, tokenization, the hand-off to the engine's scheduler, and the first
# token's detokenization and stream), as `vllm bench serve` / benchmark_serving measure TTFT. Not a fitted parameter:
# the TTFT measured at concurrency 1-4 for a ~230-token prompt less the committed profile's prefill of it (9.5 ms for
# Qwen3-8B bf16 on an H100 SXM). Offline harnesses (llama-bench, trtllm-bench / gptSessionBenchmark,
# benchmark_latency.py, LMDeploy profile_generation) have no such path; engines not listed: 0. The floor is the
# host's as much as the engine's: the same vLLM path measures 40-100 ms in its issues (#770: 62 ms TTFT for 8 tokens
# of an 8B on an A5000; #7635: ~100 ms below 400 tokens, TP1-4 on V100s).
REQUEST_PATH_MS = {
    # GPUStack performance lab, qwen3-8b/h100-latency.md @ 1dbc3b81 (data/pending/gpustack_performance_lab_2025-2026
    # .csv): vLLM 0.11.0 `vllm serve`, openai-chat endpoint, concurrency 1: mean TTFT 59.0 ms (median 60.4)
    "vllm": 50.0,
    # the same document: SGLang 0.5.3.post3, concurrency 4: mean TTFT 27.7 ms (median 27.3)
    "sglang": 18.0,
    # the same document: TensorRT-LLM 1.2.0rc1 `trtllm-serve`, concurrency 4: mean TTFT 51.6 ms (median 45.5)
    "trtllm": 40.0,
    # dstack TGI vs vLLM on 8 x MI300X (data/measured_serving.csv): TGI, Llama-3.1-405B TP8, one 80-token prompt:
    # TTFT 123.5 ms where the fitted profile's prefill takes 80 ms
    "tgi": 45.0,
}


def request_path_ms(runtime: str | None) -> float:
    """REQUEST_PATH_MS of an engine id (aliases too), 0 for engines without a measured HTTP path or None."""
    if not runtime:
        return 0.0
    return REQUEST_PATH_MS.get(canonical_id(runtime), 0.0)


# Engines whose first output token comes from a decode step, not from the prefill: TurboMind's context decoder
# computes the KV cache of all prompt tokens but the last, and the first generation step feeds that last token to the
# decoder with the batch (LlamaBatch<T>::InitializeSampling: `sequence_lengths_ = context_length - 1`, "the length of
# sequence that has kv cache already computed", and invokePadLastTokenIds puts each prompt's last token into the
# first step's input; InternLM/lmdeploy src/turbomind/models/llama/LlamaBatch.cc, v0.1-v0.2). So its time to first
# token is a prefill of P - 1 tokens and one decode step of the batch at context P - 1 (first_token_steps), and a
# request's O tokens take O decode steps. Other engines (vLLM, SGLang, TensorRT-LLM, llama.cpp) sample the first
# token from the prefill's last logits.
FIRST_TOKEN_FROM_DECODE = frozenset({"lmdeploy"})


def first_token_from_decode(runtime: str | None) -> bool:
    """Whether an engine id (aliases too) produces the first token in a decode step (FIRST_TOKEN_FROM_DECODE)."""
    if not runtime:
        return False
    return canonical_id(runtime) in FIRST_TOKEN_FROM_DECODE


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # (built when first validated)


class Interval(_Frozen):
    """Quantiles of measured / predicted speed (tokens/s; for latencies the inverse) over the fit residuals."""

    p10: float = Field(gt=0)
    p90: float = Field(gt=0)
    rows: int = Field(ge=0, description="residuals the quantiles come from")


class ClassFit(_Frozen):
    """Provenance of one class's parameters."""

    rows_fit: int = Field(ge=0)
    devices_fit: list[str]
    devices_held_out: list[str]
    residual_median_abs_pct: dict[str, float] = Field(default_factory=dict, description="per regime, fit rows")
    interval_source: str
    at_prior: list[str] = Field(default_factory=list, description=(
        "parameters the fit rows do not constrain (they stayed at the prior: the documented GPU defaults)"))
    level: Literal["engine", "engine-other-hw", "family", "default"] = Field("engine", description=(
        "whose rows the parameters come from: this engine on this class, this engine on other classes, the pooled "
        "engine family, or a documented default (no measurement)"))
    sources: list[str] = Field(default_factory=list, description="source ids of the rows fitted")
    moe_rows: int = Field(0, ge=0, description="fitted rows of mixture-of-experts models")
    multi_gpu_rows: int = Field(0, ge=0, description="fitted rows of tensor-parallel groups (TP > 1)")
    traits: list[str] = Field(default_factory=list, description=(
        "architecture traits of the fitted rows' models (architecture.ModelArch.traits: layer mixers, mla); empty = "
        "not recorded"))


class RuntimeClass(_Frozen):
    vendor: str = Field(description="HardwareSpec.vendor, case-insensitive")
    unit_kind: UnitKind
    efficiency: Efficiency
    intervals: dict[Regime, Interval] = Field(default_factory=dict)
    fit: ClassFit | None = None

    @property
    def key(self) -> str:
        return f"{self.vendor.lower()}-{self.unit_kind}"


class Provenance(_Frozen):
    data: str
    sources: list[str]
    fitted: str = Field(description="date (UTC) the fit ran")
    command: str
    split: str
    model: str = Field(description="the parameterisation, in words")


_VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "apple": "Apple", "intel": "Intel"}


class RuntimeProfile(_Frozen):
    id: str = Field(pattern=ID_PATTERN)
    name: str
    description: str
    unit_kind: UnitKind = Field("gpu", description="the compute unit the runtime runs on when none is named")
    classes: list[RuntimeClass] = Field(min_length=1)
    provenance: Provenance
    runs_on: list[str] = Field(default_factory=list, description=(
        "hardware vendors the engine's code runs on (lower case), where it is not every vendor: TensorRT-LLM, "
        "LMDeploy TurboMind and DeepSpeed-MII are CUDA-only; empty = no such limit"))

    def fitted_class(self, spec: HardwareSpec, unit: ComputeUnit) -> RuntimeClass | None:
        """The profile's class for this vendor's unit kind (fitted, or a documented estimate), or None."""
        key = f"{spec.vendor.lower()}-{unit.kind}"
        return next((c for c in self.classes if c.key == key), None)

    def covers(self, spec: HardwareSpec, unit: ComputeUnit) -> bool:
        """Whether the profile holds a class for this vendor's unit kind (fitted_class)."""
        return self.fitted_class(spec, unit) is not None

    def runs_on_vendor(self, spec: HardwareSpec) -> bool:
        """Whether the engine's code runs on the device's vendor at all (runs_on: empty = every vendor)."""
        return not self.runs_on or spec.vendor.lower() in self.runs_on

    def for_unit(self, spec: HardwareSpec, unit: ComputeUnit) -> RuntimeClass:
        """The class for this vendor's unit kind; where the profile has none and the engine runs on the vendor, the
        unmeasured class (unmeasured_class: the kind defaults, their range widened); a one-line error where the
        engine does not run on the vendor (runs_on)."""
        if (c := self.fitted_class(spec, unit)) is not None:
            return c
        if not self.runs_on_vendor(spec):
            names = " and ".join(_VENDOR_NAMES.get(v, v) for v in self.runs_on)
            raise PlannerError(f"--runtime: {self.id} ({self.name}) runs on {names} GPUs only, and {spec.id} is "
                               f"{spec.vendor}'s; choose another --runtime or device")
        return unmeasured_class(self, spec, unit)

    def unmeasured_note(self, spec: HardwareSpec, unit: ComputeUnit) -> str | None:
        """The warning an estimate carries where this profile has no class for the unit (for_unit's unmeasured
        class), else None."""
        if self.covers(spec, unit):
            return None
        return (f"{self.name} has no published measurement on {spec.vendor} {unit.kind} units ({spec.id}): the "
                f"estimate uses the {unit.kind} kind defaults ({EFFICIENCY_DEFAULTS_PATH.name}) and their range "
                f"widened x{EXTRAPOLATION_WIDEN} for the extrapolation (fitted classes: "
                f"{', '.join(c.key for c in self.classes)})")

    def default_unit(self, spec: HardwareSpec) -> str | None:
        """The unit the runtime runs on: the first unit of the profile's unit kind (llama.cpp on a Mac: the GPU)."""
        return next((u.name for u in spec.units if u.kind == self.unit_kind), None)


def runtime_paths() -> dict[str, Path]:
    """id -> path of hardware_specs/runtimes/*.yaml (the folder listed again only when it changes)."""
    from .catalog_index import folder_index
    return dict(folder_index(RUNTIMES_DIR))


def list_runtime_ids() -> list[str]:
    return list(runtime_paths())


def parse_runtime(data: dict, where: str) -> RuntimeProfile:
    return validated(RuntimeProfile, data, f"runtime profile {where}")


@lru_cache(maxsize=32)
def _load_path(path: str) -> RuntimeProfile:
    return parse_runtime(read_yaml(path), path)


def load_runtime(id_or_path: str | RuntimeProfile) -> RuntimeProfile:
    """A runtime id (`llamacpp`, `trtllm`, `gpt-fast`; aliases `llama.cpp`, `tensorrt-llm`) or a YAML path."""
    if isinstance(id_or_path, RuntimeProfile):
        return id_or_path
    if id_or_path.endswith((".yaml", ".yml")) or os.sep in id_or_path:
        if not Path(id_or_path).exists():
            raise PlannerError(f"--runtime: file not found: {id_or_path}")
        return _load_path(str(Path(id_or_path).resolve()))
    key = canonical_id(id_or_path)
    paths = runtime_paths()
    if key not in paths:
        raise PlannerError(f"--runtime: unknown runtime '{id_or_path}'; allowed: {', '.join(paths) or 'none'} "
                           f"(profiles in {RUNTIMES_DIR})")
    return _load_path(str(paths[key]))


DEFAULT_INTERVALS_PATH = SPECS_DIR / "defaults" / "intervals.yaml"


class DefaultIntervals(_Frozen):
    """The range of estimates that name no runtime (kind-default efficiencies), fitted by `planner accuracy --fit`."""

    description: str
    intervals: dict[Regime, Interval]
    provenance: dict[str, str]


@lru_cache(maxsize=1)
def _default_intervals() -> DefaultIntervals | None:
    if not DEFAULT_INTERVALS_PATH.exists():
        return None
    return validated(DefaultIntervals, read_yaml(DEFAULT_INTERVALS_PATH), str(DEFAULT_INTERVALS_PATH))


def default_interval_class() -> RuntimeClass | None:
    """The default intervals wrapped as a RuntimeClass-like record (vendor 'any'), or None if not fitted yet."""
    d = _default_intervals()
    if d is None:
        return None
    eff = efficiency_defaults()
    return by_identity("default_interval_class", (d, eff), lambda: _default_interval_class(d, eff))


def _default_interval_class(d: DefaultIntervals, defaults) -> RuntimeClass:
    # built from validated parts (model_construct: the class's validator is not needed to wrap them)
    return RuntimeClass.model_construct(vendor="any", unit_kind="gpu", efficiency=defaults.by_unit_kind["gpu"],
                        intervals=d.intervals, fit=ClassFit.model_construct(
                            rows_fit=sum(iv.rows for iv in d.intervals.values()), devices_fit=[], devices_held_out=[],
                            interval_source=f"kind-default efficiencies vs {d.provenance.get('data', 'published rows')}"
                                            f" ({d.provenance.get('rows', '')})"))


EXTRAPOLATION_WIDEN = 1.3  # log-space widening per extrapolation (ranges here and in planner/accuracy/benchmark.py)


def unmeasured_class(prof: RuntimeProfile, spec: HardwareSpec, unit: ComputeUnit) -> RuntimeClass:
    """The class of an engine on a vendor's unit kind that no published measurement covers (llama.cpp on an Intel
    Arc GPU or on a CPU): the unit's default efficiency (the device spec's own, else the kind default of
    efficiency.yaml) and the kind defaults' ranges against published measurements (intervals.yaml) widened x
    EXTRAPOLATION_WIDEN, the issue's "an engine or hardware vendor with no measurements"; fit level 'default', no
    fitted row (so a mixture-of-experts or tensor-parallel estimate widens once more, interval_regime)."""
    return by_identity(("unmeasured_class", prof.id), (prof, spec, unit, efficiency_defaults(), _default_intervals()),
                       lambda: _unmeasured_class(prof, spec, unit))


def _unmeasured_class(prof: RuntimeProfile, spec: HardwareSpec, unit: ComputeUnit) -> RuntimeClass:
    from .hardware import default_efficiency
    base = default_efficiency(spec, unit)
    eff = base.model_copy(update={"source": f"no published measurement of {prof.name} on {spec.vendor} {unit.kind} "
                                            f"units: {base.source}"})
    d = _default_intervals()
    intervals = {k: widen(iv, EXTRAPOLATION_WIDEN) for k, iv in (d.intervals if d is not None else {}).items()}
    src = (f"the kind defaults' ranges against published measurements ({DEFAULT_INTERVALS_PATH.name}), widened x"
           f"{EXTRAPOLATION_WIDEN}: no measurement of {prof.name} on {spec.vendor} {unit.kind} units")
    return RuntimeClass.model_construct(
        vendor=spec.vendor.lower(), unit_kind=unit.kind, efficiency=eff, intervals=intervals,
        fit=ClassFit(rows_fit=0, devices_fit=[], devices_held_out=[], interval_source=src, level="default"))


def wider(a: Interval, b: Interval) -> Interval:
    """The interval that holds both: [min p10, max p90], over the larger of their row counts."""
    return Interval(p10=min(a.p10, b.p10), p90=max(a.p90, b.p90), rows=max(a.rows, b.rows))


def widen(iv: Interval, factor: float) -> Interval:
    """The interval widened in log space around its geometric centre c = sqrt(p10 x p90):
    p10' = c x (p10 / c)^factor, p90' = c x (p90 / c)^factor."""
    c = (iv.p10 * iv.p90) ** 0.5
    return Interval(p10=c * (iv.p10 / c) ** factor, p90=c * (iv.p90 / c) ** factor, rows=iv.rows)


INTERVAL_ORDER = {"prefill": ("prefill",), "decode": ("decode", "throughput"), "throughput": ("throughput", "decode")}


def interval_key(available, want: str) -> str | None:
    """The interval key a figure of key `want` takes from a profile class that has `available` keys: itself, and
    'decode' <-> 'throughput' for each other where one is missing (prefill has no stand-in)."""
    return next((k for k in INTERVAL_ORDER[want] if k in available), None)


def interval_regime(profile_class: RuntimeClass, stage: str, batch: int, moe: bool = False,
                    multi_gpu: bool = False, traits: tuple[str, ...] = (), served: bool = False) -> Interval | None:
    """The interval for a headline figure: prefill figures use 'prefill'; decode and end-to-end figures use
    'decode' at batch 1 and 'throughput' at larger batches (falling back to the other if the profile lacks it).
    A tensor-parallel group uses the key's '_multi_gpu' interval where the profile has one (fitted from its
    multi-GPU rows, never narrower than the key's own); without one it is widened x EXTRAPOLATION_WIDEN when the
    class's fit had no tensor-parallel row. Widened x EXTRAPOLATION_WIDEN (each) for a mixture-of-experts model when
    the fit had no such row, and for a model with an architecture trait (ModelArch.traits: sliding-window, SSM,
    linear attention, MLA, ...) that none of the fitted models has (extrapolating outside the fit). A mixture-of-
    experts model takes the key's '_moe' interval where the profile has one (MoE rows' own cross-validated
    residuals, never narrower than the key's), the wider of it and the '_multi_gpu' one in a tensor-parallel
    group. A figure of a server under load (served: the serving commands' simulations of more than one request at a
    time) takes the wider of that and the key's '_served' interval (the cross-validated residuals of published
    served runs: bursts, waves, steady queues, whose figures also carry the engine's admission and interleaving),
    or is widened x EXTRAPOLATION_WIDEN where the profile has none."""
    iv = profile_class.intervals
    key = interval_key(iv, "prefill" if stage == "prefill" else "decode" if batch == 1 else "throughput")
    if key is None:
        return None
    out = iv[key]
    fit = profile_class.fit
    factor = 1.0
    if moe and key + MOE_SUFFIX in iv:
        out = iv[key + MOE_SUFFIX]
    elif moe and (fit is None or fit.moe_rows == 0):
        factor *= EXTRAPOLATION_WIDEN
    if traits and fit is not None and fit.traits and not set(traits) <= set(fit.traits):
        factor *= EXTRAPOLATION_WIDEN
    if multi_gpu and key + MULTI_GPU_SUFFIX in iv:
        mg = iv[key + MULTI_GPU_SUFFIX]
        out = mg if out is iv[key] else wider(out, mg)
    elif multi_gpu and (fit is None or fit.multi_gpu_rows == 0):
        factor *= EXTRAPOLATION_WIDEN
    if served and key + SERVED_SUFFIX in iv:
        out = wider(out, iv[key + SERVED_SUFFIX])
    elif served:
        factor *= EXTRAPOLATION_WIDEN
    return out if factor == 1.0 else widen(out, factor)


def interval_for(profile_class: RuntimeClass, stage: str, batch: int, moe: bool = False, multi_gpu: bool = False,
                 traits: tuple[str, ...] = (), served: bool = False) -> Interval | None:
    """interval_regime, worked out once per profile class and arguments (it reads the batch only as batch == 1)."""
    return by_identity(("interval_regime", stage, batch == 1, moe, multi_gpu, tuple(traits), served),
                       (profile_class,),
                       lambda: interval_regime(profile_class, stage, batch, moe, multi_gpu, traits, served))


def runtime_for_engine(engine: str | None, hardware=None) -> str | None:
    """The profile id for a KV-sizing `--engine` name when a profile exists (vllm, sglang, trtllm, llamacpp, ...)
    and, with `hardware` (id, path or HardwareSpec), has a class for that device's vendor; else None (the kind
    defaults apply as before). `estimate --engine X` without `--runtime` then uses X's efficiency and range."""
    from .memory import ENGINES  # only the KV-sizing engines; any other --engine stays an error of its own
    if not engine or engine == "none" or engine not in ENGINES:
        return None
    key = canonical_id(engine)
    if key not in runtime_paths():
        return None
    if hardware is not None:
        from .hardware import load_hardware
        spec = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware)
        prof = load_runtime(key)
        if not any(c.vendor.lower() == spec.vendor.lower() and any(u.kind == c.unit_kind for u in spec.units)
                   for c in prof.classes):
            return None
    return key
