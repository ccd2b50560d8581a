"""Memory: weights + KV cache + peak activations + runtime overhead against usable capacity, the largest batch
and context that fit, and how serving engines size their KV cache.

Activations (peak transient of a prefill of B sequences x S tokens, one layer live at a time, a = 2 bytes):
  MLP:        B*S*(2h + 3*I_eff)*a          residual + normed input, gate/up outputs, activated product
  attention:  B*S*(2h + q + 2kv + o)*a      (+ 2*B*H*S*(S+past)*a for the score and probability matrices
                                             when FlashAttention is off: the quadratic term)
  logits:     B*V*4                          fp32 logits of the last position
  peak = max(MLP, attention) + logits
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .architecture import ModelArch
from .errors import PlannerError
from .ops import kv_bytes_per_sequence, kv_bytes_per_token, state_bytes_per_sequence, weight_bytes
from .quantization import WeightFormat, activation_bytes

ENGINES = ("none", "vllm", "trtllm", "sglang", "llamacpp")

# Engine defaults, from each engine's documentation
VLLM_GPU_MEMORY_UTILIZATION = 0.9      # vLLM EngineArgs.gpu_memory_utilization default
VLLM_BLOCK_SIZE = 16                   # vLLM default KV block size (tokens)
VLLM_MAX_NUM_BATCHED_TOKENS = 8192     # vLLM V1 default scheduler token budget (profiling run size)
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9  # TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction default
SGLANG_MEM_FRACTION_STATIC = 0.88      # SGLang server_args mem_fraction_static typical default (80 GB class GPUs)


def activation_bytes_peak(m: ModelArch, fmt: WeightFormat, batch, prompt, past=0, flash_attention=True):
    """Peak transient activation bytes of a prefill (formula in the module docstring)."""
    B, S, P = (np.asarray(x, dtype=np.float64) for x in (batch, prompt, past))
    a = activation_bytes(fmt)
    h = m.hidden_size
    if m.moe:
        shared = (m.moe.shared_expert_intermediate_size or m.moe.expert_intermediate_size) * m.moe.num_shared_experts
        i_eff = max(m.moe.experts_per_token * m.moe.expert_intermediate_size + shared,
                    m.intermediate_size if m.num_dense_layers else 0)
    else:
        i_eff = m.intermediate_size
    mlp = B * S * (2 * h + 3 * i_eff) * a
    attn = B * S * (2 * h + m.q_dim + 2 * m.kv_dim + m.attn_out_dim) * a
    if not flash_attention and m.num_attention_layers:  # a pure state-space model has no score matrix
        attn = attn + 2 * B * m.num_attention_heads * S * (S + P) * a
    return np.maximum(mlp, attn) + B * m.vocab_size * 4.0


@dataclass(frozen=True)
class MemoryBreakdown:
    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    overhead_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activations_bytes + self.overhead_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes


def memory_breakdown(m, fmt, kv_dtype, batch, prompt, output, capacity_bytes, overhead_bytes, flash_attention=True):
    context = prompt + output
    return MemoryBreakdown(
        weights_bytes=weight_bytes(m, fmt),
        kv_cache_bytes=float(batch * kv_bytes_per_sequence(m, kv_dtype, context)),
        activations_bytes=float(activation_bytes_peak(m, fmt, batch, prompt, 0, flash_attention)),
        overhead_bytes=overhead_bytes,
        capacity_bytes=capacity_bytes,
    )


def max_batch(m, fmt, kv_dtype, prompt, output, capacity_bytes, overhead_bytes, flash_attention=True, tp: int = 1,
              kv_ways: int = 1) -> int:
    """Largest batch whose weights + KV + activations + overhead fit (KV and activations are linear in batch).

    Per device of a t-way tensor-parallel group: weights / t, activations / t, KV / kv_ways (KV heads split at most
    t ways; an MLA latent is replicated), the runtime overhead on every device."""
    free = capacity_bytes - weight_bytes(m, fmt) / tp - overhead_bytes
    per_seq = float(kv_bytes_per_sequence(m, kv_dtype, prompt + output)) / kv_ways + float(
        activation_bytes_peak(m, fmt, 1, prompt, 0, flash_attention)) / tp
    return max(0, int(free // per_seq)) if free > 0 else 0


def max_context(m, fmt, kv_dtype, batch, capacity_bytes, overhead_bytes, flash_attention=True, tp: int = 1,
                kv_ways: int = 1) -> int:
    """Longest context (prompt + output tokens, the prompt taking all of it) that fits at this batch.

    Memory is monotone in the context, so bisect on integers; not capped at the model's maximum (reported apart).
    """
    def fits(c):
        need = (weight_bytes(m, fmt) / tp + overhead_bytes + batch * float(kv_bytes_per_sequence(m, kv_dtype, c)) / kv_ways
                + float(activation_bytes_peak(m, fmt, batch, c, 0, flash_attention)) / tp)
        return need <= capacity_bytes
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi) and hi < 1 << 40:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


@dataclass(frozen=True)
class EngineKV:
    engine: str
    kv_pool_bytes: float
    max_concurrency: float  # sequences of the requested length the pool holds at once
    blocks: int | None
    fits: bool
    rule: str


def engine_kv(engine: str, m: ModelArch, fmt: WeightFormat, kv_dtype: str, batch: int, prompt: int, output: int,
              capacity_bytes: float, overhead_bytes: float, flash_attention: bool = True,
              gpu_memory_utilization: float | None = None, tp: int = 1, kv_ways: int = 1) -> EngineKV:
    """The KV cache a serving engine will allocate, and how many requests of this length it holds.

    vllm:     blocks = (capacity * util - weights - peak activations of the profiling run - non-torch overhead)
                       // (block_size * kv bytes per token);  max concurrency = blocks / ceil(max_model_len / block)
    trtllm:   KV pool = free_gpu_memory_fraction * (capacity - weights - activations - overhead)
    sglang:   KV pool = capacity * mem_fraction_static - weights
    llamacpp: weights + KV for n_ctx = batch x (prompt + output) tokens, allocated up front, + compute buffers
    """
    if engine not in ENGINES:
        raise PlannerError(f"--engine: unknown engine '{engine}'; allowed: {', '.join(ENGINES)}")
    # per device of a t-way tensor-parallel group (t = 1: the whole model on one device)
    W = weight_bytes(m, fmt) / tp
    ctx = prompt + output
    per_seq = float(kv_bytes_per_sequence(m, kv_dtype, ctx)) / kv_ways
    per_tok = kv_bytes_per_token(m, kv_dtype) / kv_ways
    act = float(activation_bytes_peak(m, fmt, batch, prompt, 0, flash_attention)) / tp
    if engine == "vllm":
        util = gpu_memory_utilization or VLLM_GPU_MEMORY_UTILIZATION
        prof = float(activation_bytes_peak(m, fmt, 1, VLLM_MAX_NUM_BATCHED_TOKENS, 0, flash_attention)) / tp
        pool = capacity_bytes * util - W - prof - overhead_bytes
        block_bytes = VLLM_BLOCK_SIZE * per_tok
        state = state_bytes_per_sequence(m) / kv_ways  # linear-attention / SSM layers: a constant per sequence
        if state == 0:
            blocks = max(0, int(pool // block_bytes))
            conc = blocks / math.ceil(ctx / VLLM_BLOCK_SIZE)
        else:  # hybrid or pure state-space model: blocks for the attention layers plus each sequence's state
            seq_bytes = math.ceil(ctx / VLLM_BLOCK_SIZE) * block_bytes + state
            conc = max(pool, 0.0) / seq_bytes
            blocks = max(0, int(conc * math.ceil(ctx / VLLM_BLOCK_SIZE))) if block_bytes > 0 else None
        return EngineKV(engine, max(pool, 0.0), conc, blocks, pool > 0 and conc >= batch,
                        f"gpu_memory_utilization={util}, block_size={VLLM_BLOCK_SIZE}, "
                        f"profile with max_num_batched_tokens={VLLM_MAX_NUM_BATCHED_TOKENS}")
    if engine == "trtllm":
        pool = max(0.0, TRTLLM_FREE_GPU_MEMORY_FRACTION * (capacity_bytes - W - act - overhead_bytes))
        conc = pool / per_seq if per_seq else math.inf
        return EngineKV(engine, max(pool, 0.0), conc, None, pool > 0 and conc >= batch,
                        f"free_gpu_memory_fraction={TRTLLM_FREE_GPU_MEMORY_FRACTION}")
    if engine == "sglang":
        pool = max(0.0, capacity_bytes * SGLANG_MEM_FRACTION_STATIC - W)
        conc = pool / per_seq if per_seq else math.inf
        ok = pool > 0 and conc >= batch and capacity_bytes * (1 - SGLANG_MEM_FRACTION_STATIC) >= act
        return EngineKV(engine, max(pool, 0.0), conc, None, ok, f"mem_fraction_static={SGLANG_MEM_FRACTION_STATIC}")
    if engine == "llamacpp":
        pool = batch * per_seq
        need = W + pool + act + overhead_bytes
        return EngineKV(engine, pool, batch if need <= capacity_bytes else 0.0, None, need <= capacity_bytes,
                        f"n_ctx={batch * ctx} (batch x context), KV allocated up front")
    need = W + batch * per_seq + act + overhead_bytes
    free = capacity_bytes - W - act - overhead_bytes
    return EngineKV(engine, batch * per_seq, max(free, 0.0) / per_seq if per_seq else math.inf, None,
                    need <= capacity_bytes, "weights + KV(batch x context) + activations + overhead")
