"""The replayed scalar path (planner.replay: the reference's float operations recorded once per model / format /
KV dtype / device model, replayed as straight-line code) against the reference on random configurations over the
whole catalog; the reports built without pydantic's validator against validation; `planner estimate` without numpy.

Tolerance: none. A replay performs the reference's IEEE double operations in the reference's order, so its floats
are the reference's bit for bit (compared with ==, and -0.0 vs 0.0 told apart), or it returns None (a branch the
recording did not take) and the caller runs the reference.
"""

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import estimate
from planner.architecture import list_model_ids, load_model
from planner.efficiency import resolve_efficiency
from planner.errors import PlannerError
from planner.hardware import list_hardware_ids, load_hardware
from planner.latency import point_latency
from planner.memory import DEFAULT_SETTINGS, ENGINES, EngineSettings, _plan_memory_fields
from planner.quantization import weight_format
from planner.replay import Replayed, Untraceable, as_float, traced
from planner.roofline import capable_units, device_model

FORMATS = ["fp16", "bf16", "int8", "w8a8-int8", "fp8", "int4-g128", "nvfp4", "mxfp4", "q4_0", "q4_k_m", "fp32"]
WORKLOAD = st.tuples(st.integers(1, 512), st.integers(1, 200_000), st.integers(1, 50_000))


def _same(a, b) -> bool:
    """Equal values of equal types, floats bit for bit (signed zeros apart, NaN equal to NaN)."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (a == b and math.copysign(1, a) == math.copysign(1, b)) or (a != a and b != b)
    return a == b


def _device(spec, fmt, eff_mode, data):
    units = capable_units(spec, fmt)
    if not units:
        return None
    u = data.draw(st.sampled_from(units))
    try:
        if eff_mode in ("llamacpp", "trtllm", "vllm", "hf-eager"):
            eff = resolve_efficiency(spec, u, "auto", eff_mode)
        else:
            eff = resolve_efficiency(spec, u, eff_mode)
    except PlannerError:  # the runtime profile does not cover this device class
        eff = resolve_efficiency(spec, u, "default")
    return device_model(spec, u, fmt, eff)


def _reference(fn, static, args):
    try:
        return fn(*static, *args)
    except (ZeroDivisionError, OverflowError, PlannerError) as exc:
        return type(exc)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(list_model_ids()), st.sampled_from(list_hardware_ids()), st.sampled_from(FORMATS),
       st.sampled_from(["fp16", "fp8", "int8", "int4"]), st.booleans(),
       st.sampled_from(["auto", "default", "datasheet", "llamacpp", "trtllm", "vllm", "hf-eager"]),
       st.lists(WORKLOAD, min_size=2, max_size=6), st.data())
def test_point_latency_replay_equals_reference(model, hw, fmt_name, kvd, flash, eff_mode, workloads, data):
    m, spec, fmt = load_model(model), load_hardware(hw), weight_format(fmt_name)
    dev = _device(spec, fmt, eff_mode, data)
    if dev is None:
        return  # this device runs no unit of this format
    static = (m, fmt, kvd, dev, flash)
    first = tuple(float(x) for x in workloads[0])
    ref = _reference(point_latency, static, first)
    if isinstance(ref, type):
        return  # the reference raises for these numbers: nothing is recorded
    value, replay = traced(point_latency, static, first)  # every catalog configuration is recordable
    assert _same(value, ref)
    assert _same(replay(*first), ref)
    for w in workloads[1:]:
        args = tuple(float(x) for x in w)
        out = replay(*args)
        if out is not None:  # None: a branch the recording did not take (the caller then runs the reference)
            assert _same(out, point_latency(*static, *args)), (w, workloads[0])


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(list_model_ids()), st.sampled_from(list_hardware_ids()), st.sampled_from(FORMATS),
       st.sampled_from(["fp16", "fp8"]), st.sampled_from(list(ENGINES)), st.sampled_from([1, 2, 8]),
       st.booleans(), st.sampled_from(["v1", "v0"]), st.lists(WORKLOAD, min_size=2, max_size=6))
def test_plan_memory_replay_equals_reference(model, hw, fmt_name, kvd, engine, tp, flash, vllm_version, workloads):
    m, spec, fmt = load_model(model), load_hardware(hw), weight_format(fmt_name)
    es = DEFAULT_SETTINGS if vllm_version == "v1" else EngineSettings(vllm_version=vllm_version)
    static = (m, fmt, kvd, spec, engine, es, tp, 1, flash)
    ref = _reference(_plan_memory_fields, static, workloads[0])
    if isinstance(ref, type):
        return
    try:
        value, replay = traced(_plan_memory_fields, static, workloads[0])
    except Untraceable:  # vLLM's windowed block count (numpy) and its refusal message are not recorded: reference
        return
    assert _same(value, ref)
    for w in workloads[1:]:
        out = replay(*w)
        if out is not None:
            assert _same(out, _plan_memory_fields(*static, *w)), (w, workloads[0])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list_model_ids()), st.sampled_from(["a100-40gb-sxm", "h100-sxm", "rtx-4090", "apple-m2-max",
                                                           "mi300x", "x86-server-cpu", "l40s", "b200"]),
       st.sampled_from([None, "fp16", "int8", "int4-g128", "q4_0", "fp8", "mxfp4"]), st.sampled_from(["fp16", "fp8"]),
       st.sampled_from(["none", "vllm", "sglang", "trtllm", "llamacpp"]), st.sampled_from([None, "vllm", "llamacpp"]),
       st.booleans(), st.lists(WORKLOAD, min_size=3, max_size=5))
def test_repeated_estimates_equal_the_first(model, hw, weights, kvd, engine, runtime, flash, workloads):
    """The first estimate of a configuration runs the reference, the second records, later ones replay: every
    call gives the same JSON (the per-op tables included), and a workload after others equals its own first call."""
    def dump(b, p, o):
        try:
            return estimate(model, hw, weights, kvd, b, p, o, engine=engine, runtime=runtime,
                            flash_attention=flash).model_dump_json()
        except PlannerError as exc:
            return str(exc)

    firsts = [dump(*w) for w in workloads]
    for _ in range(2):
        assert [dump(*w) for w in workloads] == firsts


def test_replay_records_branches_and_refuses_what_it_cannot_record():
    def f(x, y):
        z = x * 2.0 if x > 1 else x - 1.0
        return z + as_float(y), "big" if z > 10 else "small"

    value, r = traced(f, (), (3.0, 2))
    assert value == (8.0, "small")
    assert r(4.0, 1) == (9.0, "small")
    assert r(0.5, 1) is None       # x > 1 was recorded as true
    assert r(6.0, 1) is None       # z > 10 was recorded as false
    for bad in (lambda x: float(x), lambda x: f"{x:.2f}", lambda x: {x: 1}, lambda x: int(x)):
        with pytest.raises(Untraceable):
            traced(bad, (), (1.0,))

    calls = []

    def g(x):
        calls.append(type(x).__name__)
        return (x * 3.0,) if x > 0 else (-x,)

    rg = Replayed(g, record_at=2, refallback=2)
    assert [rg("k", (), (v,)) for v in (1.0, 2.0, 5.0, -4.0, -1.0, -2.0, 7.0, -3.0)] == [
        (3.0,), (6.0,), (15.0,), (4.0,), (1.0,), (2.0,), (21.0,), (3.0,)]
    # the reference, the recording, a replay, a fallback, the recording of the other branch, replays
    assert calls == ["float", "_T", "float", "_T"]

    def nested(x):  # a recording asked for during a recording (or in another thread meanwhile) runs fn
        return (x + Replayed(lambda y: (y * 2.0,), record_at=1)("n", (), (x,))[0],)

    value, r = traced(nested, (), (1.0,))
    assert value == (3.0,) and r(2.0) == (6.0,)

    # x * 1 and x - 0.0 are not recorded (x itself for every float); x - -0.0 and x + 0.0 are (not for x = -0.0)
    value, r = traced(lambda x: (x * 1, x - 0.0, x - (-0.0), x + 0.0), (), (5.0,))
    assert _same(r(-0.0), (-0.0, -0.0, 0.0, 0.0))


def test_reports_are_what_validation_makes():
    """Reports are built with validation's coercions, without the validator: validating a dump gives it back,
    types included (an int where a float belongs would dump as `1`, not `1.0`)."""
    from planner.estimate import Estimate
    computed = {"memory": {"max_batch_at_context", "max_context_at_batch"}, "prefill": {"ops"}, "decode": {"ops"}}
    for kw in (dict(model="llama-2-7b", hardware="a100-40gb-sxm"),
               dict(model="mixtral-8x7b", hardware="h100-sxm", weights="fp8", engine="vllm", batch=8),
               dict(model="gemma-2-9b", hardware="apple-m2-max", weights="q4_0", runtime="llamacpp", output=1),
               dict(model="llama-3.1-70b", hardware="l4", batch=64)):  # does not fit: None figures
        for _ in range(3):
            e = estimate(**kw)
            d = e.model_dump_json(exclude=computed)
            assert Estimate.model_validate_json(d).model_dump_json(exclude=computed) == d
            assert json.loads(e.model_dump_json())["prefill"]["ops"]  # the per-op tables are there when read


def test_cli_estimate_needs_no_numpy():
    code = ("import sys, io, contextlib; from planner.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(['estimate', '-m', 'llama-2-7b', '-H', "
            "'a100-40gb-sxm'])\n"
            "print(' '.join(m for m in ('numpy', 'pandas') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


@pytest.mark.parametrize("model, hw, eff_mode", [("deepseek-r1", "a10", "llamacpp"), ("llama-3-8b", "rtx-4090",
                                                                                      "llamacpp"),
                                                  ("llama-2-7b", "a100-80gb-sxm", "hf-eager")])
def test_replay_of_an_unfused_attention_with_a_score_bytes_factor(model, hw, eff_mode):
    """Without flash attention, llama.cpp and HF eager move more than the counted score bytes
    (Efficiency.score_bytes_factor 3.0 / 2.5): the extra bytes are float arithmetic on the recorded values, so a
    replay is the reference bit for bit (found by the random test above: deepseek-r1 on an A10)."""
    m, spec, fmt = load_model(model), load_hardware(hw), weight_format("fp16")
    u = capable_units(spec, fmt)[0]
    eff = resolve_efficiency(spec, u, "auto", eff_mode)
    assert eff.score_bytes_factor > 1.0
    static = (m, fmt, "fp16", device_model(spec, u, fmt, eff), False)
    value, replay = traced(point_latency, static, (1.0, 1.0, 1.0))
    assert _same(value, point_latency(*static, 1.0, 1.0, 1.0))
    for w in ((1.0, 1.0, 1.0), (4.0, 2048.0, 64.0)):
        out = replay(*w)
        assert out is None or _same(out, point_latency(*static, *w))
