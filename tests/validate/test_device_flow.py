"""The GPU device flow (validate/gpu_sweep.sh -> validate/preflight.py -> `planner validate device`) without a GPU:
the CPU dry run runs every step (preflight, the Triton-interpreter gate, one budgeted phase per kernel family,
the guarded fit) on the tiny preset; the unit tests check the budget arithmetic, that a timed-out or empty phase
fails the flow, the preflight's message for a missing pydantic, and the wheels step's pip command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import validate.device as device
from validate.preflight import WHEEL_PACKAGES, preflight

REPO = Path(__file__).resolve().parents[2]


def test_dry_run_of_the_whole_flow(tmp_path):
    """One run of the script as the device would run it, on the CPU: exit 0, one records file per family, every
    record names the backend that ran, the tiny sweep's fit is refused by the guardrails (and says why)."""
    env = {**os.environ, "OUT": str(tmp_path), "GPU_SWEEP_DRY_RUN": "1", "PYTHON": sys.executable,
           "GPU_SWEEP_BUDGET_S": "240"}
    res = subprocess.run(["bash", str(REPO / "validate" / "gpu_sweep.sh")], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] and summary["dry_run"] and summary["preset"] == "tiny"
    assert [s["step"] for s in summary["steps"]] == ["preflight", "gate", "phase ceilings", "phase quant_matmul",
                                                     "phase paged_attention", "phase decode_step", "fit"]
    # tiny preset: 4 ceilings, 6 GEMMs (3 formats x M 1, 4), 4 attention cases, 2 decode steps
    assert {f: c["ok"] for f, c in summary["families"].items()} == {
        "ceilings": 4, "quant_matmul": 6, "paged_attention": 4, "decode_step": 2}
    assert "too few records" in summary["fit"]["refused"]
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) <= 8 and "flow.log" in files and "summary.json" in files  # the device tool brings back 8
    assert all(len(Path(f).parts) <= 3 for f in files)  # no deeper than $OUT/a/b/file
    from validate.records import read_dir
    (dev,) = (tmp_path / "records").iterdir()
    recs = read_dir(dev)
    assert len(recs) == 16 and all(r.backend for r in recs)
    assert "phase decode_step: 2 records" in res.stdout and "decode stacks built: 2 (one per format)" in res.stdout


def test_budget_shares_add_up():
    # 360 s: the gate 20 % = 72 s; the families share 288 s as 10 / 30 / 30 / 30 %
    gate, shares = device.phase_shares(360.0)
    assert gate == pytest.approx(72.0)
    assert shares == pytest.approx({"ceilings": 28.8, "quant_matmul": 86.4, "paged_attention": 86.4,
                                    "decode_step": 86.4})
    assert gate + sum(shares.values()) == pytest.approx(360.0)


def _fake_run(results):
    """A stand-in for device._run: the gate passes; each family phase returns results[family] = (rc, records)."""
    def run(cmd, timeout_s, flow, env=None):
        if "pytest" in cmd:
            return 0, "1 passed"
        fam = cmd[cmd.index("--family") + 1]
        rc, n = results.get(fam, (0, 1))
        if n:
            from validate.records import RecordWriter
            from .test_calibrate import matmul_rec
            out = Path(cmd[cmd.index("--out") + 1]) / "cpu-test"
            w = RecordWriter(out / f"run-{fam}.jsonl")
            for _ in range(n):
                w.append(matmul_rec(1))
        return rc, ("" if rc == 0 else "Terminated")
    return run


@pytest.mark.parametrize("results,why", [
    ({"paged_attention": (124, 1)}, "phase paged_attention: FAILED"),    # killed at its time limit: not success
    ({"decode_step": (0, 0)}, "no ok record: the family is missing"),
    ({"quant_matmul": (1, 0)}, "phase quant_matmul: FAILED"),
])
def test_a_timed_out_or_missing_family_fails_the_flow(tmp_path, monkeypatch, capsys, results, why):
    monkeypatch.setattr(device, "_run", _fake_run(results))
    assert device.run_flow(tmp_path, dry_run=True, budget_s=60) == 1
    out = capsys.readouterr().out
    assert why in out and "flow FAILED" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert not summary["ok"] and not any(s["step"] == "fit" for s in summary["steps"])


def test_preflight_names_the_wheels_step_when_pydantic_is_missing(monkeypatch):
    import importlib
    real = importlib.import_module

    def fake(name, *a):
        if name == "pydantic":
            raise ImportError("No module named 'pydantic'")
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", fake)
    info = preflight("cpu")
    (problem,) = info["problems"]
    assert problem.startswith("pydantic is not importable") and "validate/build_wheels.sh" in problem
    assert "--target /tmp/site .whl/*.whl" in problem


def test_preflight_on_this_machine_reports_versions():
    info = preflight("cpu")
    assert info["problems"] == []
    import torch
    assert info["versions"]["torch"] == torch.__version__ and info["ops"]["aten._weight_int4pack_mm_for_cpu"]


def test_wheels_step_command_line():
    """DRY_RUN=1 prints the one pip command of the device README's recipe: cp312, manylinux x86_64 platforms,
    --no-deps, binary only, into .whl, each package pinned to the version installed here."""
    import importlib.metadata as md
    res = subprocess.run(["bash", str(REPO / "validate" / "build_wheels.sh")], capture_output=True, text=True,
                         env={**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable}, timeout=60)
    assert res.returncode == 0, res.stderr
    args = res.stdout.split()
    assert args[1:4] == ["-m", "pip", "download"]
    for flag in ("--no-deps", "--only-binary=:all:"):
        assert flag in args
    assert args[args.index("--python-version") + 1] == "3.12" and args[args.index("--implementation") + 1] == "cp"
    plats = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert "manylinux_2_17_x86_64" in plats and "manylinux2014_x86_64" in plats
    assert args[args.index("-d") + 1] == ".whl"
    assert [a for a in args if "==" in a] == [f"{p}=={md.version(p)}" for p in WHEEL_PACKAGES]


@pytest.mark.parametrize("argv,field", [
    (["--device", "cpu"], "--device: 'cpu' is not a CUDA device"),
    (["--budget-s", "5000"], "--budget-s: at most 3600 s"),
])
def test_device_command_bad_flags_are_one_line(tmp_path, capsys, argv, field):
    from planner.cli import main
    assert main(["validate", "device", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}") and len(err.strip().splitlines()) == 1
