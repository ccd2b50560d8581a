"""One decode step of a Llama-style transformer layer stack with random weights.

Per layer (pre-norm, as in Llama / Mistral / Qwen2)::

    a = RMSNorm(h)                                   [B, hidden]
    q, k, v = split(a @ Wqkv^T)                      [B, Hq, D], [B, Hkv, D], [B, Hkv, D]
    q, k = RoPE(q, pos), RoPE(k, pos)                rotate-half layout, pos = context_len - 1
    cache[block_tables[b, pos // bs], pos % bs] = k, v   (append the new token through the table)
    o = paged_decode_attention(q, cache, block_tables, context_lens)
    h = h + o @ Wo^T
    gate, up = split(RMSNorm(h) @ W13^T)             [B, I], [B, I]
    h = h + (silu(gate) * up) @ W2^T

No embedding, final norm or LM head: the stack maps the new token's hidden state [B, hidden] to
the output hidden state. Projections run through :class:`QuantizedLinear` (dense fp32 / bf16 /
fp16, int8 or int4), attention through :func:`paged_decode_attention`. The residual stream and
the KV cache are kept in the activation dtype; RMSNorm, RoPE and softmax compute in fp32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from validate.kernels.paged_attention import paged_decode_attention
from validate.kernels.quant_matmul import QuantizedLinear, WeightFormat

__all__ = ["DecodeStackConfig", "CONFIGS", "LayerWeights", "DecodeStack", "build_decode_stack"]


@dataclass(frozen=True)
class DecodeStackConfig:
    """Shape of the layer stack. ``rope_theta=None`` skips RoPE."""

    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    n_layers: int
    rms_eps: float = 1e-5
    rope_theta: float | None = 10000.0

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ValueError("n_heads must be a multiple of n_kv_heads")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even (RoPE halves)")

    @property
    def q_dim(self) -> int:
        """``n_heads * head_dim``."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """``n_kv_heads * head_dim`` (for K or V alone)."""
        return self.n_kv_heads * self.head_dim

    @property
    def params_per_layer(self) -> int:
        """Weights per layer: ``hidden (q + 2 kv) + q hidden + 3 hidden I + 2 hidden`` (norms)."""
        h = self.hidden
        attn = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        mlp = 3 * h * self.intermediate
        return attn + mlp + 2 * h


CONFIGS: dict[str, DecodeStackConfig] = {
    # Llama-3-8B (hf.co/meta-llama/Meta-Llama-3-8B config.json); rope_theta 500000
    "llama3-8b": DecodeStackConfig(4096, 32, 8, 128, 14336, 32, 1e-5, 500000.0),
    # one Llama-3-8B layer, for quick CPU measurements
    "llama3-8b-1layer": DecodeStackConfig(4096, 32, 8, 128, 14336, 1, 1e-5, 500000.0),
    # test-sized GQA stack
    "tiny": DecodeStackConfig(256, 4, 2, 64, 512, 2),
}


@dataclass
class LayerWeights:
    """One layer: fp32 norm weights and the four prepared projections."""

    attn_norm: torch.Tensor  # [hidden]
    mlp_norm: torch.Tensor  # [hidden]
    wqkv: QuantizedLinear  # [q_dim + 2 kv_dim, hidden]
    wo: QuantizedLinear  # [hidden, q_dim]
    w13: QuantizedLinear  # [2 intermediate, hidden]: gate rows then up rows
    w2: QuantizedLinear  # [hidden, intermediate]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE of ``x`` [B, H, D] at ``positions`` [B], computed in fp32."""
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d // 2, device=x.device, dtype=torch.float32) * 2 / d)
    angle = positions.float()[:, None] * inv_freq[None, :]  # [B, D/2]
    cos, sin = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]
    x1, x2 = x.float()[..., : d // 2], x.float()[..., d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


@dataclass
class DecodeStack:
    """A random-weight layer stack with its paged KV caches (one K and one V cache per layer)."""

    cfg: DecodeStackConfig
    weight_format: WeightFormat
    dtype: torch.dtype
    device: torch.device
    layers: list[LayerWeights]
    k_caches: list[torch.Tensor]  # each [num_blocks, block_size, n_kv_heads, head_dim]
    v_caches: list[torch.Tensor]

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        return self.k_caches[0].shape[1]

    def step(
        self, x: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor
    ) -> torch.Tensor:
        """Run one decode step for a batch; returns the new hidden states [B, hidden] in ``dtype``.

        ``x`` [B, hidden]: hidden state of each sequence's new token. ``context_lens`` [B] counts
        tokens *including* the new one, whose K/V is written at position ``context_lens - 1``
        (the block that position falls in must already be in ``block_tables``).
        """
        cfg = self.cfg
        batch = x.shape[0]
        bs = self.block_size
        ctx = context_lens.to(self.device)
        pos = ctx.long() - 1  # [B]
        bt = block_tables.to(self.device)
        slot_block = bt.long().gather(1, (pos // bs)[:, None]).squeeze(1)  # [B]
        slot_off = pos % bs  # [B]
        h = x.to(self.dtype)
        for layer, k_cache, v_cache in zip(self.layers, self.k_caches, self.v_caches):
            qkv = layer.wqkv(_rms_norm(h, layer.attn_norm, cfg.rms_eps))  # [B, q + 2 kv]
            q = qkv[:, : cfg.q_dim].reshape(batch, cfg.n_heads, cfg.head_dim)
            k = qkv[:, cfg.q_dim : cfg.q_dim + cfg.kv_dim].reshape(batch, cfg.n_kv_heads, cfg.head_dim)
            v = qkv[:, cfg.q_dim + cfg.kv_dim :].reshape(batch, cfg.n_kv_heads, cfg.head_dim)
            if cfg.rope_theta is not None:
                q = _rope(q, pos, cfg.rope_theta)
                k = _rope(k, pos, cfg.rope_theta)
            k_cache[slot_block, slot_off] = k.to(k_cache.dtype)
            v_cache[slot_block, slot_off] = v.to(v_cache.dtype)
            attn = paged_decode_attention(q.contiguous(), k_cache, v_cache, bt, ctx)  # [B, Hq, D]
            h = h + layer.wo(attn.reshape(batch, cfg.q_dim))
            gate_up = layer.w13(_rms_norm(h, layer.mlp_norm, cfg.rms_eps))  # [B, 2 I]
            act = F.silu(gate_up[:, : cfg.intermediate]) * gate_up[:, cfg.intermediate :]
            h = h + layer.w2(act)
        return h

    def reference_weights(self) -> list[dict[str, torch.Tensor]]:
        """Per-layer fp32 weights (dequantized exactly as the kernels see them), for
        :func:`validate.reference.decode_step_ref`."""
        return [
            {
                "attn_norm": lw.attn_norm.float().cpu(),
                "mlp_norm": lw.mlp_norm.float().cpu(),
                "wqkv": lw.wqkv.dequantized().cpu(),
                "wo": lw.wo.dequantized().cpu(),
                "w13": lw.w13.dequantized().cpu(),
                "w2": lw.w2.dequantized().cpu(),
            }
            for lw in self.layers
        ]

    def weight_bytes(self) -> int:
        """Bytes of all projection weights plus their scales/zeros (norm weights excluded)."""
        total = 0
        for lw in self.layers:
            for lin in (lw.wqkv, lw.wo, lw.w13, lw.w2):
                b = lin.bytes_moved(1)
                total += b.weight_bytes + b.scale_bytes + b.zero_bytes
        return total


def build_decode_stack(
    cfg: DecodeStackConfig,
    weight_format: WeightFormat | Literal["dense"],
    dtype: torch.dtype,
    device: torch.device | str,
    seed: int,
    *,
    num_blocks: int = 256,
    block_size: int = 16,
    group_size: int = 128,
) -> DecodeStack:
    """Random weights (N(0, 1/fan_in)), norm weights ``1 + 0.1 N(0, 1)``, and KV caches of
    ``num_blocks`` blocks filled with N(0, 1) in ``dtype`` (standing in for earlier tokens).

    ``weight_format``: ``"dense"`` (weights in ``dtype``), a dense dtype name equal to ``dtype``,
    ``"int8"`` (per channel) or ``"int4"`` (``group_size`` along K). Deterministic in ``seed``.
    """
    device = torch.device(device)
    fmt: WeightFormat
    if weight_format == "dense":
        fmt = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    else:
        fmt = weight_format
    # generated and quantized where it runs: on a GPU, a Llama-3-8B layer's 218 M weights take milliseconds
    # instead of seconds of CPU randn + quantization + copy (the same seed gives other numbers on CUDA than on CPU)
    gen = torch.Generator(device=device).manual_seed(seed)

    def linear(n: int, k: int) -> QuantizedLinear:
        w = torch.randn(n, k, generator=gen, device=device) / math.sqrt(k)
        return QuantizedLinear.from_float(
            w, fmt, act_dtype=dtype, device=device, group_size=group_size
        )

    def norm() -> torch.Tensor:
        return 1.0 + 0.1 * torch.randn(cfg.hidden, generator=gen, device=device)

    layers, k_caches, v_caches = [], [], []
    cache_shape = (num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim)
    for _ in range(cfg.n_layers):
        layers.append(
            LayerWeights(
                attn_norm=norm(),
                mlp_norm=norm(),
                wqkv=linear(cfg.q_dim + 2 * cfg.kv_dim, cfg.hidden),
                wo=linear(cfg.hidden, cfg.q_dim),
                w13=linear(2 * cfg.intermediate, cfg.hidden),
                w2=linear(cfg.hidden, cfg.intermediate),
            )
        )
        k_caches.append(torch.randn(cache_shape, generator=gen, device=device).to(dtype))
        v_caches.append(torch.randn(cache_shape, generator=gen, device=device).to(dtype))
    return DecodeStack(cfg, fmt, dtype, device, layers, k_caches, v_caches)
