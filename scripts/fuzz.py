"""The large fuzz campaign of the CLI and the Python API (the CI test runs a smaller one under hypothesis).

    python scripts/fuzz.py [--cli 10000] [--api 2000] [--seed N] [--show 20]

Prints, per command, how many runs were ok, clean errors and defects, then the first defects with their command
lines. Exit status 1 if any defect was found.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzzing import campaign  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", type=int, default=10000)
    ap.add_argument("--api", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--show", type=int, default=20)
    a = ap.parse_args()
    t0 = time.perf_counter()
    res = campaign(a.cli, a.api, a.seed)
    dt = time.perf_counter() - t0
    table = collections.defaultdict(collections.Counter)
    for o in res:
        table[o.command][o.kind] += 1
    print(f"seed {a.seed}: {a.cli} CLI runs and {a.api} API calls in {dt:.0f} s\n")
    print(f"{'command':<12} {'runs':>6} {'ok':>6} {'clean error':>12} {'defect':>7}")
    for cmd in sorted(table):
        c = table[cmd]
        print(f"{cmd:<12} {sum(c.values()):>6} {c['ok']:>6} {c['clean']:>12} {c['defect']:>7}")
    tot = collections.Counter(o.kind for o in res)
    print(f"{'total':<12} {len(res):>6} {tot['ok']:>6} {tot['clean']:>12} {tot['defect']:>7}")
    bad = [o for o in res if o.kind == "defect"]
    causes = collections.Counter(o.why.split(":")[0][:80] for o in bad)
    if bad:
        print("\ndefects by cause:")
        for why, n in causes.most_common():
            print(f"  {n:5d}  {why}")
        print("\nfirst defects:")
        for o in bad[: a.show]:
            print(f"- {o.why}\n    {o.argv}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
