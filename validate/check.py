"""`planner validate check`: do the planner's predictions still match the committed measurements?

For every device folder ``validate/records/<device-id>/`` the check loads the device's spec
(hardware_specs/<device-id>.yaml) and its calibration (hardware_specs/calibration/<device-id>.yaml, or another
folder/file given by the caller), recomputes the prediction of every committed ok kernel record with that
calibration's efficiency (the ceilings STREAM / GEMM are the spec itself and are not predicted), and fails when
the median or the p90 of |pred / meas - 1| exceeds the tolerance stated in the calibration file -- overall, or in
any kernel or (kernel, format) group the calibration gives its own tolerance (validate.calibrate.check_groups).
No torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planner.errors import PlannerError
from planner.hardware import HardwareSpec, load_hardware

from .calibrate import (CalibrationFile, abs_err_pct, group_errors, load_calibration, noise_floor, signed_err_pct,
                        summarize)
from .predict import evaluate, predictable, prepare
from .records import RECORDS_DIR, read_dir


@dataclass
class DeviceCheck:
    device_id: str
    n: int
    median_pct: float
    p90_pct: float
    tol_median_pct: float
    tol_p90_pct: float
    per_kernel: dict = field(default_factory=dict)
    calibration: str = ""
    group_failures: list = field(default_factory=list)  # "kernel:<k>[:<fmt>] median x > tolerance y"
    noise: dict = field(default_factory=dict)  # the records' own timing noise (calibrate.noise_floor)

    @property
    def ok(self) -> bool:
        return (self.median_pct <= self.tol_median_pct and self.p90_pct <= self.tol_p90_pct
                and not self.group_failures)

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAIL"
        kern = ", ".join(f"{k} {v['median_pct']:.1f}/{v['p90_pct']:.1f}" for k, v in self.per_kernel.items())
        fails = f"; beyond the group tolerance: {'; '.join(self.group_failures)}" if self.group_failures else ""
        nf = self.noise.get("all", {})
        if nf.get("n"):
            fails += f"; timing noise of the records median {nf['median_pct']:.1f} %, p90 {nf['p90_pct']:.1f} %"
        return (f"{verdict}: {self.device_id}: {self.n} records, |error| median {self.median_pct:.1f} % "
                f"(tolerance {self.tol_median_pct:g}), p90 {self.p90_pct:.1f} % (tolerance {self.tol_p90_pct:g}); "
                f"per kernel median/p90 %: {kern}{fails}; calibration {self.calibration}")


def check_device(records_path: str | Path, spec: HardwareSpec, cal: CalibrationFile, cal_name: str = "") -> DeviceCheck:
    records = [r for r in read_dir(records_path) if predictable(r)]
    if not records:
        raise PlannerError(f"check: no ok kernel records in {records_path}")
    ms, bounds, _ = evaluate(prepare(records), len(records), spec, dict(cal.units))
    meas = np.array([r.measured.median_ms for r in records])
    err = abs_err_pct(ms, meas)
    kernels = np.array([r.kernel for r in records])
    per = {k: summarize(err[kernels == k]) for k in sorted(set(kernels))}
    fails = []
    signed = group_errors(records, signed_err_pct(ms, meas), bounds)
    for g, e in sorted(group_errors(records, err, bounds).items()):
        tol = cal.tolerance.per_group.get(g)
        if tol is None:
            continue
        med, p90, bias = float(np.median(e)), float(np.percentile(e, 90)), float(np.median(signed[g]))
        if med > tol.median_pct or p90 > tol.p90_pct or (tol.bias_pct is not None and abs(bias) > tol.bias_pct):
            fails.append(f"{g} median {med:.1f} % (tolerance {tol.median_pct:g}), p90 {p90:.1f} % "
                         f"(tolerance {tol.p90_pct:g}), bias {bias:+.1f} % (tolerance {tol.bias_pct})")
    return DeviceCheck(spec.id, len(records), float(np.median(err)), float(np.percentile(err, 90)),
                       cal.tolerance.median_pct, cal.tolerance.p90_pct, per, cal_name, fails,
                       noise_floor(records, range(len(records))))


def run_check(records_root: str | Path | None = None, calibration_dir: str | Path | None = None,
              calibration_file: str | Path | None = None, device_id: str | None = None,
              spec_path: str | Path | None = None) -> list[DeviceCheck]:
    """Check every device folder under ``records_root`` (or only ``device_id``)."""
    from planner.efficiency import CALIBRATION_DIR

    root = Path(records_root or RECORDS_DIR)
    if not root.is_dir():
        raise PlannerError(f"--records: no such folder: {root}")
    devices = sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.jsonl")))
    if device_id is not None:
        if device_id not in devices:
            raise PlannerError(f"--device-id: no records for '{device_id}' in {root}; have: {', '.join(devices) or 'none'}")
        devices = [device_id]
    if not devices:
        raise PlannerError(f"check: no device folders with .jsonl records in {root}")
    if calibration_file is not None and len(devices) > 1:
        raise PlannerError("--calibration: one file checks one device; add --device-id")
    out = []
    for dev in devices:
        spec = load_hardware(str(spec_path) if spec_path else dev)
        cal_path = Path(calibration_file) if calibration_file else Path(calibration_dir or CALIBRATION_DIR) / f"{dev}.yaml"
        if not cal_path.exists():
            raise PlannerError(f"check: no calibration for {dev} ({cal_path}); run `planner validate fit --device-id {dev}`")
        cal = load_calibration(cal_path)
        if cal.hardware_id != spec.id:
            raise PlannerError(f"{cal_path}: hardware_id '{cal.hardware_id}' does not match the records' device '{spec.id}'")
        out.append(check_device(root / dev, spec, cal, str(cal_path)))
    return out


def prediction_table(records_root: str | Path | None = None, calibration_dir: str | Path | None = None):
    """Every committed ok kernel record with the prediction `planner validate check` scores (the committed
    calibration): DataFrame[device, file, kernel, predicted_ms, measured_ms, error_pct, split], plus notes. For
    the app's Validation section; devices without a spec or a calibration are skipped with a note."""
    import pandas as pd

    from planner.efficiency import CALIBRATION_DIR

    from .calibrate import is_holdout

    cols = ["device", "file", "kernel", "predicted_ms", "measured_ms", "error_pct", "split"]
    root = Path(records_root or RECORDS_DIR)
    rows, notes = [], []
    for dev_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        cal_path = Path(calibration_dir or CALIBRATION_DIR) / f"{dev_dir.name}.yaml"
        try:
            spec = load_hardware(dev_dir.name)
            cal = load_calibration(cal_path)
            records = [r for r in read_dir(dev_dir) if predictable(r)]
        except PlannerError as exc:
            notes.append(f"{dev_dir.name}: skipped ({exc})")
            continue
        if not records:
            continue
        ms, _, _ = evaluate(prepare(records), len(records), spec, dict(cal.units))
        for r, p in zip(records, ms):
            m = r.measured.median_ms
            rows.append({"device": dev_dir.name, "file": f"{r.run_id}.jsonl", "kernel": r.kernel,
                         "predicted_ms": float(p), "measured_ms": m, "error_pct": 100.0 * (float(p) - m) / m,
                         "split": "held-out" if is_holdout(r) else "fit"})
    return pd.DataFrame(rows, columns=cols), notes
