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


def test_kv_passes_per_query_head_by_hand():
    """Llama-3.1-8B decode, batch 16 at 4096 tokens of context, bf16 cache: the score op reads K = 16 x 4096 x 8 K/V
    heads x 128 x 2 B = 134,217,728 B per layer. A fused kernel that shares K/V across the 32 / 8 = 4 query heads of a
    group reads it once; a kernel with one CTA per query head (Efficiency.kv_read_per_query_head) or a materialized
    attention (no flash attention: a batched matmul broadcasting each K/V head) reads it 4 times."""
    from planner.ops import decode_ops as ops_of
    from planner.roofline import kv_passes, op_bytes

    m, f = load_model("llama-3.1-8b"), weight_format("bf16")
    k_read = 16 * 4096 * 8 * 128 * 2
    fused = {o.name: o for o in ops_of(m, f, "bf16", 16, 4096)}
    unfused = {o.name: o for o in ops_of(m, f, "bf16", 16, 4096, flash_attention=False)}
    s = fused["attn_scores"]
    assert float(s.kv_read_bytes) == pytest.approx(k_read) and s.kv_group == 4.0 and s.kv_passes == 1.0
    assert kv_passes(s) == 1.0 and kv_passes(s, True) == 4.0
    assert float(op_bytes(s, None)) == pytest.approx(float(s.bytes))
    assert float(op_bytes(s, None, per_query_head=True)) == pytest.approx(float(s.bytes) + 3 * k_read)
    u = unfused["attn_scores"]
    assert u.kv_passes == 4.0 and float(op_bytes(u, None)) == pytest.approx(float(u.bytes) + 3 * k_read)
    # through time_ops: the flag costs 3 more K reads of bandwidth time on the attention ops, nothing elsewhere
    a = _times("bf16", Efficiency(**BASE))
    b = _times("bf16", Efficiency(**BASE, kv_read_per_query_head=True))
    assert float(b["attn_scores"].memory_s) == pytest.approx(float(a["attn_scores"].memory_s) * float(s.bytes + 3 * k_read) / float(s.bytes))
    assert float(b["mlp"].time_s) == float(a["mlp"].time_s)


def test_tensor_parallel_keeps_query_heads_per_kv_head_until_kv_heads_replicate():
    """Llama-3.1-70B (64 query heads, 8 K/V heads): at TP 8 each GPU holds 8 query heads and 1 K/V head (group 8); at
    TP 16 the 8 K/V heads are replicated in pairs, 4 query heads share each GPU's K/V head (group 4)."""
    from planner.ops import decode_ops as ops_of
    from planner.serving.parallelism import split_ops

    m, f = load_model("llama-3.1-70b"), weight_format("bf16")
    ops = ops_of(m, f, "bf16", 1, 1024, flash_attention=False)
    for tp, g in ((1, 8.0), (8, 8.0), (16, 4.0)):
        s = next(o for o in split_ops(ops, m, tp) if o.name == "attn_scores")
        assert (s.kv_group, s.kv_passes) == (g, g), tp


def _gemm_compute_s(spec_id, fmt_name, eff, batch_tokens):
    """compute_s of Llama-2-7B's MLP GEMM for a prompt of `batch_tokens` tokens (R = that many rows)."""
    from planner.ops import prefill_ops

    spec, f = load_hardware(spec_id), weight_format(fmt_name)
    dev = device_model(spec, spec.unit("gpu"), f, eff)
    ops = prefill_ops(load_model("llama-2-7b"), f, "fp16", 1, batch_tokens)
    return {ot.op.name: ot for ot in time_ops(ops, dev)}["mlp"]


@pytest.mark.parametrize("rows, share", [(1, 1.0), (8, 1.0), (9, 1 / 9), (32, 1 / 32), (40, 2 / 40),
                                         (512, 16 / 512)])
def test_dequant_cost_is_paid_once_per_tile_of_tokens(rows, share):
    """Efficiency.dequant_tile_tokens = 32 (llama.cpp's Metal kernel_mul_mm dequantizes a weight tile once per
    32-token block, for more than 8 tokens; its mat-vec kernels up to 8 dequantize per token): a weight GEMM of R
    rows pays dequant_overhead x ceil(R / 32) / R of its compute time above 8 rows, all of it up to 8, by hand
    1 + 1.0 x (1, 1, 1/9, 1/32, 2/40, 16/512) at R = 1, 8, 9, 32, 40, 512; without a tile the full 1.0 at any R. Compute
    time = 32 layers x 2 x R x 4096 x 11008 x 3 FLOPs / (M4 Max 15.05 TFLOP/s x 0.7), the plain roofline (no half
    rows)."""
    base = dict(BASE, regime_curves=False)
    flat = Efficiency(**base, dequant_overhead={"q4_0": 1.0})
    tiled = Efficiency(**base, dequant_overhead={"q4_0": 1.0}, dequant_tile_tokens=32)
    plain = _gemm_compute_s("apple-m4-max", "q4_0", Efficiency(**base), rows)
    by_hand = 32 * 2 * rows * 4096 * 11008 * 3 / (15.05e12 * 0.7)
    assert float(plain.compute_s) == pytest.approx(by_hand, rel=1e-9)
    assert float(_gemm_compute_s("apple-m4-max", "q4_0", flat, rows).compute_s) == pytest.approx(2 * by_hand)
    assert float(_gemm_compute_s("apple-m4-max", "q4_0", tiled, rows).compute_s) == pytest.approx(
        (1 + share) * by_hand)


def test_dequant_factor_at_on_stacked_devices():
    """A sweep stacks devices: one tile per device (0 = flat), the same factors as one device at a time."""
    import numpy as np

    from planner.roofline import dequant_factor_at

    rows = np.array([1.0, 4.0, 64.0, 512.0]).reshape(1, 4)
    tiles = np.array([0, 32]).reshape(2, 1)
    got = dequant_factor_at(rows, 3.0, tiles)
    assert got[0].tolist() == [3.0, 3.0, 3.0, 3.0]  # flat: 1 + 2.0 at any R
    assert got[1].tolist() == pytest.approx([3.0, 3.0, 1 + 2.0 * 2 / 64, 1 + 2.0 * 16 / 512])
    for i, r in enumerate([1.0, 4.0, 64.0, 512.0]):  # the one-GEMM path: the same numbers
        assert dequant_factor_at(r, 3.0, 32) == pytest.approx(float(got[1, i]))
    assert dequant_factor_at(rows, 3.0, 0) == 3.0


def test_quantized_weights_dequantize_into_the_faster_16bit_dtype():
    """An MI100 lists bf16 matrix math at half its fp16 rate (92.3 vs 184.6 TFLOP/s, AMD MI100 datasheet): a
    weight-only quantized format (Q4_K_M, int4, int8) dequantizes into fp16 there, as llama.cpp's HIP kernels and
    the GPTQ/AWQ ones do, while a bf16 model computes in bf16; where both rates are equal the format's own order
    (bf16 first) stands."""
    from planner.hardware import load_hardware
    from planner.quantization import weight_format as get_weight_format
    from planner.roofline import matmul_dtype

    mi100 = load_hardware("mi100").unit("gpu")
    assert mi100.peak_tflops["fp16"] == 2 * mi100.peak_tflops["bf16"] == 184.6
    for fmt in ("q4_k_m", "int4-g128", "int8"):
        assert matmul_dtype(mi100, get_weight_format(fmt)) == "fp16"
    assert matmul_dtype(mi100, get_weight_format("bf16")) == "bf16"
    h100 = load_hardware("h100-sxm").unit("gpu")
    assert matmul_dtype(h100, get_weight_format("q4_k_m")) == "bf16"
