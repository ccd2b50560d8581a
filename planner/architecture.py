"""Model architectures: the schema, parameter counts, the catalog, and Hugging Face `config.json` import.

Covers dense decoder-only transformers (MHA, GQA, MQA), gated (SwiGLU/GeGLU) and plain MLPs, tied or untied
embeddings, sliding-window attention (all layers or an interleaved pattern), Mixture-of-Experts (routed experts,
experts per token, shared experts, dense layers before the MoE layers) and Multi-head Latent Attention
(DeepSeek-V2/V3: the KV cache holds kv_lora_rank + qk_rope_head_dim values per token per layer).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .catalog_index import folder_index, parsed
from .errors import PlannerError, pydantic_one_line, unknown_id
from .io import read_json, read_yaml

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MoESpec(_Frozen):
    num_experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0)
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = Field(0, ge=0)
    shared_expert_intermediate_size: int = Field(0, ge=0, description="per shared expert; 0 = expert size")
    first_dense_layers: int = Field(0, ge=0, description="leading layers with a dense MLP (DeepSeek first_k_dense)")
    dense_layer_interval: int = Field(1, ge=1, description="every n-th layer is MoE (1 = all after the dense ones)")
    shared_expert_gate: bool = False

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


class ModelArch(_Frozen):
    """A decoder-only transformer. Sizes are element counts; nothing here depends on the number format."""

    name: str
    family: str = "llama"
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
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
    sliding_window: int | None = Field(None, gt=0)
    sliding_window_pattern: int = Field(1, ge=1, description="n: n-1 of every n layers are local (Gemma-3: 6); 1 = all")
    sliding_window_first_local: bool = Field(True, description="Gemma-2 alternates local/global starting local")
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    published_params_b: float | None = Field(None, description="published total parameter count, billions")
    published_active_params_b: float | None = None
    source: str | None = None

    @model_validator(mode="after")
    def _heads(self):
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        return self

    # ------------------------------------------------------------ derived shapes
    @property
    def q_dim(self) -> int:
        """Width of the query projection output."""
        if self.mla:
            return self.num_attention_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of K (= of V) for standard attention."""
        return self.num_kv_heads * self.head_dim

    @property
    def attn_out_dim(self) -> int:
        return self.num_attention_heads * (self.mla.v_head_dim if self.mla else self.head_dim)

    @property
    def num_moe_layers(self) -> int:
        if not self.moe:
            return 0
        tail = self.num_layers - self.moe.first_dense_layers
        return sum(1 for i in range(tail) if (i + 1) % self.moe.dense_layer_interval == 0)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def num_local_layers(self) -> int:
        """Layers with sliding-window attention."""
        if self.sliding_window is None:
            return 0
        n = self.sliding_window_pattern
        if n == 1:
            return self.num_layers
        if n == 2:
            return (self.num_layers + (1 if self.sliding_window_first_local else 0)) // 2
        return self.num_layers - self.num_layers // n

    @property
    def num_global_layers(self) -> int:
        return self.num_layers - self.num_local_layers

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """Elements cached per token per layer: 2 x kv_heads x head_dim, or MLA's kv_lora_rank + rope dim."""
        if self.mla:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

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
            return q + kv + o
        p = h * self.q_dim + 2 * h * self.kv_dim + self.attn_out_dim * h
        if self.attention_bias:
            p += self.q_dim + 2 * self.kv_dim
        if self.o_proj_bias:
            p += h
        if self.qk_norm:
            p += 2 * self.head_dim
        return p

    def mlp_params(self, intermediate: int) -> int:
        mats = 3 if self.mlp_gated else 2
        p = mats * self.hidden_size * intermediate
        if self.mlp_bias:
            p += (mats - 1) * intermediate + self.hidden_size
        return p

    def expert_params(self) -> int:
        return self.mlp_params(self.moe.expert_intermediate_size) if self.moe else 0

    def shared_expert_params(self) -> int:
        if not self.moe or not self.moe.num_shared_experts:
            return 0
        size = self.moe.shared_expert_intermediate_size or self.moe.expert_intermediate_size
        return self.moe.num_shared_experts * self.mlp_params(size) + (self.hidden_size if self.moe.shared_expert_gate else 0)

    def router_params(self) -> int:
        return self.hidden_size * self.moe.num_experts if self.moe else 0

    def norm_params_per_layer(self) -> int:
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
        """Parameters by group; the parts sum to `total`. Active counts experts_per_token routed experts."""
        L = self.num_layers
        dense_mlp = self.num_dense_layers * self.mlp_params(self.intermediate_size)
        b = {
            "embedding": self.embedding_params(),
            "attention": L * self.attention_params(),
            "dense_mlp": dense_mlp,
            "routed_experts": self.num_moe_layers * self.moe.num_experts * self.expert_params() if self.moe else 0,
            "shared_experts": self.num_moe_layers * self.shared_expert_params(),
            "router": self.num_moe_layers * self.router_params(),
            "norms": L * self.norm_params_per_layer() + self.hidden_size,
            "lm_head": self.lm_head_params(),
        }
        b["total"] = sum(b.values())
        active_routed = self.num_moe_layers * self.moe.experts_per_token * self.expert_params() if self.moe else 0
        b["active"] = b["total"] - b["routed_experts"] + active_routed
        return b

    @property
    def total_params(self) -> int:
        return self.param_breakdown()["total"]

    @property
    def active_params(self) -> int:
        return self.param_breakdown()["active"]


# ---------------------------------------------------------------- Hugging Face config.json import

_SUPPORTED = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2", "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3", "Phi3ForCausalLM": "phi3", "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3", "GemmaForCausalLM": "gemma",
    "GPTJForCausalLM": "gptj", "FalconForCausalLM": "falcon",
}
# plain (non-gated) GELU MLP of width n_inner / ffn_hidden_size, 4 x hidden when unset (GPT-J, Falcon configs)
_PLAIN_MLP = ("gptj", "falcon")
_MODEL_TYPES = set(_SUPPORTED.values()) | {"gemma3_text"}


def _need(cfg: dict, key: str, where: str, *alts: str):
    for k in (key, *alts):
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    raise PlannerError(f"{where}: missing required field '{key}'")


def from_hf_config(cfg: dict, name: str = "custom", where: str = "config.json") -> ModelArch:
    """Build a ModelArch from a Hugging Face config.json dict (Llama, Mistral, Mixtral, Qwen2/2-MoE/3/3-MoE,
    Gemma 2/3, Phi-3, DeepSeek-V2/V3). An unsupported architecture is an error naming what is missing."""
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):  # Gemma 3 multimodal wrapper
        inner = dict(cfg["text_config"])
        inner.setdefault("model_type", "gemma3_text")
        cfg = inner
    mtype = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    if mtype not in _MODEL_TYPES:
        arch = next((a for a in archs if a in _SUPPORTED), None)
        if arch is None:
            raise PlannerError(
                f"{where}: unsupported architecture (model_type={mtype!r}, architectures={archs}); supported model_type: "
                + ", ".join(sorted(_MODEL_TYPES)))
        mtype = _SUPPORTED[arch]
    h = int(_need(cfg, "hidden_size", where, "n_embd", "d_model"))
    heads = int(_need(cfg, "num_attention_heads", where, "n_head"))
    if mtype in _PLAIN_MLP:
        cfg = {"intermediate_size": cfg.get("n_inner") or cfg.get("ffn_hidden_size") or 4 * h,
               "max_position_embeddings": cfg.get("n_positions") or 2048,
               "num_key_value_heads": (cfg.get("num_kv_heads") if cfg.get("new_decoder_architecture")
                                       else (1 if cfg.get("multi_query") else None)),
               "mlp_bias": mtype == "gptj", **cfg}
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    kw: dict = dict(
        name=name, family=mtype, hidden_size=h,
        num_layers=int(_need(cfg, "num_hidden_layers", where, "n_layer")),
        num_attention_heads=heads, num_kv_heads=kv_heads,
        head_dim=int(cfg.get("head_dim") or h // heads),
        intermediate_size=int(_need(cfg, "intermediate_size", where)),
        vocab_size=int(_need(cfg, "vocab_size", where)),
        max_position_embeddings=int(_need(cfg, "max_position_embeddings", where)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", mtype.startswith("gemma"))),
        mlp_gated=mtype not in _PLAIN_MLP,
    )
    if mtype in ("qwen2", "qwen2_moe"):
        kw["attention_bias"] = True
    if mtype in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"):
        kw["qk_norm"] = True
    if cfg.get("attention_bias"):
        kw["attention_bias"] = True
        if mtype == "llama":
            kw["o_proj_bias"] = True
    if cfg.get("mlp_bias"):
        kw["mlp_bias"] = True
    sw = cfg.get("sliding_window")
    use_sw = cfg.get("use_sliding_window", True)
    if sw and use_sw:
        kw["sliding_window"] = int(sw)
        if mtype == "gemma2":
            kw["sliding_window_pattern"] = 2
        elif mtype in ("gemma3", "gemma3_text"):
            kw["sliding_window_pattern"] = int(cfg.get("sliding_window_pattern", 6))
        elif mtype in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
            # Qwen applies the window only above max_window_layers; treat as full attention unless all layers use it
            if int(cfg.get("max_window_layers", kw["num_layers"])) >= kw["num_layers"]:
                kw.pop("sliding_window")
    if mtype in ("mixtral",):
        kw["moe"] = MoESpec(num_experts=int(_need(cfg, "num_local_experts", where)),
                            experts_per_token=int(_need(cfg, "num_experts_per_tok", where)),
                            expert_intermediate_size=kw["intermediate_size"])
    elif mtype in ("qwen2_moe", "qwen3_moe"):
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        kw["moe"] = MoESpec(
            num_experts=int(_need(cfg, "num_experts", where)),
            experts_per_token=int(_need(cfg, "num_experts_per_tok", where)),
            expert_intermediate_size=int(_need(cfg, "moe_intermediate_size", where)),
            num_shared_experts=1 if shared else 0, shared_expert_intermediate_size=shared,
            shared_expert_gate=bool(shared),
            dense_layer_interval=int(cfg.get("decoder_sparse_step", 1)),
        )
        if cfg.get("mlp_only_layers"):
            raise PlannerError(f"{where}: mlp_only_layers is not supported")
    elif mtype in ("deepseek_v2", "deepseek_v3"):
        kw["moe"] = MoESpec(
            num_experts=int(_need(cfg, "n_routed_experts", where)),
            experts_per_token=int(_need(cfg, "num_experts_per_tok", where)),
            expert_intermediate_size=int(_need(cfg, "moe_intermediate_size", where)),
            num_shared_experts=int(cfg.get("n_shared_experts") or 0),
            first_dense_layers=int(cfg.get("first_k_dense_replace") or 0),
            dense_layer_interval=int(cfg.get("moe_layer_freq") or 1),
        )
        kw["mla"] = MLASpec(
            kv_lora_rank=int(_need(cfg, "kv_lora_rank", where)), q_lora_rank=cfg.get("q_lora_rank"),
            qk_rope_head_dim=int(_need(cfg, "qk_rope_head_dim", where)),
            qk_nope_head_dim=int(_need(cfg, "qk_nope_head_dim", where)),
            v_head_dim=int(_need(cfg, "v_head_dim", where)))
        kw["head_dim"] = kw["mla"].qk_nope_head_dim + kw["mla"].qk_rope_head_dim
    for k in ("published_params_b", "published_active_params_b", "source"):
        if k in cfg:
            kw[k] = cfg[k]
    try:
        return ModelArch(**kw)
    except ValidationError as exc:
        raise pydantic_one_line(where, exc) from None


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
    extra = {k: data[k] for k in ("published_params_b", "published_active_params_b", "source") if k in data}
    return from_hf_config({**hf, **extra}, name=Path(path).stem, where=path)


def load_model(id_or_path: str) -> ModelArch:
    """A catalog id (`llama-2-7b`) or a path to a Hugging Face config.json."""
    if id_or_path.endswith(".json") or os.sep in id_or_path:
        p = Path(id_or_path)
        if p.is_dir():
            p = p / "config.json"
        if not p.exists():
            raise PlannerError(f"--model: file not found: {id_or_path}")
        return from_hf_config(read_json(p), name=p.parent.name if p.name == "config.json" else p.stem, where=str(p))
    paths = catalog_paths()
    if id_or_path not in paths:
        raise unknown_id("model", id_or_path, list(paths), "models")
    return _load_catalog(str(paths[id_or_path]))
