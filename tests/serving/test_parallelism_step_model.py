"""Tensor/pipeline parallelism and the simulator's step tables against the core cost model."""

import numpy as np
import pytest

from planner import estimate
from planner.architecture import load_model
from planner.efficiency import resolve_efficiency
from planner.errors import PlannerError
from planner.hardware import load_hardware
from planner.latency import decode_step_time_s, prefill_time_s
from planner.quantization import weight_format
from planner.roofline import device_model, select_unit
from planner.serving import StepModel, node_for, pipeline_bubble_fraction, tp_step_time_s
from planner.serving.parallelism import Link, check_tp, kv_split, tp_comm_time_s


def _dev(hw="h100-sxm", weights="bf16"):
    spec, fmt = load_hardware(hw), weight_format(weights)
    u = select_unit(spec, fmt)
    return spec, fmt, device_model(spec, u, fmt, resolve_efficiency(spec, u, "auto"))


def test_tp1_equals_single_device_estimate():
    m = load_model("llama-3.1-8b")
    spec, fmt, dev = _dev()
    e = estimate("llama-3.1-8b", "h100-sxm", "bf16", batch=8, prompt=1000, output=64)
    ttft = float(tp_step_time_s(m, fmt, "fp16", dev, "prefill", 8, 1000, 0, tp=1))
    first = float(tp_step_time_s(m, fmt, "fp16", dev, "decode", 8, 1, 1000, tp=1))
    assert ttft == float(prefill_time_s(m, fmt, "fp16", dev, 8, 1000))  # exactly the core
    assert ttft * 1e3 == pytest.approx(e.prefill.latency_ms, rel=1e-12)
    assert first * 1e3 == pytest.approx(e.decode.latency_ms_first, rel=1e-12)


def test_tp_allreduce_hand_number():
    m, fmt = load_model("llama-3.1-8b"), weight_format("bf16")
    link = Link("nvlink", 450.0, 8.0)
    # decode of 8 tokens: 8 x 4096 x 2 bytes = 65,536 B per all-reduce; ring at t=2: 2(1)/2 x 65536 / 450e9 + 8 us;
    # two per layer x 32 layers
    per = 65536 / 450e9 + 8e-6
    assert float(tp_comm_time_s(m, fmt, 8, 2, link)) == pytest.approx(64 * per, rel=1e-12)
    assert float(tp_comm_time_s(m, fmt, 8, 1, link)) == 0.0


def test_tp_splits_work():
    m = load_model("llama-3.1-70b")
    spec, fmt, dev = _dev("h100-sxm", "fp8")
    link = node_for(spec).intra_link()
    t1 = float(tp_step_time_s(m, fmt, "fp16", dev, "decode", 16, 1, 2000, 1, None))
    t4 = float(tp_step_time_s(m, fmt, "fp16", dev, "decode", 16, 1, 2000, 4, link))
    assert t1 / 4 < t4 < t1 / 2  # a quarter of the weights per GPU, plus collectives and fixed overheads
    assert kv_split(m, 16) == 8  # 8 KV heads: no split below one head per GPU


def test_tp_must_divide_heads():
    with pytest.raises(PlannerError, match="does not divide"):
        check_tp(load_model("llama-3.1-8b"), 3)


def test_gpipe_bubble():
    assert pipeline_bubble_fraction(4, 12) == pytest.approx(3 / 15)  # (p - 1) / (m + p - 1)
    assert pipeline_bubble_fraction(1, 1) == 0


def test_node_files_and_defaults():
    n = node_for(load_hardware("h100-sxm"))
    assert (n.id, n.gpus_per_node, n.intra_link().per_direction_gbs, n.inter_link().per_direction_gbs) == \
        ("dgx-h100", 8, 450, 50)  # 900 GB/s NVLink bidirectional; 400 Gb/s InfiniBand per GPU
    assert node_for(load_hardware("l4")).intra_link().per_direction_gbs == 32  # PCIe Gen4 x16, 64 GB/s both ways
    assert node_for(load_hardware("apple-m4-max")).gpus_per_node == 1


@pytest.mark.parametrize("model", ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gemma-2-9b"])
def test_step_model_equals_core(model):
    m = load_model(model)
    spec, fmt, dev = _dev("h100-sxm", "fp8")
    sm = StepModel.build(m, fmt, "fp16", dev)
    for p in (1, 100, 1000, 6000):
        assert sm.prefill_time([p]) == pytest.approx(float(prefill_time_s(m, fmt, "fp16", dev, 1, p)), rel=1e-9)
    for b, c in ((1, 10), (8, 1000), (64, 3000), (256, 20000)):
        assert sm.decode_time(b, b * c) == pytest.approx(float(decode_step_time_s(m, fmt, "fp16", dev, b, c)),
                                                         rel=1e-9)
    # a run of k decode steps in closed form = the sum of the steps one by one
    for b, c, k in ((16, 1000, 299), (3, 4000, 400)):
        one_by_one = sum(sm.decode_time(b, b * (c + j)) for j in range(k))
        tol = 1e-9 if m.sliding_window is None else 2e-3  # windowed layers: trapezoid across the bend
        assert sm.decode_run_time(b, b * c, k) == pytest.approx(one_by_one, rel=tol)


def test_mixed_context_decode_is_mean_context():
    # attention terms are linear in the context: sequences at 1000 and 3000 cost the same as two at 2000
    m = load_model("llama-3.1-8b")
    spec, fmt, dev = _dev()
    sm = StepModel.build(m, fmt, "fp16", dev)
    assert sm.decode_time(2, 1000 + 3000) == pytest.approx(float(decode_step_time_s(m, fmt, "fp16", dev, 2, 2000)))


def test_chunked_pieces_match_core_prefill_with_past():
    m = load_model("llama-3.1-8b")
    spec, fmt, dev = _dev()
    sm = StepModel.build(m, fmt, "fp16", dev)
    assert sm.prefill_time([512], [1536]) == pytest.approx(float(prefill_time_s(m, fmt, "fp16", dev, 1, 512, 1536)))
    np.testing.assert_allclose(sm.prefill_time([300, 700]), sm.step_time(1000, 2, None, sm.prefill_features(
        [300, 700], [0, 0])))


def test_pipeline_handoff_in_step():
    m = load_model("llama-3.1-8b")
    spec, fmt, dev = _dev()
    link = Link("infiniband", 50.0, 25.0)
    one = StepModel.build(m, fmt, "fp16", dev, max_tokens=64)
    two = StepModel.build(m, fmt, "fp16", dev, pp=2, pp_link=link, max_tokens=64)
    # one hand-off between 2 stages: 8 tokens x 4096 x 2 bytes over 50 GB/s + 25 us
    assert two.decode_time(8, 8000) - one.decode_time(8, 8000) == pytest.approx(8 * 4096 * 2 / 50e9 + 25e-6)


def test_attention_free_model_under_tensor_parallelism_has_a_constant_decode_step():
    """Mamba-2 (no attention layer) holds a constant state: its TP decode step does not depend on the context, so the
    sampled decode sum must broadcast one step time over its samples (it raised IndexError before) and TPOT equals the
    first and the last step."""
    from planner import estimate

    e = estimate("mamba-codestral-7b", "l40s", tp=8, prompt=512, output=128)
    d = e.decode
    assert d.latency_ms_per_token == pytest.approx(d.latency_ms_first, rel=1e-12)
    assert d.latency_ms_last == pytest.approx(d.latency_ms_first, rel=1e-12)
    assert e.end_to_end.latency_s == pytest.approx(e.prefill.latency_ms / 1e3 + 127 * d.latency_ms_first / 1e3,
                                                   rel=1e-9)


@pytest.mark.parametrize("model, hw, weights, kv, runtime, flash", [
    ("llama-3-8b", "a100-80gb-sxm", "bf16", "fp8", "vllm", True),        # fp8 cache converted in-kernel on Ampere
    ("llama-3-8b", "rtx-4090", "q4_k_m", "fp16", "llamacpp", False),     # passes, re-read share, fp32 scores
    ("llama-3-8b", "apple-m2-ultra", "q4_k_m", "fp16", "llamacpp", False),
    ("llama-2-13b", "a100-80gb-sxm", "int8", "fp16", "gpt-fast", True),  # a K/V copy per query head (GQA-free: 1)
    ("llama-3.1-70b", "a100-80gb-sxm", "int4-g128", "fp16", "gpt-fast", True),
    ("llama-3-8b", "h100-sxm", "bf16", "fp16", "hf-eager", True),        # the per-step cache copy
])
def test_step_model_moves_the_bytes_time_ops_does(model, hw, weights, kv, runtime, flash):
    """The serving step model's attention terms move the bytes roofline.op_bytes counts on the device (the cache
    format converted in the kernel, the passes over it and their re-read share, the per-step cache copy, a wider score
    matrix: roofline.op_bytes_multipliers) and pay the cache conversion's compute, so its prefill and decode steps
    equal the core's (latency.prefill_time_s / decode_step_time_s, rel 1e-9) under every engine's cache rules; before
    this, it read op.bytes and timed an fp8 cache on an A100 at 10.87 ms per step where estimate() says 11.20."""
    from planner.runtimes import load_runtime

    m, spec, fmt = load_model(model), load_hardware(hw), weight_format(weights)
    u = select_unit(spec, fmt)
    dev = device_model(spec, u, fmt, load_runtime(runtime).for_unit(spec, u).efficiency)
    sm = StepModel.build(m, fmt, kv, dev, flash_attention=flash)
    for p in (1, 700, 4096):
        assert sm.prefill_time([p]) == pytest.approx(float(prefill_time_s(m, fmt, kv, dev, 1, p,
                                                                          flash_attention=flash)), rel=1e-9)
    for b, c in ((1, 4096), (8, 1000), (32, 6000)):
        assert sm.decode_time(b, b * c) == pytest.approx(
            float(decode_step_time_s(m, fmt, kv, dev, b, c, flash_attention=flash)), rel=1e-9)
