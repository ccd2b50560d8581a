"""Which decode attention kernel a published engine build ran (planner/accuracy/decode_kernels.py), and the size of
the effect checked by hand on one TensorRT-LLM row."""

import pytest

from planner.accuracy.decode_kernels import decode_kernel_per_query_head as per_head
from planner.architecture import load_model
from planner.ops import decode_ops
from planner.quantization import weight_format
from planner.roofline import op_bytes
from planner.serving.parallelism import split_ops

V061 = "TensorRT-LLM v0.6.1 (gptSessionBenchmark, static batch)"
V09 = "TensorRT-LLM v0.9.0 (gptSessionBenchmark, static batch)"
DSTACK = "dstack_tgi_vs_vllm_mi300x_llama405b_2024-10"


def test_xqa_covers_eight_query_heads_per_kv_head_from_v07():
    """XQA's precompiled set: 8 query heads per K/V head, head size 128/256, from v0.7. Llama-2-70B (64/8, d 128) gets
    it in v0.9 and not in v0.6.1; Mistral-7B (32/8 = 4) and Falcon-180B (232/8 = 29, d 64) never; MHA models
    (GPT-J, Llama-2-7B) have one query head per K/V head, so the question does not arise."""
    assert per_head("trtllm", V061, "x", "llama-2-70b", 2176)
    assert not per_head("trtllm", V09, "x", "llama-2-70b", 2176)
    assert per_head("trtllm", V09, "x", "mistral-7b", 2176)
    assert per_head("trtllm", V09, "x", "falcon-180b", 2176)
    assert not per_head("trtllm", V061, "x", "gpt-j-6b", 2176)
    assert not per_head("trtllm", V061, "x", "llama-2-7b", 2176)
    assert not per_head("vllm", "vLLM v0.19.1", "vllm_blog_fp8_kvcache_2026-04", "llama-3.1-8b", 22000)
    # gpt-fast and HF eager repeat K/V to every query head in the model code, whatever the build
    assert per_head("gpt-fast", "gpt-fast (PyTorch, torch.compile)", "gpt_fast_readme", "llama-3.1-8b", 105)
    assert not per_head("gpt-fast", "gpt-fast (PyTorch, torch.compile)", "gpt_fast_readme", "llama-2-7b", 105)


def test_rocm_custom_paged_attention_stops_at_32k():
    """vLLM 0.6.3 and TGI on ROCm (the dstack 405B runs): the custom kernel up to max_seq_len 32,768 (128 / 8 = 16
    query heads per K/V head, head size 128), paged_attention v1/v2 beyond."""
    assert not per_head("vllm", "vLLM 0.6.3.dev116", DSTACK, "llama-3.1-405b", 32000 + 92)
    assert per_head("vllm", "vLLM 0.6.3.dev116", DSTACK, "llama-3.1-405b", 64000 + 150)
    assert per_head("tgi", "TGI", DSTACK, "llama-3.1-405b", 128000 + 150)


def test_masked_mha_explains_the_v061_llama70b_throughput():
    """TensorRT-LLM v0.6.1, Llama-2-70B fp8 on 4 x H100 SXM, batch 480, 128 in / 2048 out: 1,486 output tok/s per
    GPU = 480 / (1486 x 4) = 80.8 ms per decode step (the prefill is ~1% of the run). At the mean context 128 + 1024
    = 1152 tokens each GPU reads K and V of 480 x 1152 tokens x 80 layers x 2 K/V heads x 128 x 1 B (fp8) x 2 =
    22.6 GB per step: 6.8 ms at the datasheet 3.35 TB/s, with the 17.4 GB of weights ~12 ms of memory time, far
    below 80.8 ms. Masked MHA reads it once per query head, 64 / 8 = 8 times: 181 GB = 54 ms, which with the
    weights and ~16 TFLOP of GEMMs per GPU accounts for the measured step."""
    m, f = load_model("llama-2-70b"), weight_format("fp8")
    ops = split_ops(decode_ops(m, f, "fp8", 480, 1152), m, 4)
    kv = sum(o.count * float(o.kv_read_bytes) for o in ops if o.kv_dtype)
    assert kv == pytest.approx(480 * 1152 * 80 * 2 * 128 * 1 * 2, rel=1e-3)
    assert kv == pytest.approx(22.6e9, rel=0.01)
    moved = sum(o.count * float(op_bytes(o, None, per_query_head=True) - o.bytes) for o in ops if o.kv_dtype)
    assert moved == pytest.approx(7 * kv, rel=1e-6)
    step_s = 480 / (1486 * 4)
    assert 8 * kv / 3.35e12 == pytest.approx(0.054, rel=0.01) and 8 * kv / 3.35e12 < step_s
    assert (kv + 17.4e9) / 3.35e12 < step_s / 4


def test_repeat_kv_engines_carry_the_flag_in_their_profiles():
    """The committed gpt-fast and HF eager profiles read K/V once per query head (their model code repeats K/V); the
    serving engines' current builds share it."""
    from planner.runtimes import load_runtime

    for rt, flag in (("gpt-fast", True), ("hf-eager", True), ("vllm", False), ("trtllm", False)):
        prof = load_runtime(rt)
        assert all(c.efficiency.kv_read_per_query_head == flag for c in prof.classes), rt


def test_materialized_score_bytes_by_hand():
    """Llama-2-7B, one 512-token prompt without flash attention: each layer has 32 heads x (512 x 513 / 2) = 4,202,496
    (query, key) pairs; the planner counts the score matrix at 2 bytes: written by QK^T (8,404,992 B), read and
    written by softmax (2x), read by PV. llama.cpp on CUDA moves 24 bytes per score (3.0 x the 8 counted), on Metal 16
    (2.0 x), on ROCm (the same sources through HIP) 24; roofline.op_bytes adds (factor - 1) x the op's score
    bytes. Other engines: 1."""
    from planner.accuracy.decode_kernels import score_bytes_factor
    from planner.architecture import load_model
    from planner.ops import prefill_ops
    from planner.quantization import weight_format
    from planner.roofline import op_bytes

    ops = {o.name: o for o in prefill_ops(load_model("llama-2-7b"), weight_format("fp16"), "fp16", 1, 512,
                                          flash_attention=False)}
    pairs = 32 * 512 * 513 // 2
    assert pairs == 4_202_496
    assert ops["attn_scores"].score_bytes == 2 * pairs == 8_404_992
    assert ops["attn_softmax"].score_bytes == 4 * pairs and ops["attn_values"].score_bytes == 2 * pairs
    flash = {o.name: o for o in prefill_ops(load_model("llama-2-7b"), weight_format("fp16"), "fp16", 1, 512)}
    assert flash["attn_scores"].score_bytes == 0.0
    sc = ops["attn_scores"]
    assert op_bytes(sc, None, score_factor=3.0) == pytest.approx(sc.bytes + 2 * 2 * pairs)
    assert op_bytes(sc, None) == sc.bytes
    assert score_bytes_factor("llamacpp", "NVIDIA") == 3.0 and score_bytes_factor("llamacpp", "Apple") == 2.0
    assert score_bytes_factor("llamacpp", "AMD") == 3.0
    assert score_bytes_factor("vllm", "NVIDIA") == 1.0 and score_bytes_factor(None, "AMD") == 1.0
    from planner.runtimes import load_runtime
    effs = {c.vendor.lower(): c.efficiency.score_bytes_factor for c in load_runtime("llamacpp").classes}
    assert effs == {"amd": 3.0, "apple": 2.0, "nvidia": 3.0}
    assert score_bytes_factor("hf-eager", "AMD") == score_bytes_factor("hf-eager", None) == 2.5  # 20 B / 8 B
    assert {c.efficiency.score_bytes_factor for c in load_runtime("hf-eager").classes} == {2.5}


def test_kv_reread_share_by_hand():
    """A decode attention op's K/V passes after the first cost Efficiency.kv_reread_share of a pass each
    (roofline.kv_passes: passes = 1 + (p - 1) x share). Llama-3-8B (32 query heads, 8 K/V heads of 128), one sequence
    at 4,096 cached tokens: the score op reads one layer's K, 4,096 x 8 x 128 x 2 B = 8,388,608 B. Without flash
    attention its broadcast matmul makes p = 32 / 8 = 4 passes: 4 x 8,388,608 at a share of 1, (1 + 3 x 0.5) = 2.5
    passes at 0.5, 1 + 3 x 1.8 = 6.4 at 1.8. A fused kernel sharing K/V across the group makes one pass whatever the
    share; one giving each query head its own CTA (Efficiency.kv_read_per_query_head) makes 4, taken like the
    materialized ones. A prompt's ops and an MHA model's (Llama-2-7B: one query head per K/V head) are untouched;
    stacked devices take one share each."""
    import numpy as np

    from planner.architecture import load_model
    from planner.ops import decode_ops, prefill_ops
    from planner.quantization import weight_format
    from planner.roofline import kv_passes, op_bytes

    fp16 = weight_format("fp16")
    m8 = load_model("llama-3-8b")
    sc = {o.name: o for o in decode_ops(m8, fp16, "fp16", 1, 4096, flash_attention=False)}["attn_scores"]
    k_layer = 4096 * 8 * 128 * 2
    assert k_layer == 8_388_608 and sc.kv_read_bytes == pytest.approx(k_layer, rel=1e-12)
    assert kv_passes(sc) == 4.0 and kv_passes(sc, reread_share=0.5) == 2.5
    assert kv_passes(sc, reread_share=1.8) == pytest.approx(6.4, rel=1e-12)
    assert op_bytes(sc, None) == pytest.approx(sc.bytes + 3 * k_layer, rel=1e-12)
    assert op_bytes(sc, None, reread_share=0.5) == pytest.approx(sc.bytes + 1.5 * k_layer, rel=1e-12)
    fused = {o.name: o for o in decode_ops(m8, fp16, "fp16", 1, 4096)}["attn_scores"]
    assert kv_passes(fused, reread_share=0.5) == 1.0
    assert op_bytes(fused, None, reread_share=0.5) == fused.bytes
    assert kv_passes(fused, per_query_head=True, reread_share=0.5) == 2.5
    stacked = kv_passes(sc, reread_share=np.array([1.0, 0.5, 1.8]))
    np.testing.assert_allclose(stacked, [4.0, 2.5, 6.4], rtol=1e-12)
    pre = {o.name: o for o in prefill_ops(m8, fp16, "fp16", 1, 512, flash_attention=False)}["attn_scores"]
    assert kv_passes(pre, reread_share=0.5) == kv_passes(pre) == 4.0  # decode only
    mha = {o.name: o for o in decode_ops(load_model("llama-2-7b"), fp16, "fp16", 1, 4096,
                                         flash_attention=False)}["attn_scores"]
    assert kv_passes(mha, reread_share=0.5) == 1.0


def test_committed_kv_reread_shares_are_physical():
    """The fitted shares (planner accuracy --fit) of the engines whose decode attention makes extra passes: llama.cpp
    on NVIDIA GPUs reads its materialized attention's extra passes mostly from L2 (share below 1: its Llama-3 rows at
    tg512-8192 lose per token of context 0.6 of what four DRAM passes would cost); on Apple GPUs they cost more
    than a pass each (Metal's broadcast mat-vec: above 1); every share inside the field's bounds; engines whose rows
    make no extra pass keep 1."""
    from planner.runtimes import load_runtime

    shares = {(rt, c.vendor.lower()): c.efficiency.kv_reread_share
              for rt in ("llamacpp", "vllm", "sglang", "lmdeploy") for c in load_runtime(rt).classes}
    assert 0.2 < shares[("llamacpp", "nvidia")] < 0.8
    assert 1.2 < shares[("llamacpp", "apple")] < 3.0
    assert shares[("lmdeploy", "nvidia")] == 1.0 and shares[("sglang", "nvidia")] == 1.0
    assert all(0.0 < s <= 8.0 for s in shares.values())
