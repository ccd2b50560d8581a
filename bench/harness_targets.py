"""The validation harness's targets (issue 3), measured side by side. Not a test: prints, asserts nothing.

  1. calibrated held-out prediction error (median / p90 |pred / meas - 1|), per kernel, from the committed
     records and a refit (validate/calibrate.py) -- target median <= 5 %, p90 <= 10 %
  2. paged decode attention: achieved GB/s (exact bytes / median time, LLC flushed) as a % of the measured
     STREAM triad, vs context length -- target >= 80 % at long contexts
  3. int4 / int8 weight-only decode matmul at M = 1: speed-up over the bf16 dense baseline, one run
  4. the CPU sweep's duration (the run file's first and last record times)

Run from the repo root: ``python bench/harness_targets.py [--device-id ID] [--measure]``. Without --measure,
items 2 and 3 come from the committed records; with it they are measured now on this machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.hardware import load_hardware  # noqa: E402
from validate.calibrate import fit  # noqa: E402
from validate.records import RECORDS_DIR, read_dir, read_records  # noqa: E402


def _device(arg: str | None) -> str:
    if arg:
        return arg
    devs = sorted(p.name for p in RECORDS_DIR.iterdir() if p.is_dir())
    return next(d for d in devs if d.startswith("cpu-"))


def held_out_errors(records, spec) -> None:
    res = fit(records, spec)
    rep = res["report"]
    print("1. calibrated prediction error, |pred/meas - 1| %  (before = kind defaults; target median <= 5, p90 <= 10)")
    print(f"   {'group':<24} {'split':<9} {'n':>4}  {'before med':>10} {'p90':>6}  {'after med':>9} {'p90':>6}")
    for key in rep["after"]["held_out"]:
        if not (key == "all" or key.startswith("kernel:")):
            continue
        for split in ("held_out", "fit"):
            a, b = rep["after"][split].get(key, {"n": 0}), rep["before"][split].get(key, {"n": 0})
            if a["n"]:
                print(f"   {key:<24} {split:<9} {a['n']:>4}  {b['median_pct']:>10.1f} {b['p90_pct']:>6.1f}  "
                      f"{a['median_pct']:>9.1f} {a['p90_pct']:>6.1f}")


def attention_vs_stream(records) -> None:
    triad = max((r for r in records if r.kernel == "stream" and r.params.op == "triad" and r.status == "ok"),
                key=lambda r: r.created)
    print(f"\n2. paged decode attention vs STREAM triad {triad.achieved_gbs:.1f} GB/s (records; LLC flushed)")
    print(f"   {'KV':<5} {'batch':>5} {'context':>8} {'ms':>9} {'GB/s':>7} {'% STREAM':>9}")
    rows = [r for r in records if r.kernel == "paged_attention" and r.status == "ok"
            and len(set(r.params.context_lens)) == 1]
    rows.sort(key=lambda r: (r.params.kv_dtype, r.params.batch, r.params.context_lens[0]))
    below = {}
    for r in rows:
        pct = 100 * r.achieved_gbs / triad.achieved_gbs
        print(f"   {r.params.kv_dtype:<5} {r.params.batch:>5} {r.params.context_lens[0]:>8} "
              f"{r.measured.median_ms:>9.3f} {r.achieved_gbs:>7.2f} {pct:>8.1f}%")
        if pct < 80:
            below.setdefault(r.params.kv_dtype, []).append(r.params.context_lens[0])
    for kv, ctxs in below.items():
        print(f"   {kv}: below 80 % of STREAM at every measured context up to {max(ctxs)}")


def matmul_speedups(records) -> None:
    print("\n3. weight-only decode matmul at M = 1: speed-up over bf16 dense (same run, LLC flushed)")
    mm = [r for r in records if r.kernel == "quant_matmul" and r.status == "ok" and r.params.m == 1]
    for (n, k) in sorted({(r.params.n, r.params.k) for r in mm}):
        base = [r for r in mm if (r.params.n, r.params.k) == (n, k) and r.params.weight_format == "bf16"]
        if not base:
            continue
        b = base[-1].measured.median_ms
        for r in mm:
            if (r.params.n, r.params.k) != (n, k) or r.params.weight_format == "bf16":
                continue
            g = f"-g{r.params.group_size}" if r.params.group_size else ""
            print(f"   {n}x{k} {r.params.weight_format + g:<10} {r.measured.median_ms:8.3f} ms vs bf16 {b:8.3f} ms:"
                  f" {b / r.measured.median_ms:5.2f}x  ({r.achieved_gbs:.1f} GB/s)")


def sweep_durations(dev: str) -> None:
    print("\n4. sweep durations (first to last record of each committed run)")
    for f in sorted((RECORDS_DIR / dev).glob("*.jsonl")):
        recs = read_records(f)
        t = [dt.datetime.fromisoformat(r.created) for r in recs]
        print(f"   {f.name}: {len(recs)} records, {(max(t) - min(t)).total_seconds():.0f} s "
              f"(load {recs[0].fingerprint.get('load_avg_1m')})")


def measure_now(dev: str) -> list:
    from validate.records import MatmulParams, PagedAttentionParams, StreamParams
    from validate.runner import run_sweep
    cases = [StreamParams(op="triad", array_bytes=256 * 2**20)]
    for kv in ("bf16", "fp32"):
        for c in (512, 2048, 8192, 32768):
            b = max(1, 16384 // c)
            cases.append(PagedAttentionParams(batch=b, context_lens=[c] * b, num_q_heads=32, num_kv_heads=8,
                                              head_dim=128, block_size=16, kv_dtype=kv, q_dtype="bf16",
                                              backend="auto"))
    for f, g in (("bf16", None), ("int8", None), ("int4", 32), ("int4", 128)):
        cases.append(MatmulParams(m=1, n=4096, k=4096, weight_format=f, act_dtype="bf16", group_size=g))
    with tempfile.TemporaryDirectory() as d:
        return read_records(run_sweep("cpu", out_dir=d, device_id=dev, cases=cases))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device-id", default=None)
    ap.add_argument("--measure", action="store_true", help="measure attention and M=1 matmuls now")
    args = ap.parse_args()
    dev = _device(args.device_id)
    records = read_dir(RECORDS_DIR / dev)
    print(f"device {dev}: {len(records)} committed records")
    held_out_errors(records, load_hardware(dev))
    now = measure_now(dev) if args.measure else records
    attention_vs_stream(now)
    matmul_speedups(now)
    sweep_durations(dev)


if __name__ == "__main__":
    main()
