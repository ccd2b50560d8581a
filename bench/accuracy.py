"""Accuracy benchmark against published measurements: a thin wrapper over `planner accuracy`.

  python bench/accuracy.py [--fit] [--out-dir reports]

Prints the held-out checks and writes reports/accuracy.md, reports/accuracy.png, reports/accuracy_rows.csv
(with --fit, also hardware_specs/runtimes/*.yaml).
"""

import sys

from planner.cli import main

if __name__ == "__main__":
    sys.exit(main(["accuracy", *sys.argv[1:]]))
