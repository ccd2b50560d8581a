"""Parameter counts from the architecture against published counts (each cited in its catalog entry)."""

import json

import pytest

from planner.architecture import from_hf_config, list_model_ids, load_model
from planner.errors import PlannerError

REQUIRED = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
            "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-30b-a3b", "gemma-2-9b", "phi-3-mini",
            "deepseek-v3"]


def test_catalog_has_required_ids():
    assert set(REQUIRED) <= set(list_model_ids())


@pytest.mark.parametrize("model_id", list_model_ids())
def test_total_params_match_published_within_1pct(model_id):
    # every catalog entry carries its published count and the source it comes from
    m = load_model(model_id)
    assert m.published_params_b or m.published_non_embedding_params_b, f"{model_id} needs a published count"
    if m.published_params_b:
        assert m.total_params / 1e9 == pytest.approx(m.published_params_b, rel=0.01)
    if m.published_non_embedding_params_b:  # Qwen3 cards: without the embedding and the untied LM head
        non_emb = m.total_params - m.embedding_params() - m.lm_head_params()
        assert non_emb / 1e9 == pytest.approx(m.published_non_embedding_params_b, rel=0.01)


@pytest.mark.parametrize("model_id, published_total_b, published_active_b, tol_b", [
    # Mixtral paper (arXiv:2401.04088): 46.7B total, 12.9B active (two of eight experts)
    ("mixtral-8x7b", 46.7, 12.9, 0.01 * 12.9),
    # Qwen3-30B-A3B card: 30.5B total, 3.3B activated (8 of 128 experts)
    ("qwen3-30b-a3b", 30.5, 3.3, 0.01 * 3.3 + 0.05),
    # Qwen1.5-MoE-A2.7B card: 14.3B total, 2.7B activated (4 of 60 experts + a shared expert)
    ("qwen1.5-moe-a2.7b", 14.3, 2.7, 0.01 * 2.7),
    # DeepSeek-V3 report (arXiv:2412.19437): 671B total, 37B activated. "37B" is printed to 2 significant figures,
    # i.e. 37 +- 0.5B; tolerance = that rounding + 1%. DeepSeek counts activated parameters without the input
    # embedding table (a lookup, not a matmul): V3 37.55B - 0.93B = 36.62B; V2-Lite 2.66B - 0.21B = 2.45B.
    ("deepseek-v3", 671, 37, 0.5 + 0.01 * 37),
    ("deepseek-v2-lite", 15.7, 2.4, 0.05 + 0.01 * 2.4),
])
def test_moe_active_params(model_id, published_total_b, published_active_b, tol_b):
    m = load_model(model_id)
    assert m.total_params / 1e9 == pytest.approx(published_total_b, rel=0.01)
    active = m.active_params - (m.embedding_params() if m.family.startswith("deepseek") else 0)
    assert abs(active / 1e9 - published_active_b) <= tol_b


def test_gemma3_interleaved_sliding_window():
    # Gemma 3 1B: 26 layers, 5 of every 6 local (512-token window): 26 - 26 // 6 = 22 local, 4 global;
    # parameters 999,885,952 (safetensors index), tied embeddings
    m = load_model("gemma-3-1b")
    assert (m.num_local_layers, m.num_global_layers, m.sliding_window) == (22, 4, 512)
    assert m.total_params == 999_885_952


def test_breakdown_adds_up_and_untied_head_counted():
    m = load_model("llama-2-7b")
    b = m.param_breakdown()
    parts = sum(v for k, v in b.items() if k not in ("total", "active"))
    assert parts == b["total"]
    # untied: embedding and LM head are two 32000 x 4096 matrices
    assert b["embedding"] == b["lm_head"] == 32000 * 4096
    # Llama-2-7B by hand: 32 layers x (4 x 4096^2 attention + 3 x 4096 x 11008 MLP + 2 x 4096 norms)
    # + 2 x 32000 x 4096 + 4096 final norm = 6,738,415,616 (the HF safetensors count)
    assert b["total"] == 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096 + 4096 == 6_738_415_616


def test_tied_embedding_counted_once():
    m = load_model("gemma-2-9b")
    assert m.tie_word_embeddings and m.param_breakdown()["lm_head"] == 0


def test_gqa_mqa_mla_kv_shapes():
    assert load_model("llama-3.1-8b").kv_elements_per_token_per_layer == 2 * 8 * 128
    assert load_model("llama-2-7b").kv_elements_per_token_per_layer == 2 * 32 * 128
    # DeepSeek-V3 MLA caches kv_lora_rank (512) + qk_rope_head_dim (64) per token per layer
    assert load_model("deepseek-v3").kv_elements_per_token_per_layer == 512 + 64


def test_sliding_window_layers():
    # Gemma 2 alternates local (4096-token window) and global layers: 21 + 21 of 42
    g = load_model("gemma-2-9b")
    assert (g.num_local_layers, g.num_global_layers, g.sliding_window) == (21, 21, 4096)
    assert load_model("mistral-7b").num_local_layers == 32


def test_hf_config_families(tmp_path):
    # a minimal MQA config: 1 KV head
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 8, "num_key_value_heads": 1, "num_hidden_layers": 2, "vocab_size": 1000,
           "max_position_embeddings": 2048}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = load_model(str(p))
    assert m.num_kv_heads == 1 and m.head_dim == 32
    # 2 x (256*256 + 2*256*32 + 256*256 + 3*256*512 + 2*256) + 2*1000*256 + 256
    assert m.total_params == 2 * (2 * 256 * 256 + 2 * 256 * 32 + 3 * 256 * 512 + 2 * 256) + 2 * 1000 * 256 + 256


@pytest.mark.parametrize("cfg, needle", [
    ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "unsupported architecture"),
    ({"model_type": "llama", "hidden_size": 64}, "missing required field"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 6, "num_key_value_heads": 4,
      "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 8, "max_position_embeddings": 8}, "multiple of"),
    ({"model_type": "llama", "hidden_size": -64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "intermediate_size": 8, "vocab_size": 8, "max_position_embeddings": 8, "head_dim": 16}, "hidden_size"),
])
def test_bad_configs_are_one_line_errors(cfg, needle):
    with pytest.raises(PlannerError) as ei:
        from_hf_config(cfg)
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_gemma3_multimodal_wrapper_reads_text_config():
    import yaml

    from planner.architecture import CATALOG_DIR

    text = yaml.safe_load((CATALOG_DIR / "gemma-3-1b.yaml").read_text())["hf_config"]
    text = {k: v for k, v in text.items() if k not in ("architectures", "model_type")}
    wrapped = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text}
    assert from_hf_config(wrapped).total_params == load_model("gemma-3-1b").total_params


# Totals and active counts of the catalog as it stood before the per-layer layout (commit e7dbd0e); the layout and
# the config.json schema must not move any of them by one parameter.
@pytest.mark.parametrize("model_id, total, active", [
    ("deepseek-v2-lite", 15_706_484_224, 2_661_150_208),
    ("deepseek-v3", 671_026_404_352, 37_552_282_624),
    ("falcon-180b", 179_520_174_592, 179_520_174_592),
    ("gemma-2-9b", 9_241_705_984, 9_241_705_984),
    ("gemma-3-1b", 999_885_952, 999_885_952),
    ("gpt-j-6b", 6_050_828_288, 6_050_828_288),
    ("llama-2-13b", 13_015_864_320, 13_015_864_320),
    ("llama-2-70b", 68_976_648_192, 68_976_648_192),
    ("llama-2-7b", 6_738_415_616, 6_738_415_616),
    ("llama-3-70b", 70_553_706_496, 70_553_706_496),
    ("llama-3-8b", 8_030_261_248, 8_030_261_248),
    ("llama-3.1-405b", 405_853_388_800, 405_853_388_800),
    ("llama-3.1-70b", 70_553_706_496, 70_553_706_496),
    ("llama-3.1-8b", 8_030_261_248, 8_030_261_248),
    ("llama-3.2-1b", 1_235_814_400, 1_235_814_400),
    ("mistral-7b", 7_241_732_096, 7_241_732_096),
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
    ("phi-3-mini", 3_821_079_552, 3_821_079_552),
    ("qwen1.5-moe-a2.7b", 14_315_784_192, 2_689_173_504),
    ("qwen2.5-72b", 72_706_203_648, 72_706_203_648),
    ("qwen2.5-7b", 7_615_616_512, 7_615_616_512),
    ("qwen3-30b-a3b", 30_532_122_624, 3_353_032_704),
    ("qwen3-4b", 4_022_468_096, 4_022_468_096),
])
def test_counts_of_the_earlier_catalog_unchanged(model_id, total, active):
    m = load_model(model_id)
    assert (m.total_params, m.active_params) == (total, active)
