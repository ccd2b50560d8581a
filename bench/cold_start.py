"""Cold-start time of `planner estimate` (a fresh Python process each run), against `python -c pass` measured in
the same run so the interpreter's own start-up is visible. Prints medians over N runs.

    python bench/cold_start.py [N]
"""

import statistics
import subprocess
import sys
import time


def _time(cmd: list[str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def main(n: int = 15) -> None:
    base = _time([sys.executable, "-c", "pass"], n)
    est = _time([sys.executable, "-m", "planner", "estimate", "-m", "llama-2-7b", "-H", "a100-40gb-sxm"], n)
    js = _time([sys.executable, "-m", "planner", "estimate", "-m", "deepseek-v3", "-H", "h200-sxm", "--json"], n)
    med = statistics.median
    print(f"python -c pass                      median {med(base) * 1e3:7.1f} ms")
    print(f"planner estimate (table)            median {med(est) * 1e3:7.1f} ms  (p90 "
          f"{sorted(est)[int(0.9 * (n - 1))] * 1e3:.1f} ms)")
    print(f"planner estimate --json (MoE+MLA)   median {med(js) * 1e3:7.1f} ms")
    print(f"planner's own share of the cold start: {(med(est) - med(base)) * 1e3:.1f} ms "
          f"({med(est) / med(base):.1f}x a bare interpreter)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
