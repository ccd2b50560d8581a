"""Shared builders for the kernel tests: paged KV cases with NaN-poisoned padding."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Literal

import torch

# Without a GPU the Triton kernels run in the Triton interpreter (CPU tensors): the variable must be set before
# any module decorates a kernel with @triton.jit (tests/validate/test_triton_interpreter.py runs them).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from validate.kernels.paged_attention import quantize_kv_cache  # noqa: E402

INT8_POISON = -128  # never produced by quantize_kv_cache (it clamps to [-127, 127])


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    """Fixed seed for any test that forgets its own generator."""
    torch.manual_seed(0)


@dataclass
class PagedCase:
    """One paged decode-attention input, plus the clean fp32 caches it was made from."""

    q: torch.Tensor  # [B, Hq, D]
    k_cache: torch.Tensor  # [num_blocks, block_size, Hkv, D], padding poisoned
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [B, max_blocks] int32, shuffled ids, unused entries -> poison block
    context_lens: torch.Tensor  # [B] int32
    k_scale: torch.Tensor | None
    v_scale: torch.Tensor | None
    k_clean: torch.Tensor  # fp32 originals (no poison), for quantized-vs-full comparisons
    v_clean: torch.Tensor
    poison_blocks: list[int]


def make_paged_case(
    context_lens: list[int],
    *,
    block_size: int,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int = 64,
    kv_dtype: torch.dtype = torch.float32,
    q_dtype: torch.dtype = torch.float32,
    granularity: Literal["block_head", "tensor"] = "block_head",
    extra_blocks: int = 3,
    extra_table_cols: int = 2,
    seed: int = 0,
) -> PagedCase:
    """Build a case whose every unused byte would poison the output if read.

    Blocks are handed out in a random permutation (non-contiguous, out of order). Blocks no
    sequence owns and slots ``>= context_len`` in each sequence's last block hold NaN (float and
    fp8 caches) or the int8 code -128 plus a NaN per-block scale for unowned blocks (int8 cannot
    store NaN). Table entries past each sequence's blocks point at a poisoned block.
    """
    gen = torch.Generator().manual_seed(seed)
    per_seq = [math.ceil(c / block_size) for c in context_lens]
    num_blocks = sum(per_seq) + extra_blocks
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    owned, cursor = [], 0
    for n in per_seq:
        owned.append(perm[cursor : cursor + n])
        cursor += n
    poison_blocks = perm[cursor:]
    cols = max(per_seq) + extra_table_cols
    table = torch.full((len(context_lens), cols), poison_blocks[0], dtype=torch.int32)
    for b, ids in enumerate(owned):
        table[b, : len(ids)] = torch.tensor(ids, dtype=torch.int32)

    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_clean = torch.randn(shape, generator=gen)
    v_clean = torch.randn(shape, generator=gen)
    k_scale = v_scale = None
    if kv_dtype in (torch.int8, torch.float8_e4m3fn):
        k_cache, k_scale = quantize_kv_cache(k_clean, kv_dtype, granularity)
        v_cache, v_scale = quantize_kv_cache(v_clean, kv_dtype, granularity)
    else:
        k_cache, v_cache = k_clean.to(kv_dtype), v_clean.to(kv_dtype)

    poison = INT8_POISON if kv_dtype == torch.int8 else float("nan")
    for cache in (k_cache, v_cache):
        if kv_dtype == torch.float8_e4m3fn:
            nan_code = torch.tensor(float("nan")).to(torch.float8_e4m3fn)
            view = cache.view(torch.uint8)
            fill = int(nan_code.view(torch.uint8))
            for blk in poison_blocks:
                view[blk] = fill
            for ids, c in zip(owned, context_lens):
                view[ids[-1], (c - 1) % block_size + 1 :] = fill
            continue
        for blk in poison_blocks:
            cache[blk] = poison
        for ids, c in zip(owned, context_lens):
            cache[ids[-1], (c - 1) % block_size + 1 :] = poison
    if kv_dtype == torch.int8 and granularity == "block_head":
        for s in (k_scale, v_scale):
            assert s is not None
            s[poison_blocks] = float("nan")

    q = torch.randn(len(context_lens), num_q_heads, head_dim, generator=gen).to(q_dtype)
    return PagedCase(
        q=q,
        k_cache=k_cache,
        v_cache=v_cache,
        block_tables=table,
        context_lens=torch.tensor(context_lens, dtype=torch.int32),
        k_scale=k_scale,
        v_scale=v_scale,
        k_clean=k_clean,
        v_clean=v_clean,
        poison_blocks=poison_blocks,
    )


@pytest.fixture
def paged_case() -> Callable[..., PagedCase]:
    """The :func:`make_paged_case` builder."""
    return make_paged_case
