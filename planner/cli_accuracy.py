"""`planner accuracy`: the accuracy benchmark against published measurements (planner/accuracy/)."""

from __future__ import annotations

import sys

from .errors import PlannerError


def register(sub) -> None:
    p = sub.add_parser("accuracy", help="accuracy against published measurements: report, chart, runtime profiles")
    p.add_argument("--out-dir", default="reports", help="where accuracy.md, accuracy.png, accuracy_rows.csv go")
    p.add_argument("--fit", action="store_true",
                   help="refit the engine profiles first and write hardware_specs/runtimes/*.yaml")
    p.add_argument("--fit-kernels", action="store_true",
                   help="refit the GEMM regime constants (hardware_specs/defaults/regimes.yaml) to aiconfigurator's "
                        "measured kernel tables (optional extra: pip install 'llm-planner[kernels]') and stop")
    p.add_argument("--kernels-root", default=None,
                   help="with --fit-kernels: an unpacked aiconfigurator_core folder instead of the installed package")
    p.add_argument("--no-png", action="store_true", help="skip the chart (needs altair + vl-convert-python)")
    p.add_argument("--data", action="append", default=None, metavar="CSV",
                   help="check the committed profiles against your own measurements in the schema of "
                        "data/measured_public.csv (repeatable): writes accuracy_data.md, accuracy_data_rows.csv and "
                        "accuracy_data.png to --out-dir, no refit")
    p.set_defaults(func=cmd_accuracy)


def cmd_accuracy(args) -> int:
    import time

    from .accuracy.benchmark import run

    t0 = time.perf_counter()
    if args.data:
        if args.fit or args.fit_kernels:
            raise PlannerError("--data checks the committed profiles; run --fit or --fit-kernels on their own")
        from .accuracy import external
        try:
            out = external.check(args.data)
        except PlannerError as exc:  # the file's own message, named as the option it came from
            raise PlannerError(f"--data {exc}") from None
        files, notes = external.write(out, args.data, args.out_dir, png=not args.no_png)
        for line in external.summary_lines(out):
            print(line)
        for n in notes:
            print(f"note: {n}", file=sys.stderr)
        print(f"{len(out['results'])} rows mapped, {len(out['unmapped'])} unmapped (listed with reasons in the "
              f"report); wrote {', '.join(files)} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return 0
    if args.fit_kernels:
        from .accuracy.kernel_tables import write_regimes
        path, doc = write_regimes(args.kernels_root)
        fit = doc["provenance"]["fit"]
        for k, v in fit.items():
            if "median_abs_log_error" not in v:  # the engine libraries' per-table fits (provenance)
                continue
            print(f"{k:20s} median |log error| {v['median_abs_log_error']:.4f}  p90 {v['p90_abs_log_error']:.4f}  "
                  f"({v['rows']} kernels)")
        print(f"regime constants {doc['gemm']}; wrote {path} in {time.perf_counter() - t0:.1f} s")
        return 0
    out = run(args.out_dir, fit=args.fit, png=not args.no_png)
    for c in out["checks"]:
        print(f"{'ok ' if c['ok'] else 'MISS'} {c['check']:38s} {c['value']:6.1f}%  (target {c['limit']}, "
              f"{c['rows']} rows, leave-one-source-out)")
    for n in out["notes"]:
        print(f"note: {n}", file=sys.stderr)
    print(f"{len(out['results'])} rows mapped, {len(out['unmapped'])} unmapped (listed with reasons in the report); "
          f"wrote {', '.join(out['files'])} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0
