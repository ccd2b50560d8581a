"""Hardware specs: the schema of `hardware_specs/*.yaml`, loading by id or path, efficiency defaults.

Specs are data, the schema is code: every section carries a `source`, unknown keys are errors, peaks are dense
(sparse datasheet figures halved, GeForce cards at the fp32-accumulate tensor rate). A device has one or more
compute units sharing one memory system (a system-on-chip lists CPU, GPU and NPU separately).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .catalog_index import folder_index, parsed
from .errors import PlannerError, unknown_id
from .io import read_yaml, validated

DType = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4"]
DTYPES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")
UnitKind = Literal["gpu", "cpu", "npu"]
DeviceKind = Literal["gpu", "cpu", "soc", "npu"]

REPO_ROOT = Path(__file__).resolve().parent.parent
SPECS_DIR = Path(os.environ.get("PLANNER_SPECS_DIR", REPO_ROOT / "hardware_specs"))
EFFICIENCY_DEFAULTS_PATH = SPECS_DIR / "defaults" / "efficiency.yaml"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MemorySpec(_Frozen):
    """Main memory: capacity in GB (1e9), peak bandwidth in GB/s (1e9 B/s)."""

    capacity_gb: float = Field(gt=0)
    bandwidth_gbs: float = Field(gt=0)
    type: str | None = None
    usable_fraction: float = Field(1.0, gt=0, le=1, description="share a model may use (unified memory, phones)")
    source: str = Field(min_length=3)
    usable_fraction_source: str | None = None
    derived: str | None = Field(None, description="how any number here was derived, if not printed by the vendor")

    @model_validator(mode="after")
    def _usable_has_source(self):
        if self.usable_fraction < 1 and not self.usable_fraction_source:
            raise ValueError("usable_fraction < 1 needs usable_fraction_source")
        return self


class ComputeUnit(_Frozen):
    """One compute unit (the GPU, the CPU cores, an NPU) with its dense peaks in TFLOP/s (or TOPS for ints)."""

    name: str = Field(min_length=1)
    kind: UnitKind
    peak_tflops: dict[DType, float] = Field(min_length=1)
    formats: list[str] | None = Field(None, description="weight formats this unit runs; None = every format")
    bandwidth_gbs: float | None = Field(None, gt=0, description="if this unit alone reaches less than memory peak")
    source: str = Field(min_length=3)
    derived: str | None = None

    @model_validator(mode="after")
    def _positive_peaks(self):
        for k, v in self.peak_tflops.items():
            if not v > 0:
                raise ValueError(f"peak_tflops.{k} must be > 0, got {v}")
        return self


class CacheSpec(_Frozen):
    last_level_mb: float = Field(gt=0)
    source: str = Field(min_length=3)


class InterconnectSpec(_Frozen):
    """GPU-to-GPU link. NVIDIA quotes NVLink as total bidirectional GB/s per GPU; one direction is half."""

    kind: Literal["nvlink", "pcie", "infinity-fabric", "nvlink-c2c", "ethernet", "thunderbolt", "none"]
    bidirectional_gbs: float = Field(ge=0)
    pcie_bidirectional_gbs: float | None = Field(None, ge=0)
    source: str = Field(min_length=3)

    @property
    def per_direction_gbs(self) -> float:
        return self.bidirectional_gbs / 2


class PowerSpec(_Frozen):
    tdp_w: float = Field(gt=0)
    source: str = Field(min_length=3)


class PriceSpec(_Frozen):
    usd_per_hour: float = Field(gt=0)
    source: str = Field(min_length=3)


class Efficiency(_Frozen):
    """Achievable fractions of peak and fixed costs; the roofline divides peaks by these.

    time(op) = max(flops / (peak * compute_fraction), bytes / (bandwidth * bandwidth_fraction)) + kernel_overhead_us
    time(step) = sum(op times) + step_overhead_ms
    With class_compute_fraction, an op class listed there uses its own fraction instead of compute_fraction.
    With matmul_tflops_per_watt > 0, weight GEMMs run at most at tdp_w x that (sustained power cap).
    With fp16_accumulate the 16-bit matmul peak is max(fp16, int8 / 2) (see the field).
    Weight GEMMs optionally scale compute_fraction by R / (R + compute_half_rows) (R = GEMM rows) and divide it by
    1 + dequant_overhead[format] (planner/roofline.py `time_ops`).
    """

    bandwidth_fraction: float = Field(gt=0, le=1)
    compute_fraction: float = Field(gt=0, le=1)
    kernel_overhead_us: float = Field(0.0, ge=0)
    step_overhead_ms: float = Field(0.0, ge=0)
    # Optional refinements (runtime profiles, hardware_specs/runtimes/); the defaults leave the roofline unchanged.
    compute_half_rows: float = Field(0.0, ge=0, description=(
        "GEMM rows R (tokens per expert/weight matrix in the step) at which a weight GEMM reaches half of "
        "compute_fraction: fraction(R) = compute_fraction * R / (R + compute_half_rows); 0 = flat"))
    format_half_rows: dict[str, float] = Field(default_factory=dict, description=(
        "weight format -> compute_half_rows of that format's GEMM kernel (formats not listed use "
        "compute_half_rows): dense fp32/bf16 GEMM libraries and fused int8/int4 kernels tile rows differently"))
    dequant_overhead: dict[str, float] = Field(default_factory=dict, description=(
        "weight format -> extra GEMM compute time for dequantizing weights, as a fraction of that time "
        "(compute time x (1 + overhead)); formats not listed: 0"))
    fp16_accumulate: bool = Field(False, description=(
        "the runtime's 16-bit GEMMs accumulate in fp16 (llama.cpp's cuBLAS path, CUBLAS_COMPUTE_16F): on NVIDIA "
        "tensor cores that rate is half the int8 rate, which is 2x the listed fp32-accumulate rate on GeForce "
        "cards; matmul peak = max(listed fp16/bf16, int8 / 2)"))
    matmul_tflops_per_watt: float = Field(0.0, ge=0, description=(
        "sustained weight-GEMM throughput per watt of board power (power.tdp_w): the effective matmul peak is "
        "min(peak x compute_fraction, tdp_w x this); 0 = no power cap (or the spec publishes no TDP)"))
    class_compute_fraction: dict[Literal["matmul", "attention", "vector"], float] = Field(
        default_factory=dict, description=(
            "op class -> compute fraction for that class, replacing compute_fraction (classes not listed use "
            "compute_fraction); e.g. a CPU runtime that computes attention in fp32 while the unit's bf16 peak is "
            "listed reaches a smaller share of that peak in attention than in weight GEMMs"))
    kv_dequant_overhead: dict[str, float] = Field(default_factory=dict, description=(
        "KV-cache dtype -> extra attention compute time for converting cached K/V into the math dtype, as a "
        "fraction of that time (compute time x (1 + overhead)); dtypes not listed: 0 (read natively)"))
    source: str = Field("", description="where these came from: kind default, device spec, calibration file")

    @model_validator(mode="after")
    def _class_fractions(self):
        for k, v in self.kv_dequant_overhead.items():
            if not v >= 0:
                raise ValueError(f"kv_dequant_overhead.{k} must be >= 0, got {v}")
        for k, v in self.format_half_rows.items():
            if not v >= 0:
                raise ValueError(f"format_half_rows.{k} must be >= 0, got {v}")
        for k, v in self.class_compute_fraction.items():
            if not 0 < v <= 1:
                raise ValueError(f"class_compute_fraction.{k} must be in (0, 1], got {v}")
        return self


DATASHEET_EFFICIENCY = Efficiency(
    bandwidth_fraction=1.0, compute_fraction=1.0, kernel_overhead_us=0.0, step_overhead_ms=0.0,
    source="datasheet peaks (efficiency 1.0, no overheads)",
)


class HardwareSpec(_Frozen):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    name: str
    kind: DeviceKind
    vendor: str
    year: int | None = None
    memory: MemorySpec
    units: list[ComputeUnit] = Field(min_length=1)
    cache: CacheSpec | None = None
    interconnect: InterconnectSpec | None = None
    power: PowerSpec | None = None
    price: PriceSpec | None = None
    efficiency: Efficiency | None = Field(None, description="device override of the kind defaults")
    notes: str | None = None

    @model_validator(mode="after")
    def _unique_units(self):
        names = [u.name for u in self.units]
        if len(set(names)) != len(names):
            raise ValueError(f"unit names must be unique, got {names}")
        return self

    @property
    def usable_capacity_gb(self) -> float:
        return self.memory.capacity_gb * self.memory.usable_fraction

    def unit(self, name: str | None) -> ComputeUnit:
        if name is None:
            return self.units[0]
        for u in self.units:
            if u.name == name:
                return u
        raise PlannerError(f"--unit: '{name}' is not a unit of {self.id}; allowed: {', '.join(u.name for u in self.units)}")


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
    if spec.efficiency is not None:
        eff = spec.efficiency
        return eff if eff.source else eff.model_copy(update={"source": f"hardware spec {spec.id}"})
    eff = efficiency_defaults().by_unit_kind[unit.kind]
    return eff.model_copy(update={"source": f"default for {unit.kind} units ({EFFICIENCY_DEFAULTS_PATH.name})"})

