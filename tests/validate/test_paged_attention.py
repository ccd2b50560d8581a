"""Paged decode attention (torch backend) against the token-by-token fp32 reference."""

from __future__ import annotations

import math

import pytest
import torch

import validate.kernels.paged_attention as pa
from validate.kernels.paged_attention import (
    paged_attention_cost,
    paged_decode_attention,
    quantize_kv_cache,
)
from validate.reference import paged_decode_attention_ref
from validate.tolerances import assert_close, tolerance_key_for_dtype

from .conftest import make_paged_case

CONTEXT_LENS = [1, 15, 17, 100, 1000]
BLOCK_SIZES = [1, 8, 16, 32]
HEADS = [pytest.param(4, 4, id="mha"), pytest.param(8, 2, id="gqa4")]
FLOAT_DTYPES = [
    pytest.param(torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, id="bf16"),
    pytest.param(torch.float16, id="fp16"),
]


def _batch(context_len: int) -> list[int]:
    """The length under test, a different odd length and a single token: masking must be
    per sequence, not per batch."""
    return [context_len, context_len * 7 // 13 + 2, 1]


def _ref(case, scale: float | None = None) -> torch.Tensor:
    d = case.q.shape[-1]
    return paged_decode_attention_ref(
        case.q,
        case.k_cache,
        case.v_cache,
        case.block_tables,
        case.context_lens,
        scale if scale is not None else 1.0 / math.sqrt(d),
        case.k_scale,
        case.v_scale,
    )


def _run(case, **kw) -> torch.Tensor:
    return paged_decode_attention(
        case.q,
        case.k_cache,
        case.v_cache,
        case.block_tables,
        case.context_lens,
        k_scale=case.k_scale,
        v_scale=case.v_scale,
        **kw,
    )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("num_q_heads,num_kv_heads", HEADS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("context_len", CONTEXT_LENS)
def test_float_kv_matches_reference(context_len, block_size, num_q_heads, num_kv_heads, dtype):
    case = make_paged_case(
        _batch(context_len),
        block_size=block_size,
        num_q_heads=num_q_heads,
        num_kv_heads=num_kv_heads,
        kv_dtype=dtype,
        q_dtype=dtype,
        seed=context_len + block_size,
    )
    out = _run(case)
    assert out.dtype == dtype and out.shape == case.q.shape
    assert_close(out, _ref(case), tolerance_key_for_dtype(dtype))


@pytest.mark.parametrize("granularity", ["block_head", "tensor"])
@pytest.mark.parametrize(
    "kv_dtype", [pytest.param(torch.int8, id="int8"), pytest.param(torch.float8_e4m3fn, id="fp8")]
)
@pytest.mark.parametrize("block_size", [1, 16, 32])
@pytest.mark.parametrize("context_len", CONTEXT_LENS)
def test_quantized_kv_matches_reference(context_len, block_size, kv_dtype, granularity):
    """Kernel and reference dequantize the same codes with the same scales: fp32-tight."""
    case = make_paged_case(
        _batch(context_len),
        block_size=block_size,
        num_q_heads=8,
        num_kv_heads=2,
        kv_dtype=kv_dtype,
        granularity=granularity,
        seed=3 * context_len + block_size,
    )
    assert_close(_run(case), _ref(case), "fp32")


@pytest.mark.parametrize(
    "kv_dtype,key",
    [pytest.param(torch.int8, "int8_kv", id="int8"), pytest.param(torch.float8_e4m3fn, "fp8_kv", id="fp8")],
)
@pytest.mark.parametrize("q_dtype", [torch.float32, torch.bfloat16], ids=["q_fp32", "q_bf16"])
@pytest.mark.parametrize("granularity", ["block_head", "tensor"])
@pytest.mark.parametrize("context_len", [1, 17, 1000])
def test_quantized_kv_error_vs_full_precision(context_len, granularity, q_dtype, kv_dtype, key):
    """The format's own error: quantized-cache attention vs fp32 attention on the original cache."""
    case = make_paged_case(
        _batch(context_len),
        block_size=16,
        num_q_heads=8,
        num_kv_heads=2,
        kv_dtype=kv_dtype,
        q_dtype=q_dtype,
        granularity=granularity,
        seed=context_len,
    )
    full = paged_decode_attention_ref(
        case.q, case.k_clean, case.v_clean, case.block_tables, case.context_lens, 1 / 8.0
    )
    assert_close(_run(case), full, key)


@pytest.mark.parametrize("chunk_bytes", [1, 20_000, 100_000, 2**30])
@pytest.mark.parametrize(
    "kv_dtype", [pytest.param(torch.float32, id="fp32"), pytest.param(torch.int8, id="int8")]
)
def test_online_softmax_across_chunks(chunk_bytes, kv_dtype):
    """The torch backend gathers chunks of blocks (1 block, a few, all); the running max/sum and
    the per-block KV scales must merge across chunks exactly."""
    case = make_paged_case([1000, 333, 1], block_size=8, num_q_heads=8, num_kv_heads=2,
                           kv_dtype=kv_dtype, seed=7)  # fmt: skip
    out = pa._paged_decode_attention_torch(
        case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens,
        1 / 8.0, case.k_scale, case.v_scale, chunk_bytes=chunk_bytes,
    )  # fmt: skip
    assert_close(out, _ref(case), "fp32")


def test_poison_is_effective():
    """Reading one slot past the context must produce NaN -- otherwise the NaN tests prove nothing."""
    case = make_paged_case([17, 5], block_size=16, num_q_heads=4, num_kv_heads=4, seed=1)
    assert torch.isfinite(_run(case)).all()
    case.context_lens = case.context_lens + 1
    assert torch.isnan(_run(case)).any()


@pytest.mark.parametrize("pad_id", [-1, 10**6])
def test_table_entries_past_context_are_never_dereferenced(pad_id):
    """Past a sequence's blocks the table may hold garbage (vLLM pads with arbitrary ids)."""
    case = make_paged_case([17, 40, 3], block_size=16, num_q_heads=8, num_kv_heads=2, seed=2)
    expected = _ref(case)
    for b, c in enumerate(case.context_lens.tolist()):
        case.block_tables[b, math.ceil(c / 16) :] = pad_id
    assert_close(_run(case), expected, "fp32")


def test_default_scale_is_inverse_sqrt_head_dim():
    case = make_paged_case([17], block_size=8, num_q_heads=2, num_kv_heads=1, seed=3)
    assert_close(_run(case), _run(case, scale=1 / 8.0), "fp32")
    assert_close(_run(case, scale=0.3), _ref(case, scale=0.3), "fp32")


def test_gathers_only_the_needed_blocks(monkeypatch):
    """The CPU path indexes the cache with (at most) the batch's live block ids, never the whole
    cache: count the rows the gather touches."""
    case = make_paged_case([20, 3], block_size=4, num_q_heads=2, num_kv_heads=1, extra_blocks=200)
    seen: list[int] = []
    orig = pa._gather_fp32

    def spy(cache, ids, batch, nb, block_size):
        seen.append(ids.numel())  # blocks this gather reads
        return orig(cache, ids, batch, nb, block_size)

    monkeypatch.setattr(pa, "_gather_fp32", spy)
    _run(case)
    assert max(seen) <= 2 * math.ceil(20 / 4) < case.k_cache.shape[0]


def test_input_validation():
    case = make_paged_case([5], block_size=4, num_q_heads=3, num_kv_heads=3)
    with pytest.raises(ValueError, match="multiple"):
        paged_decode_attention(case.q[:, :2], case.k_cache, case.v_cache,
                               case.block_tables, case.context_lens)  # fmt: skip
    with pytest.raises(ValueError, match="columns"):
        paged_decode_attention(case.q, case.k_cache, case.v_cache, case.block_tables[:, :1],
                               case.context_lens)  # fmt: skip
    with pytest.raises(ValueError, match=">= 1"):
        paged_decode_attention(case.q, case.k_cache, case.v_cache, case.block_tables,
                               torch.zeros(1, dtype=torch.int32))  # fmt: skip
    codes, s = quantize_kv_cache(case.k_clean, torch.int8)
    with pytest.raises(ValueError, match="k_scale"):
        paged_decode_attention(case.q, codes, codes, case.block_tables, case.context_lens)


def test_quantize_kv_cache_error_bound():
    x = torch.randn(5, 16, 2, 64)
    codes, scale = quantize_kv_cache(x, torch.int8)
    assert scale.shape == (5, 2) and codes.dtype == torch.int8
    assert int(codes.min()) >= -127
    err = (codes.float() * scale[:, None, :, None] - x).abs()
    assert (err <= scale[:, None, :, None] / 2 + 1e-6).all()
    codes8, scale8 = quantize_kv_cache(x, torch.float8_e4m3fn, "tensor")
    assert scale8.dim() == 0
    # e4m3: half an ulp is <= 2^-4 relative for normals; subnormals (< 2^-6) have ulp 2^-9.
    err8 = (codes8.float() * scale8 - x).abs()
    assert (err8 <= 2**-4 * x.abs() + 2**-10 * scale8 + 1e-7).all()


def test_cost_formulas():
    """ctx [1, 17] with 16-token blocks: 1 + 2 blocks, 18 tokens."""
    c = paged_attention_cost([1, 17], 8, 2, 64, torch.bfloat16, torch.bfloat16, block_size=16)
    assert c.kv_bytes == 2 * 18 * 2 * 64 * 2
    assert c.block_table_bytes == 3 * 4
    assert c.scale_bytes == 0
    assert c.q_bytes == c.out_bytes == 2 * 8 * 64 * 2
    assert c.flops == 4 * 18 * 8 * 64
    assert c.total_bytes == c.kv_bytes + c.block_table_bytes + 2 * c.q_bytes
    c8 = paged_attention_cost([1, 17], 8, 2, 64, torch.int8, torch.bfloat16, block_size=16)
    assert c8.kv_bytes * 2 == c.kv_bytes and c8.scale_bytes == 2 * 3 * 2 * 4


def test_public_surface():
    assert sorted(pa.__all__) == sorted(
        ["HAS_TRITON", "KVScale", "AttentionCost", "paged_decode_attention",
         "quantize_kv_cache", "paged_attention_cost"]
    )  # fmt: skip
    for name in pa.__all__:
        assert hasattr(pa, name)
