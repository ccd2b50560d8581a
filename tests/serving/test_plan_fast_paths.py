"""Property tests: the capacity plan's fast paths against their reference paths, on random configurations.

Fast path                                           reference                                      tolerance
plan() reusing a simulation (and its requests)      plan() with _Planner.reuse_simulations False:  identical
once per plan                                       every trial, range and recommendation          (to_dict,
                                                    simulated afresh                               configs)
the screen's prefill of the p95 and the mean        two scalar tp_step_time_s calls                rel 1e-12 (*)
prompt in one vectorized tp_step_time_s call
simulator.percentiles(x) (summaries' p50-p99)       np.percentile(x, PERCENTILES)                  bit for bit

(*) numpy's vectorized power (its SIMD loops) and Python's float ** (libm pow) differ in the last bit for ~5% of
inputs, and the GEMM ridge roll-off raises times to p = 2.5 (planner.regimes.ridge_rolloff_time): e.g. Mixtral-8x7B
bf16 on an L4 at a 20,165.5-token mean prompt, 8.929583429947726 vs 8.92958342994773 s. The plan's fast and
reference paths both take the vectorized screen, so the plan itself stays identical (the first test).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from planner.architecture import load_model
from planner.errors import PlannerError
from planner.hardware import load_hardware
from planner.serving import plan
from planner.serving.parallelism import check_tp, node_for, tp_step_time_s
from planner.serving.plan import _format_name, _Planner

MODELS = ("llama-3.1-8b", "gemma-2-9b", "mixtral-8x7b", "qwen3-30b-a3b")
DEVICES = ("h100-sxm", "a100-40gb-sxm", "l4", "rtx-4090", "mi300x", "apple-m4-max", "tpu-v5e")
FORMATS = ("bf16", "fp8", "int8", "int4-g128")


def _plan_dict(monkeypatch, reuse: bool, **kw) -> tuple[dict, list]:
    monkeypatch.setattr(_Planner, "reuse_simulations", reuse)
    res = plan(**kw)
    d = res.to_dict()
    d.pop("elapsed_s")
    # the note's count of engine runs is what the fast path changes: compare the rest of it
    d["notes"] = [n.split(" (")[0] if "engine runs" in n else n for n in d["notes"]]
    return d, res.configs.to_dict(orient="records")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(MODELS), scenario=st.sampled_from(["chat", "batch", "long-doc", "on-device"]),
       hw=st.lists(st.sampled_from(DEVICES), min_size=1, max_size=3, unique=True),
       qps_scale=st.sampled_from([0.5, 1.0, 3.0]), n=st.integers(60, 240), seed=st.integers(0, 5))
def test_plan_reusing_simulations_equals_simulating_every_trial(monkeypatch, model, scenario, hw, qps_scale, n,
                                                                seed):
    from planner.serving.scenarios import get_scenario

    qps = get_scenario(scenario).workload.qps * qps_scale
    kw = dict(model=model, scenario=scenario, hardware=hw, qps=qps, n_requests=n, seed=seed)
    fast, fast_cfg = _plan_dict(monkeypatch, True, **kw)
    ref, ref_cfg = _plan_dict(monkeypatch, False, **kw)
    assert fast == ref
    assert fast_cfg == ref_cfg or str(fast_cfg) == str(ref_cfg)   # NaN != NaN: compare the text then


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), hw=st.sampled_from(DEVICES), fmt=st.sampled_from(FORMATS),
       tp=st.sampled_from([1, 2, 4, 8]), p95=st.integers(1, 40_000), mean=st.floats(1, 30_000))
def test_vectorized_prefill_screen_equals_scalar_calls(model, hw, fmt, tp, p95, mean):
    from planner.serving.scenarios import get_scenario
    from planner.serving.plan import _workload_stats

    m, spec = load_model(model), load_hardware(hw)
    try:
        check_tp(m, tp)
        f, unit = _format_name(spec, fmt)
    except PlannerError:
        return
    if tp > node_for(spec).gpus_per_node:
        return
    sc = get_scenario("chat")
    P = _Planner(m, sc, _workload_stats(sc, 0), 100, 0, "auto", "fp16")
    try:
        dev = P._dev(spec, f, unit)
    except PlannerError:
        return
    link = node_for(spec).intra_link() if tp > 1 else None
    vec = tp_step_time_s(m, f, "fp16", dev, "prefill", 1, np.array([p95, mean]), 0, tp, link)
    one = [float(tp_step_time_s(m, f, "fp16", dev, "prefill", 1, p, 0, tp, link)) for p in (p95, mean)]
    assert [float(t) for t in vec] == pytest.approx(one, rel=1e-12)


def test_reference_path_simulates_more():
    """The switch the property test flips does change the work: the fast path runs fewer simulations."""
    import re
    import sys

    mod = sys.modules["planner.serving.plan"]
    counts = {}
    for reuse in (True, False):
        _Planner.reuse_simulations = reuse
        try:
            res = plan("llama-3.1-8b", "chat", hardware=["l4"], n_requests=100)
        finally:
            _Planner.reuse_simulations = True
        note = next(n for n in res.notes if "engine runs" in n)
        counts[reuse] = int(re.search(r"\((\d+) engine runs\)", note).group(1))
    assert mod._Planner.reuse_simulations is True
    assert counts[True] < counts[False]


@settings(max_examples=300, deadline=None)
@given(x=st.lists(st.floats(-1e12, 1e12, allow_nan=False), min_size=1, max_size=400),
       dup=st.integers(0, 3), scale=st.sampled_from([1.0, 1e3, 1e-3, 3.7]))
def test_percentiles_equal_numpy(x, dup, scale):
    from planner.serving.simulator import PERCENTILES, percentiles

    a = np.repeat(np.asarray(x, dtype=np.float64) * scale, dup + 1)   # ties, as integer-valued latencies give
    assert percentiles(a) == [float(v) for v in np.percentile(a, PERCENTILES)]
