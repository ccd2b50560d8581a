"""The families of issue 9, from trimmed copies of their public config.json files (tests/data/configs/, each with
its `_source` URL): parameter counts against the published ones, and KV-cache / state bytes derived by hand."""

import json
from pathlib import Path

import numpy as np
import pytest

from planner.architecture import load_model
from planner.hf_config import from_hf_config
from planner.ops import (decode_ops, kv_bytes_per_sequence, kv_bytes_per_token, prefill_ops, totals, weight_bytes,
                         weight_bytes_by_group)
from planner.quantization import weight_format

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
GIB = 2 ** 30
BF16 = weight_format("bf16")


def cfg(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def from_file(name: str):
    return from_hf_config(cfg(name), name=name, where=f"{name}.json")


ALL = sorted(p.stem for p in CONFIGS.glob("*.json"))


def test_every_config_has_its_source_and_a_catalog_entry():
    for name in ALL:
        assert cfg(name)["_source"].startswith("https://huggingface.co/"), name
        # the catalog entry is the same config: same layout, same parameter count
        a, b = from_file(name), load_model(name)
        assert a.param_breakdown() == b.param_breakdown(), name
        assert (a.mixers, a.mlps) == (b.mixers, b.mlps), name


@pytest.mark.parametrize("name", ALL)
def test_published_parameter_count_within_1pct(name):
    m = load_model(name)  # published counts and their citation live in the catalog entry
    if m.published_params_b:
        assert m.total_params / 1e9 == pytest.approx(m.published_params_b, rel=0.01)
    if m.published_non_embedding_params_b:
        non_emb = m.total_params - m.embedding_params() - m.lm_head_params()
        assert non_emb / 1e9 == pytest.approx(m.published_non_embedding_params_b, rel=0.01)


# ---------------------------------------------------------------- Gemma 3


@pytest.mark.parametrize("name, safetensors_total", [
    ("gemma-3-4b", 4_300_079_472), ("gemma-3-12b", 12_187_325_040), ("gemma-3-27b", 27_432_406_640)])
def test_gemma3_exact_safetensors_totals(name, safetensors_total):
    # text model + SigLIP tower + projector, counted from config.json: equal to the HF safetensors totals
    assert from_file(name).total_params == safetensors_total


def test_gemma3_text_config_local_global_and_vision_tower():
    m = from_file("gemma-3-27b")
    # 62 layers, 5 of every 6 local with a 1,024-token window: 62 - 62 // 6 = 52 local, 10 global
    assert (m.num_local_layers, m.num_global_layers, m.local_window) == (52, 10, 1024)
    # KV per token per layer: 2 x 16 KV heads x 128 x 2 B = 8,192 B; at 32,768 tokens the local layers hold 1,024
    per = 2 * 16 * 128 * 2
    assert kv_bytes_per_token(m, "bf16") == 62 * per
    assert float(kv_bytes_per_sequence(m, "bf16", 32768)) == 10 * 32768 * per + 52 * 1024 * per
    # SigLIP tower (27 layers of 1152, MLP 4304, 64 x 64 patches of 14 px) + projector 1152 x 5376 + norm:
    d, I = 1152, 4304
    layer = 4 * (d * d + d) + 2 * d * I + I + d + 4 * d
    vision = 27 * layer + 3 * 14 * 14 * d + d + 64 * 64 * d + 2 * d + d * 5376 + d
    assert m.vision_params == vision
    # in memory (16-bit) but never read by text decode
    assert weight_bytes_by_group(m, BF16)["vision"] == 2 * vision
    dec = totals(decode_ops(m, BF16, "bf16", 1, 100))["weight_bytes"]
    assert float(dec) < weight_bytes(m, BF16) - 2 * vision + 1


# ---------------------------------------------------------------- gpt-oss


@pytest.mark.parametrize("name, checkpoint_gib", [("gpt-oss-20b", 12.8), ("gpt-oss-120b", 60.8)])
def test_gpt_oss_memory_matches_the_mxfp4_checkpoint(name, checkpoint_gib):
    # model card: checkpoint sizes 12.8 GiB and 60.8 GiB (experts MXFP4 = 4 + 8/32 = 4.25 bits, the rest bf16);
    # asking for bf16 never widens the published MXFP4 experts
    m = load_model(name)
    assert weight_bytes(m, BF16) / GIB == pytest.approx(checkpoint_gib, rel=0.01)
    # active parameters as the card counts them, without the embedding (input table)
    assert (m.active_params - m.embedding_params()) / 1e9 == pytest.approx(m.published_active_params_b, rel=0.01)


def test_gpt_oss_alternating_window_and_sinks():
    m = load_model("gpt-oss-20b")
    assert m.mixers[:4] == ("sliding", "full", "sliding", "full") and m.local_window == 128
    assert m.attention_sinks and m.attention_params() % 64 == 0  # ... + one sink per head (64)
    # per layer 2 x 8 x 64 x 2 B = 2,048 B; 12 full layers grow, 12 sliding keep 128 tokens
    per = 2 * 8 * 64 * 2
    assert float(kv_bytes_per_sequence(m, "bf16", 10000)) == 12 * 10000 * per + 12 * 128 * per
    # decode at 10,000 cached tokens reads 10,000 K/V per full layer and 128 per sliding layer
    kv = totals(decode_ops(m, BF16, "bf16", 1, 10000))["kv_read_bytes"]
    assert float(kv) == 12 * 10000 * per + 12 * 128 * per


# ---------------------------------------------------------------- Llama 4


def test_llama4_chunked_local_nope_global_and_interleaved_moe():
    scout, mav = load_model("llama-4-scout"), load_model("llama-4-maverick")
    # every 4th layer is a global NoPE layer: 12 global, 36 chunked (8,192)
    assert (scout.num_global_layers, scout.num_local_layers, scout.local_window) == (12, 36, 8192)
    # Scout: MoE on all 48 layers; Maverick: every 2nd layer MoE (24), dense MLP of 16,384 between
    assert (scout.num_moe_layers, mav.num_moe_layers, mav.num_dense_layers) == (48, 24, 24)
    assert mav.intermediate_size == 16384 and mav.moe.num_shared_experts == 1
    per = 2 * 8 * 128 * 2
    assert float(kv_bytes_per_sequence(scout, "bf16", 100_000)) == 12 * 100_000 * per + 36 * 8192 * per
    assert (scout.active_params / 1e9) == pytest.approx(17, rel=0.02)


# ---------------------------------------------------------------- linear attention and state-space layers


def test_qwen3_next_constant_delta_state():
    m = load_model("qwen3-next-80b-a3b")
    assert (m.count_mixers("linear"), m.count_mixers("full")) == (36, 12)
    # full layers: 2 x 2 KV heads x 256 x 2 B = 2,048 B per token per layer
    assert kv_bytes_per_token(m, "bf16") == 12 * 2048
    # DeltaNet state per layer: 32 value heads x 128 x 128 + conv (4 - 1) x (2 x 16 x 128 + 32 x 128), 2 B each
    state = (32 * 128 * 128 + 3 * (2 * 2048 + 4096)) * 2
    assert float(kv_bytes_per_sequence(m, "bf16", 0)) == 36 * state
    assert float(kv_bytes_per_sequence(m, "bf16", 5000) - kv_bytes_per_sequence(m, "bf16", 0)) == 12 * 2048 * 5000
    # the DeltaNet scan costs the same per decode step at any context
    def scan(ctx):
        return [o for o in decode_ops(m, BF16, "bf16", 4, ctx) if o.name == "attn_linear_attn_scan"][0]
    assert float(scan(10).flops) == float(scan(100_000).flops) > 0
    assert float(scan(10).kv_read_bytes) == float(scan(100_000).kv_read_bytes) == 4 * state


@pytest.mark.parametrize("name, attn_layers, kv_heads, head_dim, ssm_layers, state_el", [
    # Nemotron-H-8B: 4 '*' layers; Mamba-2 d_inner 128 x 64 = 8192, state 128, conv dim 8192 + 2 x 8 x 128
    ("nemotron-h-8b", 4, 8, 128, 24, 8192 * 128 + 3 * (8192 + 2 * 8 * 128)),
    # Falcon-H1-7B: attention and Mamba-2 in all 44 layers; d_ssm 3072, state 256, 1 group
    ("falcon-h1-7b", 44, 2, 128, 44, 3072 * 256 + 3 * (3072 + 2 * 256)),
    # Jamba: attention on layers 4, 12, 20, 28; Mamba-1 d_inner 8192 x state 16, conv (4 - 1) x 8192
    ("jamba-v0.1", 4, 8, 128, 28, 8192 * 16 + 3 * 8192),
    # Mamba-2 (Codestral): 64 SSM layers, no attention
    ("mamba-codestral-7b", 0, 1, 1, 64, 8192 * 128 + 3 * (8192 + 2 * 8 * 128)),
])
def test_ssm_state_per_sequence_and_kv_per_token(name, attn_layers, kv_heads, head_dim, ssm_layers, state_el):
    m = load_model(name)
    assert (m.num_attention_layers, m.count_mixers("ssm", "full+ssm")) == (attn_layers, ssm_layers)
    per_tok = attn_layers * 2 * kv_heads * head_dim * 2 if attn_layers else 0
    assert kv_bytes_per_token(m, "bf16") == per_tok
    assert float(kv_bytes_per_sequence(m, "bf16", 1000)) == 1000 * per_tok + ssm_layers * state_el * 2
    # decode: the scan's cost does not depend on the context; prefill scan flops grow linearly with the prompt
    d = [o for o in decode_ops(m, BF16, "bf16", 1, 50) if o.name == "attn_ssm_scan"][0]
    d2 = [o for o in decode_ops(m, BF16, "bf16", 1, 50_000) if o.name == "attn_ssm_scan"][0]
    assert float(d.flops) == float(d2.flops) and float(d.kv_read_bytes) == state_el * 2  # one sequence, per layer
    p1 = [o for o in prefill_ops(m, BF16, "bf16", 1, 1024) if o.name == "attn_ssm_scan"][0]
    p2 = [o for o in prefill_ops(m, BF16, "bf16", 1, 4096) if o.name == "attn_ssm_scan"][0]
    assert float(p2.flops) == pytest.approx(4 * float(p1.flops))


# ---------------------------------------------------------------- DeepSeek / GLM


def test_deepseek_v32_sparse_attention_reads_top_k():
    m, r1 = load_model("deepseek-v3.2"), load_model("deepseek-r1")
    assert r1.param_breakdown()["total"] == load_model("deepseek-v3").total_params  # R1 = V3 layout
    # MLA latent 512 + 64 rope, plus the indexer key 128, per token per layer, 61 layers
    assert kv_bytes_per_token(m, "bf16") == 61 * (512 + 64 + 128) * 2
    assert kv_bytes_per_token(r1, "bf16") == 61 * (512 + 64) * 2
    ops = {o.name: o for o in decode_ops(m, BF16, "bf16", 1, 100_000)}
    # the main attention reads the 2,048 selected latents; the indexer reads every cached index key
    assert float(ops["attn_scores_local"].kv_read_bytes) == 2048 * 576 * 2
    assert float(ops["attn_indexer"].kv_read_bytes) == 100_000 * 128 * 2


def test_glm4_moe_and_flash_on_the_deepseek_v2_layout():
    g, f = load_model("glm-4.5"), load_model("glm-4.7-flash")
    # GLM-4.5: 3 dense layers then 89 MoE layers (160 routed + 1 shared); GQA 8 KV heads of 128
    assert (g.num_dense_layers, g.num_moe_layers, g.moe.num_experts) == (3, 89, 160)
    assert kv_bytes_per_token(g, "bf16") == 92 * 2 * 8 * 128 * 2
    # Flash: MLA (latent 512 + rope 64) on 47 layers
    assert f.mla is not None and kv_bytes_per_token(f, "bf16") == 47 * 576 * 2


@pytest.mark.parametrize("name, layers, kv_heads, head_dim", [
    ("qwen3-0.6b", 28, 8, 128), ("qwen3-8b", 36, 8, 128), ("qwen3-32b", 64, 8, 128), ("qwen3-235b-a22b", 94, 4, 128),
    ("phi-4", 40, 10, 128), ("phi-4-mini", 32, 8, 128), ("mistral-small-3-24b", 40, 8, 128),
    ("llama-3.3-70b", 80, 8, 128),
])
def test_dense_gqa_kv_per_token(name, layers, kv_heads, head_dim):
    m = load_model(name)
    assert m.local_window is None  # Phi-4-mini's 262,144 window exceeds its 131,072 context: full attention
    assert kv_bytes_per_token(m, "fp16") == layers * 2 * kv_heads * head_dim * 2


def test_mistral_small_31_counts_pixtral_in_memory():
    m31, m30 = load_model("mistral-small-3.1-24b"), load_model("mistral-small-3-24b")
    assert m31.total_params - m31.vision_params == m30.total_params  # the same text model
    assert 0.4e9 < m31.vision_params < 0.45e9 and m31.active_params == m30.active_params


def test_prefill_flops_per_layer_kind_are_finite_and_positive():
    for name in ALL:
        m = load_model(name)
        t = totals(prefill_ops(m, BF16, "bf16", 2, 3000))
        assert all(np.isfinite(float(v)) and float(v) >= 0 for v in t.values()), name
        # at least 2 x active parameters x tokens (the weight GEMMs), minus the LM head on prompt positions
        assert float(t["flops"]) > 2 * (m.active_params - m.embedding_params() - m.vision_params
                                        - m.vocab_size * m.hidden_size) * 2 * 3000 * 0.99, name


@pytest.mark.parametrize("name", ["gpt-oss-20b", "llama-4-scout", "qwen3-next-80b-a3b", "nemotron-h-8b",
                                  "mamba-codestral-7b", "deepseek-v3.2", "falcon-h1-7b", "jamba-v0.1",
                                  "nemotron-3-super-120b"])
def test_serving_step_model_equals_the_core_on_every_layer_kind(name):
    # the simulator's tables (planner.serving.step_model) time the new layer kinds exactly as the core does:
    # windowed / chunked / top-k groups, and the linear-attention and SSM scans per sequence
    from planner.efficiency import resolve_efficiency
    from planner.hardware import load_hardware
    from planner.latency import decode_step_time_s, prefill_time_s
    from planner.roofline import device_model, select_unit
    from planner.serving import StepModel

    m, spec, fmt = load_model(name), load_hardware("h200-sxm"), weight_format("fp8")
    u = select_unit(spec, fmt)
    dev = device_model(spec, u, fmt, resolve_efficiency(spec, u, "auto"))
    sm = StepModel.build(m, fmt, "fp16", dev, max_tokens=2048)
    for p in (1, 300, 2048):
        assert sm.prefill_time([p]) == pytest.approx(float(prefill_time_s(m, fmt, "fp16", dev, 1, p)), rel=1e-9)
    for b, c in ((1, 10), (8, 1000), (64, 20000)):
        assert sm.decode_time(b, b * c) == pytest.approx(float(decode_step_time_s(m, fmt, "fp16", dev, b, c)),
                                                         rel=1e-9)


def test_vllm_pool_charges_each_sequence_its_state():
    # vLLM's hybrid allocator: attention KV in 16-token blocks plus one state per sequence. Nemotron-H-8B at
    # 4,224 tokens: 264 blocks x 16 x 16,384 B (4 attention layers) + 24 Mamba states of 2,158,592 B
    from planner.hardware import load_hardware
    from planner.memory import plan_memory

    m, spec = load_model("nemotron-h-8b"), load_hardware("h100-sxm")
    ek = plan_memory(m, BF16, "fp16", 8, 4096, 128, spec, "vllm", capacity_bytes=80e9)
    per_seq = 264 * 16 * 16_384 + 24 * 2_158_592
    assert ek.max_concurrency == pytest.approx(ek.kv_pool_bytes / per_seq)
    assert ek.kv_cache_bytes == pytest.approx(8 * per_seq)
    pure = plan_memory(load_model("mamba-codestral-7b"), BF16, "fp16", 8, 4096, 128, spec, "vllm", capacity_bytes=80e9)
    assert pure.max_concurrency == pytest.approx(pure.kv_pool_bytes / (64 * 2_158_592))  # no per-token KV at all


@pytest.mark.parametrize("name, published_b, convention, tol_b", [
    # tolerance: the rounding of the printed figure (2 significant figures: +-0.5B) + 1%
    ("llama-4-scout", 17, "all", 0.5 + 0.17), ("llama-4-maverick", 17, "all", 0.5 + 0.17),
    ("jamba-v0.1", 12, "all", 0.5 + 0.12), ("qwen3-235b-a22b", 22, "all", 0.5 + 0.22),
    ("deepseek-r1", 37, "no_embedding", 0.5 + 0.37), ("deepseek-v3.2", 37, "no_embedding", 0.5 + 0.37),
    # GLM and Qwen3-Next print their activated count without the embedding and the LM head (matmul-free lookup
    # and the vocabulary projection): GLM-4.5 33.63B - 2 x 0.78B = 32.08B
    ("glm-4.5", 32, "no_embedding_no_head", 0.5 + 0.32), ("glm-4.5-air", 12, "no_embedding_no_head", 0.5 + 0.12),
    ("qwen3-next-80b-a3b", 3, "no_embedding_no_head", 0.5 + 0.03), ("glm-4.7-flash", 3, "no_embedding_no_head",
                                                                    0.5 + 0.03),
    # Nemotron 3 Super's card: "12B active"; without the input embedding 12.23B, with it 12.77B
    ("nemotron-3-super-120b", 12, "no_embedding", 0.5 + 0.12),
])
def test_published_active_parameters(name, published_b, convention, tol_b):
    m = load_model(name)
    active = m.active_params
    if convention != "all":
        active -= m.embedding_params()
    if convention == "no_embedding_no_head":
        active -= m.vocab_size * m.hidden_size
    assert abs(active / 1e9 - published_b) <= tol_b


def test_internlm_bias_puts_biases_on_q_k_v_and_o():
    """InternLM (v1) configs carry `bias`: InternLM-7B true (q, k, v and o projections have biases), InternLM-20B
    false; InternLM2 reads the same Llama-shaped fields. With bias: 4 x 4096 more parameters per layer."""
    base = {"architectures": ["InternLMForCausalLM"], "model_type": "internlm", "hidden_size": 4096,
            "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 103168,
            "max_position_embeddings": 2048}
    with_bias = from_hf_config({**base, "bias": True}, name="internlm-7b", where="internlm-7b.json")
    without = from_hf_config({**base, "bias": False}, name="internlm-7b", where="internlm-7b.json")
    assert with_bias.attention_bias and with_bias.o_proj_bias and not without.attention_bias
    assert with_bias.total_params - without.total_params == 32 * 4 * 4096
    v2 = from_hf_config({**base, "architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2",
                         "num_key_value_heads": 8}, name="internlm2-7b", where="internlm2.json")
    assert (v2.family, v2.num_kv_heads) == ("internlm2", 8)


# ---------------------------------------------------------------- Nemotron 3 (E blocks, LatentMoE)

# Nemotron 3 Super (catalog entry's sources): 88 blocks, 40 Mamba-2 (M), 40 MoE (E), 8 attention (*); hidden 4096;
# 512 routed experts of 2688 (squared ReLU: up and down only), 22 per token, in a latent of 1024; one shared expert
# of 5376 at the hidden width; Mamba-2 128 heads x 64 (d_inner 8192), state 128, 8 groups, conv 4; attention 32 q
# heads and 2 K/V heads of 128; vocabulary 131072, untied.
SUPER_ROUTED = 40 * 512 * 2 * 1024 * 2688              # 112,742,891,520
SUPER_SHARED = 40 * 2 * 4096 * 5376                    # 1,761,607,680
SUPER_LATENT = 40 * 2 * 4096 * 1024                    # 335,544,320: hidden -> latent, latent -> hidden
SUPER_ROUTER = 40 * 4096 * 512                         # 83,886,080
SUPER_ATTN = 8 * (2 * 4096 * 4096 + 2 * 4096 * 2 * 128)  # q, o + k, v: 285,212,672
# in_proj 4096 -> (2 x 8192 + 2 x 8 x 128 + 128), conv (8192 + 2048) x (4 + 1 bias), A / D / dt_bias 3 x 128,
# gated norm 8192, out_proj 8192 -> 4096
SUPER_MAMBA = 40 * (4096 * 18560 + 10240 * 5 + 3 * 128 + 8192 + 8192 * 4096)  # 4,385,438,720


def test_nemotron3_super_latent_moe_by_hand():
    m = load_model("nemotron-3-super-120b")
    assert (m.num_moe_layers, m.count_mixers("ssm"), m.num_attention_layers) == (40, 40, 8)
    b = m.param_breakdown()
    assert (b["routed_experts"], b["shared_experts"], b["expert_latent_proj"], b["router"]) == (
        SUPER_ROUTED, SUPER_SHARED, SUPER_LATENT, SUPER_ROUTER)
    assert (b["attention"], b["state_mixers"]) == (SUPER_ATTN, SUPER_MAMBA)
    assert b["embedding"] == b["lm_head"] == 131072 * 4096
    assert b["total"] / 1e9 == pytest.approx(120.67, abs=0.01)  # the card: 120B
    active_routed = 40 * 22 * 2 * 1024 * 2688
    assert b["active"] == b["total"] - SUPER_ROUTED + active_routed
    assert kv_bytes_per_token(m, "bf16") == 8 * 2 * 2 * 128 * 2  # 8 KiB: 8 attention layers, 2 K/V heads
    # one decode token: the latent projections are dense GEMMs of every MoE layer; the routed experts multiply at
    # the latent width (22 x 2 x 1024 x 2688 weights), and the weights read are those of the touched experts
    ops = {o.name: o for o in decode_ops(m, BF16, "bf16", 1, 100)}
    lat, ex = ops["moe_latent_proj"], ops["moe_experts"]
    assert (lat.count, float(lat.flops), float(lat.weight_bytes)) == (40, 2 * 2 * 4096 * 1024, 2 * 4096 * 1024 * 2)
    assert float(lat.act_bytes) == 2 * (4096 + 1024) * 2
    assert float(ex.flops) == 2 * 22 * 2 * 1024 * 2688 and float(ex.weight_bytes) == 22 * 2 * 1024 * 2688 * 2
    assert weight_bytes_by_group(m, BF16)["linear"] == 2 * (SUPER_ATTN + SUPER_MAMBA + SUPER_SHARED + SUPER_LATENT)
    # expert parallelism dispatches the latent: a quarter of the bytes a 4096-wide MoE would send
    from planner.serving.expert_parallel import all_to_all_bytes
    assert m.expert_width == 1024
    assert float(all_to_all_bytes(100, 22, m.expert_width, 2, 8)) == 100 * 22 * 1024 * 2 * 7 / 8


def test_nemotron3_e_blocks_from_a_config():
    """A Nemotron 3 Nano-shaped config (MoE blocks 'E' without a latent): the experts read the hidden width, the
    shared expert its own size; an E block without its expert count is a one-line error naming the field."""
    from planner.errors import PlannerError

    c = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 2688,
         "num_hidden_layers": 5, "hybrid_override_pattern": "ME*EM", "num_attention_heads": 32,
         "num_key_value_heads": 2, "head_dim": 128, "mamba_num_heads": 64, "mamba_head_dim": 64,
         "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "n_routed_experts": 128, "num_experts_per_tok": 6,
         "moe_intermediate_size": 1856, "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 3712,
         "mlp_hidden_act": "relu2", "vocab_size": 131072, "max_position_embeddings": 262144}
    m = from_hf_config(c, name="nano-shape")
    assert m.mixers == ("ssm", "none", "full", "none", "ssm") and m.mlps == ("none", "moe", "none", "moe", "none")
    assert m.expert_width == 2688 and m.latent_proj_params() == 0
    b = m.param_breakdown()
    assert b["routed_experts"] == 2 * 128 * 2 * 2688 * 1856 and b["shared_experts"] == 2 * 2 * 2688 * 3712
    assert b["expert_latent_proj"] == 0
    assert "moe_latent_proj" not in {o.name for o in decode_ops(m, BF16, "bf16", 1, 10)}
    with pytest.raises(PlannerError) as e:
        from_hf_config({k: v for k, v in c.items() if k != "n_routed_experts"}, name="x", where="config.json")
    assert "n_routed_experts" in str(e.value) and "\n" not in str(e.value)


def test_a_tied_embedding_is_stored_at_the_output_tensors_type():
    """Gemma-3-4B ties its LM head to the 262,208 x 2,560 = 671,252,480-parameter token embedding. llama.cpp's
    quantizer gives a tied token_embd the output tensor's type (llama_tensor_get_type: Q6_K under Q4_0, 6.5625 bits),
    so at q4_0 the matrix is 671,252,480 x 6.5625 / 8 = 550,636,800 B, in memory and in every decode step's LM head
    (not 4.5 bits: 377,579,520 B); Llama-3-8B's untied embedding stays at the format's 4.5 bits (525,336,576 params,
    295,501,824 B) beside its Q6_K output; fp16 is 16 bits either way."""
    from planner.ops import decode_ops, weight_bytes_by_group
    from planner.quantization import weight_format

    g, q4 = load_model("gemma-3-4b"), weight_format("q4_0")
    assert 262208 * 2560 == 671_252_480
    assert weight_bytes_by_group(g, q4)["embedding"] == pytest.approx(550_636_800)
    assert weight_bytes_by_group(g, q4)["lm_head"] == 0.0
    lm = next(o for o in decode_ops(g, q4, "fp16", 1, 128) if o.name == "lm_head")
    assert float(lm.weight_bytes) == pytest.approx(550_636_800)
    l3 = load_model("llama-3-8b")
    assert weight_bytes_by_group(l3, q4)["embedding"] == pytest.approx(128256 * 4096 * 4.5 / 8)
    assert weight_bytes_by_group(l3, q4)["lm_head"] == pytest.approx(128256 * 4096 * 6.5625 / 8)
    assert weight_bytes_by_group(g, weight_format("fp16"))["embedding"] == pytest.approx(671_252_480 * 2)


def test_cohere_command_r_by_hand():
    """Command-R (CohereForCausalLM): attention and a gated SwiGLU MLP off one LayerNorm per layer, tied embeddings.
    Parameters by hand from the config (hidden 8192, 40 layers, 64 heads = key/value heads, intermediate 22,528,
    vocabulary 256,000): embeddings 256,000 x 8,192 = 2,097,152,000; per layer q/k/v/o 4 x 8,192^2 = 268,435,456,
    MLP 3 x 8,192 x 22,528 = 553,648,128, one norm 8,192 -> 822,091,776 x 40 = 32,883,671,040; the final norm
    8,192: 34,980,831,232 (the model card's "35B"). Under tensor parallelism the two branches share one all-reduce
    per layer (parallel_attention_mlp), as GPT-J's and Falcon's do."""
    from planner.architecture import load_model
    m = load_model("command-r")
    assert m.family == "cohere" and m.parallel_attention_mlp and m.mlp_gated and m.tie_word_embeddings
    assert m.total_params == 256_000 * 8192 + 40 * (4 * 8192 ** 2 + 3 * 8192 * 22528 + 8192) + 8192 == 34_980_831_232
