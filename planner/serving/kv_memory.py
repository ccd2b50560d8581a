"""KV-cache memory management: contiguous pre-allocation versus paged blocks, prefix sharing, and the attention
score matrix with and without FlashAttention.

Contiguous (pre-vLLM engines, e.g. FasterTransformer/HF): every sequence reserves max_len tokens up front.
  utilization = sum(len_i) / (n x max_len)
Paged (vLLM PagedAttention, Kwon et al., SOSP 2023): a sequence holds ceil(len / block) blocks of `block` tokens;
only its last block is partly empty, so the waste is < 1 block per sequence.
  utilization = sum(len_i) / sum(ceil(len_i / block) x block)
Sequences that fit in a pool of N tokens: contiguous floor(N / max_len); paged floor(N / mean paged tokens per
sequence) (expected value over the length distribution).
Prefix sharing (vLLM automatic prefix caching, SGLang RadixAttention): the full blocks of a common system prompt
of S tokens are stored once; a partial last block is per sequence (copy-on-write), so n sequences share
floor(S / block) blocks and save (n - 1) x floor(S / block) blocks.
FlashAttention (Dao et al., 2022) never materializes the B x H x S x S score and probability matrices; without it
they take 2 x B x H x S x (S + past) x 2 bytes at peak (planner.memory.activation_bytes_peak) and their reads and
writes add to the attention time (planner.ops).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import PlannerError


def _lengths(lengths) -> np.ndarray:
    x = np.asarray(lengths, dtype=np.int64)
    if x.ndim != 1 or len(x) == 0 or np.any(x < 1):
        raise PlannerError("lengths: need a non-empty list of integers >= 1")
    return x


def contiguous_vs_paged(lengths, max_len: int, block_size: int = 16, pool_tokens: int | None = None) -> dict:
    """Memory utilization and sequences that fit, contiguous (max_len per sequence) vs paged (block_size)."""
    x = _lengths(lengths)
    if block_size < 1 or max_len < 1:
        raise PlannerError("block_size and max_len must be integers >= 1")
    if np.any(x > max_len):
        raise PlannerError(f"max_len: {max_len} is shorter than the longest sequence ({int(x.max())})")
    used = int(x.sum())
    contiguous = len(x) * max_len
    paged = int(np.sum(-(-x // block_size)) * block_size)
    out = {
        "sequences": len(x), "tokens_used": used, "block_size": block_size, "max_len": max_len,
        "contiguous_reserved_tokens": contiguous, "paged_reserved_tokens": paged,
        "contiguous_utilization": used / contiguous, "paged_utilization": used / paged,
        "contiguous_waste_fraction": 1 - used / contiguous, "paged_waste_fraction": 1 - used / paged,
        "paged_waste_tokens_per_sequence": (paged - used) / len(x),
    }
    if pool_tokens is not None:
        out["pool_tokens"] = int(pool_tokens)
        out["contiguous_sequences_fit"] = int(pool_tokens // max_len)
        out["paged_sequences_fit"] = int(pool_tokens // (paged / len(x)))
    return out


def prefix_sharing(n_sequences: int, prefix_tokens: int, own_tokens, block_size: int = 16) -> dict:
    """Blocks with and without sharing a common prefix of `prefix_tokens` across n sequences.

    own_tokens: tokens after the prefix, one per sequence (or a single number for all)."""
    if n_sequences < 1 or prefix_tokens < 0 or block_size < 1:
        raise PlannerError("prefix sharing: n_sequences >= 1, prefix_tokens >= 0, block_size >= 1")
    own = np.broadcast_to(np.asarray(own_tokens, dtype=np.int64), (n_sequences,))
    per_seq = -(-(prefix_tokens + own) // block_size)
    without = int(per_seq.sum())
    shared = prefix_tokens // block_size
    with_sharing = int((per_seq - shared).sum()) + shared
    return {"sequences": n_sequences, "prefix_tokens": prefix_tokens, "block_size": block_size,
            "shared_blocks": shared, "blocks_without_sharing": without, "blocks_with_sharing": with_sharing,
            "saved_fraction": 1 - with_sharing / without if without else 0.0}


def kv_capacity(model, hardware, weights: str = "fp16", kv_dtype: str = "fp16", lengths=None, max_len: int | None = None,
                block_size: int = 16, tp: int = 1) -> dict:
    """contiguous_vs_paged on the KV pool of a real (model, device): how many sequences of `lengths` fit."""
    from ..architecture import load_model
    from ..hardware import load_hardware
    from ..quantization import kv_dtype as norm_kv, weight_format
    from .step_model import replica_memory

    m = model if not isinstance(model, str) else load_model(model)
    spec = hardware if not isinstance(hardware, str) else load_hardware(hardware)
    mem = replica_memory(m, weight_format(weights), norm_kv(kv_dtype), spec, tp=tp)
    x = _lengths(lengths)
    r = contiguous_vs_paged(x, max_len or int(x.max()), block_size, mem.kv_pool_tokens)
    r.update({"model": m.name, "hardware": spec.id, "weights": weights, "kv_dtype": kv_dtype,
              "kv_pool_gb": mem.kv_pool_tokens * mem.kv_bytes_per_token / 1e9, "memory_verdict": mem.verdict})
    return r


def attention_memory_table(model, hardware, prompts=(2048, 8192, 32768, 131072), weights: str = "fp16",
                           batch: int = 1, efficiency="auto"):
    """Prefill with and without FlashAttention, a DataFrame: score_matrix_gb = 2 x B x H x S^2 x 2 bytes (scores and
    probabilities of one layer), peak activations of each (planner.memory), prefill time of each (planner.latency)."""
    import pandas as pd

    from ..architecture import load_model
    from ..efficiency import resolve_efficiency
    from ..hardware import load_hardware
    from ..latency import prefill_time_s
    from ..memory import activation_bytes_peak
    from ..quantization import activation_bytes, weight_format
    from ..roofline import device_model, select_unit

    m = model if not isinstance(model, str) else load_model(model)
    spec = hardware if not isinstance(hardware, str) else load_hardware(hardware)
    fmt = weight_format(weights)
    u = select_unit(spec, fmt)
    dev = device_model(spec, u, fmt, resolve_efficiency(spec, u, efficiency))
    S = np.asarray(prompts, dtype=np.float64)
    act_fa = activation_bytes_peak(m, fmt, batch, S, 0, True)
    act_no = activation_bytes_peak(m, fmt, batch, S, 0, False)
    t_fa = prefill_time_s(m, fmt, "fp16", dev, batch, S, 0, True)
    t_no = prefill_time_s(m, fmt, "fp16", dev, batch, S, 0, False)
    cap = spec.usable_capacity_gb * 1e9
    a = activation_bytes(fmt)
    return pd.DataFrame({
        "prompt": S.astype(int), "score_matrix_gb": 2 * batch * m.num_attention_heads * S * S * a / 1e9,
        "peak_activations_gb_flash": act_fa / 1e9, "peak_activations_gb_no_flash": act_no / 1e9,
        "prefill_ms_flash": t_fa * 1e3, "prefill_ms_no_flash": t_no * 1e3,
        "slowdown_without_flash": t_no / t_fa,
        "no_flash_activations_exceed_memory": act_no > cap,
    })


def blocks_for(tokens: int, block_size: int) -> int:
    return math.ceil(tokens / block_size)
