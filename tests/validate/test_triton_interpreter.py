"""The GPU code path without a GPU: the Triton kernels (paged decode attention, one pass and split-KV, and the
w8a16 int8 GEMM) run in the Triton interpreter (``TRITON_INTERPRET=1``, set by conftest.py when torch sees no CUDA;
CPU tensors) and are compared with the naive references of validate/reference.py, with the tolerances of
validate/tolerances.py.

Grid: GQA group 1 / 4 / 8 x head_dim 64 / 128 x block 16 / 32 x every KV dtype (fp32, bf16, fp16, int8, fp8),
ragged batches (a long sequence, a shorter odd one, a single token: partial last blocks, empty splits) over caches
whose unused blocks, tail slots and table entries are NaN-poisoned (tests/validate/conftest.py). head_dim 128 runs
the split-KV pass (4 splits) and head_dim 64 the one-pass kernel, so every dtype / group / block meets both.
About 15 s on 2 cores; CI installs the pinned triton of the ``test`` extra.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

from validate.kernels import paged_attention as pa
from validate.kernels import quant_matmul as qm
from validate.reference import paged_decode_attention_ref, quant_matmul_ref
from validate.tolerances import assert_close, tolerance_key_for_dtype

from .conftest import make_paged_case

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA, test_gpu_kernels.py runs these kernels")

KV = [
    pytest.param(torch.float32, torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, id="bf16"),
    pytest.param(torch.float16, torch.float16, id="fp16"),
    pytest.param(torch.int8, torch.bfloat16, id="int8"),
    pytest.param(torch.float8_e4m3fn, torch.bfloat16, id="fp8"),
]


def test_interpreter_is_on_and_triton_is_installed():
    # the `test` extra pins triton; without it these tests would prove nothing
    assert pa.HAS_TRITON and qm.HAS_TRITON
    assert os.environ.get("TRITON_INTERPRET") == "1" and pa.interpreter_on()


def _attention(case, num_splits):
    return pa.paged_decode_attention(case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens,
                                     k_scale=case.k_scale, v_scale=case.v_scale, backend="triton",
                                     num_splits=num_splits)


def _reference(case):
    return paged_decode_attention_ref(case.q, case.k_cache, case.v_cache, case.block_tables, case.context_lens,
                                      1.0 / math.sqrt(case.q.shape[-1]), case.k_scale, case.v_scale)


@pytest.mark.parametrize("kv_dtype,q_dtype", KV)
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_triton_paged_attention_matches_reference(group, head_dim, block_size, kv_dtype, q_dtype):
    num_kv_heads = 2
    case = make_paged_case([77, 77 * 7 // 13 + 2, 1], block_size=block_size, num_q_heads=group * num_kv_heads,
                           num_kv_heads=num_kv_heads, head_dim=head_dim, kv_dtype=kv_dtype, q_dtype=q_dtype,
                           seed=group * 1000 + head_dim + block_size)
    splits = 4 if head_dim == 128 else 1
    out = _attention(case, splits)
    assert out.dtype == q_dtype and out.shape == case.q.shape
    assert_close(out, _reference(case), tolerance_key_for_dtype(q_dtype), f"splits={splits}")


def test_split_counts_agree_with_one_pass():
    """Any split count gives the one-pass answer (fp32: only the order of the online-softmax merges differs)."""
    case = make_paged_case([200, 33, 1, 16], block_size=16, num_q_heads=8, num_kv_heads=2, head_dim=64, seed=5)
    one = _attention(case, 1)
    assert_close(one, _reference(case), "fp32")
    for s in (2, 3, 7, 64):  # 64 > the table's 15 columns: clipped to one block per split
        assert_close(_attention(case, s), one, "fp32", f"splits={s}")
    assert torch.isfinite(one).all()


def test_split_count_heuristic():
    """Llama-3-8B (8 kv heads) at batch 1 on an H200 (132 SMs), 4096 tokens in blocks of 16 = 256 table columns:
    2 x 132 / 8 = 33 splits (264 programs, 2 waves) of ceil(256 / 33) = 8 blocks. Batch 32 x 8 heads = 256 programs
    already fill 132 SMs: one pass. A short table caps splits at cols / 4 (at least 4 blocks each)."""
    assert pa.num_kv_splits(1, 8, 256, 132) == 33
    assert pa.num_kv_splits(32, 8, 256, 132) == 1
    assert pa.num_kv_splits(1, 8, 12, 132) == 3
    assert pa.num_kv_splits(1, 1, 100_000, 132) == pa.MAX_SPLITS


def test_backend_label_names_what_runs():
    case = make_paged_case([40], block_size=16, num_q_heads=4, num_kv_heads=2, seed=1)
    assert pa.backend_label(case.q, case.k_cache, case.block_tables) == "torch"  # auto on CPU tensors
    assert pa.backend_label(case.q, case.k_cache, case.block_tables, "triton", 3) == "triton-splitkv3"
    assert pa.backend_label(case.q, case.k_cache, case.block_tables, "triton", 1) == "triton"


@pytest.mark.parametrize("act_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m", [1, 5, 33])
def test_triton_w8a16_matches_reference(m, act_dtype):
    """N = 96 and K = 200 are not multiples of the tiles (64, 128): the masks cut the edges."""
    gen = torch.Generator().manual_seed(m)
    w = torch.randn(96, 200, generator=gen) / math.sqrt(200)
    q = qm.quantize_int8_per_channel(w)
    x = torch.randn(m, 200, generator=gen).to(act_dtype)
    scales = q.scales.to(act_dtype)
    y = qm.int8_w8a16_triton(x, q.qweight, scales)
    assert y.dtype == act_dtype and y.shape == (m, 96)
    assert_close(y, quant_matmul_ref(x, q.qweight, scales), tolerance_key_for_dtype(act_dtype))


def test_int4_pack_variant_by_torch_version():
    # tinygemm's CUDA packer took int32 [N, K] codes before torch 2.5 and uint8 [N, K/2] pairs from 2.5 on
    assert qm.int4_pack_variant("2.4.1+cu121") == "int32"
    assert qm.int4_pack_variant("2.5.0") == "uint8"
    assert qm.int4_pack_variant("2.11.0+cu130") == "uint8"
    assert qm.int4_pack_variant("2.13.0+cpu") == "uint8"


def test_quantized_linear_names_its_kernel():
    w = torch.randn(64, 128) / 11
    assert qm.QuantizedLinear.from_float(w, "int8", act_dtype=torch.bfloat16).kernel_name == "aten._weight_int8pack_mm"
    assert qm.QuantizedLinear.from_float(w, "bf16", act_dtype=torch.bfloat16).kernel_name == "F.linear"
    int4 = qm.QuantizedLinear.from_float(w, "int4", act_dtype=torch.bfloat16, group_size=32)
    assert int4.kernel_name == "tinygemm._weight_int4pack_mm_for_cpu"
