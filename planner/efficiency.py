"""Which efficiency factors an estimate uses, and why.

Order of precedence (the first that applies wins, and the result's `source` says which):
  1. an explicit Efficiency passed by the caller (tests, sweeps, calibration fitting)
  2. `datasheet`: efficiency 1.0 and no overheads (the plain roofline)
  2b. a serving-runtime profile named by the caller (`runtime=`; hardware_specs/runtimes/<id>.yaml, fitted to
     published measurements by `planner accuracy --fit`), for the unit's hardware class
  3. a calibration file for the device written by `planner validate fit` (hardware_specs/calibration/<id>.yaml),
     unless calibration is turned off (`--no-calibration`)
  4. the device spec's own `efficiency:` section
  5. the documented default for the compute unit's kind (hardware_specs/defaults/efficiency.yaml)
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from .catalog_index import by_identity, folder_index, parsed
from .errors import pydantic_one_line
from .hardware import (DATASHEET_EFFICIENCY, DEQUANT_MATVEC_TOKENS, SPECS_DIR, ComputeUnit, Efficiency,
                       HardwareSpec, default_efficiency)
from .io import read_yaml
from .quantization import dequant_overhead_for, is_dequantized, kernel_format_name

CALIBRATION_DIR = SPECS_DIR / "calibration"


def calibration_path(hardware_id: str) -> Path:
    return CALIBRATION_DIR / f"{hardware_id}.yaml"


def _parse_calibration(path: str) -> dict[str, Efficiency]:
    """unit name -> the fitted Efficiency of one calibration file (one-line error naming the file if malformed)."""
    p = Path(path)
    out = {}
    for unit, raw in ((read_yaml(p).get("units") or {}).items()):
        try:
            eff = Efficiency.model_validate(raw)
        except ValidationError as exc:
            raise pydantic_one_line(f"calibration {p}", exc) from None
        out[unit] = eff if eff.source else eff.model_copy(update={"source": f"calibration {p.name}"})
    return out


def _calibrated(hardware_id: str, unit: str) -> Efficiency | None:
    """The calibration of this device's unit, if hardware_specs/calibration/ has one (the folder is indexed once
    per change, each file parsed once per change: a sweep over the catalog does not stat or parse per call)."""
    p = folder_index(CALIBRATION_DIR).get(hardware_id)
    if p is None:
        return None
    return parsed(p, _parse_calibration, "calibration").get(unit)


def resolve_efficiency(spec: HardwareSpec, unit: ComputeUnit, mode: str | Efficiency = "auto",
                       runtime=None) -> Efficiency:
    """mode: an Efficiency, 'datasheet', 'auto' (calibration if present, else spec/kind default) or 'default'.
    runtime: None, a runtime id or a RuntimeProfile; applies after an explicit Efficiency and 'datasheet'."""
    return resolve_with_origin(spec, unit, mode, runtime)[0]


def resolve_with_origin(spec: HardwareSpec, unit: ComputeUnit, mode: str | Efficiency = "auto",
                        runtime=None) -> tuple[Efficiency, str]:
    """(resolve_efficiency, efficiency_origin) with the calibration folder looked at once."""
    if isinstance(mode, Efficiency):
        return mode, "explicit"
    if mode == "datasheet":
        return DATASHEET_EFFICIENCY, "datasheet"
    if runtime is not None:
        from .runtimes import load_runtime
        prof = load_runtime(runtime)
        return (by_identity("runtime_efficiency", (prof, spec, unit), lambda: _runtime_efficiency(prof, spec, unit)),
                "runtime")
    if mode == "auto":
        cal = _calibrated(spec.id, unit.name)
        if cal is not None:
            return cal, "calibration"
    return default_efficiency(spec, unit), ("device" if spec.efficiency is not None else "default")


def _runtime_efficiency(prof, spec: HardwareSpec, unit: ComputeUnit) -> Efficiency:
    eff = prof.for_unit(spec, unit).efficiency
    return eff.model_copy(update={"source": f"runtime profile {prof.id} ({spec.vendor.lower()}-{unit.kind}): "
                                            + (eff.source or "fitted")})


def efficiency_origin(spec: HardwareSpec, unit: ComputeUnit, mode: str | Efficiency = "auto", runtime=None) -> str:
    """Which rule of the precedence above resolve_efficiency applies: explicit, datasheet, runtime, calibration,
    device or default (the one precedence, resolve_with_origin)."""
    return resolve_with_origin(spec, unit, mode, runtime)[1]


def dequant_share_text(eff: Efficiency) -> str:
    """How a fitted dequantization cost is paid, for the messages that quote one: '' where it is a flat share of the
    GEMM time, else the per-tile rule of Efficiency.dequant_tile_tokens (planner/roofline.py dequant_factor_at)."""
    tile = eff.dequant_tile_tokens
    return (f" per token up to {DEQUANT_MATVEC_TOKENS} tokens, 1/{tile} of it per token in {tile}-token tiles above"
            if tile else "")


def dequant_cost_text(eff: Efficiency, fmt_name: str) -> str:
    """'q4_k_m dequantization +597% GEMM time[ per token ...]' for the report's Efficiency line, naming the format
    whose fitted cost a format without its own borrows (quantization.dequant_overhead_for, a lower bound); '' where
    the profile counts none."""
    fmt_name = kernel_format_name(fmt_name)  # (llama.cpp MXFP4_MOE's non-expert GEMMs run Q8_0's kernels)
    dq, src = dequant_overhead_for(eff.dequant_overhead, fmt_name)
    if src is None:
        return ""
    borrowed = f" ({src}'s fitted cost, a lower bound)" if src != fmt_name else ""
    return f"{fmt_name} dequantization +{dq * 100:.0f}% GEMM time{borrowed}{dequant_share_text(eff)}"


def unmeasured_dequant_warning(eff: Efficiency, fmt_name: str, runtime_id: str | None) -> str | None:
    """A warning where a runtime profile has no fitted dequantization cost (Efficiency.dequant_overhead, GEMM time x
    (1 + overhead), per tile where Efficiency.dequant_tile_tokens is set) for this weight-only quantized format.
    Where a simpler format whose work it contains was fitted (quantization.DEQUANT_SUPERSET_OF), the estimate
    charges that one's cost, a lower bound; else it counts none (planner/roofline.py _device_model). Both are
    optimistic; the warning names the costs fitted for other formats for comparison. None for a format without
    such a cost, or where it was fitted."""
    fitted = eff.dequant_overhead or {}
    fmt_name = kernel_format_name(fmt_name)
    if runtime_id is None or fmt_name in fitted or not is_dequantized(fmt_name):
        return None
    if not fitted:
        return (f"runtime {runtime_id} was fitted on no weight-only quantized rows on this hardware class: the "
                f"dequantization cost of {fmt_name} is not measured and the estimate counts none (optimistic)")
    listed = ", ".join(f"{f} +{v * 100:.0f}%" for f, v in sorted(fitted.items()))
    dq, src = dequant_overhead_for(fitted, fmt_name)
    if src is not None:
        return (f"runtime {runtime_id} has no measured dequantization cost for {fmt_name}: the estimate charges "
                f"{src}'s (+{dq * 100:.0f}%{dequant_share_text(eff)}), whose unpacking {fmt_name} does and more, so "
                f"it is a lower bound and the estimate optimistic (fitted GEMM-time costs: {listed})")
    return (f"runtime {runtime_id} has no measured dequantization cost for {fmt_name} (fitted GEMM-time costs"
            f"{dequant_share_text(eff)}: {listed}); the estimate counts none, so it is optimistic (the fitted formats cost up to "
            f"{max(fitted.values()) * 100:.0f}%)")
