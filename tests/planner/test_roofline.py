"""The roofline's refinements act where they should: KV conversion cost on attention ops only."""

import pytest

from planner.architecture import load_model
from planner.hardware import Efficiency, load_hardware
from planner.ops import decode_ops
from planner.quantization import weight_format
from planner.roofline import device_model, select_unit, time_ops

BASE = dict(bandwidth_fraction=0.8, compute_fraction=0.7, kernel_overhead_us=0.0, step_overhead_ms=0.0)


def _times(kv_dtype, eff):
    spec, f = load_hardware("x86-server-cpu"), weight_format("bf16")
    dev = device_model(spec, select_unit(spec, f), f, eff)
    ops = decode_ops(load_model("llama-3.1-8b"), f, kv_dtype, 16, 4096)
    return {ot.op.name: ot for ot in time_ops(ops, dev)}


def test_kv_dequant_overhead_scales_attention_compute_only():
    plain = Efficiency(**BASE)
    conv = Efficiency(**BASE, kv_dequant_overhead={"int8": 1.0})
    a, b = _times("int8", plain), _times("int8", conv)
    # converting int8 K/V doubles the attention compute time (x (1 + 1.0)); weight GEMMs are untouched
    assert float(b["attn_scores"].compute_s) == pytest.approx(2 * float(a["attn_scores"].compute_s))
    assert float(b["attn_values"].compute_s) == pytest.approx(2 * float(a["attn_values"].compute_s))
    assert float(b["mlp"].time_s) == float(a["mlp"].time_s)
    # a cache dtype not listed is read natively
    assert float(_times("fp16", conv)["attn_scores"].compute_s) == float(_times("fp16", plain)["attn_scores"].compute_s)
