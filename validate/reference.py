"""Deliberately naive fp32 references for the kernels in :mod:`validate.kernels`.

These are written for obviousness, not speed: the paged-attention reference walks each
sequence's block table token by token; the quantized matmul reference dequantizes the codes to
an fp32 weight and multiplies; the decode-step reference runs the layer stack with plain fp32
tensor ops. Every reference returns fp32. Kernel tests compare against them with the tolerances
of :mod:`validate.tolerances`.

KV-cache scale convention (shared with :mod:`validate.kernels.paged_attention`): for an int8 or
fp8 cache, ``k_scale`` / ``v_scale`` is either a per-tensor scale (a Python float or a 0-d
tensor) or a per-(block, kv head) scale tensor of shape ``[num_blocks, num_kv_heads]``; the stored
code ``c`` of block ``b``, head ``h`` stands for ``float(c) * scale[b, h]``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

__all__ = [
    "dequantize_kv",
    "paged_decode_attention_ref",
    "quant_matmul_ref",
    "rms_norm_ref",
    "rope_ref",
    "decode_step_ref",
]


def _scale_at(scale: float | torch.Tensor | None, block: int, head: int) -> float:
    """Scale of (block, kv head) under the KV-scale convention of this module."""
    if scale is None:
        return 1.0
    if isinstance(scale, torch.Tensor):
        if scale.dim() == 0:
            return float(scale)
        return float(scale[block, head])
    return float(scale)


def dequantize_kv(
    codes: torch.Tensor, block: int, scale: float | torch.Tensor | None
) -> torch.Tensor:
    """fp32 values of one cache slot ``codes`` [num_kv_heads, head_dim] that lives in ``block``."""
    out = codes.float().clone()
    for h in range(codes.shape[0]):
        out[h] *= _scale_at(scale, block, h)
    return out


def paged_decode_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    k_scale: float | torch.Tensor | None = None,
    v_scale: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Single-query attention over a paged KV cache, one token at a time, in fp32.

    Shapes: ``q`` [batch, num_q_heads, head_dim]; ``k_cache``/``v_cache``
    [num_blocks, block_size, num_kv_heads, head_dim]; ``block_tables`` [batch, max_blocks] (int);
    ``context_lens`` [batch] (>= 1). Token ``t`` of sequence ``b`` is slot ``t % block_size`` of
    block ``block_tables[b, t // block_size]``; only ``t < context_lens[b]`` is ever read. Query
    head ``h`` attends with kv head ``h // (num_q_heads // num_kv_heads)`` (GQA; MHA when equal).

    ``out[b, h] = sum_t softmax_t(scale * q[b,h] . k_t) * v_t``; returns fp32 [batch, num_q_heads, head_dim].
    """
    batch, num_q_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    out = torch.zeros(batch, num_q_heads, head_dim, dtype=torch.float32)
    for b in range(batch):
        n = int(context_lens[b])
        keys, values = [], []
        for t in range(n):  # walk the block table token by token
            block = int(block_tables[b, t // block_size])
            slot = t % block_size
            keys.append(dequantize_kv(k_cache[block, slot].cpu(), block, k_scale))
            values.append(dequantize_kv(v_cache[block, slot].cpu(), block, v_scale))
        k = torch.stack(keys)  # [n, num_kv_heads, head_dim]
        v = torch.stack(values)
        for h in range(num_q_heads):
            kv_h = h // group
            scores = (k[:, kv_h, :] @ q[b, h].float().cpu()) * scale  # [n]
            probs = torch.softmax(scores, dim=0)
            out[b, h] = probs @ v[:, kv_h, :]
    return out


def quant_matmul_ref(
    x: torch.Tensor,
    qweight_unpacked_int: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None = None,
    group_size: int | None = None,
    *,
    mid_code: int = 8,
) -> torch.Tensor:
    """``x @ dequant(W).T`` in fp32: dequantize the integer codes, then one fp32 matmul.

    ``qweight_unpacked_int`` [N, K] holds one integer code per weight (not packed).
    ``scales`` (and ``zeros``) are [N] (per output channel, ``group_size=None``) or
    [N, K // group_size] (group-wise along K).

    * symmetric (``zeros is None``): ``w = q * scale`` (signed codes, e.g. int8 in [-128, 127]);
    * asymmetric (``zeros`` given): ``w = (q - mid_code) * scale + zero`` -- tinygemm's convention,
      where codes are unsigned (int4: 0..15, ``mid_code = 8``) and ``zero`` is the real value of the
      middle code (not an integer zero point).

    ``x`` [M, K]; returns fp32 [M, N].
    """
    q = qweight_unpacked_int.float()
    n, k = q.shape
    s = scales.float()
    z = zeros.float() if zeros is not None else None
    if group_size is not None:
        if k % group_size:
            raise ValueError(f"K={k} not a multiple of group_size={group_size}")
        s = s.repeat_interleave(group_size, dim=1)  # [N, K]
        z = z.repeat_interleave(group_size, dim=1) if z is not None else None
    else:
        s = s.reshape(n, 1)
        z = z.reshape(n, 1) if z is not None else None
    w = q * s if z is None else (q - mid_code) * s + z
    return x.float() @ w.T


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim, in fp32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()


def rope_ref(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding, rotate-half (GPT-NeoX / HF Llama) layout, in fp32.

    ``x`` [batch, heads, head_dim], ``positions`` [batch]. With ``d = head_dim`` and
    ``f_i = theta^(-2i/d)`` for ``i < d/2``: ``x1' = x1 cos(p f) - x2 sin(p f)``,
    ``x2' = x2 cos(p f) + x1 sin(p f)`` where ``x1, x2`` are the two halves of the head.
    """
    d = x.shape[-1]
    out = torch.empty(x.shape, dtype=torch.float32)
    for b in range(x.shape[0]):
        p = float(positions[b])
        for i in range(d // 2):
            angle = p * theta ** (-2.0 * i / d)
            c, s = math.cos(angle), math.sin(angle)
            x1, x2 = x[b, :, i].float(), x[b, :, i + d // 2].float()
            out[b, :, i] = x1 * c - x2 * s
            out[b, :, i + d // 2] = x2 * c + x1 * s
    return out


def decode_step_ref(
    cfg: Any,
    layer_weights: Sequence[dict[str, torch.Tensor]],
    k_caches: Sequence[torch.Tensor],
    v_caches: Sequence[torch.Tensor],
    x: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
) -> torch.Tensor:
    """One decode step of a pre-norm Llama-style layer stack, in fp32.

    ``cfg`` has ``hidden, n_heads, n_kv_heads, head_dim, intermediate, n_layers, rms_eps`` and
    ``rope_theta`` (``None`` skips RoPE). ``layer_weights[i]`` holds fp32 ``attn_norm`` [hidden],
    ``wqkv`` [(n_heads + 2 n_kv_heads) head_dim, hidden], ``wo`` [hidden, n_heads head_dim],
    ``mlp_norm`` [hidden], ``w13`` [2 intermediate, hidden] (gate rows then up rows) and
    ``w2`` [hidden, intermediate]. ``context_lens`` counts the tokens *including* the new one,
    whose K/V is written (in the cache dtype) at position ``context_lens - 1`` of the caches,
    which are modified in place: pass clones. ``x`` [batch, hidden]; returns fp32 [batch, hidden].

    Per layer: ``h = x + Wo attn(rope(q), rope(k), v)`` with ``q, k, v = split(Wqkv rms(x))``;
    ``x = h + W2 (silu(gate) * up)`` with ``gate, up = split(W13 rms(h))``.
    """
    batch = x.shape[0]
    hq, hkv, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    positions = context_lens.long() - 1
    h = x.float().cpu()
    for i, w in enumerate(layer_weights):
        k_cache, v_cache = k_caches[i], v_caches[i]
        block_size = k_cache.shape[1]
        qkv = rms_norm_ref(h, w["attn_norm"], cfg.rms_eps) @ w["wqkv"].float().T
        q = qkv[:, : hq * d].reshape(batch, hq, d)
        k = qkv[:, hq * d : (hq + hkv) * d].reshape(batch, hkv, d)
        v = qkv[:, (hq + hkv) * d :].reshape(batch, hkv, d)
        if cfg.rope_theta is not None:
            q = rope_ref(q, positions, cfg.rope_theta)
            k = rope_ref(k, positions, cfg.rope_theta)
        for b in range(batch):  # append the new token's K/V through the block table
            p = int(positions[b])
            block = int(block_tables[b, p // block_size])
            k_cache[block, p % block_size] = k[b].to(k_cache.dtype)
            v_cache[block, p % block_size] = v[b].to(v_cache.dtype)
        attn = paged_decode_attention_ref(
            q, k_cache, v_cache, block_tables, context_lens, scale=1.0 / math.sqrt(d)
        )
        h = h + attn.reshape(batch, hq * d) @ w["wo"].float().T
        gate_up = rms_norm_ref(h, w["mlp_norm"], cfg.rms_eps) @ w["w13"].float().T
        gate, up = gate_up[:, : cfg.intermediate], gate_up[:, cfg.intermediate :]
        h = h + (torch.nn.functional.silu(gate) * up) @ w["w2"].float().T
    return h
