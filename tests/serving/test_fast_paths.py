"""Property tests: the simulator's fast paths against their reference definitions, on random configurations.

Fast path                                   reference (its definition)                       tolerance
StepModel.decode_run(b, C)(k)               sum of k single decode steps, decode_time        rel 1e-9 (2e-3 on
                                            (b, C + b j), j = 0..k-1                         sliding windows: the
                                                                                             trapezoid across the bend)
decode_run(b, C)(k) for several k           per op, _sum_max_linear(x0, dx, y0, dy, k) on    bit for bit
                                            the op's compute and memory times at step 0 and
                                            their slopes, plus k x the step's fixed time
steps_to_reach(run_time, gap, kmax)         the smallest k in 1..kmax with run_time(k) >=    exact (same integer)
                                            gap, by scanning k = 1, 2, ...
blocks_for_run(cnt, bs, D, b, free, kmax)   step by step: step j gives one block to each     exact (same integers)
                                            sequence at residue (-(D + j)) % bs; stop at the
                                            first step that does not fit
StepModel.prefill_time([p]) (memoized)      step_time with prefill_features(prompts, zeros)  bit for bit
fresh_prefill_features(prompts)             prefill_features(prompts, [0] * n)               bit for bit
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from planner.architecture import load_model
from planner.hardware import load_hardware
from planner.quantization import weight_format
from planner.serving.engine import device_for
from planner.serving.simulator import blocks_for_run, steps_to_reach
from planner.serving.step_model import StepModel, _sum_max_linear

MODELS = ("llama-3.1-8b", "gemma-2-9b", "mixtral-8x7b", "falcon-h1-7b", "qwen3-8b")
DEVICES = (("h100-sxm", "fp8"), ("a100-40gb-sxm", "fp16"), ("rtx-4090", "int4-g128"), ("apple-m4-max", "fp16"))
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.lru_cache(maxsize=None)
def _sm(model: str, dev_i: int, tp: int) -> StepModel:
    m = load_model(model)
    hid, fname = DEVICES[dev_i]
    spec = load_hardware(hid)
    fmt = weight_format(fname)
    _, dev, _ = device_for(m, spec, fmt)
    link = None
    if tp > 1:
        from planner.serving.parallelism import node_for

        link = node_for(spec).intra_link()
    return StepModel.build(m, fmt, "fp16", dev, tp, 1, link, None, True, 4096)


configs = st.tuples(st.sampled_from(MODELS), st.integers(0, len(DEVICES) - 1), st.sampled_from([1, 2]))


def _model(cfg) -> StepModel:
    model, dev_i, tp = cfg
    if tp > 1 and DEVICES[dev_i][0] == "apple-m4-max":  # one device per node: no TP group
        tp = 1
    return _sm(model, dev_i, tp)


@SETTINGS
@given(cfg=configs, b=st.integers(1, 300), ctx=st.integers(0, 40_000), k=st.integers(1, 400))
def test_decode_run_is_the_sum_of_single_steps(cfg, b, ctx, k):
    sm = _model(cfg)
    C = float(b * ctx)
    one_by_one = sum(sm.decode_time(b, C + b * j) for j in range(k))
    tol = 1e-9 if sm.model.attention_window is None else 2e-3
    run_time = sm.decode_run(b, C)
    assert run_time(k) == pytest.approx(one_by_one, rel=tol)
    # the closure evaluated at several run lengths (its per-batch terms remembered) equals the closed form op by
    # op, bit for bit
    for kk in (1, k // 2, k, k + 7):
        assert run_time(kk) == _reference_run_time(sm, b, C, kk)
        assert sm.decode_run_time(b, C, kk) == run_time(kk)


def _reference_run_time(sm: StepModel, b: int, C: float, k: int) -> float:
    """decode_run_time as the sum over ops of _sum_max_linear (the form before the fast path)."""
    if k <= 0:
        return 0.0
    t = k * (sm.step_overhead_s + sm._tok(b) + sm._lm(b))
    for idx, g in enumerate(sm.groups):
        if g.window is not None:
            t += sm._window_run(idx, b, C, k)
            continue
        for count, f0, f1, f2, b0, b1, b2 in g.ops:
            t += count * (_sum_max_linear(f0 * b + f1 * C + f2 * (C + b), (f1 + f2) * b,
                                          b0 * b + b1 * C + b2 * (C + b), (b1 + b2) * b, k) + k * sm.kernel_overhead_s)
    return t


@SETTINGS
@given(cfg=configs, b=st.integers(1, 256), ctx=st.integers(0, 20_000), kmax=st.integers(1, 3000),
       frac=st.floats(0.0, 1.2))
def test_steps_to_reach_is_the_smallest_k(cfg, b, ctx, kmax, frac):
    sm = _model(cfg)
    run_time = sm.decode_run(b, float(b * ctx))
    gap = max(frac * run_time(kmax), 1e-12)
    k, seen = steps_to_reach(run_time, gap, kmax)
    ref = next((j for j in range(1, kmax + 1) if run_time(j) >= gap), kmax)
    assert k == ref
    assert all(v == run_time(j) for j, v in seen.items())   # the times it hands back are the run's own


@settings(max_examples=300, deadline=None)
@given(bs=st.sampled_from([1, 2, 4, 16, 32]), data=st.data())
def test_blocks_for_run_matches_step_by_step(bs, data):
    cnt = data.draw(st.lists(st.integers(0, 40), min_size=bs, max_size=bs))
    b = sum(cnt)
    D = data.draw(st.integers(0, 10_000))
    kmax = data.draw(st.integers(1, 2000))
    need0 = cnt[(-D) % bs]
    free = data.draw(st.integers(need0, need0 + 3 * b * (kmax // bs + 2) + 5))  # step 0 fits (after make_room)
    k, f, taken = 0, free, 0
    while k < kmax and cnt[(-(D + k)) % bs] <= f:
        f -= cnt[(-(D + k)) % bs]
        taken += cnt[(-(D + k)) % bs]
        k += 1
    if b == 0:
        k, taken = kmax, 0
    assert blocks_for_run(cnt, bs, D, b, free, kmax) == (k, taken)


@SETTINGS
@given(cfg=configs, prompts=st.lists(st.integers(1, 9000), min_size=1, max_size=6))
def test_whole_prompt_prefill_fast_path(cfg, prompts):
    sm = _model(cfg)
    zeros = [0] * len(prompts)
    assert sm.fresh_prefill_features(prompts) == sm.prefill_features(prompts, zeros)
    ref = sm.step_time(sum(prompts), len(prompts), None, sm.prefill_features(prompts, zeros))
    assert sm.prefill_time(prompts) == ref
    assert sm.prefill_time(prompts) == ref   # a second call (memoized for one prompt) returns the same value
