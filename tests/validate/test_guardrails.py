"""Issue 12 / 15: a fit that cannot go wrong silently, records and calibrations that refuse absurd numbers, and run
files that concurrent runs cannot lose.

Synthetic records come from test_calibrate's made-up CPU (100 GB/s, 1 TFLOP/s fp32, 4 TFLOP/s bf16): their
'measured' times are the planner's own predictions under a known efficiency, so every expectation below is
derived from that construction, never from a timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from planner.efficiency import CALIBRATION_DIR, resolve_efficiency
from planner.errors import PlannerError
from validate.calibrate import (
    ROOFLINE_FACTOR,
    fit,
    guard,
    impossible_records,
    load_calibration,
    roofline_ms,
)
from validate.predict import evaluate, prepare
from validate.records import Measured, RecordWriter, new_run_id, read_dir, read_records

from .test_calibrate import SPEC, TRUE, _synthetic, matmul_rec

REPO = Path(__file__).resolve().parents[2]


def _with_times(recs, ms):
    return [r.model_copy(update={"measured": r.measured.model_copy(update={
        "median_ms": float(t), "p10_ms": float(t), "p90_ms": float(t), "min_ms": float(t), "mean_ms": float(t)})})
        for r, t in zip(recs, ms)]


# ---------------------------------------------------------------- the fit's guardrails


def test_roofline_of_a_record_by_hand():
    # bf16 4096 x 4096 at M = 1: 33,554,432 weight + 8,192 + 8,192 activation bytes = 33,570,816 B at 100 GB/s
    # = 0.33571 ms; 2 x 4096^2 = 33.6 MFLOP at the highest peak 4 TFLOP/s = 0.0084 ms; the roofline is the larger
    assert roofline_ms(matmul_rec(1), SPEC) == pytest.approx(0.33570816, rel=1e-9)


def test_impossible_record_is_refused_and_named():
    recs = _synthetic(TRUE)
    # 0.1 ms for the 0.3357 ms roofline above: 3.36x faster than the datasheet allows (> ROOFLINE_FACTOR = 2)
    i = next(i for i, r in enumerate(recs) if r.kernel == "quant_matmul" and r.params.m == 1
             and r.params.weight_format == "bf16" and r.params.n == 4096)
    recs[i] = _with_times([recs[i]], [0.1])[0]
    assert ROOFLINE_FACTOR == 2.0
    (line,) = impossible_records(recs, SPEC)
    assert '"m":1' in line and "3.36x faster" in line
    with pytest.raises(PlannerError, match=r"1 records are physically impossible on test-cpu .*quant_matmul"):
        fit(recs, SPEC)


def test_too_few_records_per_parameter_is_refused():
    # 12 GEMM records of 3 formats: ~8 outside the hold-out for 7 free parameters (bandwidth, compute, kernel
    # overhead, half rows, bf16 half rows, int8 and int4-g128 dequant) -- fewer than 5 per parameter
    recs = [matmul_rec(m, f, 128 if f == "int4" else None) for m in (1, 4, 16, 64) for f in ("bf16", "int8", "int4")]
    ms, _, _ = evaluate(prepare(recs), len(recs), SPEC, TRUE)
    with pytest.raises(PlannerError, match=r"refused: too few records: \d+ fit records for 7 free parameters"):
        fit(_with_times(recs, ms), SPEC)


def _gemms(eff):
    """36 bf16 GEMM records (M 1..64 x N 512..16384, K 4096) timed by the planner under ``eff``: 5 free parameters
    (bandwidth, compute, kernel overhead, half rows, bf16 half rows), ~25 fit records (>= 5 per parameter)."""
    recs = [matmul_rec(m, n=n) for m in (1, 2, 4, 8, 16, 64) for n in (512, 1024, 2048, 4096, 8192, 16384)]
    ms, _, _ = evaluate(prepare(recs), len(recs), SPEC, eff)
    return _with_times(recs, ms)


def test_fit_that_does_not_beat_the_defaults_is_refused():
    """Records made by the kind defaults themselves: the defaults' held-out error is 0, a fit cannot improve on it."""
    default = resolve_efficiency(SPEC, SPEC.unit(None), "default")
    recs = _gemms(default)
    ms = [r.measured.median_ms for r in recs]
    res = fit(_with_times(recs, ms), SPEC)
    assert res["report"]["before"]["held_out"]["all"]["median_pct"] == 0.0
    assert any("does not improve on the defaults" in r for r in res["refusals"])
    with pytest.raises(PlannerError, match="refused to write a calibration: .*does not improve"):
        guard(res)


def test_a_fraction_on_its_bound_is_refused():
    """Every record 0.7x the time TRUE predicts, with TRUE's bandwidth fraction at 1.0: memory-bound records now
    need bandwidth_fraction 1 / 0.7 = 1.43 > 1 (still slower than half the roofline, so not 'impossible')."""
    truth = TRUE.model_copy(update={"bandwidth_fraction": 1.0})
    recs = _gemms(truth)
    recs = _with_times(recs, [r.measured.median_ms * 0.7 for r in recs])
    assert not impossible_records(recs, SPEC)
    res = fit(recs, SPEC)
    assert any("on a bound" in r and "bandwidth_fraction" in r for r in res["refusals"])
    with pytest.raises(PlannerError, match="bandwidth_fraction"):
        guard(res)


def test_a_good_fit_passes_the_guard_and_reports_its_noise_floor():
    res = fit(_synthetic(TRUE, noise=0.05), SPEC)
    guard(res)  # no refusal
    assert res["refusals"] == []
    # the synthetic records have p10 = p90 (no spread): a noise floor of exactly 0
    assert res["report"]["noise_floor"]["all"]["median_pct"] == 0.0


def test_committed_calibration_pins_zero_parameters_and_names_its_device():
    cal = load_calibration(CALIBRATION_DIR / "cpu-amd-epyc-2c.yaml")
    assert "compute_half_rows" in cal.provenance["pinned_at_zero"]
    assert cal.units["cpu"].compute_half_rows == 0.0
    assert "no catalog match" in cal.provenance["device_match"]
    assert cal.tolerance.per_group["bound:memory"].bias_pct > 0


# ---------------------------------------------------------------- records and calibration files


def test_records_schema_refuses_absurd_and_non_finite_numbers(tmp_path):
    base = dict(p10_ms=1, p90_ms=1, min_ms=1, mean_ms=1, std_ms=0, reps=3, warmup=1, flushed=True, flush_bytes=1,
                threads=2)
    for bad in (1e308, float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(ValidationError):
            Measured(median_ms=bad, **base)
    good = json.loads(matmul_rec(1).model_dump_json())
    p = tmp_path / "r.jsonl"
    for field, value in (("median_ms", 1e308), ("p90_ms", float("nan"))):
        obj = json.loads(json.dumps(good))
        obj["measured"][field] = value
        p.write_text(json.dumps(obj) + "\n")  # json.dumps writes NaN as the bare token NaN, which json.loads reads
        with pytest.raises(PlannerError, match=rf"line 1: measured\.{field}"):
            read_records(p)
    obj = json.loads(json.dumps(good))
    obj["achieved_gbs"] = float("inf")
    p.write_text(json.dumps(obj) + "\n")
    with pytest.raises(PlannerError, match="achieved_gbs"):
        read_records(p)


def _calibration_copy(tmp_path, edit) -> Path:
    data = yaml.safe_load((CALIBRATION_DIR / "cpu-amd-epyc-2c.yaml").read_text())
    edit(data)
    out = tmp_path / "cpu-amd-epyc-2c.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["tolerance"].update(p90_pct=float("inf")), "tolerance.p90_pct"),
    (lambda d: d["tolerance"].update(median_pct=1e10), "tolerance.median_pct"),
    (lambda d: d["tolerance"]["per_group"]["bound:memory"].update(bias_pct=float("nan")), "bias_pct"),
    (lambda d: d["units"]["cpu"].update(kernel_overhead_us=float("inf")), "kernel_overhead_us"),
])
def test_calibration_file_must_be_finite_and_bounded(tmp_path, edit, field):
    path = _calibration_copy(tmp_path, edit)
    with pytest.raises(PlannerError, match=field.replace(".", r"\.")):
        load_calibration(path)


# ---------------------------------------------------------------- run files


def test_run_ids_are_unique_within_one_second():
    import datetime as dt
    t = dt.datetime(2026, 12, 1, 6, 0, 0, tzinfo=dt.timezone.utc)
    ids = {new_run_id("cpu", t) for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith(f"20261201T060000Z-cpu-p{os.getpid()}-") for i in ids)


def test_a_writer_never_takes_over_another_runs_file(tmp_path):
    path = tmp_path / "dev" / "run.jsonl"
    w = RecordWriter(path)
    w.append(matmul_rec(1))
    with pytest.raises(PlannerError, match="already exists"):
        RecordWriter(path)
    assert read_records(path) == [matmul_rec(1)]


def test_two_concurrent_runs_keep_all_their_records(tmp_path):
    """Two `planner validate run` processes started together into one folder: two run files, none lost
    (tiny preset, --limit 1: 4 ceilings + 1 kernel case = 5 records each)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "planner", "validate", "run", "--preset", "tiny", "--limit", "1", "--quiet",
           "--out", str(tmp_path), "--device-id", "cpu-test"]
    procs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    files = sorted((tmp_path / "cpu-test").glob("*.jsonl"))
    assert len(files) == 2
    recs = read_dir(tmp_path / "cpu-test")
    assert len(recs) == 10 and len({r.run_id for r in recs}) == 2
    assert np.all([r.status == "ok" and r.backend for r in recs])


def test_cli_fit_refusal_is_one_line_and_writes_nothing(tmp_path, capsys):
    """`planner validate fit` on 12 records: the report is printed, then one `error:` line naming the refusal,
    exit 2, and no calibration file."""
    from planner.cli import main
    from planner.io import atomic_write_yaml
    from validate.records import dumps

    recs = [matmul_rec(m, f, 128 if f == "int4" else None) for m in (1, 4, 16, 64) for f in ("bf16", "int8", "int4")]
    ms, _, _ = evaluate(prepare(recs), len(recs), SPEC, TRUE)
    (tmp_path / "test-cpu").mkdir()
    (tmp_path / "test-cpu" / "r.jsonl").write_text(dumps(_with_times(recs, ms)))
    spec = tmp_path / "test-cpu.yaml"
    atomic_write_yaml(spec, SPEC.model_dump(mode="json", exclude_none=True))
    out = tmp_path / "cal.yaml"
    rc = main(["validate", "fit", "--records", str(tmp_path / "test-cpu"), "--spec", str(spec), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert err.startswith("error: fit: refused: too few records") and len(err.strip().splitlines()) == 1


def test_h200_calibration_provenance_names_the_catalog_match():
    """Records of the lent H200 (torch: 'NVIDIA H200', 143771 MiB = 140.4 GiB) land on the catalog's h200-sxm, and the
    calibration says how that match was made."""
    from planner.hardware import load_hardware
    from validate.calibrate import _device_match
    from validate.records import device_id_from_fingerprint

    fp = {"device_type": "cuda", "gpu_name": "NVIDIA H200", "gpu_memory_gib": 143771 / 1024}
    assert device_id_from_fingerprint(fp) == "h200-sxm"
    assert _device_match(fp, load_hardware("h200-sxm")) == "catalog h200-sxm by gpu_name 'NVIDIA H200', 140.4 GiB in [125, 145]"
