"""Workloads and traces: distribution means, prefix-stable sampling, the shipped traces, one-line errors."""

from pathlib import Path

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.serving import LengthDist, generate, load_trace, make_workload

ROOT = Path(__file__).resolve().parents[2]


def test_lognormal_mean_matches_request():
    # mu = ln(mean) - sigma^2/2 makes E[exp(N(mu, sigma^2))] = exp(mu + sigma^2/2) = mean; floor() lowers it by ~0.5
    d = LengthDist(kind="lognormal", mean=1000, sigma=0.8, min=1, max=1 << 24)  # the cap on tokens; no clipping here
    x = d.sample(400_000, np.random.default_rng(1))
    assert x.mean() == pytest.approx(999.5, rel=0.01)


def test_uniform_and_fixed():
    rng = np.random.default_rng(0)
    u = LengthDist(kind="uniform", min=16000, max=32000).sample(100_000, rng)
    assert u.min() >= 16000 and u.max() <= 32000
    assert u.mean() == pytest.approx(24000, rel=0.01)  # (16000 + 32000) / 2
    assert set(LengthDist(kind="fixed", mean=7).sample(5, rng)) == {7}


def test_poisson_rate_and_prefix_stability():
    w = make_workload(4.0, {"kind": "fixed", "mean": 100}, {"kind": "fixed", "mean": 10})
    big, small = generate(w, 50_000, seed=3), generate(w, 1000, seed=3)
    assert big.rate_per_s == pytest.approx(4.0, rel=0.02)  # mean gap 1/qps
    np.testing.assert_array_equal(big.arrival_s[:1000], small.arrival_s)  # screening runs see the same requests


@pytest.mark.parametrize("name, rows", [("chat.csv", 8000), ("long_doc.csv", 2000)])
def test_shipped_traces(name, rows):
    p = ROOT / "data" / "traces" / name
    assert p.stat().st_size < 1_000_000
    tr = load_trace(p)
    assert len(tr) == rows
    assert np.all(np.diff(tr.arrival_s) >= 0)
    if name == "long_doc.csv":
        assert tr.prompt.min() >= 16000 and tr.prompt.max() <= 32000


def test_trace_rescaled_to_qps():
    w = make_workload(16.0, {"kind": "fixed", "mean": 1}, {"kind": "fixed", "mean": 1},
                      trace=str(ROOT / "data" / "traces" / "chat.csv"))
    r = generate(w, 4000)
    assert r.rate_per_s == pytest.approx(16.0, rel=0.05)  # the trace's ~8 req/s scaled 2x


@pytest.mark.parametrize("text, msg", [
    ("a,b,c\n1,2,3\n", "header must be"),
    ("arrival_s,prompt_tokens,output_tokens\n1,0,3\n", "prompt_tokens >= 1"),
    ("arrival_s,prompt_tokens,output_tokens\n2,5,3\n1,5,3\n", "non-decreasing"),
    ("arrival_s,prompt_tokens,output_tokens\nx,5,3\n", "expected number"),
    ("arrival_s,prompt_tokens,output_tokens\n1,5,3,7\n", "expected 3 columns .* got 4"),
    ("arrival_s,prompt_tokens,output_tokens\n1,5\n", "expected 3 columns .* got 2"),
    ("arrival_s,prompt_tokens,output_tokens\n" + "9" * 5000 + ",5,x\n", r"got '9{77}\.\.\.'$"),
])
def test_bad_trace_one_line(tmp_path, text, msg):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(PlannerError, match=msg) as e:
        load_trace(p)
    assert "\n" not in str(e.value)


def test_bad_distribution():
    with pytest.raises(PlannerError, match="lognormal needs a mean"):
        make_workload(1, {"kind": "lognormal"}, {"kind": "fixed", "mean": 1})
