"""Property tests: monotonicity in batch/prompt/context, fewer bits never cost more, every time respects the roofline."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import estimate
from planner.architecture import load_model
from planner.efficiency import resolve_efficiency
from planner.hardware import load_hardware
from planner.latency import decode_sum_s, prefill_time_s
from planner.memory import plan_memory
from planner.ops import weight_bytes
from planner.quantization import weight_format
from planner.roofline import device_model, select_unit

MODELS = ["llama-2-7b", "llama-3.1-8b", "mistral-7b", "mixtral-8x7b", "gemma-2-9b", "deepseek-v3", "qwen3-30b-a3b"]
HARDWARE = ["a100-80gb-sxm", "h100-sxm", "rtx-4090", "apple-m2-ultra", "snapdragon-8-gen3", "x86-server-cpu"]
FORMAT_CHAINS = [["fp32", "fp16", "int8", "int4-g32", "int4-g64", "int4-g128"], ["q8_0", "q6_k", "q5_k_m", "q4_k_m"]]
KV_CHAIN = ["fp32", "fp16", "fp8", "int4"]

models = st.sampled_from(MODELS)
hardware = st.sampled_from(HARDWARE)
batch = st.integers(1, 256)
prompt = st.integers(1, 16384)
output = st.integers(1, 2048)
SETTINGS = settings(max_examples=40, deadline=None)


def _dev(model, hw, fmt="fp16"):
    m, spec, f = load_model(model), load_hardware(hw), weight_format(fmt)
    u = select_unit(spec, f)
    return m, f, device_model(spec, u, f, resolve_efficiency(spec, u, "default"))


@SETTINGS
@given(models, hardware, batch, batch, prompt, prompt, output, output)
def test_memory_and_latency_never_decrease(model, hw, b1, b2, p1, p2, o1, o2):
    (b1, b2), (p1, p2), (o1, o2) = sorted((b1, b2)), sorted((p1, p2)), sorted((o1, o2))
    m, f, dev = _dev(model, hw)
    spec = load_hardware(hw)
    mem = [plan_memory(m, f, "fp16", b, p, o, spec, capacity_bytes=1e15).total_bytes
           for b, p, o in ((b1, p1, o1), (b2, p2, o2))]
    assert mem[0] <= mem[1]
    # TTFT grows with batch and prompt; the decode sum grows with batch, prompt and output
    assert prefill_time_s(m, f, "fp16", dev, b1, p1) <= prefill_time_s(m, f, "fp16", dev, b2, p2)
    assert decode_sum_s(m, f, "fp16", dev, b1, p1, o1) <= decode_sum_s(m, f, "fp16", dev, b2, p2, o2) * (1 + 1e-12)


@SETTINGS
@given(models, st.sampled_from(FORMAT_CHAINS), st.data())
def test_fewer_bits_never_cost_more_memory(model, chain, data):
    i = data.draw(st.integers(0, len(chain) - 2))
    j = data.draw(st.integers(i + 1, len(chain) - 1))
    m = load_model(model)
    assert weight_bytes(m, weight_format(chain[j])) <= weight_bytes(m, weight_format(chain[i]))
    ki = data.draw(st.integers(0, len(KV_CHAIN) - 2))
    kj = data.draw(st.integers(ki + 1, len(KV_CHAIN) - 1))
    f = weight_format("fp16")
    spec = load_hardware("h100-sxm")
    a = plan_memory(m, f, KV_CHAIN[ki], 4, 1000, 100, spec, capacity_bytes=1e15).kv_cache_bytes
    b = plan_memory(m, f, KV_CHAIN[kj], 4, 1000, 100, spec, capacity_bytes=1e15).kv_cache_bytes
    assert b <= a


@SETTINGS
@given(models, hardware, st.sampled_from(["fp16", "int8", "int4-g128", "q4_0", "fp32"]), batch, prompt, output)
def test_every_op_time_respects_peak_bandwidth_and_compute(model, hw, fmt, b, p, o):
    spec = load_hardware(hw)
    e = estimate(model, spec, fmt, batch=b, prompt=p, output=o, efficiency="default")
    bw = e.roofline.bandwidth_gbs * 1e9
    peaks = {name: e.roofline.peak_tflops[cls] * 1e12 for name, cls in (("matmul", "matmul"),)}
    peak_max = max(e.roofline.peak_tflops.values()) * 1e12
    for op in e.prefill.ops + e.decode.ops:
        t = op.time_ms / 1e3
        assert t >= op.bytes / bw * (1 - 1e-12)
        assert t >= op.flops / peak_max * (1 - 1e-12)
        assert np.isfinite(t) and t >= 0
    assert peaks["matmul"] > 0
