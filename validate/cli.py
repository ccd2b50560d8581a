"""`planner validate run|fit|check|spec|device`: parse, call the harness, print. Nothing is computed here.

No torch import at module import time: `planner estimate` must stay fast; the handlers import lazily.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def _records_dir(args_records, device_id):
    from .records import RECORDS_DIR
    from planner.errors import PlannerError

    if args_records:
        return Path(args_records)
    if device_id:
        return RECORDS_DIR / device_id
    devices = sorted(p.name for p in RECORDS_DIR.iterdir() if p.is_dir()) if RECORDS_DIR.is_dir() else []
    if len(devices) == 1:
        return RECORDS_DIR / devices[0]
    raise PlannerError(f"--device-id: give one of the measured devices: {', '.join(devices) or 'none measured yet'}")


DEVICE_RE = r"cpu|cuda(:\d+)?"


def _check_args(args) -> None:
    """--device, --device-id, --preset and --out before any work (and before torch): one line each."""
    import re

    from planner.errors import PlannerError

    dev = getattr(args, "device", None)
    if dev is not None and not re.fullmatch(DEVICE_RE, dev):
        raise PlannerError(f"--device: unknown device {dev!r}; allowed: cpu, cuda, cuda:N")
    from planner.hardware import ID_PATTERN

    did = getattr(args, "device_id", None)
    if did is not None and not re.fullmatch(ID_PATTERN, did):
        raise PlannerError(f"--device-id: {did!r} is not an id; allowed: lower-case letters, digits, '.', '_' and "
                           "'-', starting with a letter or digit (e.g. h200-sxm)")
    name = getattr(args, "preset", None)
    if name is not None:
        from .runner import PRESETS
        if name not in PRESETS:
            raise PlannerError(f"--preset: unknown preset {name!r}; allowed: {', '.join(PRESETS)}")
    out = getattr(args, "out", None)
    if out is not None and Path(out).is_file() and getattr(args, "validate_command", "") in ("run", "device"):
        raise PlannerError(f"--out: {out} is a file; give a folder (it is created if missing)")


def cmd_run(args) -> int:
    _check_args(args)
    import os
    # pinned CPU threads: OpenMP reads these when torch starts its pool (torch is imported below, not before)
    os.environ.setdefault("OMP_PROC_BIND", "close")
    os.environ.setdefault("OMP_PLACES", "cores")
    from .records import read_records
    from .runner import run_sweep

    name = args.preset or ("cpu-full" if args.full else ("cuda" if (args.device or "").startswith("cuda") else "cpu"))
    t0 = time.perf_counter()
    path = run_sweep(name, device=args.device, out_dir=args.out, device_id=args.device_id, flush=not args.no_flush,
                     progress=False if args.quiet else None, limit=args.limit, family=args.family,
                     time_budget_s=args.time_budget_s)
    dt = time.perf_counter() - t0
    recs = read_records(path)
    counts = {s: sum(r.status == s for r in recs) for s in ("ok", "oom", "error")}
    print(f"{len(recs)} records ({counts['ok']} ok, {counts['oom']} oom, {counts['error']} error) in {dt:.1f} s "
          f"-> {path}")
    for r in recs:
        if r.status != "ok":
            print(f"  {r.status}: {r.kernel} {r.message}", file=sys.stderr)
    return 0


def cmd_fit(args) -> int:
    from planner.efficiency import calibration_path
    from planner.hardware import load_hardware

    from .calibrate import calibration_dict, fit, guard, report_text, tolerance_from, write_calibration
    from .records import read_dir

    path = _records_dir(args.records, args.device_id)
    records = read_dir(path)
    dev_id = args.device_id or (records[0].device_id if records else path.name)
    spec = load_hardware(args.spec or dev_id)
    result = fit(records, spec, args.unit)
    print(report_text(result))
    if args.dry_run:
        for why in result["refusals"]:
            print(f"note: would refuse to write: {why}", file=sys.stderr)
        return 0
    guard(result)
    files = sorted({str(p.relative_to(Path.cwd())) if p.is_relative_to(Path.cwd()) else str(p)
                    for p in ([path] if path.is_file() else path.glob("*.jsonl"))})
    tol = tolerance_from(result, margin=args.margin)
    out = Path(args.out) if args.out else calibration_path(spec.id)
    write_calibration(out, calibration_dict(result, spec, files, tol))
    print(f"tolerance: median {tol.median_pct:g} %, p90 {tol.p90_pct:g} % ({tol.basis})")
    print(f"wrote {out}")
    return 0


def cmd_check(args) -> int:
    from .check import run_check

    results = run_check(args.records, args.calibration_dir, args.calibration, args.device_id, args.spec)
    for r in results:
        print(r.line())
    return 0 if all(r.ok for r in results) else 1


def cmd_spec(args) -> int:
    _check_args(args)
    from planner.io import atomic_write_yaml

    from .localspec import spec_from_records
    from .records import read_dir, read_records

    if args.records:
        records = read_dir(args.records)
    else:  # measure the ceilings now (STREAM + GEMM peaks only)
        from .runner import preset, run_sweep
        name = "cuda" if (args.device or "").startswith("cuda") else "cpu"
        ceil = [c for c in preset(name).cases if c.kernel in ("stream", "gemm_peak")]
        path = run_sweep(name, device=args.device, out_dir=args.records_out, device_id=args.device_id,
                         progress=False if args.quiet else None, cases=ceil)
        records = read_records(path)
        print(f"measured ceilings -> {path}", file=sys.stderr)
    spec = spec_from_records(records, args.device_id)
    out = args.out or f"hardware_specs/{spec['id']}.yaml"
    atomic_write_yaml(out, spec)
    u = spec["units"][0]
    print(f"{spec['id']}: bandwidth {spec['memory']['bandwidth_gbs']} GB/s (STREAM triad), peaks "
          f"{', '.join(f'{k} {v * 1e3:.0f} GFLOP/s' for k, v in u['peak_tflops'].items())} -> {out}")
    return 0


def positive_float(text: str) -> float:
    import argparse
    import math
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not math.isfinite(x) or x <= 0 or x > 86400:
        raise argparse.ArgumentTypeError(f"{text} must be > 0 and <= 86400 (seconds)")
    return x


def margin_float(text: str) -> float:
    import argparse
    import math
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [1, 10], got {text!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"must be a number in [1, 10], got {text}")
    if not 1.0 <= x <= 10.0:
        raise argparse.ArgumentTypeError(f"must be a number in [1, 10], got {text}")
    return x


def cmd_device(args) -> int:
    _check_args(args)
    from planner.errors import PlannerError

    import re
    if args.budget_s > 3600:
        raise PlannerError("--budget-s: at most 3600 s; allowed: a number of seconds in (0, 3600]")
    if not args.dry_run and not re.fullmatch(r"cuda(:\d+)?", args.device):
        raise PlannerError(f"--device: '{args.device}' is not a CUDA device; allowed: cuda, cuda:N "
                           "(for the CPU: --dry-run)")
    from .device import run_flow
    return run_flow(args.out, device=args.device, budget_s=args.budget_s, dry_run=args.dry_run,
                    preset=args.preset, device_id=args.device_id)


def register(sub) -> None:
    from planner.cli import positive_int

    p = sub.add_parser("validate", help="measure kernels, fit efficiency factors, check predictions against records")
    vs = p.add_subparsers(dest="validate_command", required=True, parser_class=type(p))

    r = vs.add_parser("run", help="run a measuring sweep; records -> validate/records/<device-id>/<run>.jsonl")
    r.add_argument("--preset", default=None, help="cpu (default, < 3 min on 2 cores), cpu-full, cuda, tiny")
    r.add_argument("--full", action="store_true", help="the larger user grid (preset cpu-full)")
    r.add_argument("--device", default=None, help="cpu or cuda (default: the preset's)")
    r.add_argument("--out", default=None, help="records root folder (default validate/records)")
    r.add_argument("--device-id", default=None, help="hardware id for the records (default: from the fingerprint)")
    r.add_argument("--no-flush", action="store_true", help="time hot (do not flush the LLC/L2 between reps)")
    r.add_argument("--limit", type=positive_int, default=None, help="only the first N kernel cases (quick look)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--family", default=None, choices=("ceilings", "quant_matmul", "paged_attention", "decode_step"),
                   help="only one kernel family of the preset")
    r.add_argument("--time-budget-s", type=positive_float, default=None,
                   help="start no case after this many seconds (records so far are kept)")
    r.set_defaults(func=cmd_run)

    f = vs.add_parser("fit", help="fit the device's efficiency factors; writes hardware_specs/calibration/<id>.yaml")
    f.add_argument("--device-id", default=None, help="measured device (folder under validate/records)")
    f.add_argument("--records", default=None, help="a records folder or .jsonl file (default validate/records/<id>)")
    f.add_argument("--spec", default=None, help="hardware spec id or YAML (default: the device id)")
    f.add_argument("--unit", default=None, help="compute unit of the spec (default: its first)")
    f.add_argument("--out", default=None, help="calibration YAML (default hardware_specs/calibration/<id>.yaml)")
    f.add_argument("--margin", type=margin_float, default=1.5,
                   help="tolerance = measured error x margin (default 1.5; 1 to 10)")
    f.add_argument("--dry-run", action="store_true", help="print the report, write nothing")
    f.set_defaults(func=cmd_fit)

    c = vs.add_parser("check", help="recompute every committed record's prediction; exit 1 beyond tolerance")
    c.add_argument("--records", default=None, help="records root (default validate/records)")
    c.add_argument("--calibration-dir", default=None, help="folder of <device-id>.yaml (default hardware_specs/calibration)")
    c.add_argument("--calibration", default=None, help="one calibration file (with --device-id)")
    c.add_argument("--device-id", default=None, help="check only this device")
    c.add_argument("--spec", default=None, help="hardware spec YAML (default hardware_specs/<device-id>.yaml)")
    c.set_defaults(func=cmd_check)

    d = vs.add_parser("device", help="the GPU device flow in one lease: preflight, correctness gate, budgeted "
                      "phases, guarded fit -> --out (validate/device.py)")
    d.add_argument("--out", required=True, help="folder for records, calibration, summary.json, flow.log")
    d.add_argument("--device", default="cuda", help="cuda (default)")
    d.add_argument("--budget-s", type=positive_float, default=360.0,
                   help="seconds for the gate and the kernel families together (default 360)")
    d.add_argument("--dry-run", action="store_true", help="the same steps on the CPU, tiny preset (CI)")
    d.add_argument("--preset", default=None, help="sweep preset (default cuda; tiny with --dry-run)")
    d.add_argument("--device-id", default=None, help="records' device id (default: from the fingerprint)")
    d.set_defaults(func=cmd_device)

    s = vs.add_parser("spec", help="measured ceilings -> a hardware spec YAML for this machine")
    s.add_argument("--out", default=None, help="spec YAML to write (default hardware_specs/<device-id>.yaml)")
    s.add_argument("--records", default=None, help="use these records' ceilings instead of measuring now")
    s.add_argument("--records-out", default=None, help="where newly measured ceiling records go")
    s.add_argument("--device", default=None, help="cpu or cuda (default cpu)")
    s.add_argument("--device-id", default=None, help="spec id (default: from the fingerprint)")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_spec)
