"""The roofline: OpCost x device -> time and bound. Pure functions of numbers (Williams et al., CACM 2009).

  time(op)  = count * (max(flops / (peak * compute_fraction), bytes / (bandwidth * bandwidth_fraction)) + overhead)
  intensity = flops / bytes                      (FLOP/byte)
  ridge     = peak / bandwidth                   (FLOP/byte where an op turns compute bound)

A compute unit's peak depends on the op's class: weight GEMMs run at the weight format's compute dtype
(weight-only int8/int4 dequantize into fp16/bf16 GEMMs; w8a8 and fp8 use the int8/fp8 tensor peaks), attention at
the activation dtype, elementwise ops at the vector (fp32) rate.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from functools import cached_property

from .catalog_index import by_identity
from .errors import PlannerError
from .hardware import DEQUANT_MATVEC_TOKENS, ComputeUnit, Efficiency, HardwareSpec, default_efficiency
from .lazy import np
from .ops import ATTENTION, MATMUL, VECTOR, OpCost
from .quantization import WeightFormat, dequant_overhead_for, weight_format
from .regimes import (GROUPED_GEMM_OPS, GemmRegime, expert_gemm_rate, fmax, gemm_regime_for, kv_read_factor,
                      matmul_preferences, regime_constants, sm_streaming_scale, weight_gemm_time_s)
from .replay import as_float
from .units import GB, TERA, US

_PLAIN = (float, int)

_CLASS_DTYPES = {
    ATTENTION: ("bf16", "fp16", "fp32", "int8"),
    VECTOR: ("fp32", "fp16", "bf16", "int8"),
}


def roofline_time_s(flops, n_bytes, peak_flops_per_s, bandwidth_bytes_per_s):
    """(time, compute_time, memory_time) in seconds: the larger of compute and memory time."""
    if (flops.__class__ is float and n_bytes.__class__ is float and peak_flops_per_s.__class__ is float
            and bandwidth_bytes_per_s.__class__ is float and peak_flops_per_s and bandwidth_bytes_per_s):
        compute, memory = flops / peak_flops_per_s, n_bytes / bandwidth_bytes_per_s  # one configuration: floats
        return (compute if compute >= memory else memory), compute, memory
    compute = np.asarray(flops, dtype=np.float64) / peak_flops_per_s
    memory = np.asarray(n_bytes, dtype=np.float64) / bandwidth_bytes_per_s
    return np.maximum(compute, memory), compute, memory


def pick_dtype(unit: ComputeUnit, preferences: tuple[str, ...]) -> str | None:
    return next((d for d in preferences if d in unit.peak_tflops), None)


def matmul_dtype(unit: ComputeUnit, fmt: WeightFormat) -> str | None:
    """The dtype weight GEMMs run in: the format's first compute dtype the unit lists, skipping 4-bit tensor dtypes
    for weight-only formats (they dequantize into the activation dtype; planner.regimes.matmul_preferences). A
    quantized weight-only format dequantizes into whichever 16-bit dtype the unit runs faster where it lists both (llama.cpp's
    CUDA/HIP kernels and the GPTQ/AWQ ones compute in fp16): an MI100 runs bf16 matrix math at half its fp16 rate."""
    prefs = matmul_preferences(fmt.compute_dtypes, fmt.weight_only)
    d = pick_dtype(unit, prefs)
    if is_weight_only_quantized(fmt) and d in _HALF:  # a quantized weight, not a 16-bit model
        other = _HALF[d]
        if other in prefs and unit.peak_tflops.get(other, 0.0) > unit.peak_tflops[d]:
            return other
    return d


_HALF = {"bf16": "fp16", "fp16": "bf16"}  # the two 16-bit dtypes a dequantized weight may compute in


def unit_supports(unit: ComputeUnit, fmt: WeightFormat) -> bool:
    if unit.formats is not None and fmt.name not in unit.formats:
        return False
    return pick_dtype(unit, fmt.compute_dtypes) is not None


def unit_request_proxy_s(spec: HardwareSpec, unit: ComputeUnit, fmt: WeightFormat, prompt=512, output=128):
    """Seconds per model parameter of one request on this unit, at its kind-default efficiency:

        2 x prompt / (peak x compute_fraction) + output x bytes_per_weight / (bandwidth x bandwidth_fraction)

    prefill is compute bound (2 FLOP per parameter per token), decode reads every weight once per token. Lower is
    faster; `prompt`/`output` may be arrays."""
    eff = default_efficiency(spec, unit)
    peak = unit.peak_tflops[matmul_dtype(unit, fmt)] * TERA * eff.compute_fraction
    bw = effective_bandwidth_bytes_s(unit_bandwidth_gbs(spec, unit), eff, (unit.sm_count or 0) * unit_stream_scale(spec, unit))
    if prompt.__class__ in _PLAIN and output.__class__ in _PLAIN:  # one request: the same steps on floats
        return 2.0 * float(prompt) / peak + float(output) * fmt.bytes_per_weight / bw
    return 2.0 * np.asarray(prompt, dtype=np.float64) / peak + np.asarray(output, dtype=np.float64) * fmt.bytes_per_weight / bw


def unit_stream_scale(spec: HardwareSpec, unit: ComputeUnit) -> float:
    """regimes.sm_streaming_scale of the device for a unit that lists SMs, else 1: the factor the per-SM bandwidth
    cap counts its SMs by (effective_bandwidth_bytes_s)."""
    return sm_streaming_scale(spec.id) if unit.sm_count else 1.0


def unit_bandwidth_gbs(spec: HardwareSpec, unit: ComputeUnit) -> float:
    """Datasheet bandwidth a unit reaches: the memory's, or the unit's own where it lists a lower one."""
    return min(spec.memory.bandwidth_gbs, unit.bandwidth_gbs or spec.memory.bandwidth_gbs)


def effective_bandwidth_bytes_s(bandwidth_gbs, eff: Efficiency, sm_count=0):
    """Bandwidth (B/s) memory-bound kernels reach:

        min(bandwidth_gbs x bandwidth_fraction, sm_count x sm_bandwidth_gbs) x 1e9

    the second term only where both are set (Efficiency.sm_bandwidth_gbs; the unit's sm_count): each SM keeps a
    bounded number of bytes in flight, so by Little's law it sustains (bytes in flight) / (DRAM latency) GB/s,
    and a GPU with more datasheet GB/s per SM than that cannot be saturated by those kernels. Callers pass the
    unit's SMs x regimes.sm_streaming_scale (an architecture whose SMs keep more bytes in flight than those the
    caps were fitted on, as Blackwell's, streams that many times more per SM). Fitted per engine and
    hardware class (planner/accuracy/fit.py): llama.cpp's CUDA kernels sustain ~9 GB/s per SM, which is why an
    A100 (2,039 GB/s, 108 SMs) decodes with them at ~48% of its bandwidth and an RTX 4090 (1,008 GB/s, 128 SMs) at
    ~88% (xiongjiedai/GPU-Benchmarks-on-LLM-Inference; llama.cpp discussion 15013). bandwidth_gbs and sm_count may
    be arrays (stacked sweep devices)."""
    bw = bandwidth_gbs * GB * eff.bandwidth_fraction
    per_sm = getattr(eff, "sm_bandwidth_gbs", 0.0)
    if per_sm.__class__ in _PLAIN and sm_count.__class__ in _PLAIN and bw.__class__ in _PLAIN:
        cap = sm_count * per_sm * GB
        return bw if cap <= 0 else (cap if cap < bw else bw)
    cap = np.asarray(sm_count, dtype=np.float64) * per_sm * GB
    return np.minimum(bw, np.where(cap > 0, cap, np.inf))


def capable_units(spec: HardwareSpec, fmt: WeightFormat) -> list[ComputeUnit]:
    return list(by_identity("capable_units", (spec, fmt), lambda: [u for u in spec.units if unit_supports(u, fmt)]))


def select_unit(spec: HardwareSpec, fmt: WeightFormat, name: str | None = None, prompt=512,
                output=128) -> ComputeUnit:
    """The named unit, or the fastest unit that runs the format for a request of `prompt` + `output` tokens
    (lowest `unit_request_proxy_s`): an NPU wins prompt-heavy work on its int8 peak, the unit with the most
    achievable bandwidth wins generation-heavy work."""
    if name is not None:
        unit = spec.unit(name)
        if not unit_supports(unit, fmt):
            allowed = [u.name for u in spec.units if unit_supports(u, fmt)]
            raise PlannerError(f"--unit: {spec.id} unit '{name}' does not run format {fmt.name}; units that do: "
                               f"{', '.join(allowed) or 'none'}")
        return unit
    able = capable_units(spec, fmt)
    if not able:
        raise PlannerError(f"--weights: no compute unit of {spec.id} runs format {fmt.name}")
    if len(able) == 1:  # (what min() returns for one unit)
        return able[0]
    return min(able, key=lambda u: float(unit_request_proxy_s(spec, u, fmt, prompt, output)))


@dataclass(frozen=True)
class DeviceModel:
    """A compute unit with its effective peaks (FLOP/s) per op class, effective bandwidth (B/s) and overheads."""

    hardware_id: str
    unit: str
    dtypes: dict[str, str]
    peak_tflops: dict[str, float]       # datasheet dense peak per op class
    bandwidth_gbs: float                # datasheet bandwidth reachable by this unit
    efficiency: Efficiency
    bytes_per_weight: float = 2.0       # the weight format's bytes per parameter (GEMM rows = flops / (2 x params))
    dequant_factor: float = 1.0         # 1 + efficiency.dequant_overhead[format]: GEMM compute-time multiplier
    dequant_tile_tokens: int = 0        # efficiency.dequant_tile_tokens (dequant_factor_at: its share per tile)
    matmul_cap_flops: float = float("inf")  # power cap on weight GEMMs: tdp_w x matmul_tflops_per_watt (FLOP/s)
    compute_half_rows: float | None = None  # the format's GEMM half rows (efficiency.format_half_rows); None: global
    unit_dtypes: tuple[str, ...] = ()       # dtypes the unit lists a peak for (native formats; regimes.kv_read_factor)
    gemm_regime: GemmRegime | None = None   # weight-GEMM regime curve for this unit (regimes.gemm_regime_for)
    kernel_peak_flops: float = 0.0          # listed matmul peak x the regime's kernel_compute_fraction (FLOP/s)
    gemm_launch_s: float = 0.0              # fixed time per weight GEMM beyond a 16-bit one (GemmRegime.extra_launch_s)
    sm_count: int = 0                       # the unit's SMs (CUs), 0 where the spec lists none
    matmul_fraction: float = 0.0            # efficiency.format_compute_fraction[format], 0 = not listed
    weight_bandwidth_share: float = 1.0     # efficiency.weight_only_bandwidth_share where mixed-input GEMMs apply
    mixed_input_share: float = 1.0          # the same for an op stored in another weight-only format (OpCost.
    #                                         weight_format: gpt-oss's mxfp4 experts) where the unit runs such kernels
    mixed_input_unit: bool = False          # the engine runs mixed-input kernels here (such an op takes the regime)
    sm_stream_scale: float = 1.0            # regimes.sm_streaming_scale: the unit's SMs stream this many times the
    #                                         bytes of those the per-SM caps were fitted on (Blackwell 1.6-1.8)

    @cached_property  # read once per operator timed: computed once per device model
    def eff_peak_flops(self) -> dict[str, float]:
        """Peak x compute fraction per op class: format_compute_fraction[format] for matmul where the profile
        lists the format, else class_compute_fraction[class] if set, else compute_fraction."""
        eff = self.efficiency
        by_class = getattr(eff, "class_compute_fraction", None) or {}
        out = {c: p * TERA * by_class.get(c, eff.compute_fraction) for c, p in self.peak_tflops.items()}
        if self.matmul_fraction:
            out[MATMUL] = self.peak_tflops[MATMUL] * TERA * self.matmul_fraction
        return out

    @cached_property
    def base_matmul_flops(self) -> float:
        """The matmul peak x the engine's fraction without the model format's own (format_compute_fraction): the
        rate of a weight GEMM stored in a format of its own (OpCost.weight_format) that the profile lists no
        fraction for (own_format_flops)."""
        eff = self.efficiency
        by_class = getattr(eff, "class_compute_fraction", None) or {}
        return self.peak_tflops[MATMUL] * TERA * by_class.get(MATMUL, eff.compute_fraction)

    def own_format_flops(self, name: str) -> float:
        """The matmul rate of a weight GEMM stored in format `name` of its own (OpCost.weight_format: gpt-oss's MXFP4
        experts): the matmul peak x the profile's format_compute_fraction[name] where it lists one (llama.cpp's
        MXFP4 kernels), else base_matmul_flops."""
        frac = (getattr(self.efficiency, "format_compute_fraction", None) or {}).get(name, 0.0)
        return self.peak_tflops[MATMUL] * TERA * frac if frac > 0 else self.base_matmul_flops

    def own_format_dequant(self, name: str) -> float:
        """1 + the profile's dequantization overhead of format `name` (quantization.dequant_overhead_for): the
        dequant factor of a weight GEMM stored in a format of its own."""
        return 1.0 + dequant_overhead_for(self.efficiency.dequant_overhead, name)[0]

    @cached_property
    def eff_bandwidth_bytes_s(self) -> float:
        """effective_bandwidth_bytes_s: bandwidth x bandwidth_fraction, capped at sm_count x sm_bandwidth_gbs x the
        unit's sm_stream_scale."""
        return effective_bandwidth_bytes_s(self.bandwidth_gbs, self.efficiency, self.sm_count * self.sm_stream_scale)

    @property
    def matmul_peak_tflops(self) -> float:
        """The unit's datasheet peak of the matmul dtype (TFLOP/s, after fp16-accumulate and mma.sync shares):
        regimes.grouped_width_efficiency's P."""
        return self.peak_tflops[MATMUL]

    @property
    def ridge_flop_per_byte(self) -> float:
        """Datasheet ridge point of the matmul dtype: peak / bandwidth."""
        return self.peak_tflops[MATMUL] * TERA / (self.bandwidth_gbs * GB)


def device_model(spec: HardwareSpec, unit: ComputeUnit, fmt: WeightFormat, eff: Efficiency) -> DeviceModel:
    """The device model of a unit for a weight format under an efficiency set (built once per set of objects)."""
    # the committed fit gemm_regime_for reads (refitted by `planner accuracy --fit-kernels`, which clears its cache)
    fit = regime_constants() if unit.sm_count is not None else None
    return by_identity("device_model", (spec, unit, fmt, eff, fit),
                       lambda: _device_model(spec, unit, fmt, eff))


def _device_model(spec: HardwareSpec, unit: ComputeUnit, fmt: WeightFormat, eff: Efficiency) -> DeviceModel:
    dtypes = {MATMUL: matmul_dtype(unit, fmt)}
    first = fmt.compute_dtypes[0]
    act_pref = ((first,) if first in ("fp32", "fp16", "bf16") else ()) + _CLASS_DTYPES[ATTENTION]
    dtypes[ATTENTION] = pick_dtype(unit, act_pref)
    dtypes[VECTOR] = pick_dtype(unit, _CLASS_DTYPES[VECTOR])
    for cls, d in dtypes.items():
        if d is None:  # a unit with a single listed dtype: run everything there
            dtypes[cls] = dtypes[MATMUL]
    bw = unit_bandwidth_gbs(spec, unit)
    dq = 1.0 + dequant_overhead_for(eff.dequant_overhead, fmt.kernel_name)[0]
    peaks = {c: unit.peak_tflops[d] for c, d in dtypes.items()}
    if getattr(eff, "fp16_accumulate", False):
        peaks[MATMUL] = fp16_accumulate_peak(unit, dtypes[MATMUL])
    share = sync_mma_share(unit, eff)
    for cls in (MATMUL, ATTENTION):  # the tensor-core classes
        peaks[cls] = peaks[cls] * share
    tpw = getattr(eff, "matmul_tflops_per_watt", 0.0)
    cap = spec.power.tdp_w * tpw * TERA if (tpw > 0 and spec.power is not None) else float("inf")
    half = (getattr(eff, "format_half_rows", None) or {}).get(fmt.kernel_name, eff.compute_half_rows)
    regime, kernel_peak = (unit_gemm_regime(spec, unit, fmt, dtypes[MATMUL], getattr(eff, "weight_only_regime", False),
                                            getattr(eff, "kernel_library", ""))
                           if getattr(eff, "regime_curves", True) else (None, 0.0))
    launch = regime.extra_launch_s(dtypes[MATMUL]) if regime is not None else 0.0
    # the engine runs mixed-input kernels on this unit: the regime applies to its weight GEMMs under the flag
    mixed_unit = bool(getattr(eff, "weight_only_regime", False)) and regime is not None
    mshare = float(getattr(eff, "weight_only_bandwidth_share", 1.0)) if mixed_unit else 1.0
    wshare = mshare if is_weight_only_quantized(fmt) else 1.0
    return DeviceModel(spec.id, unit.name, dtypes, peaks, bw, eff, fmt.bytes_per_weight, dq,
                       int(getattr(eff, "dequant_tile_tokens", 0) or 0), cap, half,
                       tuple(unit.peak_tflops), regime, kernel_peak * share, launch, unit.sm_count or 0,
                       (getattr(eff, "format_compute_fraction", None) or {}).get(fmt.kernel_name, 0.0), wshare, mshare,
                       mixed_unit, unit_stream_scale(spec, unit))


def unit_gemm_regime(spec: HardwareSpec, unit: ComputeUnit, fmt: WeightFormat, dtype: str,
                     weight_only_regime: bool = False, library: str = ""):
    """(regime constants or None, FLOP/s of the padded tiles = listed peak of the GEMM dtype x the kernel library's
    share of it, kernel_compute_fraction[dtype]) for weight GEMMs of this format on this unit
    (regimes.gemm_regime_for says where the fit applies; weight_only_regime: Efficiency.weight_only_regime, which
    brings a weight-only quantized format under it; library: Efficiency.kernel_library, whose kernels' constants)."""
    mixed = weight_only_regime and is_weight_only_quantized(fmt)
    regime = gemm_regime_for(spec.vendor, unit.sm_count, fmt.kernel_name, dtype, mixed, library)
    if regime is None:
        return None, 0.0
    return regime, unit.peak_tflops[dtype] * TERA * regime.kernel_compute_fraction[dtype]


def own_format_regime(name: str, applies, mixed_unit, half, half_gemm, regime_on: bool, has_regime: bool):
    """(applies, half rows, regime on) for a weight GEMM stored in a format of its own (OpCost.weight_format) on a
    device where the model's format gives (applies, half_gemm, regime_on): a weight-only quantized format takes the
    regime only where the engine runs mixed-input kernels (DeviceModel.mixed_input_unit), else the engine's R / (R +
    half) shape; any other format as the model's. Scalars for one device, arrays for a stacked sweep device."""
    if not is_weight_only_quantized(weight_format(name)):
        return applies, half_gemm, regime_on
    if applies.__class__ is bool and mixed_unit.__class__ is bool:
        a = applies and mixed_unit
        return a, (0.0 if a else half), (has_regime and a)
    a = np.logical_and(np.asarray(applies), np.asarray(mixed_unit) > 0)
    return a, np.where(a, 0.0, half), has_regime and bool(np.any(a))


def op_format_share(name: str, mixed_input_share):
    """Bandwidth share of a weight GEMM stored in format `name` (OpCost.weight_format) on a device whose engine
    streams mixed-input weight-only GEMMs at mixed_input_share (DeviceModel.mixed_input_share): that share for a
    weight-only quantized format, 1 otherwise."""
    return mixed_input_share if is_weight_only_quantized(weight_format(name)) else 1.0


def is_weight_only_quantized(fmt: WeightFormat) -> bool:
    """A weight-only format below 16 bits (GPTQ/AWQ int4, MXFP4, int8 W8A16): its GEMMs dequantize weights into the
    16-bit activation dtype."""
    return fmt.weight_only and fmt.bits_per_weight < 16


def sync_mma_share(unit: ComputeUnit, eff: Efficiency) -> float:
    """Share of the unit's listed tensor peaks a runtime's kernels reach through their MMA instruction: the unit's
    mma_sync_share (Hopper: 0.5, the wgmma rate is listed) where the runtime's kernels are warp-level mma.sync ones
    (Efficiency.sync_mma), else 1."""
    if getattr(eff, "sync_mma", False) and unit.mma_sync_share is not None:
        return unit.mma_sync_share
    return 1.0


def matmul_peak_note(unit: ComputeUnit, dtype: str, eff: Efficiency) -> str:
    """Why the matmul peak a runtime reaches differs from the unit's listed one ('' where it does not): fp16
    accumulation (fp16_accumulate_peak) and mma.sync kernels on a wgmma part (sync_mma_share)."""
    listed, parts = unit.peak_tflops[dtype], []
    if getattr(eff, "fp16_accumulate", False) and fp16_accumulate_peak(unit, dtype) > 1.01 * listed:  # not rounding
        parts.append(f"fp16 accumulation runs at int8 / 2 = {fp16_accumulate_peak(unit, dtype):g}")
    if (share := sync_mma_share(unit, eff)) < 1.0:
        parts.append(f"the runtime's mma.sync kernels reach {share:g} x (the listed rate needs wgmma)")
    return f"listed {listed:g}; " + "; ".join(parts) if parts else ""


def fp16_accumulate_peak(unit: ComputeUnit, dtype: str) -> float:
    """16-bit GEMM peak with fp16 accumulation: max(listed, int8 / 2). NVIDIA tensor cores run fp16-accumulate
    MMA at half the int8 rate; GeForce datasheets list fp16 at the (half) fp32-accumulate rate, datacenter parts at
    the full rate (Ada/Ampere GPU architecture whitepapers, 'Peak FP16 Tensor TFLOPS with FP16/FP32 Accumulate')."""
    listed = unit.peak_tflops[dtype]
    if dtype in ("fp16", "bf16") and "int8" in unit.peak_tflops:
        return max(listed, unit.peak_tflops["int8"] / 2)
    return listed


@dataclass(frozen=True)
class OpTime:
    op: OpCost
    time_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    overhead_s: float

    @property
    def bound(self):
        return np.where(self.compute_s > self.memory_s, "compute", "memory")

    @property
    def intensity(self):
        b = np.asarray(self.op.bytes, dtype=np.float64)
        return np.where(b > 0, np.asarray(self.op.flops, dtype=np.float64) / np.where(b > 0, b, 1), np.inf)


def gemm_rows(op: OpCost, bytes_per_weight: float):
    """Rows R of a weight GEMM: flops / (2 x parameters read), parameters = weight_bytes / bytes per weight.
    Tokens in the step for dense layers; tokens per touched expert for MoE experts."""
    if op.weight_bytes.__class__ is float and op.flops.__class__ is float:
        params = op.weight_bytes / bytes_per_weight
        return op.flops / max(2.0 * params, 1e-30)
    params = np.asarray(op.weight_bytes, dtype=np.float64) / bytes_per_weight
    return np.asarray(op.flops, dtype=np.float64) / np.maximum(2.0 * params, 1e-30)


def matmul_peak_scale(rows, half_rows, dequant_factor: float = 1.0):
    """Share of the matmul peak a weight GEMM of R rows reaches: R / (R + half_rows) / dequant_factor."""
    if not (half_rows if half_rows.__class__ in (float, int) else np.any(half_rows)):
        return 1.0 / dequant_factor
    return rows / (rows + half_rows) / dequant_factor


def dequant_factor_at(rows, dequant_factor, tile_tokens):
    """GEMM compute-time multiplier for dequantizing weights in a GEMM of R rows (tokens):
    1 + dequant_overhead x share(R), share = ceil(R / tile) / R where the kernel dequantizes each weight once per
    tile of `tile` tokens (Efficiency.dequant_tile_tokens > 0) and R > DEQUANT_MATVEC_TOKENS, else 1 (the
    matrix-vector kernels of R <= 8 tokens, and every R where no tile is set). dequant_overhead is then the
    per-token share: a decode step pays it in full, a 512-token prompt tiled by 32 pays 16/512 of it (llama.cpp's
    Metal kernel_mul_mm dequantizes a 64-row weight tile into threadgroup memory per 32-token block,
    ggml-metal.metal BLOCK_SIZE_N 32; its kernel_mul_mv dequantizes every weight for each token). Scalars or arrays
    (a stacked sweep device: one tile per device, 0 where the share is flat)."""
    if tile_tokens.__class__ in (int, float) and not tile_tokens:
        return dequant_factor
    if rows.__class__ is float and tile_tokens.__class__ in (int, float) and dequant_factor.__class__ is float:
        if rows <= DEQUANT_MATVEC_TOKENS:  # one GEMM: the same IEEE steps on floats (the scalar path replays them)
            return dequant_factor
        return 1.0 + (dequant_factor - 1.0) * (math.ceil(rows / tile_tokens) / rows)
    r = np.maximum(np.asarray(rows, dtype=np.float64), 1.0)
    t = np.asarray(tile_tokens, dtype=np.float64)
    share = np.where((t > 0) & (r > DEQUANT_MATVEC_TOKENS), np.ceil(r / np.where(t > 0, t, 1.0)) / r, 1.0)
    return 1.0 + (np.asarray(dequant_factor, dtype=np.float64) - 1.0) * share


def time_ops(ops: list[OpCost], dev: DeviceModel) -> list[OpTime]:
    """Per-op roofline times. Weight GEMMs (matmul ops that read weights) run at
    min(peak x compute_fraction, power cap) x R / (R + compute_half_rows) / dequant_factor_at(R)
    (1 + dequant_overhead[format], per tile where the profile sets dequant_tile_tokens) when a runtime profile sets
    those (defaults: the plain peak x compute_fraction). On a unit that lists an SM count their time is
    regimes.weight_gemm_time_s: the compute time padded to tile_m-row tiles and combined with the memory time by
    the ridge roll-off (t_c^p + t_m^p)^(1/p) instead of max(), constants fitted to measured
    kernels (hardware_specs/defaults/regimes.yaml). The engine's compute_fraction stays the engine's share of the
    peak; the regime curve only gives the shape. A weight-only quantized GEMM takes the curve too where the engine
    runs Marlin-style mixed-input kernels (Efficiency.weight_only_regime), its bytes at
    DeviceModel.weight_bandwidth_share of the bandwidth."""
    peaks, bw = dev.eff_peak_flops, dev.eff_bandwidth_bytes_s
    ovh = dev.efficiency.kernel_overhead_us * US
    half = getattr(dev, "compute_half_rows", None)
    if half is None:
        half = getattr(dev.efficiency, "compute_half_rows", 0.0)
    dq = getattr(dev, "dequant_factor", 1.0)
    dq_tile = getattr(dev, "dequant_tile_tokens", 0)
    cap = getattr(dev, "matmul_cap_flops", math.inf)
    if half.__class__ in _PLAIN and dq.__class__ in _PLAIN and cap.__class__ in _PLAIN:  # one device
        refine = bool(half) or dq != 1.0 or math.isfinite(cap)
    else:
        refine = bool(np.any(half)) or np.any(np.asarray(dq) != 1.0) or np.any(np.isfinite(cap))
    kv_dq = getattr(dev.efficiency, "kv_dequant_overhead", None) or {}
    gemm_regime = getattr(dev, "gemm_regime", None)  # the committed constants; which devices: kernel_peak_flops > 0
    kernel_peak = getattr(dev, "kernel_peak_flops", 0.0)
    launch = getattr(dev, "gemm_launch_s", 0.0)  # 0 on devices where the regime does not apply
    kv_copy = getattr(dev.efficiency, "kv_cache_copy", False)  # a bool, or 0/1 per stacked device
    per_head = getattr(dev.efficiency, "kv_read_per_query_head", False)  # the same
    score_factor = getattr(dev.efficiency, "score_bytes_factor", 1.0)  # a float, or one per stacked device
    reread = getattr(dev.efficiency, "kv_reread_share", 1.0)  # the same
    if kv_copy.__class__ not in _PLAIN and kv_copy.__class__ is not bool and not kv_copy.any():
        # stacked devices (an array: the class test reads no numpy on the one-device path), none copies its cache
        kv_copy = False  # op_bytes adds 2 x 0 x the KV read: the same bytes
    if kernel_peak.__class__ in _PLAIN:  # one device
        applies = kernel_peak > 0
        regime_on = gemm_regime is not None and applies
        half_gemm = 0.0 if applies else half
    else:  # a stacked sweep device: one flag per device
        applies = np.asarray(kernel_peak) > 0
        regime_on = gemm_regime is not None and bool(np.any(applies))
        kernel_peak = np.where(applies, kernel_peak, 1.0)
        half_gemm = np.where(applies, 0.0, half)
    wshare = getattr(dev, "weight_bandwidth_share", 1.0)  # mixed-input weight-only GEMMs (Efficiency field)
    mshare = getattr(dev, "mixed_input_share", 1.0)  # the same for an op stored in another weight-only format
    munit = getattr(dev, "mixed_input_unit", False)  # a bool, or 0/1 per stacked device
    out = []
    for op in ops:
        own = op.weight_format  # an op stored in a format of its own (gpt-oss's experts): its bytes and kernels
        peak = peaks[op.compute] if own is None or op.compute != MATMUL else dev.own_format_flops(own)
        weight_gemm = op.compute == MATMUL and _any_positive(op.weight_bytes)
        if own is None:
            share, op_applies, op_half, op_on = wshare, applies, half_gemm, regime_on
        else:  # a weight-only format takes the regime only where the engine runs mixed-input kernels
            share = op_format_share(own, mshare)
            op_applies, op_half, op_on = own_format_regime(own, applies, munit, half, half_gemm, regime_on,
                                                           gemm_regime is not None)
        bpw = getattr(dev, "bytes_per_weight", 2.0) if own is None else weight_format(own).bytes_per_weight
        rows = gemm_rows(op, bpw) if weight_gemm and (refine or op_on) else None
        if refine and weight_gemm:  # the regime curve replaces the engine's R / (R + half_rows) shape
            capped = (peak if peak <= cap else cap) if peak.__class__ is float and cap.__class__ is float \
                else np.minimum(peak, cap)
            peak = capped * matmul_peak_scale(rows, op_half, dequant_factor_at(
                rows, dq if own is None else dev.own_format_dequant(own), dq_tile))
        grouped = weight_gemm and op.name in GROUPED_GEMM_OPS
        if grouped:  # an expert GEMM computes at a share of the dense rate: grouped_compute_ratio, or where the
            # regime applies the width term of its per-device expert width (planner.regimes.expert_gemm_rate)
            op_rate = expert_gemm_rate(op.expert_width, dev.matmul_peak_tflops,
                                       op_applies if op_on else False)
            peak = peak * op_rate
        if kv_dq:  # converting cached K/V costs an attention op compute time (1 for every other op)
            peak = peak / attention_peak_divisor(op, dev)
        t, c, m = roofline_time_s(op.flops, op_bytes(op, getattr(dev, "unit_dtypes", None), kv_copy, per_head,
                                                     score_factor, reread), peak,
                                  bw * share if weight_gemm and not (share.__class__ is float and share == 1.0)
                                  else bw)
        if weight_gemm and op_on:  # tile padding and the ridge roll-off (planner.regimes)
            kpeak = kernel_peak * op_rate if grouped else kernel_peak
            kernel_c = (op.flops / kpeak if op.flops.__class__ is float and kpeak.__class__ is float
                        else np.asarray(op.flops, dtype=np.float64) / kpeak)
            t_r, c_r = weight_gemm_time_s(c, m, rows, gemm_regime, kernel_c, grouped)
            # both parts scaled by t / max(c, m): max(compute_s, memory_s) = time (latency.decode_sum_s sums the
            # max of the two), their ratio (the bound) unchanged
            stretch = t_r / (fmax(fmax(c_r, m), 1e-300) if c_r.__class__ is float and m.__class__ is float
                             else np.maximum(np.maximum(c_r, m), 1e-300))
            if op_applies is True:
                t, c, m = t_r, c_r * stretch, m * stretch
            else:
                t, c, m = (np.where(op_applies, t_r, t), np.where(op_applies, c_r * stretch, c),
                           np.where(op_applies, m * stretch, m))
            o = ovh + launch
            out.append(OpTime(op, op.count * (t + o), op.count * c, op.count * m, op.count * o))
            continue
        out.append(OpTime(op, op.count * (t + ovh), op.count * c, op.count * m, op.count * ovh))
    return out


def _any_positive(x) -> bool:
    return x > 0 if x.__class__ in (float, int) else bool(np.any(np.asarray(x) > 0))


def kv_passes(op: OpCost, per_query_head=False, reread_share=1.0):
    """Passes an attention op makes over the cached K/V it reads: op.kv_passes (a materialized attention: one per
    query head), or op.kv_group for a decode op of a runtime whose fused decode kernel gives each query head its
    own pass (Efficiency.kv_read_per_query_head: one CTA per query head, as TensorRT-LLM's masked MHA where XQA does
    not apply and vLLM's paged_attention v1/v2 do). A decode op's passes after the first cost reread_share of a
    pass each (Efficiency.kv_reread_share: below 1 where the K/V head's slice stays in L2 between the passes of its
    query heads):

        passes = 1 + (p - 1) x reread_share,  p = the passes above

    (Llama-3-8B without flash attention, p = 32 / 8 = 4: 1 + 3 x 0.5 = 2.5 passes from DRAM at a share of 0.5).
    per_query_head, reread_share: scalars, or one value per stacked device."""
    if op.stage != "decode" or op.kv_group == 1.0:
        return op.kv_passes
    if per_query_head.__class__ is bool or per_query_head.__class__ in _PLAIN:
        p = op.kv_group if per_query_head else op.kv_passes
    else:
        p = np.where(np.asarray(per_query_head) > 0, op.kv_group, op.kv_passes)
    if reread_share.__class__ in _PLAIN and reread_share == 1.0:
        return p
    if reread_share.__class__ in _PLAIN and p.__class__ in _PLAIN:
        return 1.0 + (p - 1.0) * float(reread_share)
    return 1.0 + (np.asarray(p, dtype=np.float64) - 1.0) * np.asarray(reread_share, dtype=np.float64)


def op_bytes(op: OpCost, unit_dtypes, kv_cache_copy=False, per_query_head=False,
             score_factor=1.0, reread_share=1.0) -> np.ndarray | float:
    """Bytes an op costs in bandwidth time: op.bytes, with the KV read taken kv_passes times (a decode op's extra
    passes at reread_share each, Efficiency.kv_reread_share) and scaled by
    regimes.kv_read_factor where the unit converts the cache format in the kernel (fp8 KV on a unit without fp8
    math), plus 2 x the KV read of a decode op where the runtime copies its cache every step (Efficiency.kv_cache_copy:
    torch.cat reads the old cache and writes the new one), plus (score_factor - 1) x the op's materialized score
    bytes (Efficiency.score_bytes_factor). kv_cache_copy, per_query_head, score_factor, reread_share: a scalar, or
    one value per device of a stacked sweep device."""
    f, passes, copy, extra = _bytes_terms(op, unit_dtypes, kv_cache_copy, per_query_head, score_factor, reread_share)
    if f == 1.0 and (copy.__class__ is float and copy == 0.0) and (passes.__class__ is float and passes == 1.0):
        return op.bytes if extra.__class__ is float and extra == 0.0 else op.bytes + extra
    kv = op.kv_read_bytes
    return op.bytes + extra + (f * passes - 1.0 + copy) * (as_float(kv) if kv.__class__ in _PLAIN
                                                           else np.asarray(kv, dtype=np.float64))


def _bytes_terms(op: OpCost, unit_dtypes, kv_cache_copy, per_query_head, score_factor, reread_share):
    """(kv_read_factor, kv_passes, cache-copy passes, extra score bytes) of op_bytes."""
    f = kv_read_factor(unit_dtypes, op.kv_dtype) if (unit_dtypes and op.kv_dtype) else 1.0
    copy = 2.0 * kv_cache_copy if op.stage == "decode" else 0.0
    passes = kv_passes(op, per_query_head, reread_share) if op.kv_dtype else 1.0
    sb = op.score_bytes
    if (sb.__class__ in _PLAIN and sb == 0.0) or (score_factor.__class__ in _PLAIN and score_factor == 1.0):
        extra = 0.0
    elif score_factor.__class__ in _PLAIN:  # one device: float arithmetic (a replay stand-in passes through)
        extra = (float(score_factor) - 1.0) * sb
    else:  # a stacked sweep device: one factor per device
        extra = (np.asarray(score_factor, dtype=np.float64) - 1.0) * sb
    return f, passes, copy, extra


def op_bytes_multipliers(op: OpCost, dev: DeviceModel) -> tuple[float, float]:
    """(a, b) with op_bytes(op, ...) = op.bytes + a x op.kv_read_bytes + b x op.score_bytes on one device, under its
    unit's formats and its efficiency's cache terms (kv_cache_copy, kv_read_per_query_head, score_bytes_factor,
    kv_reread_share): a = kv_read_factor x kv_passes - 1 + the copy's passes, b = score_bytes_factor - 1 (0 where the
    op has no score matrix). For callers that hold an op's byte terms apart, as linear functions of its shape (the
    serving step model's attention coefficients)."""
    eff = dev.efficiency
    f, passes, copy, _ = _bytes_terms(op, dev.unit_dtypes, getattr(eff, "kv_cache_copy", False),
                                      getattr(eff, "kv_read_per_query_head", False), 1.0,
                                      getattr(eff, "kv_reread_share", 1.0))
    return float(f * passes - 1.0 + copy), float(getattr(eff, "score_bytes_factor", 1.0)) - 1.0


def attention_peak_divisor(op: OpCost, dev: DeviceModel) -> float:
    """1 + the efficiency's kv_dequant_overhead of the op's cache dtype for an attention op (converting cached K/V
    costs compute time, time_ops), else 1. A float, or one value per device of a stacked sweep device."""
    kv_dq = getattr(dev.efficiency, "kv_dequant_overhead", None) or {}
    return 1.0 + kv_dq[op.kv_dtype] if op.compute == ATTENTION and op.kv_dtype in kv_dq else 1.0


def step_time_s(op_times: list[OpTime], dev: DeviceModel):
    """Sum of operator times plus the fixed per-step overhead."""
    return sum(ot.time_s for ot in op_times) + dev.efficiency.step_overhead_ms * 1e-3


def _flt(x):
    """float(x), x itself when it is a float already (what float() returns then; a replay stand-in passes through)."""
    return x if x.__class__ is float else as_float(x)


def step_bound(op_times: list[OpTime]):
    """What the step's time goes to: 'compute' or 'memory' (time of ops limited by each), or 'overhead'."""
    if all(ot.compute_s.__class__ in _PLAIN and ot.memory_s.__class__ in _PLAIN
           or np.ndim(ot.compute_s) == 0 and np.ndim(ot.memory_s) == 0 for ot in op_times):  # one configuration
        comp = sum(_flt(ot.compute_s) for ot in op_times if ot.compute_s > ot.memory_s)
        mem = sum(_flt(ot.memory_s) for ot in op_times if not ot.compute_s > ot.memory_s)
        ovh = sum(_flt(ot.overhead_s) for ot in op_times)
        return "overhead" if ovh > comp and ovh > mem else ("compute" if comp > mem else "memory")
    comp = sum(np.where(ot.compute_s > ot.memory_s, ot.compute_s, 0.0) for ot in op_times)
    mem = sum(np.where(ot.compute_s > ot.memory_s, 0.0, ot.memory_s) for ot in op_times)
    ovh = sum(ot.overhead_s for ot in op_times)
    return np.where((ovh > comp) & (ovh > mem), "overhead", np.where(comp > mem, "compute", "memory"))


def implied_shares(flops, n_bytes, time_s, peak_tflops: float, bandwidth_gbs: float) -> tuple[float, float]:
    """(share of the datasheet compute peak, share of the datasheet bandwidth) that a predicted time implies:

        compute share   = flops / time / (peak_tflops x 1e12)
        bandwidth share = bytes / time / (bandwidth_gbs x 1e9)

    e.g. Llama-2-7B fp16 decode at batch 1 reads ~13.5 GB per step; 50 ms per step on an A100 (2,039 GB/s) is
    13.5e9 / 0.05 / 2.039e12 = 13% of bandwidth (the eager-PyTorch figure of issue 11). 0 when time is not > 0."""
    t = float(time_s)
    if not t > 0:
        return 0.0, 0.0
    return float(flops) / t / (peak_tflops * TERA), float(n_bytes) / t / (bandwidth_gbs * GB)
