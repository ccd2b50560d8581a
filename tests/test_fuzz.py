"""Property-based fuzz of the CLI entry point and the public API (hypothesis drives tests/fuzzing.py's generators).

Every generated command line, over every subcommand and with hostile generated config.json and spec YAML files,
must be either ok (JSON when asked, finite, non-negative, no contradiction) or a clean error (exit 2, one `error:`
line). 2,300 examples in all, derandomized so CI is reproducible; `python scripts/fuzz.py` runs the large campaign
with a fresh seed.
"""

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.fuzzing import fuzz_api_once, fuzz_cli_once

FAST = ["estimate", "hardware", "models", "sweep", "batching", "speculative", "validate", "accuracy", "bogus"]
SLOW = ["simulate", "plan"]
_SETTINGS = dict(deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


ROOT = Path(__file__).resolve().parent.parent
GUARDED = ("hardware_specs", "validate/records", "planner/catalog", "data")


def _snapshot():
    return {str(p): p.stat().st_mtime_ns for d in GUARDED for p in (ROOT / d).rglob("*") if p.is_file()}


@pytest.fixture(autouse=True, scope="module")
def project_files_untouched():
    """No fuzzed command may write into the project's own data (a `validate fit` without --out once rewrote the
    committed calibration)."""
    before = _snapshot()
    yield
    assert _snapshot() == before


@pytest.fixture
def tmp_path(tmp_path):
    (tmp_path / "empty").mkdir()
    return tmp_path


def _check(o):
    assert o.kind in ("ok", "clean"), f"{o.why}\n  argv: {o.argv}"


@pytest.mark.parametrize("command", FAST)
def test_cli_fuzz_fast_commands(command, tmp_path):
    n = {"estimate": 900, "sweep": 150, "hardware": 100, "models": 100, "batching": 120, "speculative": 120,
         "validate": 40, "accuracy": 20, "bogus": 20}[command]

    @settings(max_examples=n, **_SETTINGS)
    @given(st.integers(0, 2**32 - 1))
    def run(seed):
        _check(fuzz_cli_once(random.Random(seed), tmp_path, command))

    run()


@pytest.mark.parametrize("command", SLOW)
def test_cli_fuzz_serving_commands(command, tmp_path):
    @settings(max_examples=60, **_SETTINGS)
    @given(st.integers(0, 2**32 - 1))
    def run(seed):
        _check(fuzz_cli_once(random.Random(seed), tmp_path, command))

    run()


def test_api_fuzz(tmp_path):
    @settings(max_examples=600, **_SETTINGS)
    @given(st.integers(0, 2**32 - 1))
    def run(seed):
        _check(fuzz_api_once(random.Random(seed), tmp_path))

    run()
