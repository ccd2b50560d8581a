"""Paged-KV decode attention: one query token per sequence over a block-paged KV cache.

Layout (vLLM / FlashInfer "NHD" pages)::

    q             [batch, num_q_heads, head_dim]                      fp32 / bf16 / fp16
    k_cache       [num_blocks, block_size, num_kv_heads, head_dim]    fp32 / bf16 / fp16 / int8 / fp8 e4m3fn
    v_cache       same as k_cache
    block_tables  [batch, max_blocks_per_seq]   int32, block ids (any order, need not be contiguous)
    context_lens  [batch]                       int32, tokens of each sequence (>= 1)

Token ``t`` of sequence ``b`` lives in slot ``t % block_size`` of block
``block_tables[b, t // block_size]``. Table entries past ``ceil(context_lens[b] / block_size)``
and slots ``>= context_lens[b]`` are never used: they may hold anything (NaN, -1 ids), and the
kernels make sure none of it reaches the output. Query head ``h`` uses kv head
``h // (num_q_heads // num_kv_heads)`` (GQA; MHA when the counts are equal).

KV scales (int8 / fp8 caches; ignored for float caches -- pass ``None``): either **per tensor**
(a Python float or 0-d tensor) or **per (block, kv head)**, a tensor ``[num_blocks, num_kv_heads]``;
the real value of a stored code ``c`` in block ``b``, kv head ``h`` is ``float(c) * scale[b, h]``.
:func:`quantize_kv_cache` produces either granularity (symmetric absmax: int8 scale = amax/127,
fp8 e4m3fn scale = amax/448).

Backends: ``"torch"`` (vectorized torch, any device; used on CPU) walks each sequence's block
table in chunks of blocks (about 4 MiB of fp32 K each); each chunk ``index_select``s only that
sequence's blocks (native dtype, one copy; non-fp32 caches converted to fp32 in cache), computes
the scores of all query heads of every KV group in one batched matmul and folds them into an
fp32 online softmax (running max, sum and numerator), so the working set stays cache-sized, the
whole cache is never densified, and a mixed-length batch costs the sum of its contexts.
Compute is fp32 whatever the cache dtype.

``"triton"`` (CUDA) follows the vLLM / FlashInfer decode design: one program per (sequence,
kv head) holding that head's group of query heads, a loop over the sequence's blocks through its
block table, masked loads of the last partial block (padding is never loaded), and an fp32 online
softmax. It was validated on CPU under ``TRITON_INTERPRET=1`` only. ``"auto"`` picks Triton on
CUDA when it is importable and the torch path otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from ._triton import HAS_TRITON, tl, triton  # noqa: F401  (optional: absent on CPU-only installs)

__all__ = [
    "HAS_TRITON",
    "KVScale",
    "AttentionCost",
    "paged_decode_attention",
    "quantize_kv_cache",
    "paged_attention_cost",
]

KVScale = float | torch.Tensor | None
Backend = Literal["auto", "torch", "triton"]

_QUANT_KV_DTYPES = (torch.int8, torch.float8_e4m3fn)
_FLOAT_KV_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_INT8_MAX = 127.0
_FP8_E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


# --------------------------------------------------------------------------------------------
# KV quantization
# --------------------------------------------------------------------------------------------


def quantize_kv_cache(
    cache: torch.Tensor,
    kv_dtype: torch.dtype,
    granularity: Literal["block_head", "tensor"] = "block_head",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a float cache ``[num_blocks, block_size, num_kv_heads, head_dim]`` symmetrically.

    ``amax`` is taken over each (block, kv head) -- i.e. over ``block_size x head_dim`` values --
    or over the whole tensor; ``scale = amax / qmax`` with ``qmax = 127`` (int8) or ``448``
    (fp8 e4m3fn); codes are ``round(x / scale)`` clamped to ``[-127, 127]`` (int8; -128 is never
    produced) or ``(x / scale).to(float8_e4m3fn)`` (round to nearest even). Returns
    ``(codes, scale)`` with ``scale`` fp32 of shape ``[num_blocks, num_kv_heads]`` or ``[]``.
    The input must be finite (quantize first, poison padding afterwards).
    """
    if kv_dtype not in _QUANT_KV_DTYPES:
        raise ValueError(f"kv_dtype must be int8 or float8_e4m3fn, got {kv_dtype}")
    x = cache.float()
    if granularity == "block_head":
        amax = x.abs().amax(dim=(1, 3))  # [num_blocks, num_kv_heads]
    elif granularity == "tensor":
        amax = x.abs().amax()  # []
    else:
        raise ValueError(f"granularity must be 'block_head' or 'tensor', got {granularity!r}")
    qmax = _INT8_MAX if kv_dtype == torch.int8 else _FP8_E4M3_MAX
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))  # all-zero block -> 1
    bscale = scale[:, None, :, None] if granularity == "block_head" else scale
    if kv_dtype == torch.int8:
        codes = torch.round(x / bscale).clamp_(-_INT8_MAX, _INT8_MAX).to(torch.int8)
    else:
        codes = (x / bscale).clamp_(-_FP8_E4M3_MAX, _FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return codes, scale.float()


# --------------------------------------------------------------------------------------------
# cost accounting
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionCost:
    """Bytes and FLOPs of one paged decode-attention call (all bytes are exact, in bytes).

    * ``kv_bytes = 2 * sum(ctx) * num_kv_heads * head_dim * kv_elem_bytes`` (K and V, only the
      ``ctx`` live tokens; masked tail slots are not loaded by the Triton kernel);
    * ``scale_bytes = 2 * sum(ceil(ctx / block_size)) * num_kv_heads * 4`` for per-(block, head)
      fp32 scales, ``2 * 4`` per tensor, 0 for float caches;
    * ``block_table_bytes = sum(ceil(ctx / block_size)) * 4`` (int32 ids actually dereferenced);
    * ``q_bytes`` / ``out_bytes = batch * num_q_heads * head_dim * q_elem_bytes``;
    * ``flops = 4 * sum(ctx) * num_q_heads * head_dim`` (2 for q.k, 2 for p.v; the softmax's
      exp/max/sum are not counted).
    """

    kv_bytes: int
    scale_bytes: int
    block_table_bytes: int
    q_bytes: int
    out_bytes: int
    flops: int

    @property
    def total_bytes(self) -> int:
        """Sum of every byte read or written."""
        return (
            self.kv_bytes + self.scale_bytes + self.block_table_bytes + self.q_bytes + self.out_bytes
        )


def paged_attention_cost(
    context_lens: Sequence[int],
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    kv_dtype: torch.dtype,
    q_dtype: torch.dtype,
    block_size: int = 16,
    scale_granularity: Literal["block_head", "tensor"] | None = None,
) -> AttentionCost:
    """Exact bytes moved and FLOPs of one call; formulas in :class:`AttentionCost`."""
    ctx = [int(c) for c in context_lens]
    tokens = sum(ctx)
    blocks = sum(math.ceil(c / block_size) for c in ctx)
    if kv_dtype in _QUANT_KV_DTYPES:
        granularity = scale_granularity or "block_head"
        scale_bytes = 2 * (blocks * num_kv_heads * 4 if granularity == "block_head" else 4)
    else:
        scale_bytes = 0
    qo = len(ctx) * num_q_heads * head_dim * q_dtype.itemsize
    return AttentionCost(
        kv_bytes=2 * tokens * num_kv_heads * head_dim * kv_dtype.itemsize,
        scale_bytes=scale_bytes,
        block_table_bytes=blocks * 4,
        q_bytes=qo,
        out_bytes=qo,
        flops=4 * tokens * num_q_heads * head_dim,
    )


# --------------------------------------------------------------------------------------------
# torch backend
# --------------------------------------------------------------------------------------------


def _block_scales(scale: KVScale, ids: torch.Tensor, device: torch.device) -> torch.Tensor | float | None:
    """Scale of each gathered block as [Hkv, nb] fp32, a Python float (per tensor) or None (float
    cache). ``ids`` are the live blocks of one sequence, so no garbage scale is ever read."""
    if scale is None:
        return None
    if isinstance(scale, torch.Tensor) and scale.dim() == 2:  # per (block, kv head)
        return scale.to(device, torch.float32).index_select(0, ids).T  # [Hkv, nb]
    return float(scale)


def _gather_fp32(
    cache: torch.Tensor, ids: torch.Tensor, batch: int, nb: int, block_size: int
) -> torch.Tensor:
    """Pages ``ids`` [batch * nb] of ``cache`` as one fp32 tensor [batch, nb * block_size, Hkv, D].

    ``index_select`` reads only the named blocks (one contiguous copy in the native dtype, token
    major as stored); fp32 caches are used as gathered, other dtypes are converted in one more
    cache-resident copy. The attention matmuls then read K / V through strided [Hkv, T, D] views.
    """
    _, _, hkv, d = cache.shape
    pages = cache.index_select(0, ids.reshape(-1))  # [batch * nb, bs, Hkv, D], native dtype
    if pages.dtype != torch.float32:
        pages = pages.to(torch.float32)
    return pages.view(batch, nb * block_size, hkv, d)


def _paged_decode_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    k_scale: KVScale,
    v_scale: KVScale,
    chunk_bytes: int = 4 * 2**20,
) -> torch.Tensor:
    """Per sequence, chunks of its own blocks + an fp32 online softmax.

    Each sequence is processed alone, so a batch of different lengths costs the sum of its
    contexts (never batch x the longest). A chunk gathers ``nb`` of the sequence's blocks (about
    ``chunk_bytes`` of fp32 K, so that the working set stays in cache) and handles all query heads
    of every KV group in one batched matmul per operand: scores [Hkv, G, T] = q [Hkv, G, D] @ K^T,
    then out += p [Hkv, G, T] @ V [Hkv, T, D]. Slots past the context in the last block are cut
    off by slicing (never read into the softmax or the value sum). KV scales multiply the scores
    (K) and the probabilities (V) rather than the gathered pages.
    """
    batch, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_q_heads // num_kv_heads
    dev = q.device
    ctx_list = [int(c) for c in context_lens.tolist()]
    token_bytes = num_kv_heads * head_dim * 4
    chunk_blocks = max(1, chunk_bytes // (block_size * token_bytes))
    tables = block_tables.to(dev, torch.long)
    qf = q.float().reshape(batch, num_kv_heads, group, head_dim) * scale  # [B, Hkv, G, D]
    out = torch.empty((batch, num_kv_heads, group, head_dim), dtype=torch.float32, device=dev)

    for b, ctx in enumerate(ctx_list):
        n_blocks = math.ceil(ctx / block_size)
        m = l = acc = None
        for first in range(0, n_blocks, chunk_blocks):
            nb = min(chunk_blocks, n_blocks - first)
            live = min(ctx - first * block_size, nb * block_size)  # tokens of this chunk in context
            ids = tables[b, first : first + nb]
            k = _gather_fp32(k_cache, ids, 1, nb, block_size)[0]  # [T, Hkv, D]
            v = _gather_fp32(v_cache, ids, 1, nb, block_size)[0, :live]  # [live, Hkv, D]
            s = torch.matmul(qf[b], k.permute(1, 2, 0))  # [Hkv, G, T]
            ks = _block_scales(k_scale, ids, dev)
            if isinstance(ks, torch.Tensor):
                s = (s.view(num_kv_heads, group, nb, block_size) * ks[:, None, :, None]).view(
                    num_kv_heads, group, nb * block_size
                )
            elif ks is not None:
                s = s * ks
            s = s[..., :live]  # slots past the context (NaN / garbage) are never used
            m_c = s.amax(dim=-1)  # [Hkv, G]
            m_new = m_c if m is None else torch.maximum(m, m_c)
            p = torch.exp(s - m_new[..., None])
            vs = _block_scales(v_scale, ids, dev)
            p_sum = p.sum(dim=-1)
            if isinstance(vs, torch.Tensor):
                vtok = vs.repeat_interleave(block_size, dim=1)[:, :live]  # [Hkv, live]
                p = p * vtok[:, None, :]
            elif vs is not None:
                p = p * vs
            pv = torch.matmul(p, v.transpose(0, 1))  # [Hkv, G, D]
            if m is None:
                l, acc = p_sum, pv
            else:
                alpha = torch.exp(m - m_new)
                l = l * alpha + p_sum
                acc = acc * alpha[..., None] + pv
            m = m_new
        out[b] = acc / l[..., None]
    return out.reshape(batch, num_q_heads, head_dim).to(q.dtype)


# --------------------------------------------------------------------------------------------
# Triton backend (CUDA)
# --------------------------------------------------------------------------------------------

if HAS_TRITON:

    @triton.jit
    def _paged_decode_attention_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        bt_ptr,
        cl_ptr,
        out_ptr,
        ks_ptr,
        vs_ptr,
        m_ptr,
        l_ptr,
        sm_scale,
        blocks_per_split,
        stride_qb,
        stride_qh,
        stride_kb,
        stride_kt,
        stride_kh,
        stride_vb,
        stride_vt,
        stride_vh,
        stride_btb,
        stride_ob,
        stride_oh,
        stride_os,
        stride_sb,
        GROUP: tl.constexpr,
        GROUP_PAD: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEAD_DIM_PAD: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        SCALE_MODE: tl.constexpr,  # 0: float cache, 1: per-tensor scale, 2: per-(block, kv head)
        SPLIT: tl.constexpr,  # False: write the normalized output; True: write (m, l, acc) partials
    ):
        """One program = one (sequence, kv head, split); it serves the GROUP query heads of that
        kv head over blocks [split * blocks_per_split, (split + 1) * blocks_per_split) of the
        sequence (the whole sequence when not split)."""
        seq = tl.program_id(0).to(tl.int64)
        kv_head = tl.program_id(1).to(tl.int64)
        split = tl.program_id(2).to(tl.int64)
        ctx = tl.load(cl_ptr + seq).to(tl.int32)

        g = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, HEAD_DIM_PAD)
        t = tl.arange(0, BLOCK_SIZE)
        g_mask = g < GROUP
        d_mask = d < HEAD_DIM
        q_heads = kv_head * GROUP + g  # [GROUP_PAD]

        q_offs = seq * stride_qb + q_heads[:, None] * stride_qh + d[None, :]
        q_mask = g_mask[:, None] & d_mask[None, :]
        q = tl.load(q_ptr + q_offs, mask=q_mask, other=0.0).to(tl.float32) * sm_scale

        m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
        acc = tl.zeros([GROUP_PAD, HEAD_DIM_PAD], dtype=tl.float32)

        num_blocks = tl.cdiv(ctx, BLOCK_SIZE)
        first = (split * blocks_per_split).to(tl.int32)
        last = tl.minimum(first + blocks_per_split, num_blocks)  # a split past the end runs no block
        for i in range(first, last):
            block = tl.load(bt_ptr + seq * stride_btb + i).to(tl.int64)
            pos = i * BLOCK_SIZE + t
            t_mask = pos < ctx  # only the last block can be partial
            kv_mask = t_mask[:, None] & d_mask[None, :]
            k = tl.load(
                k_ptr + block * stride_kb + t[:, None] * stride_kt + kv_head * stride_kh + d[None, :],
                mask=kv_mask,
                other=0.0,
            ).to(tl.float32)  # [BLOCK_SIZE, HEAD_DIM_PAD]
            v = tl.load(
                v_ptr + block * stride_vb + t[:, None] * stride_vt + kv_head * stride_vh + d[None, :],
                mask=kv_mask,
                other=0.0,
            ).to(tl.float32)
            if SCALE_MODE == 1:
                k = k * tl.load(ks_ptr)
                v = v * tl.load(vs_ptr)
            elif SCALE_MODE == 2:
                k = k * tl.load(ks_ptr + block * stride_sb + kv_head)
                v = v * tl.load(vs_ptr + block * stride_sb + kv_head)

            # Scores without tl.dot so any power-of-2 block size (1..) and group size works.
            s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # [GROUP_PAD, BLOCK_SIZE]
            s = tl.where(t_mask[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: slot 0 of a live block is in context
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
            m_i = m_new

        if SPLIT:
            # partials of split s: m [B, Hq, S], l [B, Hq, S], acc [B, Hq, S, D] (fp32, unnormalized)
            ml_offs = (seq * tl.num_programs(1) * GROUP + q_heads) * tl.num_programs(2) + split
            tl.store(m_ptr + ml_offs, m_i, mask=g_mask)
            tl.store(l_ptr + ml_offs, l_i, mask=g_mask)
            a_offs = seq * stride_ob + q_heads[:, None] * stride_oh + split * stride_os + d[None, :]
            tl.store(out_ptr + a_offs, acc, mask=q_mask)
        else:
            out = acc / l_i[:, None]
            o_offs = seq * stride_ob + q_heads[:, None] * stride_oh + d[None, :]
            tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=q_mask)

    @triton.jit
    def _combine_splits_kernel(
        m_ptr,
        l_ptr,
        acc_ptr,
        out_ptr,
        num_splits,
        stride_ob,
        stride_oh,
        HEAD_DIM: tl.constexpr,
        HEAD_DIM_PAD: tl.constexpr,
        SPLITS_PAD: tl.constexpr,
    ):
        """One program = one (sequence, query head): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M),
        M = max_s m_s (empty splits hold m = -inf, l = 0, acc = 0 and weigh 0)."""
        seq = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1).to(tl.int64)
        num_heads = tl.num_programs(1).to(tl.int64)
        s = tl.arange(0, SPLITS_PAD)
        d = tl.arange(0, HEAD_DIM_PAD)
        s_mask = s < num_splits
        d_mask = d < HEAD_DIM
        row = (seq * num_heads + head) * num_splits
        m = tl.load(m_ptr + row + s, mask=s_mask, other=float("-inf"))
        l = tl.load(l_ptr + row + s, mask=s_mask, other=0.0)
        acc = tl.load(acc_ptr + (row + s[:, None]) * HEAD_DIM + d[None, :],
                      mask=s_mask[:, None] & d_mask[None, :], other=0.0)
        m_max = tl.max(m, axis=0)
        w = tl.exp(m - m_max)  # 0 for empty splits (m = -inf)
        out = tl.sum(acc * w[:, None], axis=0) / tl.sum(l * w, axis=0)
        tl.store(out_ptr + seq * stride_ob + head * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=d_mask)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _scale_operand(scale: KVScale, device: torch.device) -> tuple[torch.Tensor, int, int]:
    """(fp32 tensor, SCALE_MODE, stride over blocks) for the Triton kernel."""
    if scale is None:
        return torch.ones(1, device=device), 0, 0
    if isinstance(scale, torch.Tensor) and scale.dim() == 2:
        s = scale.to(device, torch.float32).contiguous()
        return s, 2, s.stride(0)
    s = scale if isinstance(scale, torch.Tensor) else torch.tensor(float(scale))
    return s.to(device, torch.float32).reshape(1), 1, 0


MAX_SPLITS = 64
MIN_BLOCKS_PER_SPLIT = 4


def num_kv_splits(batch: int, num_kv_heads: int, table_cols: int, sm_count: int) -> int:
    """Flash-decoding split count: enough (sequence, kv head, split) programs to fill about 2 waves of
    the GPU's ``sm_count`` SMs, each split at least MIN_BLOCKS_PER_SPLIT KV blocks long, at most
    MAX_SPLITS. One split (no combine pass) once batch x kv heads already fills the GPU.

    Batch 1 of Llama-3-8B (8 kv heads) on an H200 (132 SMs) at 4096 tokens, block 16: 256 table columns,
    ceil(264 / 8) = 33 splits of 8 blocks -> 264 programs instead of 8.
    """
    programs = batch * num_kv_heads
    if programs >= sm_count:
        return 1
    want = -(-2 * sm_count // programs)
    return max(1, min(want, table_cols // MIN_BLOCKS_PER_SPLIT, MAX_SPLITS))


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1  # the Triton interpreter (CPU tensors): no SMs to fill


def _paged_decode_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    k_scale: KVScale,
    v_scale: KVScale,
    num_splits: int | None = None,
) -> torch.Tensor:
    """``num_splits``: None picks :func:`num_kv_splits`; 1 runs one pass per (sequence, kv head);
    more runs the split-KV (flash-decoding) pass plus a combine pass."""
    batch, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_q_heads // num_kv_heads
    if block_size & (block_size - 1):
        raise ValueError(f"Triton backend needs a power-of-2 block_size, got {block_size}")
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("q, k_cache and v_cache need a contiguous last (head_dim) dimension")
    ks, mode_k, stride_sb = _scale_operand(k_scale, q.device)
    vs, mode_v, stride_sb_v = _scale_operand(v_scale, q.device)
    if mode_k != mode_v or stride_sb != stride_sb_v:
        raise ValueError("k_scale and v_scale must have the same granularity")
    bt = block_tables.to(q.device, torch.int32).contiguous()
    cl = context_lens.to(q.device, torch.int32).contiguous()
    cols = bt.shape[1]
    splits = num_splits or num_kv_splits(batch, num_kv_heads, cols, _sm_count(q.device))
    splits = max(1, min(int(splits), cols))
    per_split = -(-cols // splits)
    out = torch.empty_like(q)
    if splits == 1:
        m = l = target = out
        t_strides = (out.stride(0), out.stride(1), 0)
    else:
        m = torch.empty((batch, num_q_heads, splits), dtype=torch.float32, device=q.device)
        l = torch.empty_like(m)
        target = torch.empty((batch, num_q_heads, splits, head_dim), dtype=torch.float32, device=q.device)
        t_strides = (target.stride(0), target.stride(1), target.stride(2))
    _paged_decode_attention_kernel[(batch, num_kv_heads, splits)](
        q, k_cache, v_cache, bt, cl, target, ks, vs, m, l,
        scale, per_split,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        bt.stride(0),
        *t_strides,
        stride_sb,
        GROUP=group,
        GROUP_PAD=_next_pow2(group),
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=_next_pow2(head_dim),
        BLOCK_SIZE=block_size,
        SCALE_MODE=mode_k,
        SPLIT=splits > 1,
        num_warps=4,
    )  # fmt: skip
    if splits > 1:
        _combine_splits_kernel[(batch, num_q_heads)](
            m, l, target, out, splits, out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, HEAD_DIM_PAD=_next_pow2(head_dim), SPLITS_PAD=_next_pow2(splits),
        )  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------
# public entry
# --------------------------------------------------------------------------------------------


def _check_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    k_scale: KVScale,
    v_scale: KVScale,
) -> None:
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(
            f"expected q [B, Hq, D] and caches [blocks, block_size, Hkv, D]; "
            f"got q {tuple(q.shape)}, k {tuple(k_cache.shape)}, v {tuple(v_cache.shape)}"
        )
    batch, num_q_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    if k_cache.shape[3] != head_dim or num_q_heads % num_kv_heads:
        raise ValueError(f"head_dim mismatch or {num_q_heads} q heads not a multiple of {num_kv_heads}")
    if block_tables.dim() != 2 or block_tables.shape[0] != batch or context_lens.shape != (batch,):
        raise ValueError("block_tables must be [batch, max_blocks] and context_lens [batch]")
    if k_cache.dtype in _QUANT_KV_DTYPES:
        if k_scale is None or v_scale is None:
            raise ValueError(f"{k_cache.dtype} cache needs k_scale and v_scale")
    elif k_cache.dtype not in _FLOAT_KV_DTYPES:
        raise ValueError(f"unsupported KV dtype {k_cache.dtype}")
    if context_lens.device.type == "cpu":  # cheap check; avoided on GPU to keep the call async
        if int(context_lens.min()) < 1:
            raise ValueError("every context length must be >= 1")
        needed = math.ceil(int(context_lens.max()) / k_cache.shape[1])
        if needed > block_tables.shape[1]:
            raise ValueError(f"block_tables has {block_tables.shape[1]} columns, need {needed}")


def resolve_backend(q: torch.Tensor, k_cache: torch.Tensor, backend: Backend = "auto") -> str:
    """The backend a call with these operands runs: ``"triton"`` or ``"torch"`` (``"auto"`` resolved:
    Triton on CUDA when importable, except fp8 caches below sm_89)."""
    if backend != "auto":
        return backend
    use_triton = q.is_cuda and HAS_TRITON
    if use_triton and k_cache.dtype == torch.float8_e4m3fn:
        use_triton = torch.cuda.get_device_capability(q.device) >= (8, 9)
    return "triton" if use_triton else "torch"


def backend_label(q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor,
                  backend: Backend = "auto", num_splits: int | None = None) -> str:
    """What ran, for records: ``torch``, ``triton`` (one pass) or ``triton-splitkv<S>`` (S splits + combine)."""
    name = resolve_backend(q, k_cache, backend)
    if name != "triton":
        return name
    cols = block_tables.shape[1]
    s = num_splits or num_kv_splits(q.shape[0], k_cache.shape[2], cols, _sm_count(q.device))
    s = max(1, min(int(s), cols))
    return "triton" if s == 1 else f"triton-splitkv{s}"


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float | None = None,
    k_scale: KVScale = None,
    v_scale: KVScale = None,
    *,
    backend: Backend = "auto",
    num_splits: int | None = None,
) -> torch.Tensor:
    """Decode attention ``softmax(scale * q K^T) V`` over a paged KV cache (see module docstring).

    ``scale`` defaults to ``1 / sqrt(head_dim)``. Returns ``[batch, num_q_heads, head_dim]`` in
    ``q.dtype``; softmax and accumulation are fp32 in both backends. ``backend="auto"`` uses Triton
    on CUDA when available (fp8 caches need sm_89+, else the torch path), torch otherwise.
    ``num_splits`` (Triton): KV splits per sequence (None: :func:`num_kv_splits` for the GPU).
    Triton on CPU tensors runs only under the Triton interpreter (``TRITON_INTERPRET=1``).
    """
    _check_inputs(q, k_cache, v_cache, block_tables, context_lens, k_scale, v_scale)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    backend = resolve_backend(q, k_cache, backend)
    if backend == "triton":
        if not HAS_TRITON or not (q.is_cuda or interpreter_on()):
            raise RuntimeError("the Triton backend needs triton and CUDA tensors (or TRITON_INTERPRET=1)")
        return _paged_decode_attention_triton(
            q, k_cache, v_cache, block_tables, context_lens, scale, k_scale, v_scale, num_splits
        )
    if backend != "torch":
        raise ValueError(f"unknown backend {backend!r}")
    return _paged_decode_attention_torch(
        q, k_cache, v_cache, block_tables, context_lens, scale, k_scale, v_scale
    )


def interpreter_on() -> bool:
    """True when Triton kernels run in the Triton interpreter (``TRITON_INTERPRET=1``: CPU tensors)."""
    import os

    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
