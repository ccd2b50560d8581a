"""Memory per device: weights + KV cache + peak activations + runtime overhead against what the serving engine lets
the model use, the largest batch and the longest context that fit (closed forms), and each engine's KV-sizing rule.

Every command (estimate, sweep, simulate, plan, static batching, speculative, UI) sizes memory through
`plan_memory` / `need_bytes` / `runtime_overhead_bytes` here, so two screens never disagree.

Activations (peak transient of one forward pass of T tokens, one layer live at a time, a = 2 bytes; under t-way
tensor parallelism the residual stream is replicated and the heads / MLP width are split, Megatron-LM):
  MLP:        T*(2h + 3*I_eff/t)*a              residual + normed input, gate/up outputs, activated product
  attention:  T*(2h + (q + 2kv + o)/t)*a        (+ 2*(H/t)*T*(S+past)*a for the score and probability matrices
                                                 when FlashAttention is off: the quadratic term)
  logits:     n*V*4                             fp32 logits of the n sequences that end in this pass
  peak = max(MLP, attention) + logits
T = B*S for a prompt run in one pass; with chunked prefill the engine runs at most its chunk of C tokens per step
(vLLM max_num_batched_tokens, SGLang chunked_prefill_size, TensorRT-LLM max_num_tokens, llama.cpp n_ubatch), so
T = min(B*S, C) and n = min(B, T): a 100k-token prompt costs a chunk's activations, not 100k tokens'.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace

from .architecture import ModelArch
from .catalog_index import by_identity
from .errors import PlannerError
from .lazy import np
from .ops import kv_bytes_per_token_per_layer, state_bytes_per_sequence, weight_bytes, weight_bytes_by_group
from .quantization import KV_FORMATS, WeightFormat, activation_bytes
from .replay import Replayed, as_float, as_int
from .scheduler_defaults import LMDEPLOY_PREFILL_TOKENS, scheduler_defaults, sglang_mem_fraction_static

ENGINES = ("none", "vllm", "trtllm", "sglang", "llamacpp", "lmdeploy")
VLLM_VERSIONS = ("v0.2", "v0", "v1")

# Engine defaults, from each engine's documentation / source
VLLM_GPU_MEMORY_UTILIZATION = 0.9      # vLLM EngineArgs.gpu_memory_utilization default
VLLM_BLOCK_SIZE = 16                   # vLLM default KV block size (tokens)
VLLM_V0_MIN_BATCHED_TOKENS = 2048      # V0 without chunked prefill: max_num_batched_tokens = max(max_model_len, 2048)
VLLM_SAMPLER_FP32_COPIES = 3           # V0 Sampler: logits.float(), softmax probs, log_softmax logprobs [seqs, V] fp32
# V1 (gpu_model_runner._dummy_sampler_run): the profile's sampler peak is one fp32 [seqs, V] tensor beyond the pass:
# fitted to the gpt-oss-120b / 8 x H200 log (vLLM 0.15.1, max_num_seqs 1024 by default there): 'Available KV cache
# memory: 115.89 GiB'; one copy gives 115.93 GiB, three 114.39 (tests/planner/test_memory.py)
VLLM_V1_SAMPLER_FP32_COPIES = 1
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9  # TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction default
TRTLLM_MAX_NUM_TOKENS = 8192           # TensorRT-LLM max_num_tokens default (chunked context)
LLAMACPP_N_UBATCH = 512                # llama.cpp n_ubatch default: the compute buffer holds one ubatch
LLAMACPP_N_BATCH = 2048                # llama.cpp n_batch default; a causal model's is min(n_ctx, n_batch)
# LMDeploy TurboMind (TurbomindEngineConfig, lmdeploy/messages.py): cache_max_entry_count "defaults to 0.8, signifying
# the percentage of FREE GPU memory to be reserved for the k/v cache" (lmdeploy > v0.2.1), in blocks of
# cache_block_seq_len = 64 tokens (its prefill chunk: scheduler_defaults.LMDEPLOY_PREFILL_TOKENS)
LMDEPLOY_CACHE_MAX_ENTRY_COUNT = 0.8
LMDEPLOY_BLOCK_SIZE = 64
# What a llama.cpp process holds on a discrete GPU besides its model, KV and compute buffers: the CUDA context (it
# has no PyTorch allocator slack, no cuBLAS/cuDNN workspaces of the serving stacks, no CUDA-graph pool: its graphs
# replay the ggml compute buffer). 0.47 GB: a llama-server log on 4 x RTX 3090 (JunweiLiang/MLLMs
# note_running_deepseek.md @ d065906f) prints "using device CUDA0 (NVIDIA GeForce RTX 3090) - 23982 MiB free" when
# loading the model, of a CUDA total of 25.62e9 B = 24,433 MiB (hardware_specs/rtx-3090.yaml): 451 MiB; vLLM 0.11 on
# an H100 logs a CUDA context of about 0.5 GiB (hardware_specs/defaults/efficiency.yaml)
LLAMACPP_GPU_CONTEXT_BYTES = 0.47e9
# llama.cpp keeps a sliding-window (iSWA) cache only for the architectures it implements with one (llama-model.cpp
# sets hparams.swa_type for Gemma 2/3, Cohere2, gpt-oss, Llama 4); Mistral 7B v0.1 runs as plain llama: full cache.
LLAMACPP_SWA_FAMILIES = frozenset({"gemma2", "gemma3", "gemma3_text", "cohere2", "gpt_oss", "llama4"})

# Runtime overhead (see runtime_overhead_bytes)
NCCL_BYTES_PER_GPU = 0.45e9            # NCCL communicator + custom all-reduce buffers per GPU under TP
CUDA_GRAPH_MAX_BATCH = 512             # vLLM's largest captured decode batch (cudagraph_capture_sizes up to 512)


# ---------------------------------------------------------------- weights (cached: the limits evaluate plans often)

# What each engine runs, where it definitely does not run something (its documentation / source): KV-cache dtypes it
# has no cache for, and the devices it does not run on. An engine not listed, or a dtype / device not named, is
# allowed (no refusal where the planner is not sure).
ENGINE_NO_KV = {
    "vllm": ("int8", "int4", "q8_0", "q4_0"),     # --kv-cache-dtype: auto, fp8, fp8_e4m3, fp8_e5m2 (CacheConfig)
    "sglang": ("int8", "int4", "q8_0", "q4_0"),   # --kv-cache-dtype: auto, fp8_e5m2, fp8_e4m3 (server_args)
    "trtllm": ("q8_0", "q4_0"),                   # KV cache quantization: FP8, INT8 (and NVFP4 on Blackwell)
    "llamacpp": ("fp8", "fp8-per-token", "int8", "int4"),  # -ctk/-ctv: f32, f16, bf16, q8_0, q4_0, q4_1, ...
    "lmdeploy": ("fp8", "fp8-per-token", "q8_0", "q4_0"),  # TurboMind quant_policy: 8 = int8 KV, 4 = int4 KV
}
ENGINE_VENDORS = {"trtllm": ("nvidia",),        # TensorRT-LLM builds CUDA engines for NVIDIA GPUs only
                  "lmdeploy": ("nvidia",)}      # TurboMind is CUDA-only (its PyTorch engine is another profile)


def check_engine(engine: str, spec, kv_dtype: str) -> None:
    """Refuse an engine on a device or with a KV dtype it does not run (ENGINE_NO_KV, ENGINE_VENDORS): one line."""
    if kv_dtype in ENGINE_NO_KV.get(engine, ()):
        ok = [k for k in KV_FORMATS if k not in ENGINE_NO_KV[engine]]
        raise PlannerError(f"--kv-dtype: {engine} has no {kv_dtype} KV cache; allowed with --engine {engine}: "
                           f"{', '.join(ok)}")
    vendors = ENGINE_VENDORS.get(engine)
    if vendors and (spec.vendor.lower() not in vendors or not any(u.kind == "gpu" for u in spec.units)):
        raise PlannerError(f"--engine: {engine} runs on {'/'.join(v.upper() for v in vendors)} GPUs only, not "
                           f"{spec.id} ({spec.vendor})")


def _weights(m: ModelArch, fmt: WeightFormat) -> float:
    return by_identity("weight_bytes", (m, fmt), lambda: weight_bytes(m, fmt))  # (hashing a ModelArch is slow)


# ---------------------------------------------------------------- activations

def _i_eff(m: ModelArch) -> int:
    if m.moe:
        shared = (m.moe.shared_expert_intermediate_size or m.moe.expert_intermediate_size) * m.moe.num_shared_experts
        return max(m.moe.experts_per_token * m.moe.expert_intermediate_size + shared,
                   m.intermediate_size if m.num_dense_layers else 0)
    return m.intermediate_size


_PLAIN = frozenset({int, float, bool})
_NP_SCALARS: frozenset = frozenset()


def _scalar(*xs) -> bool:
    """All plain numbers, numpy's float64/float32/int64/int32 scalars included (then the formulas run on floats,
    without numpy's per-call cost)."""
    global _NP_SCALARS
    for x in xs:
        c = x.__class__
        if c not in _PLAIN and c not in _NP_SCALARS:
            if not _NP_SCALARS and "numpy" in sys.modules:  # (no numpy scalar exists before numpy is imported)
                _NP_SCALARS = frozenset({np.float64, np.float32, np.int64, np.int32})
                if c in _NP_SCALARS:
                    continue
            return False
    return True


def pass_tokens(batch, prompt, chunk_tokens=None):
    """Tokens in the largest forward pass of a prefill: B*S, or min(B*S, C) under chunked prefill."""
    if _scalar(batch, prompt):
        t = as_float(batch) * as_float(prompt)
        return t if chunk_tokens is None else min(t, float(chunk_tokens))
    t = np.asarray(batch, dtype=np.float64) * np.asarray(prompt, dtype=np.float64)
    return t if chunk_tokens is None else np.minimum(t, float(chunk_tokens))


def forward_bytes_peak(m: ModelArch, fmt: WeightFormat, tokens, context, past=0, flash_attention=True, tp: int = 1):
    """Peak live bytes of one layer's forward pass over `tokens` tokens, without logits (module docstring).

    context: keys each query attends (S; only the quadratic term without FlashAttention uses it)."""
    if _scalar(tokens, context, past):  # plain floats: the same formula, without numpy's per-call cost
        T, S, P, mx = as_float(tokens), as_float(context), as_float(past), max
    else:
        T, S, P = (np.asarray(x, dtype=np.float64) for x in (tokens, context, past))
        mx = np.maximum
    a = activation_bytes(fmt)
    h = m.hidden_size
    mlp = T * (2 * h + 3 * _i_eff(m) / tp) * a
    attn = T * (2 * h + (m.q_dim + 2 * m.kv_dim + m.attn_out_dim) / tp) * a
    if not flash_attention and m.num_attention_layers:  # a pure state-space model has no score matrix
        attn = attn + 2 * (m.num_attention_heads / tp) * T * (S + P) * a
    return mx(mlp, attn)


def logits_bytes(m: ModelArch, rows):
    """fp32 logits of `rows` sequences: rows x V x 4."""
    return (as_float(rows) if _scalar(rows) else np.asarray(rows, dtype=np.float64)) * m.vocab_size * 4.0


def activation_bytes_peak(m: ModelArch, fmt: WeightFormat, batch, prompt, past=0, flash_attention=True, tp: int = 1,
                          chunk_tokens=None):
    """Peak transient activation bytes of a prefill of `batch` x `prompt` tokens per device (module docstring)."""
    T = pass_tokens(batch, prompt, chunk_tokens)
    n = min(as_float(batch), T) if _scalar(batch, T) else np.minimum(np.asarray(batch, dtype=np.float64), T)
    return forward_bytes_peak(m, fmt, T, prompt, past, flash_attention, tp) + logits_bytes(m, n)


# ---------------------------------------------------------------- runtime overhead

def runtime_overhead_bytes(spec, m: ModelArch | None = None, fmt: WeightFormat | None = None, tp: int = 1,
                           cuda_graphs: bool | None = None, draft_kv_bytes: float = 0.0, engine: str = "none") -> float:
    """Memory the runtime holds per device besides weights, KV cache and activations:

      context   CUDA context + cuBLAS/cuDNN workspaces + allocator slack, per device kind
                (hardware_specs/defaults/efficiency.yaml `runtime_overhead_gb`; GPU 0.8 GB: vLLM PR #2031's
                Llama-2-7B on A100 lost 98 blocks x 8.39 MB = 0.82 GB when non-torch memory was first counted)
      + NCCL    0.45 GB per GPU when tp > 1 (vLLM 0.11 on H100: non-torch memory 0.13 GiB at TP1, 0.55 GiB at TP2)
      + graphs  CUDA-graph pool on GPUs (off with cuda_graphs=False, vLLM --enforce-eager): the graphs share one
                private pool sized by the largest captured batch, a decode step of 512 sequences:
                forward_bytes_peak(512 tokens) (vLLM cudagraph_capture_sizes <= 512; the LM head and sampler run
                outside the graphs)
      + draft   the draft model's KV cache under speculative decoding (draft_kv_bytes, given by the caller)
    llama.cpp (engine 'llamacpp') on a discrete GPU holds its CUDA context only (LLAMACPP_GPU_CONTEXT_BYTES): its
    compute buffer is counted as activations (llamacpp_compute_buffer_bytes) and its CUDA graphs replay that buffer;
    elsewhere (unified memory, CPU) the kind's base.
    """
    if engine == "llamacpp":
        base = LLAMACPP_GPU_CONTEXT_BYTES if spec.kind == "gpu" else _efficiency_overhead_gb(spec.kind) * 1e9
        return base + float(draft_kv_bytes)
    base = _efficiency_overhead_gb(spec.kind) * 1e9
    nccl = NCCL_BYTES_PER_GPU if tp > 1 else 0.0
    if cuda_graphs is None:
        cuda_graphs = spec.kind == "gpu"
    graphs = _graph_pool_bytes(m, fmt, tp) if cuda_graphs and m is not None and fmt is not None else 0.0
    return base + nccl + graphs + float(draft_kv_bytes)


def _graph_pool_bytes(m: ModelArch, fmt: WeightFormat, tp: int) -> float:
    return by_identity(("graph_pool_bytes", tp), (m, fmt),
                       lambda: float(forward_bytes_peak(m, fmt, CUDA_GRAPH_MAX_BATCH, 1, 0, True, tp)))


def _efficiency_overhead_gb(kind: str) -> float:
    from .hardware import efficiency_defaults
    return efficiency_defaults().runtime_overhead_gb[kind]


# ---------------------------------------------------------------- llama.cpp's device buffers

def llamacpp_host_weight_bytes(m: ModelArch, fmt: WeightFormat, spec) -> float:
    """Weight bytes llama.cpp keeps in host memory with every layer offloaded to a discrete GPU: the input token
    embedding (src/llama-model.cpp load_tensors: "there is very little benefit to offloading the input layer, so
    always keep it on the CPU"; the log's CPU_Mapped model buffer, e.g. 586.82 MiB = 201,088 x 2,880 x 8.5 bits for
    gpt-oss-20b MXFP4, 417.66 MiB = 152,064 x 5,120 x 4.5 bits for a Qwen2-32B Q4_K_M). A model with tied embeddings
    loads the same table again as its output head on the device (TENSOR_DUPLICATED), so nothing of it leaves the
    device; on unified memory (a system-on-chip, a CPU) the host memory is the device memory: 0 there."""
    if spec.kind != "gpu" or m.tie_word_embeddings:
        return 0.0
    return float(weight_bytes_by_group(m, fmt)["embedding"])


def llamacpp_compute_buffer_bytes(m: ModelArch, fmt: WeightFormat, n_ctx, n_ubatch: int, flash_attention=True,
                                  tp: int = 1, logits: bool = True):
    """llama.cpp's compute buffer: the graph it reserves at context creation, one ubatch of T = min(n_ubatch,
    n_batch) tokens with n_batch = min(n_ctx, LLAMACPP_N_BATCH) (llama_context: a causal model's batch is capped at
    n_ctx), every one of them an output ("graph_reserve: reserving a graph for ubatch with n_tokens = 512, n_seqs = 1,
    n_outputs = 512"): forward_bytes_peak(T tokens against n_ctx keys) + T x V x 4 fp32 logits. Qwen3-1.7B at n_ctx
    4,096: 512 x 151,936 x 4 = 296.8 MiB of logits of the 300.75 MiB 'CUDA0 compute buffer size' its log prints.
    logits=False: the device's share where the output layer (and its logits) stays on the host (llamacpp_gpu_layers)."""
    if _scalar(n_ctx):
        T = float(min(n_ubatch, as_float(n_ctx), LLAMACPP_N_BATCH))
    else:
        T = np.minimum(np.minimum(np.asarray(n_ctx, dtype=np.float64), LLAMACPP_N_BATCH), n_ubatch)
    return forward_bytes_peak(m, fmt, T, n_ctx, 0, flash_attention, tp) + (logits_bytes(m, T) if logits else 0.0)


def llamacpp_gpu_layers(m: ModelArch, fmt: WeightFormat, kv_dtype: str, batch: int, prompt: int, output: int, spec,
                       n_ubatch: int = LLAMACPP_N_UBATCH, flash_attention: bool = True) -> int:
    """Repeating layers llama.cpp can keep on a discrete GPU (`-ngl N`) when the whole model does not fit: it puts the
    last N of the L layers on the device with their KV cache, and the output layer there only at N > L
    (llama-model.cpp load_tensors: a layer's device by il >= n_layer - n_gpu_layers; "offloading output layer to
    GPU" past n_layer), so below L the output layer, its logits and the input embedding stay in host memory.
    N = floor((capacity - CUDA context - one ubatch's activations) / (weights + KV of one layer)), 0..L, with the
    layers' weights averaged (all weights but the embedding and the LM head, over L) and n_ctx = batch x context."""
    L = m.num_layers
    groups = weight_bytes_by_group(m, fmt)
    per_layer = (sum(groups.values()) - groups["embedding"] - groups["lm_head"]) / L
    ctx = prompt + output
    per_layer += batch * as_float(kv_seq_bytes(m, kv_dtype, ctx, window_capped("llamacpp", m))) / L
    free = (spec.usable_capacity_gb * 1e9 - runtime_overhead_bytes(spec, m, fmt, engine="llamacpp")
            - as_float(llamacpp_compute_buffer_bytes(m, fmt, batch * ctx, n_ubatch, flash_attention, logits=False)))
    return int(max(0, min(L, free // per_layer))) if per_layer > 0 else L


# ---------------------------------------------------------------- KV cache per engine

def window_capped(engine: str, m: ModelArch, vllm_version: str = "v1") -> bool:
    """Whether the engine keeps only the window on sliding-window layers.

    none: yes (the physics); llama.cpp: only for the architectures it runs with an iSWA cache
    (LLAMACPP_SWA_FAMILIES); vLLM: V1's hybrid KV-cache manager frees blocks outside the window, V0 keeps every layer's
    blocks for the whole context; TensorRT-LLM: cyclic KV cache per attention window; SGLang: one full-length token
    pool (its SWA pool is opt-in); LMDeploy TurboMind: full-length blocks (no window cache the planner knows of)."""
    if not m.num_local_layers:
        return False
    if engine == "llamacpp":
        return m.family in LLAMACPP_SWA_FAMILIES
    if engine == "vllm":
        return vllm_version == "v1"
    return engine in ("none", "trtllm")


def kv_seq_bytes(m: ModelArch, kv_dtype: str, context, capped: bool = True):
    """Cache bytes of one sequence of `context` tokens (whole model): global attention layers keep every token,
    local layers (sliding window or chunked) at most W tokens if capped, linear-attention / SSM layers a constant
    state (planner.ops.state_bytes_per_sequence)."""
    scalar = _scalar(context)
    c = as_float(context) if scalar else np.asarray(context, dtype=np.float64)
    per = kv_bytes_per_token_per_layer(m, kv_dtype)
    state = state_bytes_per_sequence(m)
    if m.num_local_layers and capped:
        mn = min if scalar else np.minimum
        return per * (m.num_global_layers * c + m.num_local_layers * mn(c, m.local_window)) + state
    return per * m.num_attention_layers * c + state


# ---------------------------------------------------------------- the plain memory need (vectorized)

def need_bytes(m: ModelArch, fmt: WeightFormat, kv_dtype: str, batch, prompt, output, flash_attention=True,
               tp: int = 1, kv_ways: int = 1, chunk_tokens=None, window_cap: bool = True):
    """weights / t + batch x KV(prompt + output) / kv_ways + activations, per device; numpy-broadcast over batch,
    prompt, output (the sweep calls this on whole grids). The runtime overhead is added by the caller."""
    return (_weights(m, fmt) / tp + np.asarray(batch, dtype=np.float64)
            * kv_seq_bytes(m, kv_dtype, np.asarray(prompt) + np.asarray(output), window_cap) / kv_ways
            + activation_bytes_peak(m, fmt, batch, prompt, 0, flash_attention, tp, chunk_tokens))


# ---------------------------------------------------------------- engine settings and the memory plan

@dataclass(frozen=True)
class EngineSettings:
    """Engine arguments that change memory (vLLM's names); None = the engine's default.

    gpu_memory_utilization: the engine's memory fraction: vLLM gpu_memory_utilization (0.9), SGLang
    mem_fraction_static (its default by device memory and TP: scheduler_defaults.sglang_mem_fraction_static, 0.834 on
    an H100 at TP1), TensorRT-LLM free_gpu_memory_fraction (0.9), LMDeploy cache_max_entry_count (0.8 of the free
    memory).
    vllm_version: 'v0.2' (<= 0.2.4: the profiled peak is torch.cuda.max_memory_allocated(), non-torch memory not
    counted; fixed by PR #2031), 'v0' (0.2.5-0.6 V0 engine: peak = total - free after profiling, so non-torch memory
    counts; no chunked prefill: profiling runs max(max_model_len, 2048) tokens as max_num_seqs sequences), 'v1'
    (0.7+ V1 engine: chunked prefill always on, profiling runs max_num_batched_tokens tokens; available = total x
    util - weights - torch peak - non-torch memory). CUDA graphs are captured after the KV cache is allocated in all
    three, so they live in the (1 - util) headroom and do not shrink the pool.
    """

    vllm_version: str = "v1"
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int = VLLM_BLOCK_SIZE
    cuda_graphs: bool = True

    def __post_init__(self):
        if self.vllm_version not in VLLM_VERSIONS:
            raise PlannerError(f"--vllm-version: unknown version '{self.vllm_version}'; allowed: "
                               + ", ".join(VLLM_VERSIONS))
        u = self.gpu_memory_utilization
        if u is not None and not (isinstance(u, (int, float)) and math.isfinite(u) and 0 < u <= 1):
            raise PlannerError(f"--gpu-memory-utilization: must be in (0, 1], got {u!r}")
        for name in ("max_model_len", "max_num_batched_tokens", "max_num_seqs", "block_size"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 40):
                raise PlannerError(f"--{name.replace('_', '-')}: must be an integer in [1, 2^40], got {v!r}")


DEFAULT_SETTINGS = EngineSettings()


def settings_for_device(engine: str, s: EngineSettings, spec) -> EngineSettings:
    """`s` with the scheduler limits it leaves unset (None) taken from the engine's own defaults on this device
    (planner/scheduler_defaults.py: vLLM V1's max_num_batched_tokens and max_num_seqs by device memory,
    SGLang's chunked_prefill_size), so that memory and the simulated scheduler read one rule. vLLM V0 and the other
    engines take PLANNER_DEFAULTS.max_num_seqs (V0's 256) and keep an unset budget (a whole prompt per pass, or
    TensorRT-LLM's / llama.cpp's own chunk in engine_chunk_tokens)."""
    if s.max_num_batched_tokens is not None and s.max_num_seqs is not None:
        return s
    d = scheduler_defaults(None if engine == "vllm" and s.vllm_version != "v1" else engine, spec)
    tokens = s.max_num_batched_tokens
    if tokens is None and d.chunked_prefill:  # the engine chunks: its budget is the pass (vLLM V1, SGLang)
        tokens = d.max_num_batched_tokens
    return replace(s, max_num_batched_tokens=tokens, max_num_seqs=d.max_num_seqs if s.max_num_seqs is None
                   else s.max_num_seqs)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per device. total = weights + KV + activations + overhead; it fits when total <= budget (the memory the
    engine lets the model use: the whole usable capacity, or vLLM's capacity x gpu_memory_utilization, ...)."""

    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    overhead_bytes: float
    capacity_bytes: float
    budget_bytes: float | None = None
    engine: str = "none"
    budget_label: str = "usable"
    kv_pool_bytes: float = 0.0
    max_concurrency: float = 0.0
    blocks: int | None = None
    rule: str = "weights + KV(batch x context) + activations + overhead"
    headroom_ok: bool = True     # SGLang: activations + overhead fit outside its static pool
    refusal: str = ""            # why the engine refuses the request outright (vLLM: context > max_model_len)

    @property
    def budget(self) -> float:
        return self.capacity_bytes if self.budget_bytes is None else self.budget_bytes

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activations_bytes + self.overhead_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.budget and self.headroom_ok and not self.refusal


def engine_chunk_tokens(engine: str, s: EngineSettings) -> int | None:
    """Largest prefill pass of the engine: its chunk, or None for a whole prompt in one pass. vLLM V1's and SGLang's
    budgets are filled by settings_for_device; vLLM V0 (no chunked prefill) and none keep what the user gave."""
    return {"none": s.max_num_batched_tokens, "vllm": s.max_num_batched_tokens, "sglang": s.max_num_batched_tokens,
            "trtllm": s.max_num_batched_tokens or TRTLLM_MAX_NUM_TOKENS,
            "llamacpp": s.max_num_batched_tokens or LLAMACPP_N_UBATCH,
            "lmdeploy": s.max_num_batched_tokens or LMDEPLOY_PREFILL_TOKENS}[engine]


def vllm_profile_bytes(m: ModelArch, fmt: WeightFormat, s: EngineSettings, tp: int = 1, flash_attention=True) -> float:
    """Torch peak of vLLM's profiling run above the weights, per GPU.

    V0 (v0.2, v0): max_num_batched_tokens = max(max_model_len, 2048) tokens split over min(max_num_seqs, tokens)
      dummy sequences; the sampler then holds VLLM_SAMPLER_FP32_COPIES fp32 [seqs, V] tensors (worker.py
      profile_num_available_blocks -> model_runner.profile_run).
    V1: one dummy pass of max_num_batched_tokens tokens (gpu_model_runner.profile_run) and the sampler's
      VLLM_V1_SAMPLER_FP32_COPIES fp32 [min(max_num_seqs, tokens), V] tensor.
    """
    max_len = s.max_model_len or m.max_position_embeddings
    if s.vllm_version == "v1":
        tokens = s.max_num_batched_tokens  # settings_for_device filled it
    else:
        tokens = s.max_num_batched_tokens or max(max_len, VLLM_V0_MIN_BATCHED_TOKENS)
    seqs = min(s.max_num_seqs, tokens)
    per_seq = math.ceil(tokens / seqs)
    return float(forward_bytes_peak(m, fmt, tokens, per_seq, 0, flash_attention, tp)
                 + (VLLM_V1_SAMPLER_FP32_COPIES if s.vllm_version == "v1" else VLLM_SAMPLER_FP32_COPIES)
                 * logits_bytes(m, seqs))


def _layer_block_bytes(m: ModelArch, kv_dtype: str, block_size: int, kv_ways: int) -> float:
    """Bytes of one paged-KV block of `block_size` tokens in one attention layer, per device of a KV split kv_ways
    ways (vLLM's and TurboMind's blocks)."""
    return block_size * kv_bytes_per_token_per_layer(m, kv_dtype) / kv_ways


def _vllm_blocks_per_seq(m: ModelArch, context, block_size: int, capped: bool, chunk_tokens: int = 0):
    """Layer-blocks one sequence holds: G*ceil(c/bs) + L*ceil(min(c, W')/bs) (L = 0 unless window-capped).

    W' = W - 1 + chunk: a local layer holds its window plus the prefill chunk being computed, as vLLM V1 counts it
    (SlidingWindowSpec / ChunkedLocalAttentionSpec.max_memory_usage_bytes: min(W - 1 + max_num_batched_tokens,
    max_model_len) tokens), so a request of up to max_num_batched_tokens tokens keeps its whole length there."""
    c = np.asarray(context, dtype=np.float64)
    if m.num_local_layers and capped:
        w = m.local_window - 1 + chunk_tokens if chunk_tokens else m.local_window
        return (m.num_global_layers * np.ceil(c / block_size)
                + m.num_local_layers * np.ceil(np.minimum(c, w) / block_size))
    return m.num_attention_layers * np.ceil(c / block_size)


def plan_memory(m: ModelArch, fmt: WeightFormat, kv_dtype: str, batch: int, prompt: int, output: int, spec,
                engine: str = "none", settings: EngineSettings = DEFAULT_SETTINGS, tp: int = 1, kv_ways: int = 1,
                flash_attention: bool = True, capacity_bytes: float | None = None,
                draft_kv_bytes: float = 0.0, pp: int = 1) -> MemoryBreakdown:
    """Memory per device of (model, format, KV dtype, batch x (prompt + output)) under an engine's rule.

    none:     weights + KV(batch x context) + activations + runtime overhead <= usable capacity
    vllm:     the pool is what is left of capacity x gpu_memory_utilization after weights, the profiling run's peak
              (vllm_profile_bytes) and non-torch memory (CUDA context + NCCL; nothing for v0.2), in blocks of
              block_size tokens: blocks = floor(pool / (block_size x KV bytes per token)); it fits when the batch's
              sequences, each ceil(context / block_size) blocks, fit in the blocks
              (worker.py determine_num_available_blocks, v1/worker/gpu_worker.py determine_available_memory)
    trtllm:   KV pool = free_gpu_memory_fraction x (capacity - weights - activations - overhead)
              (tensorrt_llm KvCacheConfig: a fraction of what is free after the engine is loaded)
    sglang:   KV pool = capacity x mem_fraction_static - weights - overhead; activations and CUDA graphs must fit
              in the other (1 - mem_fraction_static) (sglang model_runner.profile_max_num_token)
    lmdeploy: KV pool = cache_max_entry_count (0.8) x (capacity - weights - activations - overhead), in blocks of 64
              tokens (TurboMind: a share of the free memory after the model; lmdeploy > v0.2.1)
    llamacpp: weights + KV of n_ctx = batch x context tokens allocated up front + the compute buffer of one
              n_ubatch + overhead <= capacity (llama_context: the KV cache is sized by n_ctx at creation)
    Every result carries its total and the budget it is compared with, so the verdict and the printed numbers come
    from the same rule. Per device of a t-way tensor-parallel group (KV split kv_ways = min(t, KV heads) ways) of
    one of pp pipeline stages (each holds 1/pp of the layers: weights and KV / pp, activations of one layer).
    """
    if engine not in ENGINES:
        raise PlannerError(f"--engine: unknown engine '{engine}'; allowed: {', '.join(ENGINES)}")
    s = settings_for_device(engine, settings, spec)
    cap = spec.usable_capacity_gb * 1e9 if capacity_bytes is None else capacity_bytes
    W = _weights(m, fmt) / (tp * pp)
    ctx = prompt + output
    capped = window_capped(engine, m, s.vllm_version)
    per_seq = as_float(kv_seq_bytes(m, kv_dtype, ctx, capped)) / (kv_ways * pp)
    chunk = engine_chunk_tokens(engine, s)
    if engine == "llamacpp":  # the input embedding stays on the host; the compute buffer is reserved for n_ctx
        W = (_weights(m, fmt) - llamacpp_host_weight_bytes(m, fmt, spec)) / (tp * pp)
        act = as_float(llamacpp_compute_buffer_bytes(m, fmt, batch * ctx, chunk, flash_attention, tp))
    else:
        act = as_float(activation_bytes_peak(m, fmt, batch, prompt, 0, flash_attention, tp, chunk))
    graphs = s.cuda_graphs and spec.kind == "gpu"
    if engine == "vllm":
        util = s.gpu_memory_utilization or VLLM_GPU_MEMORY_UTILIZATION
        budget = cap * util
        ovh = 0.0 if s.vllm_version == "v0.2" else runtime_overhead_bytes(spec, m, fmt, tp, False, draft_kv_bytes)
        prof = vllm_profile_bytes(m, fmt, s, tp, flash_attention)
        layer_block = _layer_block_bytes(m, kv_dtype, s.block_size, kv_ways)
        pool = max(0.0, budget - W - prof - ovh)
        if capped:  # layer-blocks of the hybrid allocator, this stage's share of a sequence's
            block = layer_block
            chunk = s.max_num_batched_tokens if s.vllm_version == "v1" else 0
            per_seq_blocks = float(_vllm_blocks_per_seq(m, ctx, s.block_size, capped, chunk)) / pp
        else:  # whole-model blocks (what vLLM prints as '# GPU blocks'), this stage's layers
            block = layer_block * m.num_attention_layers / pp
            per_seq_blocks = math.ceil(ctx / s.block_size)
        # linear-attention / SSM layers: one constant state per sequence beside its blocks (hybrid allocator)
        state = state_bytes_per_sequence(m) / (kv_ways * pp)
        seq_bytes = per_seq_blocks * block + state
        conc = pool / seq_bytes if seq_bytes > 0 else math.inf
        if state == 0:
            blocks = as_int(pool // block)
            conc = blocks / per_seq_blocks
        else:  # the attention blocks left beside the states of the requested batch's sequences
            blocks = as_int(max(0.0, pool - batch * state) // block) if block > 0 else None
        kv_need = batch * seq_bytes
        rule = (f"vLLM {s.vllm_version}: gpu_memory_utilization={util:g}, block_size={s.block_size}, profiling run "
                f"{'max_num_batched_tokens' if s.vllm_version == 'v1' else 'max(max_model_len, 2048)'} tokens, "
                f"{'torch peak only' if s.vllm_version == 'v0.2' else 'non-torch memory counted'}; "
                f"CUDA graphs captured after the KV cache")
        max_len = s.max_model_len or m.max_position_embeddings
        refusal = f"context {ctx:g} > max_model_len {max_len}" if ctx > max_len else ""
        return MemoryBreakdown(W, kv_need, prof, ovh, cap, budget, engine, f"= {util:g} x {cap / 1e9:.2f} GB",
                               pool, conc, blocks, rule, refusal=refusal)
    ovh = runtime_overhead_bytes(spec, m, fmt, tp, graphs, draft_kv_bytes, engine)
    kv = batch * per_seq
    if engine == "trtllm":
        f = s.gpu_memory_utilization or TRTLLM_FREE_GPU_MEMORY_FRACTION
        free = max(0.0, cap - W - act - ovh)
        pool = f * free
        return MemoryBreakdown(W, kv, act, ovh, cap, W + act + ovh + pool, engine,
                               f"(weights + activations + overhead + {f:g} x free)", pool,
                               pool / per_seq if per_seq else math.inf, None,
                               f"TensorRT-LLM: free_gpu_memory_fraction={f:g}, max_num_tokens={chunk}")
    if engine == "lmdeploy":  # TurboMind: a share of the memory left free after the model, in 64-token blocks
        f = s.gpu_memory_utilization or LMDEPLOY_CACHE_MAX_ENTRY_COUNT
        pool = f * max(0.0, cap - W - act - ovh)
        block = _layer_block_bytes(m, kv_dtype, LMDEPLOY_BLOCK_SIZE, kv_ways) * m.num_attention_layers / pp
        blocks = as_int(pool // block) if block > 0 else None
        seq_blocks = math.ceil(ctx / LMDEPLOY_BLOCK_SIZE)  # full-length blocks on every layer (no window cache)
        conc = blocks / seq_blocks if blocks is not None else math.inf
        return MemoryBreakdown(W, batch * seq_blocks * block, act, ovh, cap, W + act + ovh + pool, engine,
                               f"(weights + activations + overhead + {f:g} x free)", pool, conc, blocks,
                               f"LMDeploy TurboMind: cache_max_entry_count={f:g} of the free memory, "
                               f"{LMDEPLOY_BLOCK_SIZE}-token blocks, a forward of up to {chunk} tokens "
                               f"(max_prefill_token_num + max_batch_size)")
    if engine == "sglang":  # its default fraction depends on the device and the parallel group (v0.5.3+)
        f = s.gpu_memory_utilization or sglang_mem_fraction_static(spec, tp, pp)
        static = cap * f
        pool = max(0.0, static - W - ovh)
        return MemoryBreakdown(W, kv, act, ovh, cap, static + act, engine,
                               f"(static {f:g} x {cap / 1e9:.2f} GB + activations)", pool,
                               pool / per_seq if per_seq else math.inf, None,
                               f"SGLang: mem_fraction_static={f:g}, chunked_prefill_size={chunk}",
                               headroom_ok=act <= cap * (1 - f))
    if engine == "llamacpp":
        return MemoryBreakdown(W, kv, act, ovh, cap, None, engine, "usable", kv,
                               batch if W + kv + act + ovh <= cap else 0.0, None,
                               f"llama.cpp: n_ctx={batch * ctx} (batch x context) allocated up front, "
                               f"n_ubatch={chunk}, sliding-window cache {'on' if capped else 'off'}; activations = "
                               f"its compute buffer (one ubatch, every token an output: fp32 logits), overhead = "
                               + ("the CUDA context" if spec.kind == "gpu" else "the runtime's"))
    free = max(0.0, cap - W - act - ovh)
    return MemoryBreakdown(W, kv, act, ovh, cap, None, engine, "usable", kv,
                           free / per_seq if per_seq else math.inf, None,
                           "weights + KV(batch x context) + activations + overhead"
                           + (f", prefill chunk {chunk} tokens" if chunk else ""))


def _plan_memory_fields(m, fmt, kv_dtype, spec, engine, settings, tp, kv_ways, flash_attention, batch, prompt,
                        output) -> tuple:
    mb = plan_memory(m, fmt, kv_dtype, batch, prompt, output, spec, engine, settings, tp, kv_ways, flash_attention)
    return tuple(getattr(mb, f) for f in _BREAKDOWN_FIELDS)


_BREAKDOWN_FIELDS = tuple(MemoryBreakdown.__dataclass_fields__)
_PLAN = Replayed(_plan_memory_fields)


def plan_memory_fast(m: ModelArch, fmt: WeightFormat, kv_dtype: str, batch: int, prompt: int, output: int, spec,
                     engine: str = "none", settings: EngineSettings = DEFAULT_SETTINGS, tp: int = 1, kv_ways: int = 1,
                     flash_attention: bool = True) -> MemoryBreakdown:
    """plan_memory, its float operations replayed from the third call for the same model, format, KV dtype,
    device spec and engine settings on (planner.replay: the same numbers)."""
    if not (batch.__class__ is int and prompt.__class__ is int and output.__class__ is int):
        return plan_memory(m, fmt, kv_dtype, batch, prompt, output, spec, engine, settings, tp, kv_ways,
                           flash_attention)
    return MemoryBreakdown(*_PLAN((id(m), id(fmt), kv_dtype, id(spec), engine, settings, tp, kv_ways, flash_attention),
                                  (m, fmt, kv_dtype, spec, engine, settings, tp, kv_ways, flash_attention),
                                  (batch, prompt, output)))


# ---------------------------------------------------------------- largest batch and longest context (closed forms)

def largest_int(need, limit: float, lo: int, hi: int, breaks=()) -> int:
    """Largest integer x in [lo, hi] with need(x) <= limit, or lo - 1 if none.

    need must be nondecreasing and, between consecutive breakpoints, a polynomial of degree <= 2 in x. On the first
    piece whose right end exceeds the limit the polynomial is read off three points and solved for the limit; the
    integer answer is then confirmed with need() (a few calls in all, instead of a bisection's dozens)."""
    if need(lo) > limit:
        return lo - 1
    cuts = [int(math.floor(b)) + k for b in breaks if math.isfinite(b) and lo < b < hi for k in (0, 1)]
    edges = sorted({lo, hi, *(min(hi, max(lo, c)) for c in cuts)})
    a = lo
    for e in edges[1:]:
        if need(e) <= limit:
            a = e
            continue
        # answer in [a, e): need(a) <= limit < need(e); polynomial on [a + 1, e - 1] at most (a breakpoint's floor
        # may sit between pieces), so solve on the interior points and confirm
        x0, x2 = a, e
        x1 = (x0 + x2) / 2
        y0, y1, y2 = (need(x) - limit for x in (x0, x1, x2))
        # Newton form of the quadratic through the three points
        d01 = (y1 - y0) / (x1 - x0)
        d12 = (y2 - y1) / (x2 - x1)
        q = (d12 - d01) / (x2 - x0)
        b = d01 - q * (x0 + x1)
        c = y0 - x0 * d01 + q * x0 * x1
        if abs(q) * (x2 - x0) ** 2 > 1e-12 * (abs(b) * (x2 - x0) + abs(c) + 1):
            disc = max(b * b - 4 * q * c, 0.0)
            r = (-b + math.sqrt(disc)) / (2 * q) if q > 0 else (-b - math.sqrt(disc)) / (2 * q)
        else:
            r = -c / b if b else float(x0)
        x = int(min(max(math.floor(r), x0), x2 - 1)) if math.isfinite(r) else x0
        for _ in range(4):  # confirm on integers (float rounding, or a point between two pieces)
            if need(x) > limit:
                x -= 1
            elif x + 1 < x2 and need(x + 1) <= limit:
                x += 1
            else:
                return x
        lo_, hi_ = a, e  # not polynomial after all: bisect this piece (never seen in the tests)
        while hi_ - lo_ > 1:
            mid = (lo_ + hi_) // 2
            lo_, hi_ = (mid, hi_) if need(mid) <= limit else (lo_, mid)
        return lo_
    return hi


MAX_SEARCH = 1 << 40


def _need_fn(m, fmt, kv_dtype, spec, engine, s, tp, kv_ways, flash, cap, vary: str, batch, prompt, output, draft):
    def need(x):
        b, p = (x, prompt) if vary == "batch" else (batch, x)
        mb = plan_memory(m, fmt, kv_dtype, b, p, output, spec, engine, s, tp, kv_ways, flash, cap, draft)
        return mb.total_bytes - mb.budget + (0.0 if mb.headroom_ok else math.inf)
    return need


def _breaks(m, s, engine, batch, prompt, output, vary, flash, tp) -> list[float]:
    """Where the memory need changes polynomial piece: the window (KV cap), the chunk (activations stop growing),
    and, without FlashAttention, where the quadratic attention term overtakes the MLP."""
    chunk = engine_chunk_tokens(engine, s)
    out = []
    if vary == "prompt":
        if m.num_local_layers:
            out.append(m.local_window - output)
        if chunk:
            out += [chunk / batch, chunk]
        if not flash:
            a_h = m.num_attention_heads / tp
            gap = (3 * _i_eff(m) - (m.q_dim + 2 * m.kv_dim + m.attn_out_dim)) / tp
            out.append(gap / (2 * a_h))
    else:
        if chunk:
            out += [chunk / prompt, chunk]
    return out


def max_batch(m, fmt, kv_dtype, prompt, output, spec, engine="none", settings=DEFAULT_SETTINGS, tp=1, kv_ways=1,
              flash_attention=True, capacity_bytes=None, draft_kv_bytes=0.0) -> int:
    """Largest batch of (prompt + output)-token sequences that fits under the engine's rule (closed form).

    vLLM: floor(blocks / blocks per sequence); others: memory is affine in the batch (KV and activations), with
    one kink where the batch's prompts exceed the prefill chunk; solved per piece by `largest_int`."""
    settings = settings_for_device(engine, settings, spec)
    if engine == "vllm":
        mb = plan_memory(m, fmt, kv_dtype, 1, prompt, output, spec, engine, settings, tp, kv_ways, flash_attention,
                         capacity_bytes, draft_kv_bytes)
        return 0 if mb.refusal else max(0, int(math.floor(mb.max_concurrency + 1e-9)))
    need = _need_fn(m, fmt, kv_dtype, spec, engine, settings, tp, kv_ways, flash_attention, capacity_bytes, "batch",
                    1, prompt, output, draft_kv_bytes)
    return max(0, largest_int(need, 0.0, 1, MAX_SEARCH,
                              _breaks(m, settings, engine, 1, prompt, output, "batch", flash_attention, tp)))


def max_context(m, fmt, kv_dtype, batch, output, spec, engine="none", settings=DEFAULT_SETTINGS, tp=1, kv_ways=1,
                flash_attention=True, capacity_bytes=None, draft_kv_bytes=0.0) -> int:
    """Longest context (prompt + output tokens, output fixed, the prompt growing) that fits at this batch, or 0.

    At the requested prompt it is the same test as the fit verdict, so it is never below a context that fits.
    Closed forms: memory is affine in the prompt except where a sliding window caps the KV, the prefill chunk caps
    the activations, and (FlashAttention off) the quadratic score matrix overtakes the MLP; vLLM: the blocks a
    sequence may hold, floor(blocks / batch), converted back to tokens. Not capped at the model's maximum,
    except under vLLM, which refuses requests longer than max_model_len."""
    s = settings_for_device(engine, settings, spec)
    if engine == "vllm":
        mb = plan_memory(m, fmt, kv_dtype, batch, 1, output, spec, engine, s, tp, kv_ways, flash_attention,
                         capacity_bytes, draft_kv_bytes)
        blocks = mb.blocks or 0
        per = blocks // batch  # blocks one sequence may hold
        bs = s.block_size
        if not window_capped(engine, m, s.vllm_version):
            ctx = per * bs
        else:  # layer-blocks: (G + L) ceil(c/bs) up to the window W', G ceil(c/bs) + L ceil(W'/bs) above it
            w = m.local_window - 1 + s.max_num_batched_tokens  # V1 only
            G, L, Wb = m.num_global_layers, m.num_local_layers, math.ceil(w / bs)
            ctx = (per // (G + L)) * bs
            if ctx >= w:
                ctx = ((per - L * Wb) // G) * bs if G else MAX_SEARCH
        ctx = min(ctx, s.max_model_len or m.max_position_embeddings)  # vLLM refuses longer requests
        return max(0, int(ctx)) if ctx > output else 0
    need = _need_fn(m, fmt, kv_dtype, spec, engine, s, tp, kv_ways, flash_attention, capacity_bytes, "prompt",
                    batch, 1, output, draft_kv_bytes)
    p = largest_int(need, 0.0, 1, MAX_SEARCH, _breaks(m, s, engine, batch, 1, output, "prompt", flash_attention, tp))
    return p + output if p >= 1 else 0


def with_settings(s: EngineSettings, **kw) -> EngineSettings:
    return replace(s, **kw)
