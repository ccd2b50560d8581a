"""Regime efficiencies: how much of a peak a kernel reaches as a function of its shape, with formulas a reader can
check by hand. Pure functions of numbers; planner/roofline.py applies the ones the device specs carry inputs for.

What the cost model applies (roofline.time_ops, accuracy/predict.py), with constants fitted to kernel timings NVIDIA
measured on A100/H100/H200/B200/L40S/RTX PRO 6000 (aiconfigurator-core, planner/accuracy/kernel_tables.py; data in
hardware_specs/defaults/regimes.yaml: tile_m 128, p 2.5, grouped tile 64, kernel share of the peak bf16 0.75,
fp8 0.54, and native FP4 0.37 fitted at that shape to the nvfp4 tables of B200 / GB200 / GB300 / RTX PRO 6000), to
fp16/bf16/fp8 weight GEMMs, and NVFP4 ones where the unit computes fp4, on NVIDIA units that list an SM count
(gemm_regime_for):

  t_c    = flops / (peak x engine compute_fraction)                the engine's share (runtime profile)
  t_tile = flops / (peak x kernel_compute_fraction[dtype]) / tile_padding_efficiency(R, tile)
  t      = (max(t_c, t_tile)^p + t_m^p)^(1/p)                       weight_gemm_time_s, p = ridge_sharpness
  e.g. R = 129 rows in 128-row tiles: tile_padding_efficiency = 129/256; at the ridge (t_c = t_m) p = 2.5 costs
  2^(1/2.5) = 1.32x the plain max().

An engine whose own GEMM kernels aiconfigurator also measured (vLLM, SGLang: gemm/<engine>/<version> tables) takes
its library's kernel share and launch time per dtype at the same tile and ridge shape (GemmRegime.libraries,
Efficiency.kernel_library; vLLM fp8 0.42 of the peak and 4.1 us per GEMM beyond bf16, TensorRT-LLM's 0.54 and 10.3).
Other units, quantized formats (GEMV / dequantizing kernels the tables do not measure) and the constants below
keep today's behaviour. Wave quantization is fitted for information only: an OpCost carries no N.

GEMM (C[M x N] = A[M x K] B[K x N], M = tokens in the step, tiles tile_m x tile_n, one tile per SM at a time):
  small-M tiles      eff_m    = M / (ceil(M / tile_m) x tile_m)          padded rows do no useful work
  wave quantization  tiles    = ceil(M / tile_m) x ceil(N / tile_n);  waves = ceil(tiles / SMs)
                     eff_wave = tiles / (waves x SMs)                     the last wave leaves SMs idle
  ridge roll-off     t = (t_c^p + t_m^p)^(1/p), p = RIDGE_SHARPNESS      near intensity = ridge neither compute
                     nor memory hides the other (p -> inf is the plain max(); p = 4 loses 19% at the ridge:
                     2^(1/4) = 1.19)
  gemm_efficiency = eff_m x eff_wave (share of the tensor peak; the roll-off is applied to times)

Grouped GEMM for MoE experts (tokens routed to each expert form one small GEMM of M = tokens per expert):
  grouped_gemm_efficiency(t) = t / (ceil(t / tile_m) x tile_m)    with tile_m = 64 (CUTLASS/Triton grouped kernels
  pick 16-128; 64 is the common default)  -> 1 token per expert uses 1/64 of the tensor work it pays for.
  and it computes at grouped_compute_ratio x the dense rate (median over the measured whole-expert MoE tables of
  f_moe / f_dense, 0.78): t_c(expert GEMM) = flops / (peak x compute_fraction x grouped_compute_ratio), on every
  unit; on the units the fit applies to (gemm_regime_for), for an op that knows its expert width, at
  grouped_wide_ratio x grouped_width_efficiency(w, P) instead (the width term below; grouped_wide_ratio 0.99: the
  rate of unbounded width).
  Expert width: tensor parallelism splits each expert's intermediate dimension, so a GPU's expert GEMMs are w =
  expert_intermediate_size / TP wide (the N of the gate/up GEMM, the K of the down GEMM; expert parallelism keeps w
  whole). Each tile then does less work for the same fixed time (prologue, epilogue, a short K loop), and a faster
  GPU runs out of work per tile sooner:
      grouped_width_efficiency(w, P) = w / (w + kappa x P),   P = the unit's dense peak of the GEMM dtype in TFLOP/s
  kappa fitted to aiconfigurator's MoE tables with moe_tp 1-32 (GemmRegime.grouped_width_per_tflops: 0.7, i.e.
  half rate at w = 693 on an H100, 1,575 on a B200, 253 on an L40S). Measured (TensorRT-LLM bf16, Qwen3-235B's
  experts h 4,096 x I 1,536, 16,384 tokens): H100 0.64 of the peak at TP1 (w = 1,536), 0.36 at TP4 (384), 0.22 at
  TP8 (192); B200 0.66 / 0.30 / 0.17; vLLM 0.24's Triton kernel on the H100 0.49 / 0.42 / 0.27 (not in the fit).
  The fit lowers the median |log error| over the 20,115 MoE kernels from 0.199 to 0.124 (p90 0.76 -> 0.39).

Decode attention (one query per sequence reads its whole KV cache):
  without split-KV the grid is batch x kv_heads CTAs; fewer CTAs than SMs leave bandwidth idle:
      eff = min(1, batch x kv_heads / SMs)
  with split-KV (FlashDecoding, Dao et al. 2023) the context is cut into chunks of SPLIT_KV_CHUNK tokens:
      eff = min(1, batch x kv_heads x ceil(context / SPLIT_KV_CHUNK) / SMs)

KV / weight formats the hardware does not run natively:
  fp8 KV on a unit without fp8 tensor math (Ampere, Ada before sm_89 kernels, AMD MI200) is converted to fp16 in
  the attention kernel; measured 2.5-3x slower than "half the bytes" (issue 11): the KV read costs
  FP8_KV_EMULATION x (fp8 bytes) of bandwidth time, i.e. 2.75 / 2 = 1.375x the fp16 read.
  Weight-only quantized formats take the curve only for engines whose kernels are Marlin-style mixed-input GEMMs
  (Efficiency.weight_only_regime: vLLM, SGLang, TGI), at the 16-bit rate with the format's bytes.
  FP4 weights: a weight-only format (MXFP4 via Marlin/W4A16, ...) dequantizes into the activation dtype and runs
  at that peak, never at the FP4 tensor peak; NVFP4 (weights and activations) uses the FP4 peak where the unit
  lists one (Blackwell) and dequantizes on Hopper (fp8/bf16 peak).
"""

from __future__ import annotations

import math

from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from .lazy import np

RIDGE_SHARPNESS = 4.0
GROUPED_TILE_M = 64
SPLIT_KV_CHUNK = 512
FP8_KV_EMULATION = 2.75     # KV read time / fp8 bytes time on units without fp8 math (issue 11: 2.5-3x)
_LOW_BIT = ("fp4", "int4")  # tensor dtypes a weight-only format never computes in


def fmax(a: float, b: float) -> float:
    """np.maximum on two floats: the larger, NaN if either is NaN (the first on a tie)."""
    return a if (a >= b or a != a) else b


def small_m_efficiency(m_tokens, tile_m: int = 64):
    """M / (ceil(M / tile_m) x tile_m): share of a tile's rows that are real tokens."""
    if m_tokens.__class__ is float:  # one GEMM: the same IEEE steps on a float (ceil is exact either way)
        return m_tokens / (math.ceil(m_tokens / tile_m) * float(tile_m))
    m = np.asarray(m_tokens, dtype=np.float64)
    return m / (np.ceil(m / tile_m) * tile_m)


def wave_efficiency(m_tokens, n: int, sm_count: int, tile_m: int = 128, tile_n: int = 128):
    """tiles / (ceil(tiles / SMs) x SMs), tiles = ceil(M / tile_m) x ceil(N / tile_n)."""
    tiles = np.ceil(np.asarray(m_tokens, dtype=np.float64) / tile_m) * np.ceil(np.asarray(n, dtype=np.float64) / tile_n)
    return tiles / (np.ceil(tiles / sm_count) * sm_count)


def gemm_efficiency(m_tokens, n: int, sm_count: int, tile_m: int = 128, tile_n: int = 128):
    """Share of the tensor peak a GEMM of M tokens x N outputs reaches: small-M tiles x wave quantization."""
    return small_m_efficiency(m_tokens, tile_m) * wave_efficiency(m_tokens, n, sm_count, tile_m, tile_n)


def ridge_rolloff_time(compute_s, memory_s, p: float = RIDGE_SHARPNESS):
    """(t_c^p + t_m^p)^(1/p): >= max(t_c, t_m), 2^(1/p) x it at the ridge (t_c = t_m)."""
    if compute_s.__class__ is float and memory_s.__class__ is float:  # one GEMM: floats, np.maximum's NaN rule
        hi = fmax(fmax(compute_s, memory_s), 1e-300)
        return hi * ((compute_s / hi) ** p + (memory_s / hi) ** p) ** (1.0 / p)
    c, m = np.asarray(compute_s, dtype=np.float64), np.asarray(memory_s, dtype=np.float64)
    hi = np.maximum(np.maximum(c, m), 1e-300)
    return hi * ((c / hi) ** p + (m / hi) ** p) ** (1.0 / p)


def tile_padding_efficiency(rows, tile_m: int):
    """small_m_efficiency beyond one tile, 1 up to it: R / (ceil(R / tile_m) x tile_m) for R > tile_m, else 1.
    GEMM libraries pick a GEMV / split-K / smaller-tile kernel for a GEMM of fewer rows than their tile (measured:
    aiconfigurator's bf16 GEMMs on an H100 take the same time for M = 1..128, at 65-80% of bandwidth), so only the
    rows past a whole tile pad: M = 129 in 128-row tiles does the work of 256 rows (129/256)."""
    if rows.__class__ is float:  # one GEMM
        r = fmax(rows, 1e-9)
        return small_m_efficiency(r, tile_m) if r > tile_m else 1.0
    r = np.maximum(np.asarray(rows, dtype=np.float64), 1e-9)
    return np.where(r > tile_m, small_m_efficiency(r, tile_m), 1.0)


def grouped_gemm_efficiency(tokens_per_expert, tile_m: int = GROUPED_TILE_M):
    """Share of the tensor work of a grouped expert GEMM that real tokens use: t / (ceil(t / tile_m) x tile_m)."""
    return small_m_efficiency(np.maximum(np.asarray(tokens_per_expert, dtype=np.float64), 1e-9), tile_m)


def decode_attention_efficiency(batch, kv_heads, context, sm_count: int, split_kv: bool = True,
                                chunk: int = SPLIT_KV_CHUNK, ctas_per_sm: float = 1.0):
    """Share of bandwidth a decode attention kernel can use: min(1, CTAs / (SMs x ctas_per_sm)), CTAs = batch x
    kv_heads (x ceil(context / chunk) with split-KV); ctas_per_sm = resident CTAs per SM it takes to saturate
    bandwidth (occupancy)."""
    ctas = np.asarray(batch, dtype=np.float64) * np.asarray(kv_heads, dtype=np.float64)
    if split_kv:
        ctas = ctas * np.ceil(np.asarray(context, dtype=np.float64) / chunk)
    return np.minimum(1.0, ctas / (sm_count * ctas_per_sm))


def kv_read_factor(unit_peak_dtypes, kv_dtype: str | None) -> float:
    """Bandwidth-time multiplier on the KV-cache read: FP8_KV_EMULATION for an fp8 cache on a unit that lists no
    fp8 peak (conversion in the kernel), else 1."""
    if kv_dtype == "fp8" and "fp8" not in unit_peak_dtypes:
        return FP8_KV_EMULATION
    return 1.0


def matmul_preferences(compute_dtypes: tuple[str, ...], weight_only: bool) -> tuple[str, ...]:
    """The GEMM dtypes a weight format may compute in, in preference order: a weight-only format dequantizes into
    the activation dtype and never runs at a 4-bit tensor peak (MXFP4 weight-only on a B200 runs at the bf16 peak,
    not at 9 PFLOP/s of FP4)."""
    if not weight_only:
        return compute_dtypes
    return tuple(d for d in compute_dtypes if d not in _LOW_BIT) or compute_dtypes


# ---------------------------------------------------------------- fitted constants (hardware_specs/defaults/regimes.yaml)


class GemmRegime(BaseModel):
    """Shared GEMM shape constants fitted to measured kernel timings (planner/accuracy/kernel_tables.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
    tile_m: int = Field(ge=1, le=1024, strict=True, description="row tile of dense weight GEMMs")
    ridge_sharpness: float = Field(ge=1.0, le=64.0, strict=True, description="p of ridge_rolloff_time")
    grouped_tile_m: int = Field(ge=1, le=1024, strict=True, description="row tile of grouped MoE expert GEMMs")
    kernel_compute_fraction: dict[str, float] = Field(min_length=1, description=(
        "GEMM dtype -> the kernel library's share of the tensor peak on large GEMMs (median over the measured "
        "GPUs): the rate the padded tiles run at"))
    vendors: list[str] = Field(min_length=1, description="vendors of the GPUs whose kernels the fit measured")
    grouped_compute_ratio: float = Field(default=1.0, gt=0.0, le=1.0, description=(
        "compute rate of a grouped expert GEMM / that of a dense GEMM of the same dtype on the same GPU (median over "
        "the measured tables of each table's fitted MoE compute_fraction / dense compute_fraction): routing, the "
        "gather/scatter of tokens to their experts and irregular per-expert tiles"))
    grouped_wide_ratio: float = Field(default=0.0, ge=0.0, le=1.0, description=(
        "compute rate of a grouped expert GEMM of unbounded expert width / that of a dense GEMM (the MoE tables "
        "fitted with the width term, every moe_tp; bf16): on the units the fit applies to (gemm_regime_for) the "
        "expert GEMMs compute at this x grouped_width_efficiency instead of grouped_compute_ratio; 0 = no width "
        "model"))
    grouped_width_per_tflops: float = Field(default=0.0, ge=0.0, le=100.0, description=(
        "kappa of grouped_width_efficiency: the expert width (per-GPU intermediate size) at which a grouped expert "
        "GEMM reaches half its wide-expert rate, per TFLOP/s of the unit's peak in the GEMM dtype; 0 = no width "
        "term"))
    launch_us: dict[str, float] = Field(default_factory=dict, description=(
        "GEMM dtype -> fixed time per GEMM launch in us (median over the measured GPUs of each table's t0): what a "
        "GEMM costs beyond its roofline however small it is"))

    libraries: dict[str, "GemmLibrary"] = Field(default_factory=dict, description=(
        "engine id -> its own GEMM kernel library's share of the peak and launch time per dtype, fitted with the "
        "shared shape (tile_m, ridge_sharpness) to the tables aiconfigurator measured through that engine "
        "(kernel_library); an engine not listed runs the constants above (TensorRT-LLM's tables)"))

    def for_library(self, engine: str) -> "GemmRegime":
        """This regime with `engine`'s kernel shares and launch times where the fit has that engine's tables
        (GemmRegime.libraries), else itself."""
        lib = self.libraries.get(engine)
        if lib is None:
            return self
        return _library_regime(self, engine)

    def extra_launch_s(self, dtype: str) -> float:
        """Fixed time a GEMM in `dtype` costs beyond a 16-bit one, in seconds:
        max(0, launch_us[dtype] - launch_us['bf16']) x 1e-6. The engine's kernel_overhead_us is the per-op cost of
        launching any kernel; an fp8 (W8A8) GEMM also quantizes and scales its activations, which the measured
        tables put at ~10 us more per GEMM on Hopper (h100_sxm fp8 13.7 us vs bf16 3.5 us), ~13 us on B200."""
        base = self.launch_us.get("bf16")
        if base is None or dtype not in self.launch_us:
            return 0.0
        return max(0.0, self.launch_us[dtype] - base) * 1e-6


class GemmLibrary(BaseModel):
    """One engine's GEMM kernels as aiconfigurator measured them (its gemm/<engine>/<version> tables), fitted with
    the shared tile and ridge shape: the share of the peak its tiles reach and its fixed time per GEMM, per dtype.
    vLLM's and SGLang's fp8 (W8A8) GEMMs quantize their activations in a cheaper kernel than TensorRT-LLM's (h100_sxm
    m = 1, 4096 x 4096: vLLM 0.24 13.8 us, TensorRT-LLM 1.3 18.5 us; bf16 15.0 / 16.6 us) and reach less of the
    fp8 peak on large GEMMs (median over the GPUs 0.42 vs 0.54)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
    kernel_compute_fraction: dict[str, float] = Field(min_length=1, description=(
        "GEMM dtype -> the library's share of the tensor peak on large GEMMs (median over the measured GPUs)"))
    launch_us: dict[str, float] = Field(default_factory=dict, description=(
        "GEMM dtype -> fixed time per GEMM in us (median over the measured GPUs)"))


_LIBRARY_REGIMES: dict = {}  # (id of the base regime, engine) -> (base, its regime): one object per pair


def _library_regime(base: "GemmRegime", engine: str) -> "GemmRegime":
    """`base` with engine's library constants, built once per (base, engine) so that device models keyed by object
    identity (planner.lazy.by_identity) stay cached."""
    hit = _LIBRARY_REGIMES.get((id(base), engine))
    if hit is None or hit[0] is not base:
        lib = base.libraries[engine]
        hit = (base, base.model_copy(update={"kernel_compute_fraction": dict(lib.kernel_compute_fraction),
                                             "launch_us": dict(lib.launch_us)}))
        _LIBRARY_REGIMES[(id(base), engine)] = hit
    return hit[1]


class DecodeAttentionRegime(BaseModel):
    """Split-KV decode attention constants fitted to measured kernels (decode_attention_efficiency's chunk and
    ctas_per_sm); recorded, not applied: an OpCost carries no kv_heads, and the fit is no better than the plain
    bandwidth roofline the planner uses (provenance.fit.decode_attention: 0.163 vs 0.163 median |log error|; without
    split-KV 0.44). The fit is flat for chunks <= 128 (32 is the grid's edge, not identified): TensorRT-LLM's
    split-KV kernels saturate bandwidth from 256 tokens of context on."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
    split_kv_chunk: int = Field(ge=0, le=1 << 20, strict=True, description="tokens per split-KV chunk; 0 = none")
    ctas_per_sm: float = Field(gt=0, le=64, description="resident CTAs per SM that saturate bandwidth")


class SmStreaming(BaseModel):
    """Per-SM streaming rate of NVIDIA's decode-attention kernels on each GPU the tables measured (GB/s per SM:
    the bf16 table's bandwidth share x bandwidth / SMs) and the reference: the largest rate among the GPUs whose
    published runs the engine profiles' per-SM caps were fitted on (kernel_tables.STREAMING_REFERENCE_SYSTEMS)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
    gbs_per_sm: dict[str, float] = Field(default_factory=dict)
    reference_gbs_per_sm: float = Field(gt=0.0, le=1e4)
    reference_systems: list[str] = Field(default_factory=list)


class RegimeConstants(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
    gemm: GemmRegime
    decode_attention: DecodeAttentionRegime | None = None
    sm_streaming: SmStreaming | None = None
    provenance: dict


def regimes_path():
    from .hardware import SPECS_DIR
    return SPECS_DIR / "defaults" / "regimes.yaml"


@lru_cache(maxsize=1)
def regime_constants() -> RegimeConstants:
    """The committed fit (yaml.safe_load + pydantic): tile_m, tile_n, ridge sharpness p with their provenance."""
    from .io import read_yaml, validated
    path = regimes_path()
    return validated(RegimeConstants, read_yaml(path), str(path))


def sm_streaming_scale(spec_id: str) -> float:
    """How many times the bytes per SM a GPU's memory-bound kernels keep streaming, against the GPUs the engine
    profiles' per-SM bandwidth caps (Efficiency.sm_bandwidth_gbs) were fitted on:

        max(1, s_gpu / s_ref)

    s = the per-SM rate NVIDIA's decode-attention kernels reach on the GPU (aiconfigurator's generation-attention
    tables, bf16 KV: bandwidth share x bandwidth / SMs; RegimeConstants.sm_streaming), s_ref = the largest s among
    the GPUs with published runs in the project's data (the H200's, 27.6 GB/s per SM). By Little's law an SM streams
    (bytes in flight) / (latency); a cap fitted in GB/s per SM holds the in-flight bytes of the architectures it saw,
    and Blackwell's SMs keep more in flight: the B200's kernels stream 47.6 GB/s per SM, so a cap fitted on Hopper
    would hold a B200 to 58% of its datasheet bandwidth (TensorRT-LLM's 30.3 GB/s x 148 SMs = 4.5 of 7.7 TB/s) where
    the same kernels measured reach 92%. 1 for a GPU no table measured, and for every GPU the caps were fitted on."""
    st = regime_constants().sm_streaming
    if st is None or spec_id not in st.gbs_per_sm:
        return 1.0
    return max(1.0, st.gbs_per_sm[spec_id] / st.reference_gbs_per_sm)


MEASURED_GEMM_FORMATS = ("fp16", "bf16", "fp8")  # weight formats whose GEMMs the kernel tables measure (bf16, fp8)
# formats whose GEMMs the tables measure only where the unit computes them natively in fp4 (Blackwell's NVFP4
# tensor cores: weights and activations in NVFP4, the nvfp4 tables); elsewhere they are weight-only formats
NATIVE_FP4_FORMATS = ("nvfp4",)


def kernel_library(runtime: str | None) -> str:
    """The GEMM kernel library whose measured tables set an engine's regime constants (Efficiency.kernel_library):
    the engine itself where the committed fit has its tables (GemmRegime.libraries: vLLM, SGLang), else '' (the
    default constants, measured through TensorRT-LLM)."""
    return str(runtime) if runtime and str(runtime) in regime_constants().gemm.libraries else ""


def gemm_regime_for(vendor: str, sm_count: int | None, weight_format: str, dtype: str,
                    mixed_input: bool = False, library: str = "") -> GemmRegime | None:
    """The fitted GEMM regime for a unit and weight format, or None (the engine's R / (R + half_rows) shape): it
    applies to units that list an SM count, whose vendor's kernels the fit measured (NVIDIA only in
    aiconfigurator's tables; an AMD CU is not an SM), and to formats whose GEMMs run in the dtype the tables
    measured (MEASURED_GEMM_FORMATS) running in a dtype the fit has a kernel fraction for. Other quantized formats
    run other kernels (GEMV, int8-dot or dequantizing kernels with their own tiles), which the tables do not
    measure; mixed_input = the weight is a weight-only quantized one and the engine runs it through Marlin-style
    mixed-input kernels (Efficiency.weight_only_regime): tiles of 16-bit MMAs on weights dequantized in registers,
    so the 16-bit GEMM's curve (its kernel share and tiles) applies to the flops while the bytes are the format's.
    Marlin is measured memory bound up to ~16-32 tokens on an A100 (near 4x a 16-bit GEMM there; Frantar et al.
    2024, arXiv:2408.11743, Fig. 1), where the 4-bit ridge of this curve lies (A100: 312 TFLOP/s x 0.75 / (2.04 TB/s
    / 0.5 B per weight x 2 flop) = 29 rows)."""
    measured = weight_format in MEASURED_GEMM_FORMATS or (weight_format in NATIVE_FP4_FORMATS and dtype == "fp4")
    if sm_count is None or not (measured or mixed_input):
        return None
    g = regime_constants().gemm.for_library(library)
    return g if vendor.lower() in g.vendors and dtype in g.kernel_compute_fraction else None


GROUPED_GEMM_OPS = ("moe_experts",)  # planner.ops names of grouped (per-expert) GEMMs: rows = tokens per expert


def grouped_compute_ratio() -> float:
    """The committed GemmRegime.grouped_compute_ratio: a grouped expert GEMM computes at this share of the rate of a
    dense GEMM (0.78 in aiconfigurator's MoE vs GEMM tables: h100_sxm bf16 0.637 vs 0.814 of the peak). Measured on
    NVIDIA's kernels; applied to the expert GEMMs on every unit (no other vendor's MoE kernels are measured, and
    every MoE kernel routes, gathers and scatters its tokens)."""
    return regime_constants().gemm.grouped_compute_ratio


def grouped_width_efficiency(width, peak_tflops, kappa: float):
    """w / (w + kappa x P): the share of its wide-expert rate a grouped expert GEMM of per-GPU expert width w
    (OpCost.expert_width) reaches on a unit of dense peak P TFLOP/s in the GEMM dtype (module docstring); 1 where the
    width is not known (0) or kappa is 0. E.g. Qwen3-235B's experts (I = 1,536) at TP8 on an H100 (989 TFLOP/s bf16)
    with kappa 0.5: 192 / (192 + 494.5) = 0.28."""
    if width.__class__ in (float, int) and peak_tflops.__class__ in (float, int):  # one op: float arithmetic
        if width <= 0.0 or kappa == 0.0:
            return 1.0
        return width / (width + kappa * peak_tflops)
    w = np.asarray(width, dtype=np.float64)
    h = kappa * np.asarray(peak_tflops, dtype=np.float64)
    return np.where(w > 0, w / np.maximum(w + h, 1e-30), 1.0)


def grouped_width_model() -> tuple[float, float]:
    """The committed (GemmRegime.grouped_wide_ratio, grouped_width_per_tflops): the expert GEMM rate at unbounded
    width and kappa of grouped_width_efficiency; (0, 0) where the fit has no width model."""
    g = regime_constants().gemm
    return (g.grouped_wide_ratio, g.grouped_width_per_tflops) if g.grouped_width_per_tflops > 0 else (0.0, 0.0)


def expert_gemm_rate(width, peak_tflops, applies):
    """Share of the dense rate a grouped expert GEMM computes at (module docstring): grouped_wide_ratio x
    grouped_width_efficiency(width, peak_tflops) where the fitted regime applies (`applies`: a bool, or one per op
    instance / stacked device) and the op knows its per-device expert width (> 0), else the flat
    grouped_compute_ratio. roofline.time_ops and the fit's predict_time_s both take their expert rate from here."""
    flat = grouped_compute_ratio()
    wide, kappa = grouped_width_model()
    if wide <= 0.0:
        return flat
    if width.__class__ in (float, int) and getattr(applies, "ndim", 0) == 0:  # one op (a bool or a numpy bool)
        return wide * grouped_width_efficiency(width, peak_tflops, kappa) if applies and width > 0 else flat
    use = np.asarray(applies, dtype=bool) & (np.asarray(width, dtype=np.float64) > 0)
    return np.where(use, wide * grouped_width_efficiency(width, peak_tflops, kappa), flat)


def weight_gemm_time_s(compute_s, memory_s, rows, gemm: GemmRegime, kernel_compute_s, grouped: bool = False):
    """Time of a weight GEMM on a unit the committed fit applies to (gemm_regime_for):

        t_tiles = kernel_compute_s / tile_padding_efficiency(R, tile)  the padded tiles at the kernel's own rate
        t       = (max(t_c, t_tiles)^p + t_m^p)^(1/p)                ridge roll-off (ridge_rolloff_time)

    t_c = the engine's compute time (its compute_fraction stays the engine's share), kernel_compute_s = flops /
    (peak x kernel_compute_fraction[dtype]); R = GEMM rows: tokens in the step, or tokens per expert for grouped
    expert GEMMs (tile = grouped_tile_m). Wave quantization needs N, which an
    OpCost does not carry (fused projections), so it is not applied here. Returns (time, compute time used)."""
    tile = gemm.grouped_tile_m if grouped else gemm.tile_m
    eff = tile_padding_efficiency(rows, tile)
    if compute_s.__class__ is float and kernel_compute_s.__class__ is float and eff.__class__ is float:  # one GEMM
        t_c = fmax(compute_s, kernel_compute_s / eff)
        return ridge_rolloff_time(t_c, memory_s, gemm.ridge_sharpness), t_c
    t_c = np.maximum(np.asarray(compute_s, dtype=np.float64), np.asarray(kernel_compute_s, dtype=np.float64) / eff)
    return ridge_rolloff_time(t_c, memory_s, gemm.ridge_sharpness), t_c
