"""The scalar path (one configuration on plain Python floats, what `estimate()` takes) against the reference array
path (the same functions on one-element numpy arrays, what `sweep` takes), on random configurations over the whole
catalog: every model family (sliding window, chunked, MLA, sparse top-k, MoE, SSM / linear attention), every device,
formats with and without native GEMM dtypes, KV dtypes, FlashAttention on and off, and runtime-profile efficiencies
(GEMM half rows, dequantization overheads, power caps).

Tolerance: 1e-12 relative. Both paths run the same IEEE double operations in the same order per operator; they may
differ only in the order the per-operator terms are summed (Python's left-to-right sum, numpy's reduction), a few
ulps of the result.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.architecture import list_model_ids, load_model
from planner.efficiency import resolve_efficiency
from planner.errors import PlannerError
from planner.hardware import list_hardware_ids, load_hardware
from planner.latency import decode_sum_s
from planner.ops import decode_ops, kv_bytes_per_sequence, prefill_ops
from planner.quantization import weight_format
from planner.roofline import capable_units, device_model, step_bound, step_time_s, time_ops

REL = 1e-12
FORMATS = ["fp16", "bf16", "int8", "w8a8-int8", "fp8", "int4-g128", "nvfp4", "mxfp4", "q4_0", "q4_k_m", "fp32"]


def _close(a, b):
    a, b = float(a), float(np.asarray(b).reshape(-1)[0])
    assert a == pytest.approx(b, rel=REL, abs=0.0), (a, b)


def _arr(x):
    return np.array([x], dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(list_model_ids()), st.sampled_from(list_hardware_ids()), st.sampled_from(FORMATS),
       st.sampled_from(["fp16", "fp8", "int8", "int4"]), st.integers(1, 512), st.integers(1, 200_000),
       st.integers(1, 50_000), st.booleans(), st.sampled_from(["auto", "default", "datasheet", "llamacpp", "trtllm"]),
       st.data())
def test_scalar_path_equals_array_path(model, hw, fmt_name, kvd, batch, prompt, output, flash, eff_mode, data):
    m, spec, fmt = load_model(model), load_hardware(hw), weight_format(fmt_name)
    units = capable_units(spec, fmt)
    if not units:
        return  # this device runs no unit of this format: nothing to compare
    u = data.draw(st.sampled_from(units))
    try:
        if eff_mode in ("llamacpp", "trtllm"):
            eff = resolve_efficiency(spec, u, "auto", eff_mode)
        else:
            eff = resolve_efficiency(spec, u, eff_mode)
    except PlannerError:  # the runtime profile does not cover this device class
        eff = resolve_efficiency(spec, u, "default")
    dev = device_model(spec, u, fmt, eff)

    # per operator, prefill and the first decode step
    for ops_s, ops_a in ((prefill_ops(m, fmt, kvd, batch, prompt, 0, flash),
                          prefill_ops(m, fmt, kvd, _arr(batch), _arr(prompt), 0, flash)),
                         (decode_ops(m, fmt, kvd, batch, prompt, flash),
                          decode_ops(m, fmt, kvd, _arr(batch), _arr(prompt), flash))):
        ts, ta = time_ops(ops_s, dev), time_ops(ops_a, dev)
        assert [t.op.name for t in ts] == [t.op.name for t in ta]
        for s, a in zip(ts, ta):
            assert isinstance(s.time_s, float)  # the scalar path stays on floats
            for f in ("time_s", "compute_s", "memory_s"):
                _close(getattr(s, f), getattr(a, f))
            for f in ("flops", "weight_bytes", "act_bytes", "kv_read_bytes", "kv_write_bytes"):
                _close(getattr(s.op, f), getattr(a.op, f))
        _close(step_time_s(ts, dev), step_time_s(ta, dev))
        assert step_bound(ts) == str(np.asarray(step_bound(ta)).reshape(-1)[0])

    # the closed-form decode sum and the last step, with and without the first step's times handed in
    first = time_ops(decode_ops(m, fmt, kvd, batch, prompt, flash), dev)
    s_sum, s_last = decode_sum_s(m, fmt, kvd, dev, batch, prompt, output, flash, with_last=True)
    r_sum, r_last = decode_sum_s(m, fmt, kvd, dev, _arr(batch), _arr(prompt), _arr(output), flash, with_last=True)
    assert isinstance(s_sum, float)
    _close(s_sum, r_sum)
    _close(s_last, r_last)
    f_sum, f_last = decode_sum_s(m, fmt, kvd, dev, batch, prompt, output, flash, with_last=True, first=first)
    assert (f_sum, f_last) == (s_sum, s_last)

    _close(kv_bytes_per_sequence(m, kvd, prompt + output), kv_bytes_per_sequence(m, kvd, _arr(prompt + output)))
