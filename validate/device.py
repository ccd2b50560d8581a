"""`planner validate device`: the whole GPU validation in one command that fits one device lease.

    planner validate device --out "$OUT"                 # on the GPU machine (validate/gpu_sweep.sh wraps it)
    planner validate device --dry-run --out /tmp/flow    # the same steps on a CPU, small and fast (CI runs it)

Steps, in order; each is timed, printed, and written to ``<out>/summary.json``; the first failing step ends the
flow with exit 1 (what it measured so far is kept):

  1. preflight    versions (torch, triton, CUDA, driver, GPU), every import, the torch ops the kernels adapt to
                  (validate/preflight.py; a missing pydantic names the wheels step)
  2. gate         the GPU kernel tests against the naive references (tests/validate/test_gpu_kernels.py; the dry
                  run: the Triton interpreter subset) under ``gate_s`` seconds; exit 124 (timed out) is a failure
  3. phases       one `planner validate run --family F` per kernel family (ceilings, quant_matmul,
                  paged_attention, decode_step), each under its share of the budget (SHARES); a run stops starting
                  cases at 90 % of its share and is killed at its share + PHASE_GRACE_S (then: failed, exit 124).
                  Per-family record counts are printed; a family with no ok record fails the flow
  4. fit          the guarded fit (validate/calibrate.py) against the catalog spec of the device (h200-sxm for
                  'NVIDIA H200'; a device outside the catalog: its measured ceilings), the calibration and
                  `validate check` of it -> ``<out>/calibration/<id>.yaml``. A refusal fails the flow, except in
                  the dry run, whose tiny sweep must be refused (that proves the guardrails run)

Default budget: 360 s for steps 2-3 (gate at most GATE_SHARE of it), plus preflight and fit (~20 s): about
6.5 minutes of device time, 8 with the machine's start-up. Files in ``<out>`` (at most 8: what the device tool
brings back): records/<id>/<run>.jsonl (one per family), calibration/<id>.yaml, summary.json, flow.log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

GATE_SHARE = 0.2
SHARES = {"ceilings": 0.1, "quant_matmul": 0.3, "paged_attention": 0.3, "decode_step": 0.3}
PHASE_GRACE_S = 20.0
REPO = Path(__file__).resolve().parents[1]
GATE_TESTS = {"cuda": ["-m", "gpu", "tests/validate/test_gpu_kernels.py"],
              "cpu": ["tests/validate/test_triton_interpreter.py", "-k", "split_counts_agree or int4_pack_variant"]}


class Flow:
    """Prints each line and keeps it for flow.log; collects the summary."""

    def __init__(self, out: Path):
        self.out = out
        self.lines: list[str] = []
        self.summary: dict = {"steps": [], "families": {}, "ok": False}
        self.t0 = time.perf_counter()

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)

    def step(self, name: str, ok: bool, seconds: float, **info) -> bool:
        self.summary["steps"].append({"step": name, "ok": ok, "seconds": round(seconds, 1), **info})
        self.say(f"[{time.perf_counter() - self.t0:6.1f} s] {name}: {'ok' if ok else 'FAILED'} ({seconds:.1f} s)"
                 + (f" -- {info['why']}" if info.get("why") else ""))
        return ok

    def close(self, ok: bool) -> int:
        self.summary["ok"] = ok
        self.summary["seconds"] = round(time.perf_counter() - self.t0, 1)
        self.out.mkdir(parents=True, exist_ok=True)
        from planner.io import atomic_write_text
        atomic_write_text(self.out / "summary.json", json.dumps(self.summary, indent=1, default=str) + "\n")
        self.say(f"flow {'ok' if ok else 'FAILED'} in {self.summary['seconds']} s -> {self.out}")
        atomic_write_text(self.out / "flow.log", "\n".join(self.lines) + "\n")
        return 0 if ok else 1


def _run(cmd: list[str], timeout_s: float, flow: Flow, env: dict | None = None) -> tuple[int, str]:
    """Run a command with a wall-clock limit; 124 when it was stopped at the limit (as timeout(1) says)."""
    e = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
         "PYTHONUNBUFFERED": "1", **(env or {})}
    try:
        p = subprocess.run(cmd, cwd=REPO, env=e, capture_output=True, text=True, timeout=timeout_s)
        return p.returncode, (p.stdout + p.stderr)
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, text + f"\n(stopped after {timeout_s:.0f} s)"


def phase_shares(budget_s: float) -> tuple[float, dict[str, float]]:
    """(gate seconds, {family: seconds}): the gate gets GATE_SHARE of the budget, the families split the rest by
    SHARES. 360 s: gate 72 s; ceilings 28.8 s, quant_matmul / paged_attention / decode_step 86.4 s each."""
    gate = budget_s * GATE_SHARE
    rest = budget_s - gate
    return gate, {f: rest * s for f, s in SHARES.items()}


def _family_counts(path: Path | None) -> dict:
    from .records import read_records
    if path is None or not path.exists():
        return {"records": 0, "ok": 0, "oom": 0, "error": 0, "backends": []}
    recs = read_records(path)
    return {"records": len(recs), **{s: sum(r.status == s for r in recs) for s in ("ok", "oom", "error")},
            "backends": sorted({r.backend for r in recs if r.backend}), "file": str(path)}


def run_flow(out: str | Path, device: str = "cuda", budget_s: float = 360.0, dry_run: bool = False,
             preset: str | None = None, device_id: str | None = None) -> int:
    """The four steps above; returns the exit status (0 ok, 1 a step failed)."""
    out = Path(out)
    flow = Flow(out)
    preset = preset or ("tiny" if dry_run else "cuda")
    device = "cpu" if dry_run else device
    flow.summary.update(device=device, preset=preset, budget_s=budget_s, dry_run=dry_run)
    gate_s, shares = phase_shares(budget_s)
    flow.say(f"device flow: {device}, preset {preset}, budget {budget_s:g} s (gate {gate_s:.0f} s; "
             + ", ".join(f"{f} {s:.0f} s" for f, s in shares.items()) + f") -> {out}")

    # 1. preflight
    from .preflight import preflight, summary_lines
    t = time.perf_counter()
    info = preflight(device)
    for line in summary_lines(info):
        flow.say(line)
    flow.summary["preflight"] = info
    if not flow.step("preflight", not info["problems"], time.perf_counter() - t, why="; ".join(info["problems"])):
        return flow.close(False)

    # 2. correctness gate
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *GATE_TESTS[device.split(":")[0]]]
    if device.startswith("cuda"):
        try:
            import xdist  # noqa: F401 - parallel workers compile the Triton variants side by side
            cmd += ["-n", "8"]
        except ImportError:
            pass
    rc, text = _run(cmd, gate_s, flow)
    tail = text.strip().splitlines()[-1] if text.strip() else ""
    flow.say(f"gate: {' '.join(cmd[3:])}: {tail}")
    why = ("timed out (exit 124) after %.0f s" % gate_s) if rc == 124 else (f"exit {rc}" if rc else "")
    if not flow.step("gate", rc == 0, time.perf_counter() - t, rc=rc, why=why, tail=tail):
        flow.lines += text.splitlines()[-40:]
        return flow.close(False)

    # 3. budgeted phases, one process per family
    records_root = out / "records"
    ok_all = True
    for fam, share in shares.items():
        t = time.perf_counter()
        before = set(records_root.glob("*/*.jsonl"))
        cmd = [sys.executable, "-m", "planner", "validate", "run", "--preset", preset, "--device", device,
               "--family", fam, "--time-budget-s", f"{share * 0.9:.1f}", "--out", str(records_root), "--quiet"]
        if device_id:
            cmd += ["--device-id", device_id]
        rc, text = _run(cmd, share + PHASE_GRACE_S, flow)
        new = sorted(set(records_root.glob("*/*.jsonl")) - before)
        counts = _family_counts(new[-1] if new else None)
        flow.summary["families"][fam] = {**counts, "rc": rc, "share_s": round(share, 1)}
        skipped = [ln for ln in text.splitlines() if ln.startswith(("budget:", "decode stacks built"))]
        flow.say(f"phase {fam}: {counts['records']} records ({counts['ok']} ok, {counts['oom']} oom, "
                 f"{counts['error']} error), backends {', '.join(counts['backends']) or '-'}"
                 + (f"; {'; '.join(skipped)}" if skipped else ""))
        why = ("timed out (exit 124): killed at its share + grace" if rc == 124 else
               f"exit {rc}: {text.strip().splitlines()[-1] if text.strip() else ''}" if rc else
               "no ok record: the family is missing" if counts["ok"] == 0 else "")
        ok_all &= flow.step(f"phase {fam}", not why, time.perf_counter() - t, rc=rc, why=why)
    if not ok_all:
        return flow.close(False)

    # 4. fit with guardrails, calibration, check
    t = time.perf_counter()
    ok = _fit(flow, records_root, out, dry_run)
    flow.step("fit", ok, time.perf_counter() - t, **flow.summary.get("fit", {}))
    return flow.close(ok)


def _fit(flow: Flow, records_root: Path, out: Path, dry_run: bool) -> bool:
    from planner.errors import PlannerError
    from planner.hardware import load_hardware, parse_hardware, spec_paths

    from .calibrate import calibration_dict, fit, load_calibration, report_text, tolerance_from, write_calibration
    from .check import check_device
    from .localspec import spec_from_records
    from .records import read_dir

    (dev_dir,) = [p for p in records_root.iterdir() if p.is_dir()]
    records = read_dir(dev_dir)
    dev_id = dev_dir.name
    if dev_id in spec_paths():
        spec, spec_from = load_hardware(dev_id), f"catalog spec {dev_id}"
    else:
        measured = spec_from_records(records, dev_id)
        spec, spec_from = parse_hardware(measured, f"measured spec {dev_id}"), "its measured ceilings"
        flow.summary["measured_spec"] = measured
    flow.say(f"fit: {len(records)} records of {dev_id} against {spec_from}")
    try:
        result = fit(records, spec)
    except PlannerError as exc:
        refusal = str(exc).removeprefix("fit: ")
        result = None
    else:
        refusal = "; ".join(result["refusals"])
        flow.lines += report_text(result).splitlines()
        ha = result["report"]["after"]["held_out"]["all"]
        flow.summary["fit"] = {"held_out_median_pct": ha.get("median_pct"), "held_out_p90_pct": ha.get("p90_pct"),
                               "noise_floor": result["report"]["noise_floor"]["all"], "pinned": result["pinned"]}
    if refusal:
        flow.summary["fit"] = {**flow.summary.get("fit", {}), "refused": refusal}
        flow.say(f"fit: refused: {refusal}")
        if dry_run:
            flow.say("fit: dry run: a tiny sweep must be refused -- the guardrails ran; nothing written")
        return dry_run
    files = sorted(str(p.relative_to(out)) for p in dev_dir.glob("*.jsonl"))
    tol = tolerance_from(result)
    cal_path = out / "calibration" / f"{spec.id}.yaml"
    write_calibration(cal_path, calibration_dict(result, spec, files, tol))
    res = check_device(dev_dir, spec, load_calibration(cal_path), str(cal_path))
    flow.say(res.line())
    flow.say(f"fit: wrote {cal_path} (held-out median {flow.summary['fit']['held_out_median_pct']} %, "
             f"p90 {flow.summary['fit']['held_out_p90_pct']} %)")
    flow.summary["fit"]["calibration"] = str(cal_path)
    return res.ok
