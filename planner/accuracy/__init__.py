"""Accuracy against published measurements (issue 6): map data/measured_public.csv rows to planner workloads,
fit runtime profiles (hardware_specs/runtimes/), report errors, intervals and coverage. Run `planner accuracy`.

Heavy imports (pandas) happen inside the functions; importing this package is cheap.
"""

__all__ = ["run"]


def run(*args, **kwargs):
    from .benchmark import run as _run
    return _run(*args, **kwargs)
