"""Per-operator costs of one forward step: ModelArch x WeightFormat x KV dtype x (batch, tokens, context).

Every function here is pure arithmetic on numpy arrays (or scalars) so that one call evaluates a whole grid of
batch sizes and lengths; nothing depends on the hardware. Each OpCost counts one instance of the op in one layer
(`count` layers share it):

  flops          multiply-adds x 2 (a [T, K] x [K, N] matmul costs 2*T*K*N)
  weight_bytes   parameters read (at the format's effective bits per weight, scales included)
  act_bytes      activations read and written (16-bit, or fp32 for the fp32 format)
  kv_read_bytes  KV cache read: K once in the score op, V once in the value op (never the whole cache twice)
  kv_passes      passes over that cache an attention op makes: a materialized (unfused) attention is a batched
                 matmul that broadcasts each K/V head to its kv_group query heads, so it reads the cache
                 kv_group times (Llama-3-70B: 64 / 8 = 8); fused kernels that share K/V across a group read it
                 once (planner/roofline.py op_bytes, which also takes a runtime whose fused decode kernel gives
                 each query head its own pass: Efficiency.kv_read_per_query_head)
  kv_write_bytes new K and V appended to the cache
  score_bytes    the part of act_bytes that is a materialized score / probability matrix (unfused attention), at
                 the activation width: the scores op writes it, softmax reads and writes it, the values op reads
                 it. An engine that keeps it wider or converts it between ops moves Efficiency.score_bytes_factor
                 times these bytes (planner/roofline.py op_bytes)

Prefill of S new tokens per sequence after `past` cached ones: a causal query i attends to past + i + 1 keys
(capped at the sliding window W on local layers). Decode: one new token per sequence attends to `context`
cached keys plus itself. MoE decode reads only the experts a batch touches: with E experts, k per token and
T tokens under uniform routing, E * (1 - (1 - k/E)^T) distinct experts (expected value).
Only the last position's logits are computed in prefill (as vLLM and llama.cpp do).
"""

from __future__ import annotations

from dataclasses import dataclass

from .architecture import ModelArch
from .lazy import np
from .quantization import (WeightFormat, activation_bytes, kv_bytes_per_element, kv_bytes_per_token_layer,
                           weight_format)

# compute classes: which peak an op runs at
MATMUL = "matmul"        # weight GEMMs: the format's compute dtype
ATTENTION = "attention"  # QK^T and PV: the activation dtype
VECTOR = "vector"        # norms, softmax, embedding gather: elementwise (memory bound in practice)


@dataclass(frozen=True)
class OpCost:
    name: str
    stage: str
    count: int
    flops: np.ndarray | float
    weight_bytes: np.ndarray | float
    act_bytes: np.ndarray | float
    kv_read_bytes: np.ndarray | float = 0.0
    kv_write_bytes: np.ndarray | float = 0.0
    compute: str = MATMUL
    kv_dtype: str | None = None  # attention ops: the cache dtype their K/V are read in
    kv_group: float = 1.0   # attention ops reading the cache: query heads per K/V head (MLA's latent: 1)
    kv_passes: float = 1.0  # passes over the cached K/V: kv_group where attention is materialized, else 1
    score_bytes: np.ndarray | float = 0.0  # materialized score-matrix bytes inside act_bytes (module docstring)
    weight_format: str | None = None  # the op's weight storage format where it is not the model's (gpt-oss's
    #                                   routed experts stay mxfp4 under a bf16 model: expert_bytes_per_weight)
    expert_width: float = 0.0  # routed-expert GEMMs: each expert's intermediate width on one device (the model's
    #                            expert_intermediate_size, / TP under tensor parallelism); 0 for every other op
    #                            (planner.regimes.grouped_width_efficiency)

    @property
    def bytes(self):
        return self.weight_bytes + self.act_bytes + self.kv_read_bytes + self.kv_write_bytes


def _f(x):
    """A plain Python number as a float (the scalar path: float arithmetic, free of numpy's per-call cost; the same
    IEEE double operations, so the same answers), anything else as a float64 array."""
    c = x.__class__
    if c is float:
        return x
    if c is int:
        return float(x)
    return np.asarray(x, dtype=np.float64)


def _min(a, b):
    """np.minimum, on plain floats without numpy."""
    return (a if a <= b else b) if (a.__class__ is float and b.__class__ in _PLAIN) else np.minimum(a, b)


def _max(a, b):
    """np.maximum, on plain floats without numpy."""
    return (a if a >= b else b) if (a.__class__ is float and b.__class__ in _PLAIN) else np.maximum(a, b)


_PLAIN = (float, int)


def expected_distinct_experts(num_experts: int, k: int, tokens):
    """E * (1 - (1 - k/E)^T): expected number of distinct experts hit by T tokens routed uniformly, k each."""
    t = _f(tokens)
    return num_experts * (1.0 - (1.0 - k / num_experts) ** t)


def causal_key_sum(past, new, window=None):
    """sum_{i=0}^{new-1} min(past + i + 1, window): keys attended by `new` causal queries after `past` cached.

    With f(x) = sum_{n=1}^{x} min(n, W) = xc (xc + 1) / 2 + W * max(x - W, 0), xc = min(x, W), the sum is
    f(past + new) - f(past).
    """
    past, new = _f(past), _f(new)

    def f(x):
        if window is None:
            return x * (x + 1) / 2
        xc = _min(x, window)
        return xc * (xc + 1) / 2 + window * _max(x - window, 0.0)

    return f(past + new) - f(past)


# ---------------------------------------------------------------- weights

# Linear-attention and SSM state per sequence is kept in 16-bit (vLLM's mamba_ssm_cache_dtype "auto" = the model
# dtype, bf16 for every checkpoint in the catalog)
STATE_BYTES_PER_ELEMENT = 2.0


def expert_storage_format(m: ModelArch, fmt: WeightFormat) -> str | None:
    """The format the routed experts are stored in where it is narrower than the format's other weights, else None:
    the narrowest of the format's own expert format (llama.cpp MXFP4_MOE: MXFP4) and the published checkpoint's
    (gpt-oss ships its experts in MXFP4, 4.25 bits, and serving engines keep them so under bf16). Their GEMMs then
    run that format's kernels (OpCost.weight_format)."""
    if m.moe is None:
        return None
    own = [f for f in (fmt.expert_format, m.expert_weight_format) if f]
    best = min(own, key=lambda f: weight_format(f).bytes_per_weight, default=None)
    return best if best and weight_format(best).bytes_per_weight < fmt.bytes_per_weight else None


def expert_bytes_per_weight(m: ModelArch, fmt: WeightFormat) -> float:
    """Routed-expert bytes per weight: the format's, or its narrower expert storage (expert_storage_format)."""
    own = expert_storage_format(m, fmt)
    if own is None:
        return fmt.bytes_per_weight
    return weight_format(own).bytes_per_weight


def embedding_bits(m: ModelArch, fmt: WeightFormat) -> float:
    """Bits per weight of the token-embedding matrix as stored: the format's embedding bits, or, where the LM head is
    tied to it (one matrix in two roles), the LM head's. A quantizer gives a tied matrix its output role's type:
    llama.cpp's llama_tensor_get_type quantizes token_embd like output.weight (Q6_K under Q4_0 / Q4_K_M, Q8_0 under
    Q8_0) when the model has no output tensor; the other formats keep both 16-bit."""
    return fmt.lm_head_bits if m.tie_word_embeddings else fmt.embedding_bits


def weight_bytes_by_group(m: ModelArch, fmt: WeightFormat) -> dict[str, float]:
    """Bytes of every weight group at the format's bits; norms, router and vision tower stay 16-bit. Sums to the
    weight memory. A model read from a GGUF or safetensors file whose tensors are in this format returns the
    file's exact bytes instead (planner.model_files)."""
    wf = m.weights_file
    if wf is not None and wf.matches(fmt):
        return dict(wf.bytes_by_group)
    b = m.param_breakdown()
    bpw = fmt.bytes_per_weight
    linear = b["attention"] + b["state_mixers"] + b["dense_mlp"] + b["shared_experts"] + b["expert_latent_proj"]
    return {
        "embedding": b["embedding"] * embedding_bits(m, fmt) / 8,
        "linear": linear * bpw,
        "routed_experts": b["routed_experts"] * expert_bytes_per_weight(m, fmt),
        "router": b["router"] * 2.0,
        "norms": b["norms"] * 2.0,
        "lm_head": b["lm_head"] * fmt.lm_head_bits / 8,
        "vision": b["vision"] * (4.0 if fmt.name == "fp32" else 2.0),
    }


def weight_bytes(m: ModelArch, fmt: WeightFormat) -> float:
    return float(sum(weight_bytes_by_group(m, fmt).values()))


def weights_source(m: ModelArch, fmt: WeightFormat) -> str:
    """Where the weight bytes come from: the model file's exact tensor sizes, or parameters x bits."""
    wf = m.weights_file
    if wf is not None and wf.matches(fmt):
        return f"exact: {wf.describe()}"
    why = f" (the file holds {wf.format_name}, not {fmt.name})" if wf is not None else ""
    if own := expert_storage_format(m, fmt):
        why += (f"; routed experts {own}" + (f", the others {fmt.kernel_name}" if fmt.kernel_format else "")
                if own == fmt.expert_format else f"; routed experts {own} as published")
    return f"formula: parameters x {fmt.name} bits per weight{why}"


# ---------------------------------------------------------------- KV cache


def attn_kv_elements(m: ModelArch) -> int:
    """Elements the main attention caches per token per layer (the sparse indexer's key excluded)."""
    return m.kv_elements_per_token_per_layer - (m.sparse.index_head_dim if m.sparse else 0)


def kv_bytes_per_token_per_layer(m: ModelArch, kv_dtype: str) -> float:
    """2 x kv_heads x head_dim x bytes (MHA/GQA/MQA), or (kv_lora_rank + rope_dim) x bytes (MLA), scales included
    (planner.quantization.kv_bytes_per_token_layer); sparse attention adds the indexer key (index_head_dim)."""
    indexer = m.sparse.index_head_dim * kv_bytes_per_element(kv_dtype) if m.sparse else 0.0
    return kv_bytes_per_token_layer(m, kv_dtype) + indexer


def kv_bytes_per_token(m: ModelArch, kv_dtype: str) -> float:
    """Bytes one token adds to the cache across all attention layers (before any window caps it); linear-attention
    and SSM layers add nothing per token."""
    return m.num_attention_layers * kv_bytes_per_token_per_layer(m, kv_dtype)


def state_bytes_per_sequence(m: ModelArch) -> float:
    """Constant per-sequence state of the linear-attention and SSM layers."""
    return m.state_elements_per_sequence * STATE_BYTES_PER_ELEMENT


def kv_bytes_per_sequence(m: ModelArch, kv_dtype: str, context):
    """Cache bytes for one sequence of `context` tokens: global attention layers keep every token, local
    (sliding-window or chunked) layers at most their window, linear-attention/SSM layers a constant state."""
    c = _f(context)
    per = kv_bytes_per_token_per_layer(m, kv_dtype)
    local = m.num_local_layers * _min(c, m.local_window) if m.num_local_layers else 0.0
    return per * (m.num_global_layers * c + local) + state_bytes_per_sequence(m)


# ---------------------------------------------------------------- operators


def _attention_ops(m: ModelArch, kv_dtype: str, a: float, stage: str, batch, new, past, flash: bool) -> list[OpCost]:
    """QK^T, softmax and PV for one layer group: layers attending to the whole context, and layers attending to at
    most W keys (sliding window W; chunked local attention, costed as a window of one chunk, exact at the end of
    each chunk and an upper bound inside it; sparse top-k attention, which reads the k selected keys)."""
    B, S, P = _f(batch), _f(new), _f(past)
    Hq = m.num_attention_heads
    if m.mla:
        # decode runs the absorbed form on the latent cache (scores over kv_lora + rope dims, values over kv_lora);
        # prefill decompresses K/V per head (qk = nope + rope, v = v_head_dim)
        absorbed = stage == "decode"
        d_qk = m.mla.kv_lora_rank + m.mla.qk_rope_head_dim if absorbed else m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim
        d_v = m.mla.kv_lora_rank if absorbed else m.mla.v_head_dim
        k_tok = kv_bytes_per_token_layer(m, kv_dtype)  # the latent holds both K and V (scales included)
        v_tok = 0.0
    else:
        d_qk = d_v = m.head_dim
        k_tok = v_tok = kv_bytes_per_token_layer(m, kv_dtype) / 2
    group = 1.0 if m.mla else float(Hq // m.num_kv_heads)  # query heads per K/V head (MLA: one shared latent)
    full = m.count_mixers("full", "full+ssm")
    groups = [("", full, None)]
    if m.num_local_layers:
        groups.append(("_local", m.num_local_layers, m.local_window))
    elif m.sparse:
        groups.append(("_local", m.count_mixers("sparse"), m.sparse.index_topk))
    ops = []
    for suffix, count, window in groups:
        if count == 0:
            continue
        keys = causal_key_sum(P, S, window)                 # sum over queries of keys attended, per sequence
        cached = P if window is None else _min(P, window)  # cached tokens read from the KV cache
        pairs = B * Hq * keys                               # (query, key) pairs per layer
        kv_read_k = B * cached * k_tok
        kv_read_v = B * cached * v_tok
        new_kv = B * S * (k_tok + v_tok)                    # appended to the cache this step
        q_bytes = B * S * Hq * d_qk * a
        o_bytes = B * S * Hq * d_v * a
        fresh_kv_act = B * S * m.kv_elements_per_token_per_layer * a if stage == "prefill" else 0.0  # new K/V read as activations
        score_bytes = 0.0 if flash else pairs * a           # materialized score/probability matrix
        ops.append(OpCost(f"attn_scores{suffix}", stage, count, 2 * pairs * d_qk, 0.0,
                          q_bytes + fresh_kv_act / 2 + score_bytes, kv_read_k, new_kv, ATTENTION, kv_dtype,
                          group, 1.0 if flash else group, score_bytes))
        ops.append(OpCost(f"attn_softmax{suffix}", stage, count, 5 * pairs, 0.0, 2 * score_bytes, 0.0, 0.0, VECTOR,
                          score_bytes=2 * score_bytes))
        ops.append(OpCost(f"attn_values{suffix}", stage, count, 2 * pairs * d_v, 0.0,
                          o_bytes + fresh_kv_act / 2 + score_bytes, kv_read_v, 0.0, ATTENTION, kv_dtype,
                          group, 1.0 if flash else group, score_bytes))
    if m.sparse:
        # the lightning indexer scores every cached key (its own index_head_dim key cache) with index_n_heads heads
        s, ns = m.sparse, m.count_mixers("sparse")
        keys = causal_key_sum(P, S, None)
        ik = s.index_head_dim * kv_bytes_per_element(kv_dtype)
        ops.append(OpCost("attn_indexer", stage, ns, 2 * B * keys * s.index_n_heads * s.index_head_dim, 0.0,
                          B * S * s.index_n_heads * (s.index_head_dim + 1) * a, B * P * ik, B * S * ik, ATTENTION,
                          kv_dtype))
    return ops


def _state_ops(m: ModelArch, fmt: WeightFormat, stage: str, B, S, a: float) -> list[OpCost]:
    """Linear-attention (gated DeltaNet) and SSM layers: their projections (weight GEMMs) and the scan.

    The scan's cost is constant per token: recurrent in decode, chunked in prefill (chunk Q: the intra-chunk
    products at full chunk size). Its state is read and written once per chunk boundary: 2 x state bytes per
    sequence per decode step (a decode step is a chunk of one), 2 x state x S / Q per prefill of S tokens (the
    chunked scans write every chunk's state). No term grows with the context. The scan is named attn_* so that
    the serving step model times it per sequence, like attention."""
    T = B * S
    h, bpw = m.hidden_size, fmt.bytes_per_weight
    ops = []
    for name, spec, count in (("linear_attn", m.linear_attn, m.count_mixers("linear")),
                              ("ssm", m.ssm, m.count_mixers("ssm", "full+ssm"))):
        if not count:
            continue
        p = spec.params(h)
        state = spec.state_elements() * STATE_BYTES_PER_ELEMENT
        chunk = 1 if stage == "decode" else spec.chunk_size
        chunks = B * S / chunk  # state reads/writes per step
        inner = spec.value_dim if name == "linear_attn" else spec.d_inner
        conv = spec.conv_dim
        ops.append(OpCost(f"{name}_proj", stage, count, 2 * T * p, p * bpw, T * (2 * h + conv + 2 * inner) * a))
        ops.append(OpCost(f"attn_{name}_scan", stage, count, T * spec.scan_flops_per_token(chunk), 0.0,
                          T * (conv + 2 * inner) * a, chunks * state, chunks * state,
                          VECTOR if stage == "decode" else MATMUL))
    return ops


def step_ops(m: ModelArch, fmt: WeightFormat, kv_dtype: str, stage: str, batch, new_tokens, past,
             flash_attention: bool = True, identical_sequences: bool = False) -> list[OpCost]:
    """All operators of one forward step over `batch` sequences, each adding `new_tokens` after `past` cached.

    Prefill: new_tokens = prompt length, past = 0 (or the cached prefix for chunked prefill).
    Decode: new_tokens = 1, past = tokens already in the cache.
    identical_sequences: the batch's sequences are one token sequence repeated (a benchmark's dummy prompts, greedy
    decoding: TensorRT-LLM's gptSessionBenchmark fills every prompt with the pad id), so they route alike and an MoE
    layer touches the experts of new_tokens tokens, not of batch x new_tokens.
    """
    B, S = _f(batch), _f(new_tokens)
    T = B * S
    h, a, bpw = m.hidden_size, activation_bytes(fmt), fmt.bytes_per_weight
    L = m.num_layers
    ops: list[OpCost] = [
        OpCost("embedding", stage, 1, 0.0, T * h * embedding_bits(m, fmt) / 8, T * h * a, compute=VECTOR),
        OpCost("norms", stage, L, 4.0 * T * h * (m.norm_params_per_layer() // h),
               m.norm_params_per_layer() * 2.0, (m.norm_params_per_layer() // h) * 2 * T * h * a, compute=VECTOR),
    ]
    La = m.num_attention_layers
    if La:
        attn_p = m.attention_params()
        o_p = m.attn_out_dim * h + (h if m.o_proj_bias else 0)
        qkv_p = attn_p - o_p
        ops.append(OpCost("qkv_proj", stage, La, 2 * T * qkv_p, qkv_p * bpw, T * (h + m.q_dim + 2 * m.kv_dim) * a))
        ops += _attention_ops(m, kv_dtype, a, stage, B, S, past, flash_attention)
        ops.append(OpCost("o_proj", stage, La, 2 * T * o_p, o_p * bpw, T * (m.attn_out_dim + h) * a))
        if m.sparse:
            ip = m.indexer_params()
            ops.append(OpCost("indexer_proj", stage, m.count_mixers("sparse"), 2 * T * ip, ip * bpw,
                              T * (h + m.sparse.index_n_heads * (m.sparse.index_head_dim + 1)) * a))
    ops += _state_ops(m, fmt, stage, B, S, a)
    if m.num_dense_layers:
        I = m.intermediate_size
        mp = m.mlp_params(I)
        ops.append(OpCost("mlp", stage, m.num_dense_layers, 2 * T * mp, mp * bpw,
                          T * (2 * h + (3 if m.mlp_gated else 2) * I) * a))
    if m.moe and m.num_moe_layers:
        E, k = m.moe.num_experts, m.moe.experts_per_token
        nm = m.num_moe_layers
        ep = m.expert_params()
        Ie = m.moe.expert_intermediate_size
        touched = expected_distinct_experts(E, k, S if identical_sequences else T)
        ops.append(OpCost("moe_router", stage, nm, 2 * T * h * E, m.router_params() * 2.0, T * (h + E) * a))
        lp, w = m.latent_proj_params(), m.expert_width
        if lp:  # LatentMoE: hidden -> latent before the routed experts, latent -> hidden after them
            ops.append(OpCost("moe_latent_proj", stage, nm, 2 * T * lp, lp * bpw, T * 2 * (h + w) * a))
        ops.append(OpCost("moe_experts", stage, nm, 2 * T * k * ep, touched * ep * expert_bytes_per_weight(m, fmt),
                          T * k * (2 * w + 3 * Ie) * a, weight_format=expert_storage_format(m, fmt),
                          expert_width=float(Ie)))
        sp = m.shared_expert_params()
        if sp:
            ops.append(OpCost("moe_shared_experts", stage, nm, 2 * T * sp, sp * bpw, T * 3 * h * a))
    # final norm + LM head on the last position of each sequence; a tied head still reads the embedding matrix
    lm_p = m.vocab_size * h
    lm_bits = fmt.lm_head_bits  # untied, or tied: the one matrix is stored at the output's type (embedding_bits)
    ops.append(OpCost("lm_head", stage, 1, 2 * B * lm_p, lm_p * lm_bits / 8, B * (h * a + m.vocab_size * 4.0)))
    return ops


def prefill_ops(m, fmt, kv_dtype, batch, prompt, past=0, flash_attention=True):
    return step_ops(m, fmt, kv_dtype, "prefill", batch, prompt, past, flash_attention)


def decode_ops(m, fmt, kv_dtype, batch, context, flash_attention=True):
    return step_ops(m, fmt, kv_dtype, "decode", batch, 1, context, flash_attention)


def totals(ops: list[OpCost]) -> dict[str, np.ndarray]:
    """Sum of each cost field over all ops (times their layer count)."""
    out = {}
    for field in ("flops", "weight_bytes", "act_bytes", "kv_read_bytes", "kv_write_bytes"):
        out[field] = sum(op.count * getattr(op, field) for op in ops) + 0.0  # floats stay floats, arrays arrays
    out["bytes"] = out["weight_bytes"] + out["act_bytes"] + out["kv_read_bytes"] + out["kv_write_bytes"]
    return out
