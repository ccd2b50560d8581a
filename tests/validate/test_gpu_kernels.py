"""CUDA kernels (Triton paged attention, tinygemm int4, int8 weight-only) vs the references.

Marked ``gpu``: the CPU suite deselects them (pyproject.toml addopts ``-m "not gpu"``) and the device flow selects
them (``planner validate device``: ``pytest -m gpu tests/validate/test_gpu_kernels.py``). Selected on a machine
without CUDA they fail, never skip. The same Triton kernels run on CPU under ``TRITON_INTERPRET=1`` against the same
references (test_triton_interpreter.py); these tests are the real-hardware check.
"""

from __future__ import annotations

import math

import pytest
import torch

from validate.kernels.decode_step import CONFIGS, build_decode_stack
from validate.kernels.paged_attention import HAS_TRITON, paged_decode_attention
from validate.kernels.quant_matmul import QuantizedLinear
from validate.reference import decode_step_ref, paged_decode_attention_ref, quant_matmul_ref
from validate.timing import GRAPH_BELOW_MS, device_fingerprint, stream_bandwidth_gbs, time_fn
from validate.tolerances import assert_close, tolerance_key_for_dtype

from .conftest import make_paged_case

pytestmark = [pytest.mark.gpu]


@pytest.fixture(autouse=True)
def _cuda_device():
    """A selected GPU test without a CUDA device is an error, not a skip: the CPU suite deselects these."""
    if not torch.cuda.is_available():
        pytest.fail("tests/validate/test_gpu_kernels.py needs a CUDA device (planner validate device runs it there; "
                    "the CPU suite deselects it with -m 'not gpu')")


needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="needs triton")
CUDA = torch.device("cuda")


def _has_fp8() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def _to_cuda(case):
    for name in ("q", "k_cache", "v_cache", "block_tables", "context_lens", "k_scale", "v_scale"):
        t = getattr(case, name)
        if t is not None:
            setattr(case, name, t.to(CUDA))
    return case


KV_DTYPES = [
    pytest.param(torch.float32, torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, id="bf16"),
    pytest.param(torch.float16, torch.float16, id="fp16"),
    pytest.param(torch.int8, torch.bfloat16, id="int8"),
    pytest.param(
        torch.float8_e4m3fn,
        torch.bfloat16,
        id="fp8",
        marks=pytest.mark.skipif(not _has_fp8(), reason="fp8 needs sm_89+"),
    ),
]


@pytest.mark.parametrize("backend", [pytest.param("triton", marks=needs_triton), "torch"])
@pytest.mark.parametrize("kv_dtype,q_dtype", KV_DTYPES)
@pytest.mark.parametrize("num_q_heads,num_kv_heads", [(4, 4), (8, 2), (32, 8)])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("context_len", [1, 17, 1000])
def test_paged_attention_cuda(context_len, block_size, num_q_heads, num_kv_heads, kv_dtype,
                              q_dtype, backend):  # fmt: skip
    case = make_paged_case(
        [context_len, context_len * 7 // 13 + 2, 1],
        block_size=block_size,
        num_q_heads=num_q_heads,
        num_kv_heads=num_kv_heads,
        head_dim=128 if num_q_heads == 32 else 64,
        kv_dtype=kv_dtype,
        q_dtype=q_dtype,
        seed=context_len + block_size,
    )
    scale = 1 / math.sqrt(case.q.shape[-1])
    ref = paged_decode_attention_ref(case.q, case.k_cache, case.v_cache, case.block_tables,
                                     case.context_lens, scale, case.k_scale, case.v_scale)  # fmt: skip
    case = _to_cuda(case)
    out = paged_decode_attention(case.q, case.k_cache, case.v_cache, case.block_tables,
                                 case.context_lens, k_scale=case.k_scale, v_scale=case.v_scale,
                                 backend=backend)  # fmt: skip
    assert out.is_cuda and out.dtype == q_dtype
    assert_close(out.cpu(), ref, tolerance_key_for_dtype(q_dtype))


@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("m", [1, 7, 64, 256])
def test_int4_tinygemm_cuda(m, group_size):
    w = torch.randn(512, 1024) / 32
    lin = QuantizedLinear.from_float(w, "int4", act_dtype=torch.bfloat16, device=CUDA,
                                     group_size=group_size)  # fmt: skip
    assert lin.use_fused
    x = torch.randn(m, 1024).to(torch.bfloat16)
    q = lin.int4
    ref = quant_matmul_ref(x, q.qweight.cpu(), q.scales.cpu(), q.zeros.cpu(), group_size)
    assert_close(lin(x.to(CUDA)).cpu(), ref, "bf16")


@pytest.mark.parametrize("act_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m", [1, 7, 64, 256])
def test_int8_weight_only_cuda(m, act_dtype):
    w = torch.randn(512, 1024) / 32
    lin = QuantizedLinear.from_float(w, "int8", act_dtype=act_dtype, device=CUDA)
    assert lin.kernel_name == ("triton-w8a16" if HAS_TRITON else "aten._weight_int8pack_mm")
    x = torch.randn(m, 1024).to(act_dtype)
    ref = quant_matmul_ref(x, lin.int8.qweight.cpu(), lin.int8.scales.cpu())
    assert_close(lin(x.to(CUDA)).cpu(), ref, tolerance_key_for_dtype(act_dtype))


@pytest.mark.parametrize("weight_format", ["dense", "int8", "int4"])
def test_decode_stack_cuda(weight_format):
    cfg = CONFIGS["tiny"]
    stack = build_decode_stack(cfg, weight_format, torch.bfloat16, CUDA, seed=1, num_blocks=32)
    table = torch.randperm(32)[:24].reshape(3, 8).to(torch.int32)
    ctx = torch.tensor([1, 17, 100], dtype=torch.int32)
    x = torch.randn(3, cfg.hidden).to(torch.bfloat16)
    k_ref = [c.cpu().clone() for c in stack.k_caches]
    v_ref = [c.cpu().clone() for c in stack.v_caches]
    expected = decode_step_ref(cfg, stack.reference_weights(), k_ref, v_ref, x, table, ctx)
    out = stack.step(x.to(CUDA), table.to(CUDA), ctx.to(CUDA))
    assert_close(out.cpu(), expected, "bf16_stack")


@needs_triton
@pytest.mark.parametrize("num_splits", [None, 1, 5])
def test_split_kv_cuda(num_splits):
    """Batch 1, 4096 tokens: the auto split count fills the GPU (flash-decoding); any count matches the reference."""
    case = _to_cuda(make_paged_case([4096], block_size=16, num_q_heads=32, num_kv_heads=8, head_dim=128,
                                    kv_dtype=torch.bfloat16, q_dtype=torch.bfloat16, seed=3))
    ref = paged_decode_attention_ref(case.q.cpu(), case.k_cache.cpu(), case.v_cache.cpu(), case.block_tables.cpu(),
                                     case.context_lens.cpu(), 1 / math.sqrt(128))
    out = paged_decode_attention(case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens,
                                 backend="triton", num_splits=num_splits)
    assert_close(out.cpu(), ref, "bf16")


def test_cuda_timing_and_fingerprint():
    x = torch.randn(1024, 1024, device=CUDA)
    stats = time_fn(lambda: x @ x, warmup=2, reps=5, device=CUDA, flush_bytes=64 * 2**20)
    assert 0 < stats["min_ms"] <= stats["median_ms"] <= stats["p90_ms"] and stats["flushed"]
    assert stats["method"] in ("cuda-events+host-ahead", "cuda-events")
    small = torch.randn(256, device=CUDA)
    st = time_fn(lambda: small.mul_(1.0), warmup=2, reps=5, device=CUDA)
    # calls under GRAPH_BELOW_MS (50 us) are also timed as a CUDA-graph replay, the others are not
    assert ("graph_ms" in st) == (st["median_ms"] < GRAPH_BELOW_MS)
    assert st.get("graph_ms", 1.0) > 0
    fp = device_fingerprint(CUDA)
    assert fp["gpu_name"] and fp["gpu_memory_gib"] > 0
    bw = stream_bandwidth_gbs(CUDA, n_bytes=256 * 2**20, reps=3)
    assert bw["copy_gbs"] > 0 and bw["triad_gbs"] > 0
