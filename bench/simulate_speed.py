"""How fast the continuous-batching simulator runs: requests simulated per second of wall time for 100,000 requests.

Configurations: llama-3.1-8b on h100-sxm (bf16) at 20 req/s of chat traffic (mean ~80 sequences in flight),
with and without chunked prefill, and the long-document trace on h200-sxm. Step tables are built once (reported
apart); each simulation runs 3 times and the median is printed. Figures, not assertions: run it by hand,
`python bench/simulate_speed.py [--requests N]`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from planner.architecture import load_model
from planner.hardware import load_hardware
from planner.serving import make_config, make_workload, run_engine, summarize
from planner.serving.engine import build_engine, engine_requests

ROOT = Path(__file__).resolve().parent.parent

CASES = [
    ("chat 20 req/s, h100-sxm bf16", "h100-sxm", False,
     dict(qps=20, prompt={"kind": "lognormal", "mean": 1000, "sigma": 0.8, "min": 16, "max": 8192},
          output={"kind": "lognormal", "mean": 250, "sigma": 0.7, "min": 8, "max": 2048})),
    ("chat 20 req/s, h100-sxm bf16, chunked prefill", "h100-sxm", True,
     dict(qps=20, prompt={"kind": "lognormal", "mean": 1000, "sigma": 0.8, "min": 16, "max": 8192},
          output={"kind": "lognormal", "mean": 250, "sigma": 0.7, "min": 8, "max": 2048})),
    ("long_doc.csv trace at 0.5 req/s, h200-sxm bf16", "h200-sxm", False,
     dict(qps=0.5, prompt={"kind": "fixed", "mean": 1}, output={"kind": "fixed", "mean": 1},
          trace=str(ROOT / "data" / "traces" / "long_doc.csv"))),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    m = load_model("llama-3.1-8b")
    print(f"{'case':48s} {'build ms':>9s} {'sim s':>7s} {'req/s simulated':>16s} {'steps':>9s}  TTFT p95 / TPOT p95")
    for label, hw, chunked, wl in CASES:
        w = make_workload(**wl)
        cfg = make_config(hardware=hw, weights="bf16", chunked_prefill=chunked)
        reqs = engine_requests(w, 1, args.requests, seed=0)
        t0 = time.perf_counter()
        eng = build_engine(m, load_hardware(hw), cfg, "auto", int(reqs.prompt.max()))
        build = time.perf_counter() - t0
        run_engine(eng.step_model, engine_requests(w, 1, 1000, seed=1), eng.limits)  # warm-up
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tr = run_engine(eng.step_model, reqs, eng.limits)
            times.append(time.perf_counter() - t0)
        dt = statistics.median(times)
        s = summarize(tr)
        print(f"{label:48s} {build * 1e3:9.1f} {dt:7.2f} {args.requests / dt:16,.0f} {s['steps']:9,d}  "
              f"{s['ttft_ms']['p95']:,.0f} ms / {s['tpot_ms']['p95']:.1f} ms")


if __name__ == "__main__":
    main()
