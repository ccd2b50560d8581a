"""Weight-only int8 / int4 matmul (fused CPU ops) and the dense baseline vs the fp32 reference."""

from __future__ import annotations

import pytest
import torch

import validate.kernels.quant_matmul as qm
from validate.kernels.quant_matmul import (
    QuantizedLinear,
    bytes_moved,
    dense_matmul,
    effective_bits_per_weight,
    matmul_flops,
    pack_int4,
    quantize_int4_groupwise,
    quantize_int8_per_channel,
)
from validate.reference import quant_matmul_ref
from validate.tolerances import assert_close, tolerance_key_for_dtype

M_ROWS = [1, 7, 64, 256]
GROUP_SIZES = [32, 64, 128]
ACT_DTYPES = [
    pytest.param(torch.bfloat16, id="bf16"),
    pytest.param(torch.float32, id="fp32"),
    pytest.param(torch.float16, id="fp16"),
]
N, K = 384, 512  # N % 16 == 0 for the CPU int4 packer; K a multiple of every group size


def _weight(n: int = N, k: int = K, seed: int = 0) -> torch.Tensor:
    """N(0, 1/K) so that outputs have rms ~1 for N(0, 1) activations."""
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) / k**0.5


def _x(m: int, k: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ------------------------------------------------------------------------------- quantizers


@pytest.mark.parametrize("scale_dtype", [torch.bfloat16, torch.float16])
def test_int8_quantizer_error_bound(scale_dtype):
    w = _weight()
    q = quantize_int8_per_channel(w, scale_dtype)
    assert q.qweight.dtype == torch.int8 and q.scales.shape == (N,) and q.scales.dtype == scale_dtype
    assert int(q.qweight.min()) >= -127
    err = (q.dequantize() - w).abs()
    assert (err <= q.scales.float()[:, None] / 2 * (1 + 1e-3)).all()


@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("scale_dtype", [torch.bfloat16, torch.float16])
def test_int4_quantizer_error_bound(group_size, scale_dtype):
    """|w - dq(w)| <= s/2, plus what rounding s and z to 16 bits can shift the grid by:
    2^-8 (bf16; 2^-11 fp16) relative on z and on the 8 s that separate code 0 from z."""
    w = _weight()
    q = quantize_int4_groupwise(w, group_size, scale_dtype)
    assert q.qweight.dtype == torch.int32 and q.scales.shape == (N, K // group_size)
    assert int(q.qweight.min()) >= 0 and int(q.qweight.max()) <= 15
    s = q.scales.float().repeat_interleave(group_size, 1)
    z = q.zeros.float().repeat_interleave(group_size, 1)
    u = 2**-8 if scale_dtype == torch.bfloat16 else 2**-11
    assert ((q.dequantize() - w).abs() <= s / 2 + u * (z.abs() + 16 * s)).all()
    # the reference's generic asymmetric form is the same convention
    x = _x(3, K, torch.float32)
    assert_close(
        quant_matmul_ref(x, q.qweight, q.scales, q.zeros, group_size), x @ q.dequantize().T, "fp32"
    )


def test_int4_tinygemm_zero_point_convention():
    """Code 8 stands for ``zero`` and code 0 for ``zero - 8 * scale``: a wrong convention (q * s + z,
    (q - 8) * s - z) is off by whole multiples of the scale and fails here."""
    k, g = 64, 32
    q = torch.full((16, k), 8, dtype=torch.int32)
    q[:, 0] = 0
    scales = torch.full((16, k // g), 0.5)
    zeros = torch.full((16, k // g), 3.0)
    packed = pack_int4(q, "cpu")
    sz = torch.stack([scales.T, zeros.T], dim=-1).contiguous()  # [K/g, N, 2]
    x = torch.zeros(1, k)
    x[0, 0] = 1.0  # picks column 0 (code 0)
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, g, sz)
    torch.testing.assert_close(y, torch.full((1, 16), 3.0 - 8 * 0.5))
    x[0, 0], x[0, 1] = 0.0, 1.0  # column 1 (code 8)
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, g, sz)
    torch.testing.assert_close(y, torch.full((1, 16), 3.0))


# ------------------------------------------------------------------------- kernels vs reference


@pytest.mark.parametrize("act_dtype", ACT_DTYPES)
@pytest.mark.parametrize("m", M_ROWS)
def test_int8_kernel_matches_reference(m, act_dtype):
    lin = QuantizedLinear.from_float(_weight(), "int8", act_dtype=act_dtype)
    x = _x(m, K, act_dtype)
    y = lin(x)
    assert y.dtype == act_dtype and y.shape == (m, N)
    ref = quant_matmul_ref(x, lin.int8.qweight, lin.int8.scales)
    assert_close(y, ref, tolerance_key_for_dtype(act_dtype))


@pytest.mark.parametrize("act_dtype", ACT_DTYPES)
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("m", M_ROWS)
def test_int4_kernel_matches_reference(m, group_size, act_dtype):
    lin = QuantizedLinear.from_float(_weight(), "int4", act_dtype=act_dtype, group_size=group_size)
    assert lin.use_fused  # the real tinygemm CPU op, not the fallback
    x = _x(m, K, act_dtype)
    y = lin(x)
    assert y.dtype == act_dtype and y.shape == (m, N)
    q = lin.int4
    ref = quant_matmul_ref(x, q.qweight, q.scales, q.zeros, group_size)
    assert_close(y, ref, tolerance_key_for_dtype(act_dtype))


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_largest_shape_m256(fmt):
    """K = N = 1024, M = 256, bf16: the longest dot products of the suite."""
    w = _weight(1024, 1024, seed=5)
    lin = QuantizedLinear.from_float(w, fmt, act_dtype=torch.bfloat16, group_size=128)
    x = _x(256, 1024, torch.bfloat16, seed=6)
    assert_close(lin(x), x.float() @ lin.dequantized().T, "bf16")


@pytest.mark.parametrize("act_dtype", ACT_DTYPES)
@pytest.mark.parametrize("m", [1, 64])
def test_dense_baseline(m, act_dtype):
    w = _weight()
    x = _x(m, K, act_dtype)
    y = dense_matmul(x, w.to(act_dtype))
    assert_close(y, x.float() @ w.to(act_dtype).float().T, tolerance_key_for_dtype(act_dtype))


def test_int4_fallback_when_n_not_multiple_of_16():
    w = _weight(40, 256)
    lin = QuantizedLinear.from_float(w, "int4", act_dtype=torch.float32, group_size=64)
    assert not lin.use_fused
    x = _x(3, 256, torch.float32)
    assert_close(lin(x), x @ lin.dequantized().T, "fp32")


# ----------------------------------------------------------------- quantization error (format)


@pytest.mark.parametrize(
    "fmt,group_size,key",
    [("int8", None, "int8_weight")] + [("int4", g, "int4_weight") for g in GROUP_SIZES],
)
@pytest.mark.parametrize("act_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_quantization_error_vs_fp32(fmt, group_size, key, act_dtype):
    w = _weight(1024, 1024, seed=2)
    lin = QuantizedLinear.from_float(w, fmt, act_dtype=act_dtype, group_size=group_size or 128)
    x = _x(64, 1024, act_dtype, seed=3)
    assert_close(lin(x), x.float() @ w.T, key)


# --------------------------------------------------------------------------- bytes and flops


def test_bytes_moved_int4_g128_4096():
    b = bytes_moved("int4", 1, 4096, 4096, act_dtype=torch.bfloat16, group_size=128)
    assert b.weight_bytes == 4096 * 4096 // 2
    assert b.scale_bytes == b.zero_bytes == 4096 * 32 * 2
    assert b.act_in_bytes == b.out_bytes == 4096 * 2
    assert b.total_bytes == 8_388_608 + 2 * 262_144 + 2 * 8192
    # count bits: 4 + 2 * 16 / 128 = 4.25 bits per weight, as the byte count says
    eff = effective_bits_per_weight("int4", group_size=128, scale_bits=16)
    assert eff == 4.25
    assert (b.weight_bytes + b.scale_bytes + b.zero_bytes) * 8 == eff * 4096 * 4096


def test_bytes_moved_other_formats():
    m, n, k = 7, 256, 512
    for fmt, bits in [("fp32", 32), ("bf16", 16), ("fp16", 16), ("int8", 8)]:
        b = bytes_moved(fmt, m, n, k, act_dtype=torch.float32)
        assert b.weight_bytes == n * k * bits // 8
        assert b.act_in_bytes == m * k * 4 and b.out_bytes == m * n * 4
        assert b.scale_bytes == (n * 4 if fmt == "int8" else 0) and b.zero_bytes == 0
    assert matmul_flops(m, n, k) == 2 * m * n * k
    with pytest.raises(ValueError):
        bytes_moved("int4", 1, 16, 100, act_dtype=torch.bfloat16, group_size=64)


def test_packed_int4_holds_exactly_the_counted_bytes():
    lin = QuantizedLinear.from_float(_weight(), "int4", act_dtype=torch.bfloat16, group_size=64)
    b = lin.bytes_moved(1)
    assert lin.packed.numel() * lin.packed.element_size() == b.weight_bytes
    sz = lin.scales_and_zeros
    assert sz.shape == (K // 64, N, 2)
    assert sz.numel() * sz.element_size() == b.scale_bytes + b.zero_bytes
    lin8 = QuantizedLinear.from_float(_weight(), "int8", act_dtype=torch.bfloat16)
    b8 = lin8.bytes_moved(1)
    assert lin8.int8.qweight.numel() == b8.weight_bytes
    assert lin8.int8.scales.numel() * lin8.int8.scales.element_size() == b8.scale_bytes


def test_public_surface():
    for name in qm.__all__:
        assert hasattr(qm, name)
