"""Model architectures: the schema, parameter counts, the catalog, and Hugging Face `config.json` import.

Covers dense decoder-only transformers (MHA, GQA, MQA), gated (SwiGLU/GeGLU) and plain MLPs, tied or untied
embeddings, sliding-window attention (all layers or an interleaved pattern), Mixture-of-Experts (routed experts,
experts per token, shared experts, dense layers before the MoE layers) and Multi-head Latent Attention
(DeepSeek-V2/V3: the KV cache holds kv_lora_rank + qk_rope_head_dim values per token per layer).
"""

from __future__ import annotations

import os
from collections import Counter
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .catalog_index import folder_index, parsed
from .errors import PlannerError, pydantic_one_line, unknown_id
from .io import read_json, read_yaml
from .lazy import np

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # (built when first validated)


class MoESpec(_Frozen):
    num_experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0)
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = Field(0, ge=0)
    shared_expert_intermediate_size: int = Field(0, ge=0, description="per shared expert; 0 = expert size")
    first_dense_layers: int = Field(0, ge=0, description="leading layers with a dense MLP (DeepSeek first_k_dense)")
    dense_layer_interval: int = Field(1, ge=1, description="every n-th layer is MoE (1 = all after the dense ones)")
    shared_expert_gate: bool = False
    router_bias: bool = False
    latent_size: int = Field(0, ge=0, description=(
        "LatentMoE (Nemotron 3 Super): the routed experts run at this width, reached through one hidden -> latent "
        "and one latent -> hidden projection per MoE layer; the router and shared experts read the hidden width. "
        "0 = the hidden size (a plain MoE)"))

    @model_validator(mode="after")
    def _k_le_e(self):
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) > num_experts ({self.num_experts})")
        return self


class MLASpec(_Frozen):
    """DeepSeek Multi-head Latent Attention (arXiv:2405.04434)."""

    kv_lora_rank: int = Field(gt=0)
    q_lora_rank: int | None = Field(None, gt=0, description="None = full-rank q projection (V2-Lite)")
    qk_rope_head_dim: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class SparseAttnSpec(_Frozen):
    """DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer scores every cached key with index_n_heads
    heads of index_head_dim (its own key cache: index_head_dim values per token), and the main attention reads only
    the top index_topk keys per query."""

    index_topk: int = Field(gt=0)
    index_n_heads: int = Field(gt=0)
    index_head_dim: int = Field(gt=0)


class LinearAttnSpec(_Frozen):
    """Gated DeltaNet linear attention (Qwen3-Next; arXiv:2412.06464): a per-sequence recurrent state of
    num_value_heads x key_head_dim x value_head_dim plus a causal-conv state of (conv_kernel - 1) x conv_dim."""

    num_key_heads: int = Field(gt=0)
    num_value_heads: int = Field(gt=0)
    key_head_dim: int = Field(gt=0)
    value_head_dim: int = Field(gt=0)
    conv_kernel: int = Field(4, gt=0)
    chunk_size: int = Field(64, gt=0, description="chunked (WY) prefill block")

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def params(self, h: int) -> int:
        """in_proj_qkvz h x (2 key_dim + 2 value_dim), in_proj_ba h x 2 nv, depthwise conv conv_dim x kernel,
        dt_bias + A_log (nv each), gated RMSNorm (value_head_dim), out_proj value_dim x h."""
        nv = self.num_value_heads
        return (h * (2 * self.key_dim + 2 * self.value_dim) + h * 2 * nv + self.conv_dim * self.conv_kernel
                + 2 * nv + self.value_head_dim + self.value_dim * h)

    def state_elements(self) -> int:
        return self.num_value_heads * self.key_head_dim * self.value_head_dim + (self.conv_kernel - 1) * self.conv_dim

    def scan_flops_per_token(self, chunk: int) -> float:
        """Delta-rule update and read-out per token: ~6 dk dv per value head recurrently (decode: chunk 1); the
        chunked prefill adds the intra-chunk products 2 Q (dk + dv) per head (arXiv:2412.06464, section 3)."""
        q = _chunk_less_one(chunk)
        intra = 2 * q * (self.key_head_dim + self.value_head_dim)
        return self.num_value_heads * (6 * self.key_head_dim * self.value_head_dim + intra)


def _chunk_less_one(chunk):
    """max(chunk - 1, 0) as float64: a float for an int chunk (the scalar path), else an array."""
    if chunk.__class__ is int:
        q = float(chunk) - 1
        return q if q >= 0.0 or q != q else 0.0
    return np.maximum(np.asarray(chunk, dtype=np.float64) - 1, 0)


class SSMSpec(_Frozen):
    """Mamba selective state-space mixer. version 2 (Mamba-2 / SSD, arXiv:2405.21060): num_heads heads of head_dim,
    state_size per group, n_groups B/C groups; version 1 (Mamba, arXiv:2312.00752; Jamba): d_inner channels of
    state_size each, dt_rank. State per sequence: d_inner x state_size + (conv_kernel - 1) x conv_dim."""

    version: int = Field(2, ge=1, le=2)
    d_inner: int = Field(gt=0)
    state_size: int = Field(gt=0)
    num_heads: int = Field(1, gt=0)
    head_dim: int = Field(1, gt=0)
    n_groups: int = Field(1, gt=0)
    conv_kernel: int = Field(4, gt=0)
    dt_rank: int = Field(0, ge=0)
    conv_bias: bool = True
    proj_bias: bool = False
    gated_norm: bool = True
    inner_norms: bool = False  # Jamba: RMSNorms on dt, B and C
    chunk_size: int = Field(256, gt=0)

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.state_size if self.version == 2 else self.d_inner

    def params(self, h: int) -> int:
        di, N = self.d_inner, self.state_size
        if self.version == 2:
            inp = h * (di + self.conv_dim + self.num_heads) + (di + self.conv_dim + self.num_heads if self.proj_bias else 0)
            conv = self.conv_dim * self.conv_kernel + (self.conv_dim if self.conv_bias else 0)
            out = di * h + (h if self.proj_bias else 0)
            return inp + conv + 3 * self.num_heads + (di if self.gated_norm else 0) + out
        r = self.dt_rank
        inp = h * 2 * di + (2 * di if self.proj_bias else 0)
        conv = di * self.conv_kernel + (di if self.conv_bias else 0)
        x_proj = di * (r + 2 * N)
        dt_proj = r * di + di
        norms = (r + 2 * N) if self.inner_norms else 0
        return inp + conv + x_proj + dt_proj + di * N + di + norms + di * h + (h if self.proj_bias else 0)

    def state_elements(self) -> int:
        return self.d_inner * self.state_size + (self.conv_kernel - 1) * self.conv_dim

    def scan_flops_per_token(self, chunk: int) -> float:
        """State update h = a h + B x and read-out y = C h: 6 d_inner N per token recurrently (decode: chunk 1);
        the SSD chunked prefill adds the intra-chunk attention-like products 2 Q (N + head_dim) per head
        (arXiv:2405.21060, section 6)."""
        rec = 6.0 * self.d_inner * self.state_size
        if self.version == 1:  # Mamba-1's selective scan is recurrent in prefill too
            return rec + 0.0 * (float(chunk) if chunk.__class__ is int else np.asarray(chunk, dtype=np.float64))
        intra = 2 * _chunk_less_one(chunk) * (self.state_size + self.head_dim)
        return rec + self.num_heads * intra


MIXERS = ("full", "sliding", "chunked", "sparse", "linear", "ssm", "full+ssm", "none")
ATTENTION_MIXERS = ("full", "sliding", "chunked", "sparse", "full+ssm")
MLPS = ("dense", "moe", "none")


class ModelArch(_Frozen):
    """A decoder-only model. Sizes are element counts; nothing here depends on the number format.

    Every layer has a mixer (layer_types: full, sliding-window, chunked-local or sparse top-k attention, gated
    DeltaNet linear attention, an SSM, an SSM beside full attention (Falcon-H1), or none) and an MLP (mlp_types:
    dense, MoE or none). Left unset, they follow the older fields: sliding_window / sliding_window_pattern and
    the MoE spec's first_dense_layers / dense_layer_interval."""

    name: str
    family: str = "llama"
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0, le=1000)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0, description="dense MLP width")
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    tie_word_embeddings: bool = False
    mlp_gated: bool = True
    attention_bias: bool = False
    o_proj_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    parallel_attention_mlp: bool = Field(False, description=(
        "attention and MLP read the same normed input and both add into one residual (GPT-J; Falcon's parallel_attn "
        "and new decoder): under tensor parallelism their partial sums share one all-reduce per layer, not two"))
    attn_output_gate: bool = Field(False, description="q projection also emits a sigmoid output gate (Qwen3-Next)")
    attention_sinks: bool = Field(False, description="one learned sink logit per head and layer (gpt-oss)")
    sliding_window: int | None = Field(None, gt=0)
    sliding_window_pattern: int = Field(1, ge=1, description="n: n-1 of every n layers are local (Gemma-3: 6); 1 = all")
    sliding_window_first_local: bool = Field(True, description="Gemma-2 alternates local/global starting local")
    attention_chunk_size: int | None = Field(None, gt=0, description="chunked local attention (Llama 4)")
    layer_types: tuple[str, ...] | None = None
    mlp_types: tuple[str, ...] | None = None
    norms_per_layer: int | None = Field(None, ge=0, description="hidden-sized norms per layer (default 2, Gemma 4)")
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    sparse: SparseAttnSpec | None = None
    linear_attn: LinearAttnSpec | None = None
    ssm: SSMSpec | None = None
    vision_params: int = Field(0, ge=0, description="vision tower + projector: in memory, not in text decode")
    expert_weight_format: str | None = Field(None, description="format of the routed experts in the published "
                                             "checkpoint (gpt-oss: mxfp4); never stored wider than this")
    published_params_b: float | None = Field(None, gt=0, allow_inf_nan=False,
                                             description="published total parameter count, billions")
    published_active_params_b: float | None = Field(None, gt=0, allow_inf_nan=False)
    published_non_embedding_params_b: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="published count without the embedding (and untied LM head), billions")
    source: str | None = None
    weights_file: object | None = Field(None, description="exact tensor bytes read from a GGUF/safetensors file",
                                        exclude=True)

    @model_validator(mode="after")
    def _heads(self):
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        for fld, allowed in (("layer_types", MIXERS), ("mlp_types", MLPS)):
            v = getattr(self, fld)
            if v is None:
                continue
            if len(v) != self.num_layers:
                raise ValueError(f"{fld} has {len(v)} entries for {self.num_layers} layers")
            bad = sorted(set(v) - set(allowed))
            if bad:
                raise ValueError(f"{fld}: unknown {bad}; allowed: {', '.join(allowed)}")
        mix = self.mixers
        need = (("sliding", self.sliding_window, "sliding_window"), ("chunked", self.attention_chunk_size,
                "attention_chunk_size"), ("sparse", self.sparse, "sparse"), ("linear", self.linear_attn, "linear_attn"))
        for kind, val, fld in need:
            if kind in mix and val is None:
                raise ValueError(f"{kind} layers need {fld}")
        if any("ssm" in k for k in mix) and self.ssm is None:
            raise ValueError("ssm layers need ssm")
        if "moe" in self.mlps and self.moe is None:
            raise ValueError("moe layers need moe")
        if self.sliding_window and self.attention_chunk_size and "sliding" in mix and "chunked" in mix:
            raise ValueError("a model has either sliding-window or chunked local layers, not both")
        return self

    def context_warning(self, context: int) -> str | None:
        """The one warning every command gives for a context longer than the model's maximum (it refuses one)."""
        if context > self.max_position_embeddings:
            return f"context {context} exceeds {self.name}'s maximum of {self.max_position_embeddings} tokens"
        return None

    # ------------------------------------------------------------ per-layer layout
    # (cached: a frozen model's layout never changes, and the cost model asks for its counts on every call)
    @cached_property
    def mixers(self) -> tuple[str, ...]:
        """Mixer of every layer."""
        if self.layer_types is not None:
            return self.layer_types
        L = self.num_layers
        if self.sliding_window is None:
            return ("full",) * L
        n = self.sliding_window_pattern
        if n == 1:
            return ("sliding",) * L
        if n == 2:
            first = 0 if self.sliding_window_first_local else 1
            return tuple("sliding" if i % 2 == first else "full" for i in range(L))
        return tuple("full" if (i + 1) % n == 0 else "sliding" for i in range(L))

    @cached_property
    def mlps(self) -> tuple[str, ...]:
        """MLP of every layer: MoE after first_dense_layers, every dense_layer_interval-th layer."""
        if self.mlp_types is not None:
            return self.mlp_types
        if not self.moe:
            return ("dense",) * self.num_layers
        f, n = self.moe.first_dense_layers, self.moe.dense_layer_interval
        return tuple("moe" if i >= f and (i - f + 1) % n == 0 else "dense" for i in range(self.num_layers))

    @cached_property
    def mixer_counts(self) -> dict[str, int]:
        return dict(Counter(self.mixers))

    @cached_property
    def traits(self) -> tuple[str, ...]:
        """Architecture traits that change which kernels run (sorted): the layer mixers (full, sliding, chunked,
        sparse, linear, ssm) and 'mla' for latent attention. A runtime profile records the traits of the models it
        was fitted on (runtimes.ClassFit.traits); a model with another trait is an extrapolation."""
        return tuple(sorted(set(self.mixers) | ({"mla"} if self.mla else set())))

    def model_copy(self, *, update=None, deep: bool = False):
        """A copy with `update` applied; the cached layout is derived again from the new fields."""
        c = super().model_copy(update=update, deep=deep)
        for k in ("mixers", "mlps", "mixer_counts", "traits", "num_moe_layers", "num_dense_layers",
                  "_param_breakdown", "_count_memo"):
            c.__dict__.pop(k, None)
        return c

    @cached_property
    def _count_memo(self) -> dict[tuple[str, ...], int]:
        return {}

    def count_mixers(self, *kinds: str) -> int:
        memo = self._count_memo  # the cost model asks the same few questions on every call
        n = memo.get(kinds)
        if n is None:
            counts = self.mixer_counts
            n = memo[kinds] = sum(counts.get(k, 0) for k in kinds)
        return n

    @property
    def num_attention_layers(self) -> int:
        """Layers that keep a KV cache."""
        return self.count_mixers(*ATTENTION_MIXERS)

    @property
    def num_state_layers(self) -> int:
        """Layers that keep a constant per-sequence state (linear attention, SSM)."""
        return self.count_mixers("linear", "ssm", "full+ssm")

    @property
    def local_window(self) -> int | None:
        """Keys a local layer keeps: the sliding window, or the chunk of chunked attention."""
        return self.sliding_window if "sliding" in self.mixers else self.attention_chunk_size

    @property
    def attention_window(self) -> int | None:
        """Keys a query reads on the windowed layer group: the local window, or the sparse top-k
        (the serving step model times this group with it)."""
        return self.local_window if self.num_local_layers else (self.sparse.index_topk if self.sparse else None)

    @cached_property
    def num_moe_layers(self) -> int:
        return sum(1 for k in self.mlps if k == "moe")

    @cached_property
    def num_dense_layers(self) -> int:
        return sum(1 for k in self.mlps if k == "dense")

    @property
    def num_local_layers(self) -> int:
        """Layers with sliding-window or chunked local attention."""
        return self.count_mixers("sliding", "chunked")

    @property
    def num_global_layers(self) -> int:
        """Attention layers whose KV cache grows with the whole context (full, sparse top-k, full beside an SSM)."""
        return self.count_mixers("full", "sparse", "full+ssm")

    @property
    def attention_kind(self) -> str:
        """MHA, GQA, MQA or MLA (SSM for a model without attention layers)."""
        if not self.num_attention_layers:
            return "SSM"
        return "MLA" if self.mla else ("MHA" if self.num_kv_heads == self.num_attention_heads else
                                       ("MQA" if self.num_kv_heads == 1 else "GQA"))

    def layout_summary(self) -> str:
        """'12 sliding(128) + 12 full, sinks' -- the per-layer mixers, for listings."""
        names = {"full": "full", "sliding": f"sliding({self.sliding_window})",
                 "chunked": f"chunked({self.attention_chunk_size})",
                 "sparse": f"sparse-top{self.sparse.index_topk if self.sparse else ''}", "linear": "DeltaNet",
                 "ssm": f"Mamba{self.ssm.version if self.ssm else ''}",
                 "full+ssm": f"full+Mamba{self.ssm.version if self.ssm else ''}", "none": "MLP-only",
                 "none+moe": "MoE-only"}
        counts: dict[str, int] = {}
        for k, mlp in zip(self.mixers, self.mlps):
            k = "none+moe" if k == "none" and mlp == "moe" else k  # a mixer-free block of experts (Nemotron 3 'E')
            counts[k] = counts.get(k, 0) + 1
        parts = " + ".join(f"{n} {names[k]}" for k, n in counts.items())
        return parts + (", sinks" if self.attention_sinks else "")

    # ------------------------------------------------------------ derived shapes
    @property
    def q_dim(self) -> int:
        """Width of the query projection output."""
        if self.mla:
            return self.num_attention_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.num_attention_heads * self.head_dim * (2 if self.attn_output_gate else 1)

    @property
    def kv_dim(self) -> int:
        """Width of K (= of V) for standard attention."""
        return self.num_kv_heads * self.head_dim

    @property
    def attn_out_dim(self) -> int:
        return self.num_attention_heads * (self.mla.v_head_dim if self.mla else self.head_dim)

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """Elements cached per token per attention layer: 2 x kv_heads x head_dim, or MLA's kv_lora_rank + rope
        dim; sparse attention adds the indexer's key (index_head_dim)."""
        if self.mla:
            e = self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        else:
            e = 2 * self.num_kv_heads * self.head_dim
        return e + (self.sparse.index_head_dim if self.sparse else 0)

    @property
    def state_elements_per_sequence(self) -> int:
        """Constant state per sequence over all linear-attention and SSM layers (no growth with context)."""
        n = 0
        for k in self.mixers:
            if k == "linear":
                n += self.linear_attn.state_elements()
            elif k in ("ssm", "full+ssm"):
                n += self.ssm.state_elements()
        return n

    # ------------------------------------------------------------ parameter counts
    def attention_params(self) -> int:
        h = self.hidden_size
        if self.mla:
            m, H = self.mla, self.num_attention_heads
            qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * H * qk_head  # down, norm, up
            else:
                q = h * H * qk_head
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank  # down (+ rope k), norm
            kv += m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim)  # up to K_nope and V
            o = H * m.v_head_dim * h
            p = q + kv + o
        else:
            p = h * self.q_dim + 2 * h * self.kv_dim + self.attn_out_dim * h
            if self.attention_bias:
                p += self.q_dim + 2 * self.kv_dim
            if self.o_proj_bias:
                p += h
            if self.qk_norm:
                p += 2 * self.head_dim
        if self.attention_sinks:
            p += self.num_attention_heads
        return p

    def indexer_params(self) -> int:
        """DeepSeek-V3.2 lightning indexer: wq_b (q_lora -> n_heads x d), wk (h -> d), k LayerNorm (2d),
        weights_proj (h -> n_heads)."""
        if not self.sparse:
            return 0
        s, h = self.sparse, self.hidden_size
        q_in = self.mla.q_lora_rank if self.mla and self.mla.q_lora_rank else h
        return q_in * s.index_n_heads * s.index_head_dim + h * s.index_head_dim + 2 * s.index_head_dim + h * s.index_n_heads

    def mixer_params(self, kind: str) -> int:
        """Parameters of one layer's mixer."""
        p = 0
        if kind in ATTENTION_MIXERS:
            p += self.attention_params() + (self.indexer_params() if kind == "sparse" else 0)
        if kind == "linear":
            p += self.linear_attn.params(self.hidden_size)
        if kind in ("ssm", "full+ssm"):
            p += self.ssm.params(self.hidden_size)
        return p

    def mlp_params(self, intermediate: int, width: int | None = None) -> int:
        """One MLP of `intermediate` units between `width`-wide activations (default the hidden size)."""
        w = width or self.hidden_size
        mats = 3 if self.mlp_gated else 2
        p = mats * w * intermediate
        if self.mlp_bias:
            p += (mats - 1) * intermediate + w
        return p

    @property
    def expert_width(self) -> int:
        """Width of the activations a routed expert reads and writes: the MoE's latent size, else the hidden size."""
        return (self.moe.latent_size or self.hidden_size) if self.moe else self.hidden_size

    def expert_params(self) -> int:
        return self.mlp_params(self.moe.expert_intermediate_size, self.expert_width) if self.moe else 0

    def latent_proj_params(self) -> int:
        """LatentMoE's two projections per MoE layer (hidden -> latent before the routed experts, latent -> hidden
        after them; Nemotron 3 Super: 2 x 4096 x 1024); 0 for a plain MoE."""
        return 2 * self.hidden_size * self.moe.latent_size if self.moe and self.moe.latent_size else 0

    def shared_expert_params(self) -> int:
        if not self.moe or not self.moe.num_shared_experts:
            return 0
        size = self.moe.shared_expert_intermediate_size or self.moe.expert_intermediate_size
        return self.moe.num_shared_experts * self.mlp_params(size) + (self.hidden_size if self.moe.shared_expert_gate else 0)

    def router_params(self) -> int:
        if not self.moe:
            return 0
        return self.hidden_size * self.moe.num_experts + (self.moe.num_experts if self.moe.router_bias else 0)

    def norm_params_per_layer(self) -> int:
        if self.norms_per_layer is not None:
            return self.norms_per_layer * self.hidden_size
        n = 2 * self.hidden_size
        if self.family.startswith("gemma2") or self.family.startswith("gemma3"):
            n = 4 * self.hidden_size  # pre- and post- norms around attention and MLP
        return n

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def lm_head_params(self) -> int:
        """Untied: a separate vocab x hidden matrix. Tied: 0 extra parameters (but still read in decode)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def param_breakdown(self) -> dict[str, int]:
        """Parameters by group; the parts sum to `total`. Active counts experts_per_token routed experts and
        leaves out the vision tower (not run in text decode)."""
        return dict(self._param_breakdown)

    @cached_property
    def _param_breakdown(self) -> dict[str, int]:
        mix = self.mixers
        attn = sum(self.mixer_params(k) for k in mix if k in ATTENTION_MIXERS) - sum(
            self.ssm.params(self.hidden_size) for k in mix if k == "full+ssm")
        state = sum(self.mixer_params(k) for k in mix if k in ("linear", "ssm")) + sum(
            self.ssm.params(self.hidden_size) for k in mix if k == "full+ssm")
        nm = self.num_moe_layers
        b = {
            "embedding": self.embedding_params(),
            "attention": attn,
            "state_mixers": state,
            "dense_mlp": self.num_dense_layers * self.mlp_params(self.intermediate_size),
            "routed_experts": nm * self.moe.num_experts * self.expert_params() if self.moe else 0,
            "shared_experts": nm * self.shared_expert_params(),
            "router": nm * self.router_params(),
            "expert_latent_proj": nm * self.latent_proj_params(),
            "norms": self.num_layers * self.norm_params_per_layer() + self.hidden_size,
            "lm_head": self.lm_head_params(),
            "vision": self.vision_params,
        }
        b["total"] = sum(b.values())
        active_routed = nm * self.moe.experts_per_token * self.expert_params() if self.moe else 0
        b["active"] = b["total"] - b["routed_experts"] + active_routed - b["vision"]
        return b

    @property
    def total_params(self) -> int:
        return self.param_breakdown()["total"]

    @property
    def active_params(self) -> int:
        return self.param_breakdown()["active"]


# ---------------------------------------------------------------- Hugging Face config.json import


def from_hf_config(cfg: dict, name: str = "custom", where: str = "config.json") -> "ModelArch":
    """ModelArch from a Hugging Face config.json dict (schema and family table in planner/hf_config.py)."""
    from .hf_config import from_hf_config as _import
    return _import(cfg, name=name, where=where)


# ---------------------------------------------------------------- catalog


def catalog_paths() -> dict[str, Path]:
    return folder_index(CATALOG_DIR)


def list_model_ids() -> list[str]:
    return list(catalog_paths())


def _load_catalog(path: str) -> ModelArch:
    return parsed(path, _parse_catalog, "model")


def _parse_catalog(path: str) -> ModelArch:
    data = read_yaml(path)
    hf = data.get("hf_config")
    if not isinstance(hf, dict):
        raise PlannerError(f"{path}: catalog entry needs an 'hf_config' mapping")
    extra = {k: data[k] for k in ("published_params_b", "published_active_params_b",
                                  "published_non_embedding_params_b", "source") if k in data}
    return from_hf_config({**hf, **extra}, name=Path(path).stem, where=path)


def load_model(id_or_path: str) -> ModelArch:
    """A catalog id (`llama-2-7b`), a path to a Hugging Face config.json, a model folder (config.json with its
    safetensors files or index: exact weight bytes) or a .gguf file (planner.model_files)."""
    if not str(id_or_path).strip():
        raise PlannerError("--model: empty; give a catalog id (planner models list), a config.json, a model folder "
                           "or a .gguf file")
    paths = catalog_paths()
    if id_or_path.endswith((".json", ".gguf")) or os.sep in id_or_path or (
            id_or_path not in paths and Path(id_or_path).is_dir()):
        p = Path(id_or_path)
        if not p.exists():
            raise PlannerError(f"--model: file not found: {id_or_path}")
        if p.is_dir() or p.suffix == ".gguf":
            from .model_files import load_model_file
            return load_model_file(p)
        if not p.exists():
            raise PlannerError(f"--model: file not found: {id_or_path}")
        return from_hf_config(read_json(p), name=p.parent.name if p.name == "config.json" else p.stem, where=str(p))
    if id_or_path not in paths:
        raise unknown_id("model", id_or_path, list(paths), "models")
    return _load_catalog(str(paths[id_or_path]))
