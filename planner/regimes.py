"""Regime efficiencies: how much of a peak a kernel reaches as a function of its shape, with formulas a reader can
check by hand. Pure functions of numbers; planner/roofline.py applies the ones the device specs carry inputs for.

GEMM (C[M x N] = A[M x K] B[K x N], M = tokens in the step, tiles tile_m x tile_n, one tile per SM at a time):
  small-M tiles      eff_m    = M / (ceil(M / tile_m) x tile_m)          padded rows do no useful work
  wave quantization  tiles    = ceil(M / tile_m) x ceil(N / tile_n);  waves = ceil(tiles / SMs)
                     eff_wave = tiles / (waves x SMs)                     the last wave leaves SMs idle
  ridge roll-off     t = (t_c^p + t_m^p)^(1/p), p = RIDGE_SHARPNESS      near intensity = ridge neither compute
                     nor memory hides the other (p -> inf is the plain max(); p = 4 loses 19% at the ridge:
                     2^(1/4) = 1.19)
  gemm_efficiency = eff_m x eff_wave (share of the tensor peak; the roll-off is applied to times)

Grouped GEMM for MoE experts (tokens routed to each expert form one small GEMM of M = tokens per expert):
  grouped_gemm_efficiency(t) = t / (ceil(t / tile_m) x tile_m)    with tile_m = 64 (CUTLASS/Triton grouped kernels
  pick 16-128; 64 is the common default)  -> 1 token per expert uses 1/64 of the tensor work it pays for.

Decode attention (one query per sequence reads its whole KV cache):
  without split-KV the grid is batch x kv_heads CTAs; fewer CTAs than SMs leave bandwidth idle:
      eff = min(1, batch x kv_heads / SMs)
  with split-KV (FlashDecoding, Dao et al. 2023) the context is cut into chunks of SPLIT_KV_CHUNK tokens:
      eff = min(1, batch x kv_heads x ceil(context / SPLIT_KV_CHUNK) / SMs)

KV / weight formats the hardware does not run natively:
  fp8 KV on a unit without fp8 tensor math (Ampere, Ada before sm_89 kernels, AMD MI200) is converted to fp16 in
  the attention kernel; measured 2.5-3x slower than "half the bytes" (issue 11): the KV read costs
  FP8_KV_EMULATION x (fp8 bytes) of bandwidth time, i.e. 2.75 / 2 = 1.375x the fp16 read.
  FP4 weights: a weight-only format (MXFP4 via Marlin/W4A16, ...) dequantizes into the activation dtype and runs
  at that peak, never at the FP4 tensor peak; NVFP4 (weights and activations) uses the FP4 peak where the unit
  lists one (Blackwell) and dequantizes on Hopper (fp8/bf16 peak).
"""

from __future__ import annotations

import math

import numpy as np

RIDGE_SHARPNESS = 4.0
GROUPED_TILE_M = 64
SPLIT_KV_CHUNK = 512
FP8_KV_EMULATION = 2.75     # KV read time / fp8 bytes time on units without fp8 math (issue 11: 2.5-3x)
_LOW_BIT = ("fp4", "int4")  # tensor dtypes a weight-only format never computes in


def small_m_efficiency(m_tokens, tile_m: int = 64):
    """M / (ceil(M / tile_m) x tile_m): share of a tile's rows that are real tokens."""
    m = np.asarray(m_tokens, dtype=np.float64)
    return m / (np.ceil(m / tile_m) * tile_m)


def wave_efficiency(m_tokens, n: int, sm_count: int, tile_m: int = 128, tile_n: int = 128):
    """tiles / (ceil(tiles / SMs) x SMs), tiles = ceil(M / tile_m) x ceil(N / tile_n)."""
    tiles = np.ceil(np.asarray(m_tokens, dtype=np.float64) / tile_m) * math.ceil(n / tile_n)
    return tiles / (np.ceil(tiles / sm_count) * sm_count)


def gemm_efficiency(m_tokens, n: int, sm_count: int, tile_m: int = 128, tile_n: int = 128):
    """Share of the tensor peak a GEMM of M tokens x N outputs reaches: small-M tiles x wave quantization."""
    return small_m_efficiency(m_tokens, tile_m) * wave_efficiency(m_tokens, n, sm_count, tile_m, tile_n)


def ridge_rolloff_time(compute_s, memory_s, p: float = RIDGE_SHARPNESS):
    """(t_c^p + t_m^p)^(1/p): >= max(t_c, t_m), 2^(1/p) x it at the ridge (t_c = t_m)."""
    c, m = np.asarray(compute_s, dtype=np.float64), np.asarray(memory_s, dtype=np.float64)
    hi = np.maximum(np.maximum(c, m), 1e-300)
    return hi * ((c / hi) ** p + (m / hi) ** p) ** (1.0 / p)


def grouped_gemm_efficiency(tokens_per_expert, tile_m: int = GROUPED_TILE_M):
    """Share of the tensor work of a grouped expert GEMM that real tokens use: t / (ceil(t / tile_m) x tile_m)."""
    return small_m_efficiency(np.maximum(np.asarray(tokens_per_expert, dtype=np.float64), 1e-9), tile_m)


def decode_attention_efficiency(batch, kv_heads: int, context, sm_count: int, split_kv: bool = True,
                                chunk: int = SPLIT_KV_CHUNK):
    """Share of bandwidth a decode attention kernel can use: min(1, CTAs / SMs), CTAs = batch x kv_heads
    (x ceil(context / chunk) with split-KV)."""
    ctas = np.asarray(batch, dtype=np.float64) * kv_heads
    if split_kv:
        ctas = ctas * np.ceil(np.asarray(context, dtype=np.float64) / chunk)
    return np.minimum(1.0, ctas / sm_count)


def kv_read_factor(unit_peak_dtypes, kv_dtype: str | None) -> float:
    """Bandwidth-time multiplier on the KV-cache read: FP8_KV_EMULATION for an fp8 cache on a unit that lists no
    fp8 peak (conversion in the kernel), else 1."""
    if kv_dtype == "fp8" and "fp8" not in unit_peak_dtypes:
        return FP8_KV_EMULATION
    return 1.0


def matmul_preferences(compute_dtypes: tuple[str, ...], weight_only: bool) -> tuple[str, ...]:
    """The GEMM dtypes a weight format may compute in, in preference order: a weight-only format dequantizes into
    the activation dtype and never runs at a 4-bit tensor peak (MXFP4 weight-only on a B200 runs at the bf16 peak,
    not at 9 PFLOP/s of FP4)."""
    if not weight_only:
        return compute_dtypes
    return tuple(d for d in compute_dtypes if d not in _LOW_BIT) or compute_dtypes
