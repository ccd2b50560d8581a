"""Write the two example traces shipped in data/traces/ (fixed seed, reproducible byte for byte).

  chat.csv      8,000 requests, Poisson arrivals at 8 req/s; prompts lognormal (mean 1,000 tokens, sigma 0.8,
                16..8,192): a system prompt plus a conversation history; outputs lognormal (mean 250, sigma 0.7,
                8..2,048).
  long_doc.csv  2,000 requests, Poisson arrivals at 0.5 req/s; prompts uniform 16,000..32,000 tokens (long
                documents), outputs lognormal (mean 500, sigma 0.4, 64..2,048): summaries.
Columns: arrival_s (seconds from the start, 3 decimals), prompt_tokens, output_tokens.

Usage: python scripts/make_traces.py [--out data/traces]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from planner.io import atomic_write_text
from planner.serving.workload import TRACE_COLUMNS, LengthDist, Workload, generate

SEED = 20240501
TRACES = {
    "chat.csv": (8000, Workload(qps=8.0, prompt=LengthDist(kind="lognormal", mean=1000, sigma=0.8, min=16, max=8192),
                                output=LengthDist(kind="lognormal", mean=250, sigma=0.7, min=8, max=2048))),
    "long_doc.csv": (2000, Workload(qps=0.5, prompt=LengthDist(kind="uniform", min=16000, max=32000),
                                    output=LengthDist(kind="lognormal", mean=500, sigma=0.4, min=64, max=2048))),
}


def render(n: int, w: Workload, seed: int) -> str:
    r = generate(w, n, seed)
    lines = [",".join(TRACE_COLUMNS)]
    lines += [f"{a:.3f},{p},{o}" for a, p, o in zip(np.round(r.arrival_s, 3), r.prompt, r.output)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "data" / "traces"))
    args = ap.parse_args()
    for name, (n, w) in TRACES.items():
        path = Path(args.out) / name
        atomic_write_text(path, render(n, w, SEED))
        print(f"{path}: {n} requests, {path.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
