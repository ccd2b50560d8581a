"""`planner validate fit`: records -> the planner's efficiency factors for one device, with a report and provenance.

What is fitted (planner.hardware.Efficiency; every factor is physical and shared by all records of the device --
never a per-record or per-shape factor):

  bandwidth_fraction                 share of the measured STREAM triad that kernels reach
  compute_fraction                   share of the measured GEMM peak that weight GEMMs reach ...
  compute_half_rows                  ... scaled by R / (R + half_rows) for a GEMM of R rows (small GEMMs reach less)
  format_half_rows[dense format]     the same for the dense GEMM library of fp32 / bf16 (its own tiling); the fused
                                     int8 / int4 kernels share compute_half_rows
  dequant_overhead[format]           extra GEMM compute time of weight-only int8 / int4 (dequantizing in the kernel)
  class_compute_fraction[attention]  share of the peak decode attention reaches (CPU attention runs its math in
                                     fp32 while the unit's bf16 GEMM peak is the listed one)
  kernel_overhead_us                 fixed cost per operator call (dispatch, thread wake-up)
  step_overhead_ms                   fixed cost per whole decode step (only with decode-step records)

Method: minimize sum_i w_i log(pred_i / meas_i)^2 over the fit records (w_i = 1 / records of that kernel, so
each kernel counts equally), numpy only: Levenberg-Marquardt with a forward-difference Jacobian in an
unconstrained parametrization (fractions = logistic(u), overheads = exp(u)), by continuation from a smooth
roofline ((compute^p + memory^p)^(1/p), p = 2, 4, 8, 32) to the exact max(), from three starting points. Hold-out: a record is held out
when sha256(kernel + params) mod 100 < 30 (deterministic, ~30 %); the report gives median and p90 of
|pred / meas - 1| in % before (the kind defaults of hardware_specs/defaults/efficiency.yaml) and after, per
kernel and per regime (bound: memory / compute / overhead; size: small = bytes moved < LLC, large otherwise),
on the held-out and the fitted records.

Guardrails (a fit that cannot go wrong silently; each refusal names what happened, nothing is written):
  impossible records   a record faster than the spec's datasheet roofline by more than ROOFLINE_FACTOR (2x)
                       (time < max(flops / peak, bytes / bandwidth) / 2: a wrong byte count, a wrong spec or a
                       broken timer) is refused, with its kernel and parameters; non-finite or absurd numbers
                       never get this far (the records schema refuses them)
  too few records      fewer than MIN_RECORDS_PER_PARAM (5) fit records per free parameter, or fewer than
                       MIN_SUPPORT (3) fit records that a parameter acts on (its format, KV dtype or kernel)
  on a bound           a fraction at 0 or 1, or any parameter at the edge of the search space; an additive
                       parameter (overheads, half-rows) that goes to 0 is pinned at 0 -- its physical bound --
                       and the fit is repeated without it (the report says which were pinned)
  no improvement       the held-out median or p90 |error| is not below the defaults'

The check's tolerance is per kernel and per (kernel, format) group as well as overall (``Tolerance.per_group``).
The report gives the records' own noise floor, (p90 - p10) / (2 x median) of the reps, beside the errors.

The calibration YAML (hardware_specs/calibration/<hardware-id>.yaml) keeps `units: {<unit>: Efficiency}` (what
planner.efficiency reads) next to `tolerance`, `provenance` and `report`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.errors import PlannerError, pydantic_one_line
from planner.hardware import Efficiency, HardwareSpec
from planner.io import atomic_write_yaml, read_yaml

from .predict import evaluate, predictable, prepare
from .records import Record

HOLDOUT_PCT = 30
ROOFLINE_FACTOR = 2.0        # a record faster than the datasheet roofline by more than this is impossible
MIN_RECORDS_PER_PARAM = 5
MIN_SUPPORT = 3
MAX_TOLERANCE_PCT = 1000.0   # a tolerance above 1000 % checks nothing
_QUANT_FORMATS = ("int8", "int4-g32", "int4-g64", "int4-g128")
_DENSE_FORMATS = ("fp32", "bf16", "fp16")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GroupTolerance(_Frozen):
    """A group's tolerance on |error| (median, p90) and on its bias, |median of the signed pred / meas - 1| in %:
    a factor that is off moves a whole group one way (bandwidth x 0.8: memory-bound records +25 %) even when
    their |error| spread hides it."""

    median_pct: float = Field(gt=0, le=MAX_TOLERANCE_PCT)
    p90_pct: float = Field(gt=0, le=MAX_TOLERANCE_PCT)
    bias_pct: float | None = Field(None, gt=0, le=MAX_TOLERANCE_PCT)


class Tolerance(_Frozen):
    """|pred / meas - 1| in % that `validate check` accepts: overall, and per group (``kernel:<k>`` and
    ``kernel:<k>:<format>``). Finite and at most MAX_TOLERANCE_PCT: `p90_pct: .inf` is refused."""

    median_pct: float = Field(gt=0, le=MAX_TOLERANCE_PCT)
    p90_pct: float = Field(gt=0, le=MAX_TOLERANCE_PCT)
    basis: str = ""
    per_group: dict[str, GroupTolerance] = Field(default_factory=dict)


def _finite_numbers(obj, where: str) -> None:
    """Every number inside (nested dicts / lists) is finite: efficiency factors come from here to every estimate."""
    if isinstance(obj, bool) or obj is None:
        return
    if isinstance(obj, (int, float)):
        if not math.isfinite(obj):
            raise ValueError(f"{where}: {obj} is not a finite number")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _finite_numbers(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _finite_numbers(v, f"{where}[{i}]")


class CalibrationFile(_Frozen):
    hardware_id: str
    units: dict[str, Efficiency] = Field(min_length=1)
    tolerance: Tolerance
    provenance: dict[str, Any] = Field(default_factory=dict)
    report: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _all_finite(self):
        for name, eff in self.units.items():
            _finite_numbers(eff.model_dump(), f"units.{name}")
        _finite_numbers(self.report, "report")
        return self


def load_calibration(path: str | Path) -> CalibrationFile:
    p = Path(path)
    if not p.exists():
        raise PlannerError(f"--calibration: file not found: {p}")
    try:
        return CalibrationFile.model_validate(read_yaml(p))
    except ValidationError as exc:
        raise pydantic_one_line(f"calibration {p}", exc) from None


# ---------------------------------------------------------------- errors and splits


def is_holdout(r: Record) -> bool:
    """Deterministic ~30 % hold-out by a hash of the configuration (kernel + params)."""
    h = int(hashlib.sha256(r.key().encode()).hexdigest(), 16)
    return h % 100 < HOLDOUT_PCT


def abs_err_pct(pred_ms, meas_ms):
    return np.abs(np.asarray(pred_ms) / np.asarray(meas_ms) - 1.0) * 100.0


def signed_err_pct(pred_ms, meas_ms):
    """(pred / meas - 1) in %: > 0 where the planner predicts slower than measured."""
    return (np.asarray(pred_ms) / np.asarray(meas_ms) - 1.0) * 100.0


def summarize(err) -> dict:
    err = np.asarray(err, dtype=np.float64)
    if err.size == 0:
        return {"n": 0}
    return {"n": int(err.size), "median_pct": round(float(np.median(err)), 2),
            "p90_pct": round(float(np.percentile(err, 90)), 2)}


# ---------------------------------------------------------------- the parameter vector


def converted_kv_dtypes(records: list[Record]) -> list[str]:
    """KV dtypes whose conversion cost is fitted: every cache dtype in the attention and decode-step records except
    the one the math runs in natively (fp32 when fp32 caches were measured, else the most common one), which is
    the reference the attention compute fraction describes."""
    kinds: dict[str, int] = {}
    for r in records:
        if r.kernel == "paged_attention":
            k = r.params.kv_dtype
        elif r.kernel == "decode_step":
            k = r.params.dtype
        else:
            continue
        kinds[k] = kinds.get(k, 0) + 1
    if not kinds:
        return []
    native = "fp32" if "fp32" in kinds else max(kinds, key=kinds.get)
    return sorted(k for k in kinds if k != native)


_U_LO, _U_HI = -20.0, 12.0  # search space: fractions logistic(u), overheads exp(u) (2e-9 .. 1.6e5)


def _logit(x):
    x = min(max(x, 1e-6), 1 - 1e-9)
    return math.log(x / (1 - x))


class _Params:
    """Which Efficiency fields are free, and the map u (unconstrained) <-> Efficiency."""

    def __init__(self, base: Efficiency, records: list[Record], formats: set[str], fit_attention: bool):
        self.base = base
        kernels = {r.kernel for r in records}
        names = ["bandwidth_fraction", "compute_fraction", "kernel_overhead_us"]
        if "quant_matmul" in kernels or "decode_step" in kernels:
            names.append("compute_half_rows")
        if fit_attention:
            names.append("class_compute_fraction.attention")
        if "decode_step" in kernels:
            names.append("step_overhead_ms")
        names += [f"format_half_rows.{f}" for f in sorted(formats & set(_DENSE_FORMATS))]
        names += [f"dequant_overhead.{f}" for f in sorted(formats & set(_QUANT_FORMATS))]
        names += [f"kv_dequant_overhead.{k}" for k in converted_kv_dtypes(records)]
        self.names = names
        self.pinned: list[str] = []  # additive parameters fixed at their physical bound 0

    def pin(self, names) -> None:
        self.pinned += [n for n in names if n not in self.pinned]
        self.names = [n for n in self.names if n not in self.pinned]

    def initial(self) -> np.ndarray:
        b = self.base
        start = {"bandwidth_fraction": _logit(b.bandwidth_fraction), "compute_fraction": _logit(b.compute_fraction),
                 "kernel_overhead_us": math.log(max(b.kernel_overhead_us, 1.0)),
                 "compute_half_rows": math.log(max(b.compute_half_rows, 1.0)),
                 "class_compute_fraction.attention": _logit(b.compute_fraction),
                 "step_overhead_ms": math.log(max(b.step_overhead_ms, 0.01))}
        return np.array([start.get(n, math.log(0.1)) for n in self.names])

    def efficiency(self, u, source: str) -> Efficiency:
        u = np.clip(u, _U_LO, _U_HI)
        upd: dict[str, Any] = {"dequant_overhead": {}, "class_compute_fraction": {}, "format_half_rows": {},
                               "kv_dequant_overhead": {}, "source": source}
        for name in self.pinned:
            if "." in name:
                field, key = name.split(".", 1)
                upd[field][key] = 0.0
            else:
                upd[name] = 0.0
        for name, x in zip(self.names, u):
            if name in ("bandwidth_fraction", "compute_fraction"):
                upd[name] = 1.0 / (1.0 + math.exp(-x))
            elif name == "class_compute_fraction.attention":
                upd["class_compute_fraction"]["attention"] = 1.0 / (1.0 + math.exp(-x))
            elif name.startswith(("dequant_overhead.", "format_half_rows.", "kv_dequant_overhead.")):
                field, fmt = name.split(".", 1)
                upd[field][fmt] = math.exp(x)
            else:
                upd[name] = math.exp(x)
        return self.base.model_copy(update=upd)


def _rounded(e: Efficiency) -> Efficiency:
    r4 = lambda x: float(f"{x:.4g}")  # noqa: E731
    return e.model_copy(update={
        "bandwidth_fraction": min(r4(e.bandwidth_fraction), 1.0), "compute_fraction": min(r4(e.compute_fraction), 1.0),
        "kernel_overhead_us": r4(e.kernel_overhead_us), "step_overhead_ms": r4(e.step_overhead_ms),
        "compute_half_rows": r4(e.compute_half_rows),
        "dequant_overhead": {k: r4(v) for k, v in e.dequant_overhead.items()},
        "format_half_rows": {k: r4(v) for k, v in e.format_half_rows.items()},
        "kv_dequant_overhead": {k: r4(v) for k, v in e.kv_dequant_overhead.items()},
        "class_compute_fraction": {k: min(r4(v), 1.0) for k, v in e.class_compute_fraction.items()}})


def _levenberg_marquardt(resid, u0, iters: int = 200, h: float = 1e-4):
    """Minimize ||resid(u)||^2; numpy only. Returns (u, cost)."""
    u = np.array(u0, dtype=np.float64)
    r = resid(u)
    cost = float(r @ r)
    lam = 1e-2
    for _ in range(iters):
        J = np.empty((r.size, u.size))
        for j in range(u.size):
            du = np.zeros_like(u)
            du[j] = h
            J[:, j] = (resid(u + du) - r) / h
        g = J.T @ r
        A = J.T @ J
        improved = False
        for _ in range(12):
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-9), -g)
            u_new = np.clip(u + step, _U_LO, _U_HI)
            r_new = resid(u_new)
            c_new = float(r_new @ r_new)
            if np.isfinite(c_new) and c_new < cost:
                u, r, lam = u_new, r_new, max(lam / 3, 1e-9)
                improved = cost - c_new > 1e-12 * max(cost, 1e-30)
                cost = c_new
                break
            lam *= 4
        if not improved:
            break
    return u, cost


# ---------------------------------------------------------------- fit + report


def _regimes(records, idx, bound):
    """size: small when the bytes moved fit in the LLC (the fingerprint's), else large."""
    size = []
    for i in idx:
        r = records[i]
        llc = r.fingerprint.get("llc_bytes") or 32 * 2**20
        size.append("small" if r.work.total_bytes < llc else "large")
    return {"bound": np.array([bound[i] for i in idx]), "size": np.array(size)}


def report_errors(records: list[Record], pred_ms, idx, bound) -> dict:
    """{split: {all, kernel:<k>, bound:<b>, size:<s>: summary}} for the given record positions."""
    meas = np.array([records[i].measured.median_ms for i in idx])
    err = abs_err_pct(np.asarray(pred_ms)[idx], meas)
    kernels = np.array([records[i].kernel for i in idx])
    reg = _regimes(records, idx, bound)
    out = {"all": summarize(err)}
    for k in sorted(set(kernels)):
        out[f"kernel:{k}"] = summarize(err[kernels == k])
    for name, arr in reg.items():
        for v in sorted(set(arr)):
            out[f"{name}:{v}"] = summarize(err[arr == v])
    return out


def roofline_ms(r: Record, spec: HardwareSpec) -> float:
    """The datasheet roofline of a record's work: max(flops / the unit's highest peak, bytes / bandwidth), in ms.
    Nothing can run faster (the most generous peak of any dtype, every byte once)."""
    peak = max(max(u.peak_tflops.values()) for u in spec.units) * 1e12
    return max(r.work.flops / peak, r.work.total_bytes / (spec.memory.bandwidth_gbs * 1e9)) * 1e3


def impossible_records(records: list[Record], spec: HardwareSpec, factor: float = ROOFLINE_FACTOR) -> list[str]:
    """One line per record measured faster than ``roofline_ms / factor`` (physically impossible on this spec)."""
    out = []
    for r in records:
        floor = roofline_ms(r, spec)
        if r.measured.median_ms * factor < floor:
            out.append(f"{r.run_id} {r.kernel} {r.key()}: measured {r.measured.median_ms:.4g} ms, datasheet roofline "
                       f"{floor:.4g} ms ({floor / r.measured.median_ms:.3g}x faster than possible)")
    return out


def _support(name: str, records: list[Record], idx) -> int:
    """Fit records a parameter acts on: its weight format, KV dtype or kernel; global parameters: all."""
    def fmt(r):
        p = r.params
        if getattr(p, "weight_format", None) == "int4":
            return f"int4-g{p.group_size}"
        return getattr(p, "weight_format", None)

    def kv(r):
        return r.params.kv_dtype if r.kernel == "paged_attention" else getattr(r.params, "dtype", None)

    sel = [records[i] for i in idx]
    if name.startswith(("format_half_rows.", "dequant_overhead.")):
        return sum(fmt(r) == name.split(".", 1)[1] for r in sel)
    if name.startswith("kv_dequant_overhead."):
        return sum(kv(r) == name.split(".", 1)[1] and r.kernel in ("paged_attention", "decode_step") for r in sel)
    if name == "class_compute_fraction.attention":
        return sum(r.kernel in ("paged_attention", "decode_step") for r in sel)
    if name == "step_overhead_ms":
        return sum(r.kernel == "decode_step" for r in sel)
    if name == "compute_half_rows":
        return sum(r.kernel in ("quant_matmul", "decode_step") for r in sel)
    return len(sel)


_FRACTIONS = ("bandwidth_fraction", "compute_fraction", "class_compute_fraction.attention")


def noise_floor(records: list[Record], idx) -> dict:
    """Median / p90 over records of their own timing noise, (p90 - p10) / (2 x median) in %, overall and per
    kernel: model error below this cannot be told from machine noise."""
    out = {}
    noise = np.array([(records[i].measured.p90_ms - records[i].measured.p10_ms) / (2 * records[i].measured.median_ms)
                      * 100 for i in idx])
    kernels = np.array([records[i].kernel for i in idx])
    out["all"] = summarize(noise)
    for k in sorted(set(kernels)):
        out[f"kernel:{k}"] = summarize(noise[kernels == k])
    return out


def fit(records: list[Record], spec: HardwareSpec, unit_name: str | None = None) -> dict:
    """Fit the device's efficiency; returns {efficiency, before, after, errors..., names, refusals} (nothing
    written). Refuses (PlannerError) impossible records and too few records; ``refusals`` lists what makes the
    result unfit to write (a parameter on its bound, no held-out improvement): ``guard`` raises on it."""
    usable = [r for r in records if predictable(r)]
    if len(usable) < 8:
        raise PlannerError(f"fit: {len(usable)} usable records; need at least 8 ok kernel records")
    if len({r.device_id for r in usable}) > 1:
        raise PlannerError(f"fit: records of several devices ({', '.join(sorted({r.device_id for r in usable}))}); "
                           "fit one device at a time")
    bad = impossible_records(usable, spec)
    if bad:
        raise PlannerError(f"fit: refused: {len(bad)} records are physically impossible on {spec.id} (faster than "
                           f"its datasheet roofline by more than {ROOFLINE_FACTOR:g}x): " + "; ".join(bad[:5])
                           + (f"; and {len(bad) - 5} more" if len(bad) > 5 else ""))
    unit = spec.unit(unit_name)
    from planner.efficiency import resolve_efficiency
    before_eff = resolve_efficiency(spec, unit, "default")
    groups = prepare(usable)
    n = len(usable)
    meas = np.array([r.measured.median_ms for r in usable])
    hold = np.array([is_holdout(r) for r in usable])
    fit_idx, hold_idx = np.flatnonzero(~hold), np.flatnonzero(hold)
    if fit_idx.size < 4:
        raise PlannerError("fit: too few records outside the hold-out")
    kernels = np.array([r.kernel for r in usable])
    w = np.array([1.0 / np.sum(kernels[fit_idx] == k) for k in kernels[fit_idx]])
    sw = np.sqrt(w / w.sum() * len(fit_idx))
    formats = {f"int4-g{r.params.group_size}" if getattr(r.params, "weight_format", "") == "int4"
               else getattr(r.params, "weight_format", "") for r in usable}
    params = _Params(before_eff, usable, formats, fit_attention="paged_attention" in set(kernels))
    few = []
    if fit_idx.size < MIN_RECORDS_PER_PARAM * len(params.names):
        few.append(f"{fit_idx.size} fit records for {len(params.names)} free parameters (need at least "
                   f"{MIN_RECORDS_PER_PARAM} per parameter: {MIN_RECORDS_PER_PARAM * len(params.names)})")
    thin = [f"{nm} ({_support(nm, usable, fit_idx)})" for nm in params.names
            if _support(nm, usable, fit_idx) < MIN_SUPPORT]
    if thin:
        few.append(f"parameters with fewer than {MIN_SUPPORT} fit records acting on them: {', '.join(thin)}")
    if few:
        raise PlannerError("fit: refused: too few records: " + "; ".join(few))
    date = _dt.date.today().isoformat()
    source = f"calibration: planner validate fit, {spec.id}, {len(fit_idx)} fitted records, {date}"

    def residuals(p_smooth):
        def resid(u):
            ms, _, _ = evaluate(groups, n, spec, {unit.name: params.efficiency(u, source)}, smooth_p=p_smooth)
            return sw * np.log(ms[fit_idx] / meas[fit_idx])
        return resid

    def solve():
        # continuation: max(compute, memory) is flat on one side of the ridge, so a parameter whose ops all start
        # on the other side gets no gradient; fit a p-norm of the two first (p = 2 .. 32), then the exact roofline
        best = None
        for u0 in (params.initial(), params.initial() + 1.0, params.initial() - 1.0):
            u = u0
            for p_smooth in (2.0, 4.0, 8.0, 32.0, None):
                u, cost = _levenberg_marquardt(residuals(p_smooth), u, iters=60 if p_smooth else 200)
            if best is None or cost < best[1]:
                best = (u, cost)
        return best[0]

    u = solve()
    for _ in range(3):  # additive parameters driven to 0: pin them there and fit the rest again
        zero = [nm for nm, x in zip(params.names, u) if nm not in _FRACTIONS and x <= _U_LO + 0.5]
        if not zero:
            break
        params.pin(zero)
        u = solve()
    refusals = []
    edge = [nm for nm, x in zip(params.names, u)
            if x <= _U_LO + 0.5 or x >= _U_HI - 0.5 or (nm in _FRACTIONS and 1 / (1 + math.exp(-x)) >= 0.999)]
    if edge:
        refusals.append("parameters on a bound (a fraction at 0 or 1, an overhead at the top of its range): "
                        + ", ".join(edge))
    after_eff = _rounded(params.efficiency(u, source))
    ms_before, bound_before, _ = evaluate(groups, n, spec, {unit.name: before_eff})
    ms_after, bound_after, _ = evaluate(groups, n, spec, {unit.name: after_eff})
    report = {
        "before": {"held_out": report_errors(usable, ms_before, hold_idx, bound_after),
                   "fit": report_errors(usable, ms_before, fit_idx, bound_after)},
        "after": {"held_out": report_errors(usable, ms_after, hold_idx, bound_after),
                  "fit": report_errors(usable, ms_after, fit_idx, bound_after)},
        "noise_floor": noise_floor(usable, np.arange(n)),
    }
    hb, ha = report["before"]["held_out"]["all"], report["after"]["held_out"]["all"]
    if not ha.get("n"):
        refusals.append("no held-out records: the fit cannot be scored")
    elif not (ha["median_pct"] < hb["median_pct"] and ha["p90_pct"] <= hb["p90_pct"]):
        refusals.append(f"held-out |error| does not improve on the defaults: median {ha['median_pct']:.1f} % vs "
                        f"{hb['median_pct']:.1f} %, p90 {ha['p90_pct']:.1f} % vs {hb['p90_pct']:.1f} %")
    return {
        "efficiency": after_eff, "before_efficiency": before_eff, "unit": unit.name, "free": params.names,
        "pinned": params.pinned, "refusals": refusals, "bound_after": bound_after,
        "records": usable, "pred_before": ms_before, "pred_after": ms_after, "meas": meas,
        "holdout": hold, "fit_idx": fit_idx, "hold_idx": hold_idx, "report": report,
    }


def guard(result: dict) -> None:
    """Raise (one line, every reason) when the fit must not be written."""
    if result["refusals"]:
        raise PlannerError("fit: refused to write a calibration: " + "; ".join(result["refusals"]))


MIN_GROUP = 5  # records a group needs for its own tolerance


def check_groups(r: Record) -> tuple[str, str]:
    """The two tolerance groups of a record: ``kernel:<kernel>`` and ``kernel:<kernel>:<format>`` (KV dtype for
    attention, weight format for GEMMs and decode steps): a broken factor of one format cannot hide in the rest."""
    p = r.params
    if r.kernel == "paged_attention":
        fmt = p.kv_dtype
    else:
        fmt = p.weight_format + (f"-g{p.group_size}" if p.weight_format == "int4" else "")
    return f"kernel:{r.kernel}", f"kernel:{r.kernel}:{fmt}"


BIAS_FLOOR_PCT = 5.0  # bias tolerance = max(|bias| x margin, |bias| + this)


def group_errors(records: list[Record], err, bounds=None) -> dict[str, np.ndarray]:
    """|error| per group: ``check_groups`` plus, with ``bounds`` (the roofline regime of each prediction),
    ``bound:<memory|compute|overhead>`` -- a wrong bandwidth fraction shows in the memory-bound records even on a
    device whose records are mostly compute bound."""
    out: dict[str, list] = {}
    for i, (r, e) in enumerate(zip(records, err)):
        for g in check_groups(r) + ((f"bound:{bounds[i]}",) if bounds is not None and bounds[i] else ()):
            out.setdefault(g, []).append(e)
    return {g: np.array(v) for g, v in out.items()}


def _tol(med: float, p90: float, margin: float, floor_pct: float) -> tuple[float, float]:
    return (min(math.ceil(max(med * margin, med + floor_pct)), MAX_TOLERANCE_PCT),
            min(math.ceil(max(p90 * margin, p90 + floor_pct)), MAX_TOLERANCE_PCT))


def tolerance_from(result: dict, margin: float = 1.5, floor_pct: float = 2.0) -> Tolerance:
    """The check's tolerance: the after-fit error x margin, at least + floor_pct points, over all records and per
    group of at least MIN_GROUP records (``check_groups``)."""
    err = abs_err_pct(result["pred_after"], result["meas"])
    signed = signed_err_pct(result["pred_after"], result["meas"])
    med, p90 = float(np.median(err)), float(np.percentile(err, 90))
    t_med, t_p90 = _tol(med, p90, margin, floor_pct)
    per = {}
    bounds = result.get("bound_after")
    sgroups = group_errors(result["records"], signed, bounds)
    for g, e in sorted(group_errors(result["records"], err, bounds).items()):
        if e.size >= MIN_GROUP:
            gm, gp = _tol(float(np.median(e)), float(np.percentile(e, 90)), margin, floor_pct)
            b = abs(float(np.median(sgroups[g])))
            per[g] = GroupTolerance(median_pct=gm, p90_pct=gp,
                                    bias_pct=min(math.ceil(max(b * margin, b + BIAS_FLOOR_PCT)), MAX_TOLERANCE_PCT))
    return Tolerance(median_pct=t_med, p90_pct=t_p90, per_group=per, basis=(
        f"after-fit |error| over all {err.size} records: median {med:.1f} %, p90 {p90:.1f} %; tolerance = "
        f"max(x{margin}, +{floor_pct:g} points), rounded up; the same per kernel and per (kernel, format) group "
        f"and roofline regime (bound:memory|compute|overhead) of at least {MIN_GROUP} records, with a bias tolerance max(|median signed error| x {margin}, + {BIAS_FLOOR_PCT:g} points)"))


def _device_match(fp: dict, spec: HardwareSpec) -> str:
    """How the measured device was tied to the catalog spec (provenance)."""
    from .records import catalog_match
    hit = catalog_match(fp)
    if hit is not None:
        return f"catalog {hit[0]} by {hit[1]}" + ("" if hit[0] == spec.id else f" (fitted against spec {spec.id})")
    what = fp.get("gpu_name") or f"{fp.get('cpu_model')} x {fp.get('cpu_count')}"
    return f"measured device '{what}' (no catalog match); spec {spec.id}"


def calibration_dict(result: dict, spec: HardwareSpec, record_files: list[str], tolerance: Tolerance) -> dict:
    recs = result["records"]
    fp = recs[0].fingerprint
    eff = result["efficiency"].model_dump(exclude_defaults=False)
    eff = {k: v for k, v in eff.items() if v not in ({}, None) and k not in ("fp16_accumulate", "matmul_tflops_per_watt")}
    return {
        "hardware_id": spec.id,
        "units": {result["unit"]: eff},
        "tolerance": tolerance.model_dump(),
        "provenance": {
            "written_by": "planner validate fit (validate/calibrate.py)",
            "date": _dt.date.today().isoformat(),
            "records": record_files,
            "n_records": len(recs), "n_fit": int(result["fit_idx"].size), "n_held_out": int(result["hold_idx"].size),
            "holdout_rule": f"sha256(kernel + params) mod 100 < {HOLDOUT_PCT}",
            "method": "Levenberg-Marquardt on log(pred / meas), each kernel weighted equally (numpy)",
            "free_parameters": result["free"],
            "pinned_at_zero": result.get("pinned", []),
            "spec": spec.id, "before": result["before_efficiency"].source,
            "device_match": _device_match(fp, spec),
            "versions": {k: fp.get(k) for k in ("torch_version", "triton_version", "python_version", "cpu_model",
                                                "gpu_name", "driver_version", "torch_threads", "load_avg_1m")
                         if fp.get(k) is not None},
        },
        "report": result["report"],
    }


def report_text(result: dict) -> str:
    """Median / p90 |error| % before and after, per kernel and regime, held-out and fit."""
    rep = result["report"]
    keys = list(rep["after"]["held_out"])
    for k in rep["after"]["fit"]:
        if k not in keys:
            keys.append(k)
    lines = [f"{'group':<24} {'split':<9} {'n':>4}  {'before med/p90 %':>18}  {'after med/p90 %':>17}"]
    for k in keys:
        for split in ("held_out", "fit"):
            b = rep["before"][split].get(k, {"n": 0})
            a = rep["after"][split].get(k, {"n": 0})
            if not a.get("n"):
                continue
            lines.append(f"{k:<24} {split:<9} {a['n']:>4}  {b['median_pct']:>8.1f} / {b['p90_pct']:<7.1f}"
                         f"  {a['median_pct']:>7.1f} / {a['p90_pct']:<7.1f}")
    nf = rep.get("noise_floor", {})
    if nf:
        lines.append("noise floor (the records' own (p90 - p10) / 2 median, %): " + ", ".join(
            f"{k} {v['median_pct']:.1f} / {v['p90_pct']:.1f}" for k, v in nf.items() if v.get("n")))
    if result.get("pinned"):
        lines.append(f"pinned at 0 (driven to their physical bound): {', '.join(result['pinned'])}")
    e = result["efficiency"]
    lines.append("")
    lines.append(f"fitted ({result['unit']}): bandwidth_fraction {e.bandwidth_fraction:.3f}, compute_fraction "
                 f"{e.compute_fraction:.3f}, compute_half_rows {e.compute_half_rows:.3g}, kernel_overhead_us "
                 f"{e.kernel_overhead_us:.3g}, step_overhead_ms {e.step_overhead_ms:.3g}, class_compute_fraction "
                 f"{e.class_compute_fraction}, format_half_rows {e.format_half_rows}, dequant_overhead {e.dequant_overhead}")
    return "\n".join(lines)


def write_calibration(path: str | Path, data: dict) -> None:
    CalibrationFile.model_validate(data)
    atomic_write_yaml(path, data)
