"""Hugging Face `config.json` import: one validation schema, then one small builder per family.

Every field is read through `HFFields` (pydantic) before any arithmetic: integers are integers (4096.7, "4k",
true are refused), floats are finite, booleans are JSON booleans ("no" is refused), and counts have plausible
bounds (layers <= 1000, hidden <= 1e6, vocab <= 1e7, experts <= 1e5). hidden_size must divide by the heads unless
head_dim is given. Every bad config is one line: `<where>: <field>: <what is wrong>`.

A family is one entry of `FAMILIES` (model_type -> builder). A builder maps the validated fields to ModelArch
keyword arguments; nothing else in the planner branches on model_type.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Callable

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, model_validator

from .errors import PlannerError, pydantic_one_line

# ---------------------------------------------------------------- the schema

Count = Annotated[StrictInt, Field(ge=0)]
Pos = Annotated[StrictInt, Field(gt=0)]
Layers = Annotated[StrictInt, Field(gt=0, le=1000)]
Width = Annotated[StrictInt, Field(gt=0, le=1_000_000)]
Heads = Annotated[StrictInt, Field(gt=0, le=100_000)]
Experts = Annotated[StrictInt, Field(gt=0, le=100_000)]
Real = Annotated[float, Field(allow_inf_nan=False)]


class HFFields(BaseModel):
    """The config.json fields the importer reads (after family aliases). Unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)  # (built when first validated)

    hidden_size: Width
    num_hidden_layers: Layers
    num_attention_heads: Heads
    num_key_value_heads: Heads | None = None
    head_dim: Width | None = None
    intermediate_size: Annotated[StrictInt, Field(gt=0, le=10_000_000)] | None = None
    vocab_size: Annotated[StrictInt, Field(gt=0, le=10_000_000)]
    max_position_embeddings: Annotated[StrictInt, Field(gt=0, le=1_000_000_000)]
    tie_word_embeddings: StrictBool | None = None
    attention_bias: StrictBool | None = None
    mlp_bias: StrictBool | None = None
    # windows and layer layout
    sliding_window: Annotated[StrictInt, Field(gt=0, le=1_000_000_000)] | None = None
    use_sliding_window: StrictBool | None = None
    sliding_window_pattern: Annotated[StrictInt, Field(gt=0, le=1000)] | None = None
    max_window_layers: Annotated[StrictInt, Field(ge=0, le=1000)] | None = None
    layer_types: Annotated[list[str], Field(max_length=1000)] | None = None
    attention_chunk_size: Annotated[StrictInt, Field(gt=0, le=1_000_000_000)] | None = None
    no_rope_layers: Annotated[list[Annotated[StrictInt, Field(ge=0, le=1)]], Field(max_length=1000)] | None = None
    # mixture of experts
    num_local_experts: Experts | None = None
    num_experts: Annotated[StrictInt, Field(ge=0, le=100_000)] | None = None
    n_routed_experts: Experts | None = None
    num_experts_per_tok: Experts | None = None
    moe_intermediate_size: Width | None = None
    shared_expert_intermediate_size: Annotated[StrictInt, Field(ge=0, le=1_000_000)] | None = None
    n_shared_experts: Annotated[StrictInt, Field(ge=0, le=1000)] | None = None
    moe_latent_size: Width | None = None
    first_k_dense_replace: Annotated[StrictInt, Field(ge=0, le=1000)] | None = None
    moe_layer_freq: Annotated[StrictInt, Field(gt=0, le=1000)] | None = None
    decoder_sparse_step: Annotated[StrictInt, Field(gt=0, le=1000)] | None = None
    mlp_only_layers: Annotated[list[Annotated[StrictInt, Field(ge=0, le=1000)]], Field(max_length=1000)] | None = None
    interleave_moe_layer_step: Annotated[StrictInt, Field(gt=0, le=1000)] | None = None
    intermediate_size_mlp: Width | None = None
    expert_layer_period: Annotated[StrictInt, Field(gt=0, le=1000)] | None = None
    expert_layer_offset: Annotated[StrictInt, Field(ge=0, le=1000)] | None = None
    # MLA and sparse attention
    kv_lora_rank: Width | None = None
    q_lora_rank: Width | None = None
    qk_rope_head_dim: Width | None = None
    qk_nope_head_dim: Width | None = None
    v_head_dim: Width | None = None
    index_topk: Annotated[StrictInt, Field(gt=0, le=1_000_000_000)] | None = None
    index_n_heads: Heads | None = None
    index_head_dim: Width | None = None
    # linear attention (gated DeltaNet)
    full_attention_interval: Annotated[StrictInt, Field(gt=0, le=1000)] | None = None
    linear_num_key_heads: Heads | None = None
    linear_num_value_heads: Heads | None = None
    linear_key_head_dim: Width | None = None
    linear_value_head_dim: Width | None = None
    linear_conv_kernel_dim: Annotated[StrictInt, Field(gt=0, le=1024)] | None = None
    # state-space models
    state_size: Width | None = None
    ssm_num_heads: Heads | None = None
    ssm_head_dim: Width | None = None
    n_groups: Heads | None = None
    conv_kernel: Annotated[StrictInt, Field(gt=0, le=1024)] | None = None
    expand: Annotated[StrictInt, Field(gt=0, le=64)] | None = None
    ssm_d_inner: Width | None = None
    dt_rank: Annotated[StrictInt, Field(ge=0, le=1_000_000)] | None = None
    chunk_size: Annotated[StrictInt, Field(gt=0, le=1_000_000)] | None = None
    hybrid_override_pattern: Annotated[str, Field(max_length=1000)] | None = None
    attn_layer_period: Annotated[StrictInt, Field(gt=0, le=1000)] | None = None
    attn_layer_offset: Annotated[StrictInt, Field(ge=0, le=1000)] | None = None
    use_conv_bias: StrictBool | None = None
    use_bias: StrictBool | None = None
    # plain MLP families
    new_decoder_architecture: StrictBool | None = None
    multi_query: StrictBool | None = None
    partial_rotary_factor: Annotated[Real, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _shapes(self):
        kv = self.num_key_value_heads
        if kv is not None and self.num_attention_heads % kv:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({kv})")
        if self.head_dim is None and self.kv_lora_rank is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                             f"({self.num_attention_heads}) and no head_dim is given")
        return self

    @property
    def head_dim_or_default(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


def _schema_error(where: str, exc: ValidationError, names: dict | None = None) -> PlannerError:
    """'<where>: <field>: <msg>' on one line, the field named as the config.json spells it (names: schema name ->
    config name for family aliases); the input value is not echoed."""
    e = exc.errors()[0]
    loc = [str(x) for x in e.get("loc", ())]
    if loc and names and loc[0] in names:
        loc[0] = names[loc[0]]
    loc = ".".join(loc) or "(config)"
    msg = e.get("msg", "invalid").removeprefix("Value error, ")
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return PlannerError(f"{where}: {loc}: {msg}{more}")


# ---------------------------------------------------------------- family builders
# each takes (fields, raw config dict) and returns ModelArch keyword arguments beyond the common ones


def _need(f: HFFields, name: str):
    v = getattr(f, name)
    if v is None:
        raise PlannerError(f"missing required field '{name}'")
    return v


def _dense(f: HFFields, raw: dict) -> dict:
    return {}


def _internlm(f, raw):
    """InternLM (v1) / InternLM2: the Llama layer (RMSNorm, rotary, SwiGLU MLP); the config's `bias` puts biases on
    q, k, v and o (InternLM-7B true, InternLM-20B false: modeling_internlm.py InternLMAttention)."""
    return {"attention_bias": True, "o_proj_bias": True} if raw.get("bias") else {}


def _qwen2(f, raw):
    return {"attention_bias": True}


def _qwen3(f, raw):
    return {"qk_norm": True}


def _qwen2_moe(f, raw):
    return {**_qwen_moe(f, raw), "attention_bias": True}


def _qwen3_moe(f, raw):
    return {**_qwen_moe(f, raw), "qk_norm": True}


def _mixtral(f, raw):
    from .architecture import MoESpec
    return {"moe": MoESpec(num_experts=_need(f, "num_local_experts"), experts_per_token=_need(f, "num_experts_per_tok"),
                           expert_intermediate_size=_need(f, "intermediate_size"))}


def _qwen_moe(f, raw):
    from .architecture import MoESpec
    shared = f.shared_expert_intermediate_size or 0
    kw = {"moe": MoESpec(num_experts=_need(f, "num_experts"), experts_per_token=_need(f, "num_experts_per_tok"),
                         expert_intermediate_size=_need(f, "moe_intermediate_size"),
                         num_shared_experts=1 if shared else 0, shared_expert_intermediate_size=shared,
                         shared_expert_gate=bool(shared), dense_layer_interval=f.decoder_sparse_step or 1)}
    if f.mlp_only_layers:
        L = f.num_hidden_layers
        kw["mlp_types"] = tuple("dense" if i in set(f.mlp_only_layers) or (i + 1) % (f.decoder_sparse_step or 1)
                                else "moe" for i in range(L))
    return kw


def _gemma(f, raw):
    return {}


def _gemma2(f, raw):
    return {"sliding_window_pattern": 2} if f.sliding_window else {}


def _gemma3(f, raw):
    kw = {"qk_norm": True}
    if f.sliding_window:
        if f.layer_types:
            kw["layer_types"] = _map_layer_types(f.layer_types, f.num_hidden_layers)
        else:
            kw["sliding_window_pattern"] = f.sliding_window_pattern or 6
    return kw


def _mla(f) -> dict:
    from .architecture import MLASpec, MoESpec
    mla = MLASpec(kv_lora_rank=_need(f, "kv_lora_rank"), q_lora_rank=f.q_lora_rank,
                  qk_rope_head_dim=_need(f, "qk_rope_head_dim"), qk_nope_head_dim=_need(f, "qk_nope_head_dim"),
                  v_head_dim=_need(f, "v_head_dim"))
    moe = MoESpec(num_experts=_need(f, "n_routed_experts"), experts_per_token=_need(f, "num_experts_per_tok"),
                  expert_intermediate_size=_need(f, "moe_intermediate_size"), num_shared_experts=f.n_shared_experts or 0,
                  first_dense_layers=f.first_k_dense_replace or 0, dense_layer_interval=f.moe_layer_freq or 1)
    return {"mla": mla, "moe": moe, "head_dim": mla.qk_nope_head_dim + mla.qk_rope_head_dim}


def _deepseek(f, raw):
    return _mla(f)


def _deepseek_v32(f, raw):
    from .architecture import SparseAttnSpec
    kw = _mla(f)
    kw["sparse"] = SparseAttnSpec(index_topk=_need(f, "index_topk"), index_n_heads=_need(f, "index_n_heads"),
                                  index_head_dim=_need(f, "index_head_dim"))
    kw["layer_types"] = ("sparse",) * f.num_hidden_layers
    return kw


def _glm4_moe(f, raw):
    """GLM-4.5/4.6/4.7: biased q/k/v, optional q/k norms, DeepSeek-style routed + shared experts after
    first_k_dense_replace dense layers, a router with a score-correction bias (the MTP layer is not counted)."""
    from .architecture import MoESpec
    return {"attention_bias": bool(f.attention_bias), "qk_norm": raw.get("use_qk_norm") is True,
            "moe": MoESpec(num_experts=_need(f, "n_routed_experts"), experts_per_token=_need(f, "num_experts_per_tok"),
                           expert_intermediate_size=_need(f, "moe_intermediate_size"),
                           num_shared_experts=f.n_shared_experts or 0, first_dense_layers=f.first_k_dense_replace or 0,
                           router_bias=True)}


def _gpt_oss(f, raw):
    """gpt-oss: biased attention with one sink logit per head, alternating sliding (128) / full layers, biased
    SwiGLU experts (top-4) with a biased router; the published checkpoint stores the experts in MXFP4."""
    from .architecture import MoESpec
    E = f.num_local_experts or f.num_experts
    if not E:
        raise PlannerError("missing required field 'num_local_experts'")
    kw = {"attention_bias": True, "o_proj_bias": True, "attention_sinks": True, "mlp_bias": True,
          "moe": MoESpec(num_experts=E, experts_per_token=_need(f, "num_experts_per_tok"),
                         expert_intermediate_size=_need(f, "intermediate_size"), router_bias=True),
          "expert_weight_format": "mxfp4"}
    if f.layer_types:
        kw["layer_types"] = _map_layer_types(f.layer_types, f.num_hidden_layers)
    elif f.sliding_window:
        kw["sliding_window_pattern"] = 2
    return kw


def _llama4(f, raw):
    """Llama 4: routed experts (top-1) plus a shared expert on every interleave_moe_layer_step-th layer, dense
    layers of intermediate_size_mlp between, chunked local attention (attention_chunk_size) on RoPE layers and
    global attention on the NoPE layers (no_rope_layers[i] == 0; default every 4th)."""
    from .architecture import MoESpec
    L = f.num_hidden_layers
    step = f.interleave_moe_layer_step or 1
    nope = f.no_rope_layers or [0 if (i + 1) % 4 == 0 else 1 for i in range(L)]
    if len(nope) != L:
        raise PlannerError(f"no_rope_layers has {len(nope)} entries for {L} layers")
    kw = {"moe": MoESpec(num_experts=_need(f, "num_local_experts"), experts_per_token=_need(f, "num_experts_per_tok"),
                         expert_intermediate_size=_need(f, "intermediate_size"), num_shared_experts=1,
                         dense_layer_interval=step),
          "intermediate_size": f.intermediate_size_mlp or _need(f, "intermediate_size")}
    if f.attention_chunk_size:
        kw["attention_chunk_size"] = f.attention_chunk_size
        kw["layer_types"] = tuple("chunked" if r else "full" for r in nope)
    return kw


def _qwen3_next(f, raw):
    """Qwen3-Next: gated DeltaNet on 3 of every 4 layers (full_attention_interval), gated full attention with
    q/k norms on the rest; MoE with a gated shared expert on every layer."""
    from .architecture import LinearAttnSpec
    kw = _qwen_moe(f, raw)
    L = f.num_hidden_layers
    if f.layer_types:
        kw["layer_types"] = _map_layer_types(f.layer_types, L)
    else:
        n = f.full_attention_interval or 4
        kw["layer_types"] = tuple("full" if (i + 1) % n == 0 else "linear" for i in range(L))
    kw["linear_attn"] = LinearAttnSpec(
        num_key_heads=_need(f, "linear_num_key_heads"), num_value_heads=_need(f, "linear_num_value_heads"),
        key_head_dim=_need(f, "linear_key_head_dim"), value_head_dim=_need(f, "linear_value_head_dim"),
        conv_kernel=f.linear_conv_kernel_dim or 4)
    kw.update(qk_norm=True, attn_output_gate=True)
    return kw


def _mamba2_spec(f, d_inner: int, heads: int, head_dim: int):
    from .architecture import SSMSpec
    return SSMSpec(version=2, d_inner=d_inner, state_size=_need(f, "state_size"), num_heads=heads, head_dim=head_dim,
                   n_groups=f.n_groups or 1, conv_kernel=f.conv_kernel or 4, chunk_size=f.chunk_size or 256,
                   conv_bias=f.use_conv_bias is not False, proj_bias=bool(f.use_bias))


def _mamba2(f, raw):
    """Mamba-2 (pure SSM): every layer a Mamba-2 mixer and one norm, no MLP."""
    heads, hd = _need(f, "ssm_num_heads"), _need(f, "ssm_head_dim")
    L = f.num_hidden_layers
    return {"layer_types": ("ssm",) * L, "mlp_types": ("none",) * L, "norms_per_layer": 1,
            "ssm": _mamba2_spec(f, (f.expand or 2) * f.hidden_size, heads, hd), "intermediate_size": 1}


def _nemotron_h(f, raw):
    """Nemotron-H and Nemotron 3: one mixer per block from hybrid_override_pattern (M = Mamba-2, * = attention,
    - = MLP only, E = MoE only), squared-ReLU (non-gated) MLPs and experts, one norm per block. E blocks (Nemotron
    3): n_routed_experts of moe_intermediate_size, num_experts_per_tok of them per token, n_shared_experts of
    moe_shared_expert_intermediate_size; moe_latent_size set (Nemotron 3 Super's LatentMoE): the routed experts
    run at that width between a hidden -> latent and a latent -> hidden projection."""
    from .architecture import MoESpec
    pat = _need(f, "hybrid_override_pattern")
    L = f.num_hidden_layers
    if len(pat) != L or set(pat) - set("M*-E"):
        raise PlannerError(f"hybrid_override_pattern: needs {L} characters of M, *, -, E; got {pat[:40]!r}")
    heads, hd = _need(f, "ssm_num_heads"), _need(f, "ssm_head_dim")
    kw = {"layer_types": tuple({"M": "ssm", "*": "full", "-": "none", "E": "none"}[c] for c in pat),
          "mlp_types": tuple({"-": "dense", "E": "moe"}.get(c, "none") for c in pat), "norms_per_layer": 1,
          "mlp_gated": False, "ssm": _mamba2_spec(f, heads * hd, heads, hd)}
    if "E" in pat:
        shared = f.n_shared_experts or 0
        kw["moe"] = MoESpec(num_experts=_need(f, "n_routed_experts"), experts_per_token=_need(f, "num_experts_per_tok"),
                            expert_intermediate_size=_need(f, "moe_intermediate_size"), num_shared_experts=shared,
                            shared_expert_intermediate_size=(f.shared_expert_intermediate_size or 0) if shared else 0,
                            latent_size=f.moe_latent_size or 0)
        if "-" not in pat and f.intermediate_size is None:
            kw["intermediate_size"] = f.moe_intermediate_size  # no dense MLP block: the field is not read
    return kw


def _falcon_h1(f, raw):
    """Falcon-H1: attention and a Mamba-2 mixer side by side in every block, then a gated MLP."""
    heads, hd = _need(f, "ssm_num_heads"), _need(f, "ssm_head_dim")
    d_inner = f.ssm_d_inner or heads * hd
    return {"layer_types": ("full+ssm",) * f.num_hidden_layers, "ssm": _mamba2_spec(f, d_inner, heads, hd)}


def _jamba(f, raw):
    """Jamba: attention on layer offset + k period (attn_layer_period/offset), Mamba-1 elsewhere; MoE on
    expert_layer_period/offset layers."""
    from .architecture import MoESpec, SSMSpec
    L, h = f.num_hidden_layers, f.hidden_size
    ap, ao = f.attn_layer_period or 8, f.attn_layer_offset or 4
    ep, eo = f.expert_layer_period or 2, f.expert_layer_offset or 1
    N = _need(f, "state_size")
    d_inner = (f.expand or 2) * h
    dt_rank = f.dt_rank if isinstance(f.dt_rank, int) and f.dt_rank > 0 else math.ceil(h / 16)
    return {"layer_types": tuple("full" if i % ap == ao else "ssm" for i in range(L)),
            "mlp_types": tuple("moe" if i % ep == eo else "dense" for i in range(L)),
            "ssm": SSMSpec(version=1, d_inner=d_inner, state_size=N, conv_kernel=f.conv_kernel or 4, dt_rank=dt_rank,
                           conv_bias=f.use_conv_bias is not False, proj_bias=bool(f.use_bias), gated_norm=False,
                           inner_norms=True),
            "moe": MoESpec(num_experts=_need(f, "num_experts"), experts_per_token=_need(f, "num_experts_per_tok"),
                           expert_intermediate_size=_need(f, "intermediate_size"))}


def _plain(f, raw):
    """GPT-J / Falcon: plain (non-gated) GELU MLP; attention and MLP in parallel (GPT-J always; Falcon where
    parallel_attn, HF's default true, or new_decoder_architecture: transformers modeling_falcon adds mlp_output and
    attention_output into one residual)."""
    gptj = raw.get("model_type") == "gptj"
    parallel = gptj or raw.get("new_decoder_architecture") is True or raw.get("parallel_attn", True) is not False
    return {"mlp_gated": False, "mlp_bias": gptj, "parallel_attention_mlp": bool(parallel)}


def _cohere(f, raw):
    """Cohere (Command-R): attention and a gated (SwiGLU) MLP read the same LayerNorm output and add into one residual
    (transformers modeling_cohere CohereDecoderLayer: hidden + attn(ln(x)) + mlp(ln(x))): one norm per layer; the
    LM head is the tied embedding (scaled by logit_scale, no weights of its own)."""
    return {"parallel_attention_mlp": True, "norms_per_layer": 1}


# model_type -> (builder, field aliases {config name: schema name}, defaults applied when a field is absent)
_GPTJ = {"n_embd": "hidden_size", "n_head": "num_attention_heads", "n_layer": "num_hidden_layers",
         "n_inner": "intermediate_size", "n_positions": "max_position_embeddings"}
_MAMBA = {"num_heads": "ssm_num_heads", "head_dim": "ssm_head_dim"}
FAMILIES: dict[str, tuple[Callable, dict, dict]] = {
    "llama": (_dense, {}, {}), "mistral": (_dense, {}, {}), "mixtral": (_mixtral, {}, {}),
    "internlm": (_internlm, {}, {}), "internlm2": (_internlm, {}, {}),
    "qwen2": (_qwen2, {}, {}), "qwen2_moe": (_qwen2_moe, {}, {}), "qwen3": (_qwen3, {}, {}),
    "qwen3_moe": (_qwen3_moe, {}, {}), "qwen3_next": (_qwen3_next, {}, {}),
    "gemma": (_gemma, {}, {"tie_word_embeddings": True}), "gemma2": (_gemma2, {}, {"tie_word_embeddings": True}),
    "gemma3": (_gemma3, {}, {"tie_word_embeddings": True}), "gemma3_text": (_gemma3, {}, {"tie_word_embeddings": True}),
    "phi3": (_dense, {}, {}), "deepseek_v2": (_deepseek, {}, {}), "deepseek_v3": (_deepseek, {}, {}),
    "deepseek_v32": (_deepseek_v32, {}, {}), "glm4_moe": (_glm4_moe, {}, {}), "glm4_moe_lite": (_deepseek, {}, {}),
    "gpt_oss": (_gpt_oss, {}, {}), "llama4": (_llama4, {}, {}), "llama4_text": (_llama4, {}, {}),
    "mamba2": (_mamba2, {**_MAMBA, "layer_norm_epsilon": "_eps"}, {"max_position_embeddings": 1_048_576}),
    "nemotron_h": (_nemotron_h, {"mamba_num_heads": "ssm_num_heads", "mamba_head_dim": "ssm_head_dim",
                                 "ssm_state_size": "state_size", "attention_head_dim": "head_dim",
                                 "moe_shared_expert_intermediate_size": "shared_expert_intermediate_size"}, {}),
    "falcon_h1": (_falcon_h1, {"mamba_n_heads": "ssm_num_heads", "mamba_d_head": "ssm_head_dim",
                               "mamba_d_state": "state_size", "mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel",
                               "mamba_d_ssm": "ssm_d_inner", "mamba_chunk_size": "chunk_size",
                               "mamba_conv_bias": "use_conv_bias", "mamba_proj_bias": "use_bias"}, {}),
    "jamba": (_jamba, {"mamba_d_state": "state_size", "mamba_d_conv": "conv_kernel", "mamba_expand": "expand",
                       "mamba_dt_rank": "dt_rank", "mamba_conv_bias": "use_conv_bias", "mamba_proj_bias": "use_bias"}, {}),
    "gptj": (_plain, _GPTJ, {"max_position_embeddings": 2048}),
    "cohere": (_cohere, {}, {"tie_word_embeddings": True}),
    "falcon": (_plain, {"n_head": "num_attention_heads", "n_layer": "num_hidden_layers",
                        "ffn_hidden_size": "intermediate_size"}, {"max_position_embeddings": 2048}),
}
ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2", "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe", "Qwen3NextForCausalLM": "qwen3_next", "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text", "Gemma3ForConditionalGeneration": "gemma3", "Phi3ForCausalLM": "phi3",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV32ForCausalLM": "deepseek_v32", "Glm4MoeForCausalLM": "glm4_moe", "GptOssForCausalLM": "gpt_oss",
    "Llama4ForConditionalGeneration": "llama4", "Llama4ForCausalLM": "llama4_text", "Mamba2ForCausalLM": "mamba2",
    "NemotronHForCausalLM": "nemotron_h", "FalconH1ForCausalLM": "falcon_h1", "JambaForCausalLM": "jamba",
    "GemmaForCausalLM": "gemma", "GPTJForCausalLM": "gptj", "FalconForCausalLM": "falcon",
    "Mistral3ForConditionalGeneration": "mistral", "Glm4MoeLiteForCausalLM": "glm4_moe_lite",
    "InternLMForCausalLM": "internlm", "InternLM2ForCausalLM": "internlm2", "CohereForCausalLM": "cohere",
}
# multimodal wrappers whose text model sits under text_config
_TEXT_CONFIG_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text", "mistral3": "mistral"}


_PUBLISHED = ("published_params_b", "published_active_params_b", "published_non_embedding_params_b", "source")


def supported_model_types() -> list[str]:
    return sorted(set(FAMILIES) | set(_TEXT_CONFIG_TYPES))


def _map_layer_types(types: list[str], L: int) -> tuple[str, ...]:
    names = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear",
             "chunked_attention": "chunked"}
    if len(types) != L:
        raise PlannerError(f"layer_types has {len(types)} entries for {L} layers")
    bad = sorted({t for t in types if t not in names})
    if bad:
        raise PlannerError(f"layer_types: unknown {bad[:3]}; allowed: {', '.join(names)}")
    return tuple(names[t] for t in types)


class _Vision(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)
    model_type: str | None = None
    hidden_size: Width
    intermediate_size: Annotated[StrictInt, Field(gt=0, le=10_000_000)]
    num_hidden_layers: Layers
    patch_size: Annotated[StrictInt, Field(gt=0, le=1024)]
    image_size: Annotated[StrictInt, Field(gt=0, le=100_000)]
    num_channels: Annotated[StrictInt, Field(gt=0, le=64)] = 3
    vision_output_dim: Width | None = None
    spatial_merge_size: Annotated[StrictInt, Field(gt=0, le=64)] = 2


def vision_tower_params(vc: dict, text_hidden: int, where: str) -> int:
    """Parameters of the vision tower and its projector (in memory, never run by text decode), by encoder:

    * SigLIP (Gemma 3): per layer biased q/k/v/o 4(d^2 + d), GELU MLP 2 d I + I + d, two LayerNorms 4d; patch
      embedding c p^2 d + d, learned positions (image/patch)^2 d, post LayerNorm 2d; projector d x text_hidden
      plus its RMSNorm d.
    * Llama 4: the same ViT layers, then the pixel-shuffle adapter (4d -> out -> out) and projector out x text.
    * Pixtral (Mistral Small 3.1): bias-free attention 4 d^2, gated MLP 3 d I, two RMSNorms 2d; patch embedding
      c p^2 d, ln_pre d; projector RMSNorm d, patch merger (m^2 d -> d), linear d -> text, linear text -> text.
    """
    try:
        v = _Vision.model_validate(vc)
    except ValidationError as exc:
        raise _schema_error(f"{where}: vision_config", exc) from None
    d, I, c, p = v.hidden_size, v.intermediate_size, v.num_channels, v.patch_size
    if v.model_type == "pixtral":
        layer = 4 * d * d + 3 * d * I + 2 * d
        proj = d + (v.spatial_merge_size ** 2 * d) * d + d * text_hidden + text_hidden * text_hidden
        return v.num_hidden_layers * layer + c * p * p * d + d + proj
    layer = 4 * (d * d + d) + (d * I + I) + (I * d + d) + 2 * 2 * d
    patches = (v.image_size // p) ** 2
    embed = c * p * p * d + d + patches * d
    if v.vision_output_dim:  # Llama 4 pixel-shuffle adapter (ratio 0.5: 4 d channels) and projector
        out = v.vision_output_dim
        return v.num_hidden_layers * layer + embed + 2 * d + 4 * d * out + out * out + out * text_hidden
    return v.num_hidden_layers * layer + embed + 2 * d + d * text_hidden + d


# ---------------------------------------------------------------- entry point


def from_hf_config(cfg: Any, name: str = "custom", where: str = "config.json"):
    """ModelArch from a config.json dict: validate every field, then the family's builder. One-line errors."""
    from .architecture import ModelArch

    if not isinstance(cfg, dict):
        raise PlannerError(f"{where}: a config.json must be a JSON object, got {type(cfg).__name__}")
    extra = {k: cfg[k] for k in _PUBLISHED if k in cfg}
    mtype = cfg.get("model_type")
    archs = cfg.get("architectures")
    archs = archs if isinstance(archs, list) else []
    vision = 0
    if "text_config" in cfg:
        if not isinstance(cfg["text_config"], dict):
            raise PlannerError(f"{where}: text_config: must be a JSON object")
        outer = mtype
        vc = cfg.get("vision_config")
        inner = dict(cfg["text_config"])
        inner.setdefault("model_type", _TEXT_CONFIG_TYPES.get(outer if isinstance(outer, str) else "", outer))
        inner.setdefault("architectures", archs)
        if isinstance(vc, dict) and outer in _TEXT_CONFIG_TYPES:
            h = inner.get("hidden_size")
            if isinstance(h, int) and not isinstance(h, bool) and 0 < h <= 1_000_000:
                vision = vision_tower_params(vc, h, where)
        cfg = {**inner, **extra}
        mtype = cfg.get("model_type")
    if not isinstance(mtype, str) or mtype not in FAMILIES:
        arch = next((a for a in archs if isinstance(a, str) and a in ARCHITECTURES), None)
        if arch is None:
            if mtype is None:
                raise PlannerError(f"{where}: missing required field 'model_type' (and no known 'architectures' "
                                   f"entry); supported model_type: " + ", ".join(supported_model_types()))
            shown = mtype if isinstance(mtype, str) else type(mtype).__name__
            raise PlannerError(f"{where}: unsupported architecture: model_type {str(shown)[:40]!r}; supported model_type: "
                               + ", ".join(supported_model_types()))
        mtype = ARCHITECTURES[arch]
    builder, aliases, defaults = FAMILIES[mtype]
    data = dict(cfg)
    if mtype in ("gptj", "falcon"):
        data.pop("head_dim", None)
    for src, dst in aliases.items():
        if src in cfg and cfg[src] is not None:
            data[dst] = cfg[src]
    for k, v in defaults.items():
        if data.get(k) is None:
            data[k] = v
    if mtype in ("gptj", "falcon") and data.get("intermediate_size") is None and isinstance(data.get("hidden_size"), int):
        data["intermediate_size"] = 4 * data["hidden_size"]
    if mtype == "falcon":
        data["num_key_value_heads"] = (cfg.get("num_kv_heads") if cfg.get("new_decoder_architecture") is True
                                       else (1 if cfg.get("multi_query") is True else None))
    if mtype == "falcon_h1" and data.get("ssm_head_dim") == "auto":  # Falcon-H1: head dim = d_ssm / heads
        d_ssm, nh = data.get("ssm_d_inner"), data.get("ssm_num_heads")
        if isinstance(d_ssm, int) and isinstance(nh, int) and nh > 0 and d_ssm % nh == 0:
            data["ssm_head_dim"] = d_ssm // nh
    if mtype in ("mamba2", "nemotron_h", "falcon_h1", "jamba"):
        data.setdefault("num_attention_heads", data.get("ssm_num_heads") or 1)
    data = {k: v for k, v in data.items() if v is not None}
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "max_position_embeddings")
    for r in required:
        if r not in data:
            raise PlannerError(f"{where}: missing required field '{r}'")
    try:
        f = HFFields.model_validate(data)
    except ValidationError as exc:
        raise _schema_error(where, exc, {dst: src for src, dst in aliases.items() if src in cfg}) from None
    try:
        fam = builder(f, cfg)
    except PlannerError as exc:
        raise PlannerError(f"{where}: {exc}") from None
    except ValidationError as exc:
        raise pydantic_one_line(where, exc) from None
    kw: dict = dict(
        name=name, family=mtype, hidden_size=f.hidden_size, num_layers=f.num_hidden_layers,
        num_attention_heads=f.num_attention_heads, num_kv_heads=f.num_key_value_heads or f.num_attention_heads,
        head_dim=f.head_dim_or_default, vocab_size=f.vocab_size, max_position_embeddings=f.max_position_embeddings,
        tie_word_embeddings=bool(f.tie_word_embeddings) if f.tie_word_embeddings is not None else False,
        vision_params=vision,
    )
    if f.intermediate_size is not None:
        kw["intermediate_size"] = f.intermediate_size
    if f.attention_bias:
        kw["attention_bias"] = True
        if mtype == "llama":
            kw["o_proj_bias"] = True
    if f.mlp_bias:
        kw["mlp_bias"] = True
    # a window at least as long as the model's context is full attention (Phi-4-mini: 262,144 of 131,072)
    if (f.sliding_window and f.use_sliding_window is not False and mtype not in ("gemma",)
            and f.sliding_window < f.max_position_embeddings):
        kw["sliding_window"] = f.sliding_window
        if mtype in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
            # Qwen applies the window only above max_window_layers; full attention unless all layers use it
            if (f.max_window_layers if f.max_window_layers is not None else f.num_hidden_layers) >= f.num_hidden_layers:
                kw.pop("sliding_window")
    kw.update(fam)
    if "intermediate_size" not in kw:
        raise PlannerError(f"{where}: missing required field 'intermediate_size'")
    for k in _PUBLISHED:
        if k in cfg:
            kw[k] = cfg[k]
    try:
        return ModelArch(**kw)
    except ValidationError as exc:
        raise pydantic_one_line(where, exc) from None
