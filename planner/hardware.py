"""Hardware specs: the schema of `hardware_specs/*.yaml`, loading by id or path, efficiency defaults.

Specs are data, the schema is code: every section carries a `source`, unknown keys are errors, peaks are dense
(sparse datasheet figures halved, GeForce cards at the fp32-accumulate tensor rate). A device has one or more
compute units sharing one memory system (a system-on-chip lists CPU, GPU and NPU separately).

Every number is finite and inside the bounds stated once below; fit uses the capacity the runtime sees
(`memory.visible_gb`, decimal GB) x `usable_fraction`; figures the vendor does not publish are listed in
`unpublished` and every estimate that rests on one carries a warning.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .catalog_index import by_identity, folder_index, parsed
from .errors import PlannerError, unknown_id
from .io import read_yaml, validated

DType = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4"]
DTYPES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")
UnitKind = Literal["gpu", "cpu", "npu"]
DeviceKind = Literal["gpu", "cpu", "soc", "npu"]

REPO_ROOT = Path(__file__).resolve().parent.parent
SPECS_DIR = Path(os.environ.get("PLANNER_SPECS_DIR", REPO_ROOT / "hardware_specs"))
EFFICIENCY_DEFAULTS_PATH = SPECS_DIR / "defaults" / "efficiency.yaml"

# ---------------------------------------------------------------- bounds, stated once
# Every number in a spec file is a YAML number (strict: no strings, no booleans), finite (no .inf/.nan; 1e400
# parses as inf and is refused) and inside a plausible range. The ranges are wide enough for any device built or
# announced (GB300: 288 GB HBM, 8 TB/s, 15,000 dense FP4 TFLOPS) and narrow enough that a typo in units (bytes
# for GB, an extra 1e3) or a subnormal is refused with one line naming the field.
_NUM = {"strict": True, "allow_inf_nan": False}
CapacityGB = Annotated[float, Field(ge=1e-3, le=1e5, **_NUM)]          # 1 MB .. 100 TB
BandwidthGBs = Annotated[float, Field(ge=1e-3, le=1e6, **_NUM)]        # 1 MB/s .. 1 PB/s
LinkGBs = Annotated[float, Field(ge=0, le=1e6, **_NUM)]                # 0 = no link
PeakTflops = Annotated[float, Field(ge=1e-6, le=1e6, **_NUM)]          # 1 MFLOP/s .. 1 EFLOP/s
Fraction = Annotated[float, Field(ge=1e-6, le=1, **_NUM)]              # a share of a peak or of memory: (0, 1], no subnormals
CacheMB = Annotated[float, Field(ge=1e-3, le=1e5, **_NUM)]
Watts = Annotated[float, Field(ge=1e-3, le=1e6, **_NUM)]
UsdPerHour = Annotated[float, Field(ge=1e-6, le=1e5, **_NUM)]
OverheadUs = Annotated[float, Field(ge=0, le=1e6, **_NUM)]             # per kernel, <= 1 s
OverheadMs = Annotated[float, Field(ge=0, le=1e6, **_NUM)]             # per step, <= 1000 s
HalfRows = Annotated[float, Field(ge=0, le=1e9, **_NUM)]
OverheadRatio = Annotated[float, Field(ge=0, le=1e6, **_NUM)]          # extra time as a fraction of the time
TflopsPerWatt = Annotated[float, Field(ge=0, le=1e3, **_NUM)]
SmBandwidthGBs = Annotated[float, Field(ge=0, le=1e4, **_NUM)]         # GB/s one SM sustains; 0 = no cap
Year = Annotated[int, Field(ge=1990, le=2100, strict=True)]
SmCount = Annotated[int, Field(ge=1, le=100_000, strict=True)]           # SMs / CUs per unit
# Decimal GB the runtime sees may exceed the marketed figure: an "80 GB" HBM part is 80 GiB = 85.9e9 B.
# 1.2 x marketed is above any binary-vs-decimal ratio (TiB/TB = 1.0995).
VISIBLE_OVER_MARKETED_MAX = 1.2


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class HostPool(_Frozen):
    """A second, slower memory pool behind a coherent link (GH200/GB200/GB300: Grace LPDDR5X over NVLink-C2C).

    The planner sizes fit on the device pool (`memory`); this pool is reported, not used for fit: offloading
    weights or KV to it costs link_gbs per byte, which no estimate models yet.
    """

    capacity_gb: CapacityGB
    bandwidth_gbs: BandwidthGBs = Field(description="the host memory's own peak bandwidth (CPU side)")
    link_gbs: LinkGBs = Field(description="device <-> host link, total bidirectional GB/s (NVLink-C2C: 900)")
    type: str | None = None
    source: str = Field(min_length=3)
    derived: str | None = None


class MemorySpec(_Frozen):
    """Main memory: capacity in GB (1e9), peak bandwidth in GB/s (1e9 B/s).

    capacity_gb is the marketed figure; visible_gb is what the runtime reports as total device memory, in
    decimal GB (nvidia-smi MiB x 2^20 / 1e9, rocm-smi bytes / 1e9, or vendor docs), and is what fit uses.
    """

    capacity_gb: CapacityGB
    bandwidth_gbs: BandwidthGBs
    visible_gb: CapacityGB | None = Field(None, description="decimal GB the runtime sees; None = capacity_gb")
    visible_source: str | None = None
    type: str | None = None
    usable_fraction: Fraction = Field(1.0, description="share a model may use (unified memory, phones)")
    source: str = Field(min_length=3)
    usable_fraction_source: str | None = None
    derived: str | None = Field(None, description="how any number here was derived, if not printed by the vendor")
    host_pool: HostPool | None = Field(None, description="a second memory pool (reported; fit uses the device pool above)")

    @model_validator(mode="after")
    def _usable_has_source(self):
        if self.usable_fraction < 1 and not self.usable_fraction_source:
            raise ValueError("usable_fraction < 1 needs usable_fraction_source")
        if self.visible_gb is not None:
            if not self.visible_source:
                raise ValueError("visible_gb needs visible_source")
            if self.visible_gb > VISIBLE_OVER_MARKETED_MAX * self.capacity_gb:
                raise ValueError(f"visible_gb {self.visible_gb:g} exceeds {VISIBLE_OVER_MARKETED_MAX} x capacity_gb "
                                 f"{self.capacity_gb:g}")
        return self

    @property
    def visible_or_marketed_gb(self) -> float:
        return self.capacity_gb if self.visible_gb is None else self.visible_gb


# ids of devices, units, runtimes and measured records: lower-case letters, digits, '.', '_', '-'
ID_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"


class ComputeUnit(_Frozen):
    """One compute unit (the GPU, the CPU cores, an NPU) with its dense peaks in TFLOP/s (or TOPS for ints)."""

    name: str = Field(min_length=1, pattern=ID_PATTERN)
    kind: UnitKind
    peak_tflops: dict[DType, PeakTflops] = Field(min_length=1)
    formats: list[str] | None = Field(None, description="weight formats this unit runs; None = every format")
    bandwidth_gbs: BandwidthGBs | None = Field(None, description="if this unit alone reaches less than memory peak")
    sm_count: SmCount | None = Field(None, description=(
        "streaming multiprocessors (NVIDIA) or compute units (AMD): the CTAs one wave of a kernel runs; GEMM and "
        "decode-attention regime efficiencies (planner.regimes) apply to units that list it"))
    sm_count_source: str | None = None
    mma_sync_share: Fraction | None = Field(None, description=(
        "share of the listed tensor peaks (matmul and attention classes) that kernels built on the warp-level "
        "mma.sync instruction reach, where the listed peak needs a newer instruction: Hopper lists the wgmma rate, "
        "4096 dense fp16 FLOP per clock per SM, twice the 2048 of the A100's SM, which is what mma.sync issues; "
        "applies to runtimes whose GEMMs are such kernels (Efficiency.sync_mma); None = the listed peak"))
    mma_sync_source: str | None = None
    source: str = Field(min_length=3)
    derived: str | None = None

    @model_validator(mode="after")
    def _sm_count_has_source(self):
        if self.sm_count is not None and not self.sm_count_source:
            raise ValueError("sm_count needs sm_count_source")
        if self.mma_sync_share is not None and not self.mma_sync_source:
            raise ValueError("mma_sync_share needs mma_sync_source")
        return self


class CacheSpec(_Frozen):
    last_level_mb: CacheMB
    source: str = Field(min_length=3)


class InterconnectSpec(_Frozen):
    """GPU-to-GPU link. NVIDIA quotes NVLink as total bidirectional GB/s per GPU; one direction is half."""

    kind: Literal["nvlink", "pcie", "infinity-fabric", "nvlink-c2c", "ethernet", "thunderbolt", "ici", "none"]
    bidirectional_gbs: LinkGBs
    pcie_bidirectional_gbs: LinkGBs | None = None
    source: str = Field(min_length=3)

    @property
    def per_direction_gbs(self) -> float:
        return self.bidirectional_gbs / 2


class PowerSpec(_Frozen):
    tdp_w: Watts
    source: str = Field(min_length=3)


class PriceSpec(_Frozen):
    usd_per_hour: UsdPerHour
    source: str = Field(min_length=3)


class UnpublishedFigure(_Frozen):
    """A number in this file that its vendor does not publish (an estimate, a third-party or derived figure).

    `field` is the dotted path of the value in the spec (`units.gpu.peak_tflops.fp8`, `memory.bandwidth_gbs`);
    every estimate that uses the unit or the memory it names carries a warning.
    """

    field: str = Field(pattern=r"^(memory|units|cache|interconnect|power|price)(\.[A-Za-z0-9_-]+)+$")
    reason: str = Field(min_length=3)


# Where a runtime's quantized GEMM dequantizes per tile (Efficiency.dequant_tile_tokens), GEMMs of up to this many
# tokens run its matrix-vector kernels instead, which dequantize every weight for each token: llama.cpp's Metal
# backend takes kernel_mul_mm only for ne11 > ne11_mm_min = 8 (ggml-metal-ops.cpp), kernel_mul_mv / mul_mv_ext below.
DEQUANT_MATVEC_TOKENS = 8


class Efficiency(_Frozen):
    """Achievable fractions of peak and fixed costs; the roofline divides peaks by these.

    time(op) = max(flops / (peak * compute_fraction), bytes / (bandwidth * bandwidth_fraction)) + kernel_overhead_us
    time(step) = sum(op times) + step_overhead_ms
    With class_compute_fraction, an op class listed there uses its own fraction instead of compute_fraction.
    With matmul_tflops_per_watt > 0, weight GEMMs run at most at tdp_w x that (sustained power cap).
    With fp16_accumulate the 16-bit matmul peak is max(fp16, int8 / 2) (see the field).
    Weight GEMMs optionally scale compute_fraction by R / (R + compute_half_rows) (R = GEMM rows) and divide it by
    1 + dequant_overhead[format] (planner/roofline.py `time_ops`); with regime_curves, GEMMs the kernel-fitted
    regime curve covers use it instead of the R / (R + compute_half_rows) shape.
    """

    bandwidth_fraction: Fraction
    compute_fraction: Fraction
    kernel_overhead_us: OverheadUs = 0.0
    step_overhead_ms: OverheadMs = 0.0
    # Optional refinements (runtime profiles, hardware_specs/runtimes/); the defaults leave the roofline unchanged.
    compute_half_rows: HalfRows = Field(0.0, description=(
        "GEMM rows R (tokens per expert/weight matrix in the step) at which a weight GEMM reaches half of "
        "compute_fraction: fraction(R) = compute_fraction * R / (R + compute_half_rows); 0 = flat"))
    format_half_rows: dict[str, HalfRows] = Field(default_factory=dict, description=(
        "weight format -> compute_half_rows of that format's GEMM kernel (formats not listed use "
        "compute_half_rows): dense fp32/bf16 GEMM libraries and fused int8/int4 kernels tile rows differently"))
    dequant_overhead: dict[str, OverheadRatio] = Field(default_factory=dict, description=(
        "weight format -> extra GEMM compute time for dequantizing weights, as a fraction of that time "
        "(compute time x (1 + overhead)); formats not listed: 0"))
    dequant_tile_tokens: int = Field(0, ge=0, le=4096, description=(
        "tokens per tile over which the runtime's quantized GEMM kernel dequantizes each weight once: the dequant "
        "cost of a GEMM of R > 8 rows is then dequant_overhead x ceil(R / tile) / R of its compute time, of R <= 8 "
        "(the matrix-vector kernels) all of it (planner/roofline.py dequant_factor_at): paid in full by a decode "
        "step, 1/tile of it by a prompt's tiled GEMM. llama.cpp on Metal: 32 (ggml-metal.metal kernel_mul_mm "
        "stages a 64-row weight tile in threadgroup memory per 32-token block, BLOCK_SIZE_N 32, for ne11 > 8); 0 = "
        "the same share at any R (where the fitted overhead stands for the whole quantized GEMM path, e.g. "
        "llama.cpp's CUDA MMQ)"))
    fp16_accumulate: bool = Field(False, description=(
        "the runtime's 16-bit GEMMs accumulate in fp16 (llama.cpp's cuBLAS path, CUBLAS_COMPUTE_16F): on NVIDIA "
        "tensor cores that rate is half the int8 rate, which is 2x the listed fp32-accumulate rate on GeForce "
        "cards; matmul peak = max(listed fp16/bf16, int8 / 2)"))
    matmul_tflops_per_watt: TflopsPerWatt = Field(0.0, description=(
        "sustained weight-GEMM throughput per watt of board power (power.tdp_w): the effective matmul peak is "
        "min(peak x compute_fraction, tdp_w x this); 0 = no power cap (or the spec publishes no TDP)"))
    format_compute_fraction: dict[str, Fraction] = Field(default_factory=dict, description=(
        "weight format -> compute fraction of the weight GEMMs (op class matmul) in that format, replacing "
        "compute_fraction and class_compute_fraction['matmul'] for them (formats not listed: those): a bf16 GEMM "
        "and an fp8 GEMM are different kernels (cuBLASLt/hipBLASLt/CUTLASS), and one engine build can run one far "
        "better than the other (vLLM 0.6.3 on ROCm bf16 against the 0.6.6 and 0.9.1 fp8 builds); fitted for formats "
        "without a dequant_overhead that have enough rows of their own (planner/accuracy/fit.py own_fraction_formats)"))
    class_compute_fraction: dict[Literal["matmul", "attention", "vector"], Fraction] = Field(
        default_factory=dict, description=(
            "op class -> compute fraction for that class, replacing compute_fraction (classes not listed use "
            "compute_fraction); e.g. a CPU runtime that computes attention in fp32 while the unit's bf16 peak is "
            "listed reaches a smaller share of that peak in attention than in weight GEMMs"))
    kv_dequant_overhead: dict[str, OverheadRatio] = Field(default_factory=dict, description=(
        "KV-cache dtype -> extra attention compute time for converting cached K/V into the math dtype, as a "
        "fraction of that time (compute time x (1 + overhead)); dtypes not listed: 0 (read natively)"))
    regime_curves: bool = Field(True, description=(
        "apply the GEMM regime curve fitted to measured kernels (planner.regimes.weight_gemm_time_s: tile padding "
        "past one tile at the kernel library's share of the peak, ridge roll-off) where it applies (NVIDIA units "
        "with an SM count, fp16/bf16/fp8 weights, and weight-only quantized ones where weight_only_regime), in "
        "place of R / (R + compute_half_rows); false = the plain roofline"))
    weight_only_regime: bool = Field(False, description=(
        "the runtime's weight-only quantized GEMMs (GPTQ/AWQ int4, MXFP4 W4A16, int8 W8A16) are mixed-input "
        "kernels that dequantize tiles in registers and run 16-bit tensor-core MMAs (Marlin and its MoE variant in "
        "vLLM, SGLang and TGI; Frantar et al. 2024, arXiv:2408.11743): on a unit the GEMM regime applies to "
        "(NVIDIA, an SM count) they take that curve at the 16-bit rate with the format's own bytes "
        "(planner.regimes.gemm_regime_for), memory bound up to the ridge, instead of the R / (R + "
        "compute_half_rows) shape; false = the engine's shape (llama.cpp's int8-dot MMQ/MMVQ, gpt-fast's tinygemm, "
        "TensorRT-LLM's FpA_IntB)"))
    weight_only_bandwidth_share: Fraction = Field(1.0, description=(
        "share of the engine's bandwidth (bandwidth_fraction) its mixed-input weight-only GEMMs reach where "
        "weight_only_regime applies: the in-register dequantization (unpacking, scale loads, conversion) competes "
        "with the loads, so those kernels stream their fewer bytes more slowly than a 16-bit GEMM streams its own; "
        "fitted per engine and class from its weight-only rows (planner/accuracy/fit.py), 1 = no penalty"))
    kv_cache_copy: bool = Field(False, description=(
        "the runtime re-allocates and copies its whole KV cache every decode step (Hugging Face transformers' "
        "DynamicCache appends with torch.cat per layer): each decode attention op then moves its cache twice more, "
        "one read and one write, 3 x the KV bytes in all (planner/roofline.py op_bytes)"))
    kv_read_per_query_head: bool = Field(False, description=(
        "the runtime's fused decode attention kernel gives each query head its own pass over the K/V cache (one "
        "CTA per query head: TensorRT-LLM's masked MHA where XQA does not apply, vLLM's and TGI's paged_attention "
        "v1/v2), so a decode attention op reads its cache (query heads / K/V heads) times (planner/roofline.py "
        "op_bytes); false = one pass per K/V head (FlashAttention, FlashInfer, XQA). A materialized attention "
        "(no flash attention) always makes one pass per query head (planner/ops.py)"))
    score_bytes_factor: float = Field(1.0, ge=1.0, le=8.0, allow_inf_nan=False, description=(
        "bytes the runtime moves per byte of a materialized attention score matrix as the planner counts it "
        "(planner/ops.py score_bytes: written once, read and written by softmax, read once, at the activation "
        "width): llama.cpp keeps scores in fp32 (ggml_mul_mat returns F32) and its CUDA batched cuBLAS path also "
        "writes them in fp16 before converting and converts them back to fp16 for the values GEMM: 24 bytes per "
        "score against 8, 3.0; on Metal the F32 scores feed the values kernel directly: 16 bytes, 2.0. Only "
        "matters without flash attention"))
    kv_reread_share: float = Field(1.0, gt=0.0, le=8.0, allow_inf_nan=False, description=(
        "DRAM cost of each pass after the first that a decode attention op makes over a K/V head (a materialized "
        "attention's broadcast matmul, or a kernel with one CTA per query head: one pass per query head of the "
        "group), as a share of the first pass: below 1 where the head's slice stays in L2 between the passes of "
        "its query heads, above 1 where the extra passes run slower than a plain read (planner/roofline.py "
        "kv_passes: passes = 1 + (query heads per K/V head - 1) x this). Fitted per engine and hardware class "
        "from its decode rows (planner/accuracy/fit.py): llama.cpp without flash attention on NVIDIA GPUs "
        "(xiongjiedai/GPU-Benchmarks-on-LLM-Inference, tg512-8192) reads far less than four passes of Llama-3-8B's "
        "cache. 1 = every pass from DRAM"))
    sync_mma: bool = Field(False, description=(
        "the runtime's tensor-core kernels are warp-level mma.sync kernels with no wgmma path (llama.cpp's CUDA "
        "backend: its MMQ and flash-attention kernels; its 16-bit cuBLAS path measures the same, reports/accuracy.md): "
        "on a unit that lists mma_sync_share (Hopper) they reach that share of the listed matmul and attention "
        "peaks"))
    sm_bandwidth_gbs: SmBandwidthGBs = Field(0.0, description=(
        "memory bandwidth one SM (CU) sustains in the runtime's memory-bound kernels, GB/s: the effective bandwidth "
        "is min(bandwidth x bandwidth_fraction, sm_count x this) (planner/roofline.py effective_bandwidth_bytes_s). "
        "Little's law: an SM keeps a bounded number of bytes in flight, so it pulls (bytes in flight) / (DRAM "
        "latency) whatever the datasheet bandwidth; GPUs with many GB/s per SM (A100 18.9, H100 SXM 25.4 against "
        "RTX 4090 7.9) reach a smaller share of it. 0 = no cap (also on units that list no sm_count)"))
    kernel_library: Literal["", "trtllm", "vllm", "sglang"] = Field("", description=(
        "whose measured GEMM kernels set the regime curve's kernel share of the peak and fixed time per GEMM "
        "(planner/regimes.py GemmRegime.libraries, fitted to aiconfigurator's gemm/<engine> tables): 'vllm' or "
        "'sglang' for those engines' own kernels; '' or 'trtllm' = the default constants, measured through "
        "TensorRT-LLM"))
    source: str = Field("", description="where these came from: kind default, device spec, calibration file")


DATASHEET_EFFICIENCY = Efficiency.model_construct(  # constant, valid data (the validator is built when first needed)
    bandwidth_fraction=1.0, compute_fraction=1.0, kernel_overhead_us=0.0, step_overhead_ms=0.0, regime_curves=False,
    source="datasheet peaks (efficiency 1.0, no overheads, the plain roofline)",
)


class HardwareSpec(_Frozen):
    id: str = Field(pattern=ID_PATTERN)
    name: str
    kind: DeviceKind
    vendor: str
    year: Year | None = None
    memory: MemorySpec
    units: list[ComputeUnit] = Field(min_length=1)
    cache: CacheSpec | None = None
    interconnect: InterconnectSpec | None = None
    power: PowerSpec | None = None
    price: PriceSpec | None = None
    efficiency: Efficiency | None = Field(None, description="device override of the kind defaults")
    unpublished: list[UnpublishedFigure] = Field(default_factory=list, description=(
        "figures in this file the vendor does not publish; estimates that use them carry a warning"))
    notes: str | None = None

    @model_validator(mode="after")
    def _unique_units(self):
        names = [u.name for u in self.units]
        if len(set(names)) != len(names):
            raise ValueError(f"unit names must be unique, got {names}")
        for item in self.unpublished:
            if _lookup(self, item.field) is None:
                raise ValueError(f"unpublished: '{item.field}' names no value in this spec")
        return self

    @property
    def usable_capacity_gb(self) -> float:
        """GB a model may use: what the runtime sees (visible_gb, else the marketed capacity) x usable_fraction."""
        return self.memory.visible_or_marketed_gb * self.memory.usable_fraction

    def unpublished_for(self, unit: ComputeUnit | None = None) -> list[UnpublishedFigure]:
        """The unpublished figures an estimate on `unit` rests on: its own, the memory's, and the device-wide
        ones (cache, interconnect); figures of other units are left out."""
        own = f"units.{unit.name}." if unit is not None else None
        return [i for i in self.unpublished
                if not i.field.startswith("units.") or own is None or i.field.startswith(own)]

    def unpublished_warning(self, unit: ComputeUnit | None = None) -> str | None:
        """One warning line for an estimate that rests on unpublished figures, or None."""
        items = self.unpublished_for(unit)
        if not items:
            return None
        by_reason: dict[str, list[str]] = {}
        for i in items:  # figures with one reason are listed once, together
            by_reason.setdefault(i.reason, []).append(i.field)
        listed = "; ".join(f"{', '.join(fields)} ({reason})" for reason, fields in by_reason.items())
        return f"{self.id}: this estimate rests on figures its vendor does not publish: {listed}"

    def unit(self, name: str | None) -> ComputeUnit:
        if name is None:
            return self.units[0]
        for u in self.units:
            if u.name == name:
                return u
        raise PlannerError(f"--unit: '{name}' is not a unit of {self.id}; allowed: {', '.join(u.name for u in self.units)}")


def _lookup(spec: HardwareSpec, dotted: str):
    """The value at a dotted path of a spec (`units.gpu.peak_tflops.fp8`: units are addressed by name), or None."""
    node = spec.model_dump()
    for part in dotted.split("."):
        if isinstance(node, list):
            node = next((u for u in node if isinstance(u, dict) and u.get("name") == part), None)
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
        if node is None:
            return None
    return node


# ---------------------------------------------------------------- loading


def spec_paths() -> dict[str, Path]:
    """id -> path of every device YAML in hardware_specs/ (top level only)."""
    return folder_index(SPECS_DIR)


def list_hardware_ids() -> list[str]:
    return list(spec_paths())


def parse_hardware(data: dict, where: str) -> HardwareSpec:
    return validated(HardwareSpec, data, f"hardware spec {where}")


def _parse_path(path: str) -> HardwareSpec:
    return parse_hardware(read_yaml(path), path)


def _load_path(path: str) -> HardwareSpec:
    """A parsed spec, cached until the file changes (an edited YAML is read again)."""
    return parsed(path, _parse_path, "hardware")


def load_hardware(id_or_path: str) -> HardwareSpec:
    """A catalog id (`h100-sxm`) or a path to a user's YAML file."""
    if id_or_path.endswith((".yaml", ".yml")) or os.sep in id_or_path:
        if not Path(id_or_path).exists():
            raise PlannerError(f"--hardware: file not found: {id_or_path}")
        return _load_path(str(Path(id_or_path).resolve()))
    paths = spec_paths()
    if id_or_path not in paths:
        raise unknown_id("hardware", id_or_path, list(paths))
    spec = _load_path(str(paths[id_or_path]))
    if spec.id != id_or_path:
        raise PlannerError(f"{paths[id_or_path]}: id '{spec.id}' does not match the file name")
    return spec


def load_all_hardware() -> list[HardwareSpec]:
    return [load_hardware(i) for i in list_hardware_ids()]


# ---------------------------------------------------------------- efficiency defaults


class _EfficiencyDefaults(_Frozen):
    by_unit_kind: dict[UnitKind, Efficiency]
    runtime_overhead_gb: dict[DeviceKind, float]
    runtime_overhead_source: str
    source: str


@lru_cache(maxsize=1)
def efficiency_defaults() -> _EfficiencyDefaults:
    return validated(_EfficiencyDefaults, read_yaml(EFFICIENCY_DEFAULTS_PATH), str(EFFICIENCY_DEFAULTS_PATH))


def default_efficiency(spec: HardwareSpec, unit: ComputeUnit) -> Efficiency:
    """The device's own override if its spec has one, else the documented default for the unit's kind."""
    return by_identity("default_efficiency", (spec, unit, efficiency_defaults()),
                       lambda: _default_efficiency(spec, unit))


def _default_efficiency(spec: HardwareSpec, unit: ComputeUnit) -> Efficiency:
    if spec.efficiency is not None:
        eff = spec.efficiency
        return eff if eff.source else eff.model_copy(update={"source": f"hardware spec {spec.id}"})
    eff = efficiency_defaults().by_unit_kind[unit.kind]
    return eff.model_copy(update={"source": f"default for {unit.kind} units ({EFFICIENCY_DEFAULTS_PATH.name})"})

