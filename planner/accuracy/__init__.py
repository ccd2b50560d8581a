"""Accuracy against published measurements (issues 6, 11): map data/measured_public.csv and
data/measured_serving.csv rows to planner workloads, fit engine profiles (hardware_specs/runtimes/), report
leave-one-source-out errors, ranges and coverage per regime. Run `planner accuracy`.

Heavy imports (pandas) happen inside the functions; importing this package is cheap.
"""

__all__ = ["run"]


def run(*args, **kwargs):
    from .benchmark import run as _run
    return _run(*args, **kwargs)
