"""Hand-checked cases: padding waste, paged vs contiguous KV, prefix sharing, the attention score matrix, and
Leviathan et al.'s expected-tokens formula."""

import math

import numpy as np
import pytest

from planner import estimate
from planner.errors import PlannerError
from planner.serving import (attention_memory_table, batching_table, contiguous_vs_paged, expected_tokens,
                             leviathan_speedup, padding_waste, prefix_sharing, speculative, static_batch)

# nine short requests (prompt 100, output 50) and one long one (prompt 2000, output 200)
PROMPTS = [100] * 9 + [2000]
OUTPUTS = [50] * 9 + [200]


def test_padding_waste_nine_short_one_long():
    w = padding_waste(PROMPTS, OUTPUTS)
    # prompts padded to 2000: useful 9*100 + 2000 = 2900 of 10*2000 = 20000 -> waste 0.855
    assert w["prompt_waste_fraction"] == pytest.approx(1 - 2900 / 20000, abs=1e-12)
    # outputs run to 200: useful 9*50 + 200 = 650 of 2000 -> 0.675
    assert w["decode_waste_fraction"] == pytest.approx(1 - 650 / 2000, abs=1e-12)
    # KV reserved for 2200 tokens each: useful 9*150 + 2200 = 3550 of 22000
    assert w["kv_waste_fraction"] == pytest.approx(1 - 3550 / 22000, abs=1e-12)


def test_static_batch_latency_is_the_padded_estimate():
    r = static_batch("llama-3.1-8b", "h100-sxm", PROMPTS, OUTPUTS)
    e = estimate("llama-3.1-8b", "h100-sxm", batch=10, prompt=2000, output=200)
    assert r["batch_latency_s"] == pytest.approx(e.end_to_end.latency_s, rel=1e-12)
    # FLOP waste lies between the linear terms' waste (0.855, flops ~ tokens) and the quadratic attention
    # terms' waste 1 - (9*100^2 + 2000^2) / (10*2000^2) = 0.89775
    assert 0.855 <= r["prefill_flop_waste_fraction"] <= 1 - (9 * 100**2 + 2000**2) / (10 * 2000**2)
    assert r["mean_latency_alone_s"] < r["batch_latency_s"]


def test_batching_table_knee():
    df = batching_table("llama-3.1-8b", "h100-sxm", [1, 8, 32, 64, 256], 512, 128)
    assert list(df["batch"]) == [1, 8, 32, 64, 256]
    assert df["knee"].sum() == 1
    np.testing.assert_allclose(df["requests_per_s"], df["batch"] / df["e2e_s"])
    assert df["step_ms"].is_monotonic_increasing


def test_paged_vs_contiguous_hand_numbers():
    r = contiguous_vs_paged([100, 200, 300, 1000], max_len=1024, block_size=16, pool_tokens=10240)
    assert r["contiguous_utilization"] == pytest.approx(1600 / 4096)  # 4 x 1024 reserved
    # blocks: 7, 13, 19, 63 -> 102 blocks = 1632 tokens
    assert r["paged_reserved_tokens"] == 1632
    assert r["paged_utilization"] == pytest.approx(1600 / 1632)
    assert r["paged_waste_tokens_per_sequence"] == 8 < 16  # under one block per sequence
    assert r["contiguous_sequences_fit"] == 10  # 10240 // 1024
    assert r["paged_sequences_fit"] == 25  # 10240 // (1632 / 4)


@pytest.mark.parametrize("block", [1, 7, 16, 33])
def test_paged_waste_below_one_block(block):
    lens = np.random.default_rng(block).integers(1, 5000, size=200)
    r = contiguous_vs_paged(lens, int(lens.max()), block)
    assert 0 <= r["paged_waste_tokens_per_sequence"] < block


def test_prefix_sharing_hand_numbers():
    # 10 sequences, 500-token system prompt, 100 own tokens, block 16: ceil(600/16) = 38 blocks each = 380;
    # the 31 full prefix blocks are stored once: 10 * (38 - 31) + 31 = 101
    r = prefix_sharing(10, 500, 100, 16)
    assert (r["blocks_without_sharing"], r["shared_blocks"], r["blocks_with_sharing"]) == (380, 31, 101)


def test_attention_score_matrix_without_flash():
    df = attention_memory_table("llama-3.1-8b", "h100-sxm", [8192, 32768])
    # 2 matrices (scores, probabilities) x 32 heads x 8192^2 x 2 bytes = 8.589934592 GB
    assert df["score_matrix_gb"].iloc[0] == pytest.approx(2 * 32 * 8192**2 * 2 / 1e9)
    assert (df["slowdown_without_flash"] > 1).all()
    assert bool(df["no_flash_activations_exceed_memory"].iloc[1])  # 137 GB of scores at 32k > 80 GB


@pytest.mark.parametrize("alpha, gamma, expected", [
    (0.0, 4, 1.0),                              # nothing accepted: the target's own token
    (0.5, 3, (1 - 0.5**4) / 0.5),               # 1.875
    (0.6, 2, (1 - 0.216) / 0.4),                # 1.96
    (0.8, 4, (1 - 0.32768) / 0.2),              # 3.3616
    (1.0, 4, 5.0),                              # all gamma accepted plus the bonus token
])
def test_leviathan_expected_tokens(alpha, gamma, expected):
    assert expected_tokens(alpha, gamma) == pytest.approx(expected, rel=1e-12)


def test_leviathan_speedup_formula():
    # Theorem 3.8: (1 - a^(g+1)) / ((1 - a)(g c + 1)) with a = 0.8, g = 4, c = 0.05 -> 3.3616 / 1.2
    assert leviathan_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)


def test_speculative_breakeven_is_where_speedup_is_one():
    r = speculative("llama-3.1-70b", "llama-3.1-8b", "h100-sxm", gamma=4, alpha=0.8, weights="fp8")
    assert r["speedup"] > 1.5
    a = r["breakeven_alpha"]
    assert 0 < a < 0.8
    at_a = speculative("llama-3.1-70b", "llama-3.1-8b", "h100-sxm", gamma=4, alpha=a, weights="fp8")
    assert at_a["speedup"] == pytest.approx(1.0, abs=1e-9)
    # verification of 5 tokens costs about one decode step when memory bound: the core's number, close to Leviathan's
    assert r["speedup"] == pytest.approx(r["leviathan_speedup"], rel=0.05)
    assert math.isclose(r["expected_tokens_per_step"], 3.3616)


def test_speculative_needs_same_vocabulary():
    with pytest.raises(PlannerError, match="tokenizer"):
        speculative("llama-3.1-70b", "qwen2.5-7b", "h100-sxm")


def test_speculative_reports_a_memory_verdict():
    # Llama-3.1-70B (70.55B) + Llama-3.1-8B (8.03B) in fp16 = 2 x 78.6e9 B = 157 GB of weights alone > 80 GB (H100)
    from planner.serving import speculative

    r = speculative("llama-3.1-70b", "llama-3.1-8b", "h100-sxm", 4, 0.7, "fp16")
    assert not r["fits"] and r["verdict"].startswith("does not fit") and r["memory_gb"] > 157
    ok = speculative("llama-3.1-70b", "llama-3.1-8b", "h200-sxm", 4, 0.7, "fp8")
    assert ok["fits"] and ok["memory_gb"] < 141
