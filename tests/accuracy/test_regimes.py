"""Regime efficiencies (planner/regimes.py): each formula checked against a hand computation."""

from __future__ import annotations

import pytest

from planner import regimes
from planner.estimate import estimate


def test_gemm_small_m_and_wave_quantization():
    # M = 1 token in a 64-row tile: 1/64; M = 100 in 128-row tiles: 100/128
    assert regimes.small_m_efficiency(1, 64) == pytest.approx(1 / 64)
    assert regimes.small_m_efficiency(100, 128) == pytest.approx(100 / 128)
    # N = 4096, 128 x 128 tiles, M = 256 on 132 SMs (H100 SXM): tiles = 2 x 32 = 64 -> one wave of 132: 64/132
    assert regimes.wave_efficiency(256, 4096, 132) == pytest.approx(64 / 132)
    # M = 640: 5 x 32 = 160 tiles -> 2 waves of 132 = 264 slots: 160/264
    assert regimes.gemm_efficiency(640, 4096, 132) == pytest.approx(1.0 * 160 / 264)


def test_ridge_rolloff():
    # at the ridge (t_c = t_m = 1 ms) p = 4 gives 2^(1/4) = 1.189 ms; far from it the max
    assert regimes.ridge_rolloff_time(1e-3, 1e-3) == pytest.approx(2 ** 0.25 * 1e-3)
    assert regimes.ridge_rolloff_time(1e-3, 1e-5) == pytest.approx(1e-3, rel=1e-6)


def test_grouped_gemm_and_decode_attention():
    # 8 tokens per expert in 64-row grouped tiles: 8/64 = 12.5% of the tensor work is useful
    assert regimes.grouped_gemm_efficiency(8) == pytest.approx(0.125)
    # batch 1, 8 KV heads on 132 SMs: 8/132 without split-KV; 4096 context in 512 chunks: 64/132 with it
    assert regimes.decode_attention_efficiency(1, 8, 4096, 132, split_kv=False) == pytest.approx(8 / 132)
    assert regimes.decode_attention_efficiency(1, 8, 4096, 132) == pytest.approx(64 / 132)
    assert regimes.decode_attention_efficiency(64, 8, 4096, 132) == 1.0


def test_fp8_kv_on_ampere_costs_more_than_half_the_bytes():
    """A100 lists no fp8 peak: the fp8 KV read costs 2.75 x its bytes (issue 11: 2.5-3x slower than half the
    bytes), i.e. 1.375 x the fp16 read. H100 reads fp8 natively: half the bytes."""
    assert regimes.kv_read_factor(("fp16", "bf16", "int8"), "fp8") == 2.75
    assert regimes.kv_read_factor(("fp16", "fp8"), "fp8") == 1.0
    a16 = estimate("llama-3.1-8b", "a100-80gb-sxm", "bf16", "fp16", batch=32, prompt=4096, output=128)
    a8 = estimate("llama-3.1-8b", "a100-80gb-sxm", "bf16", "fp8", batch=32, prompt=4096, output=128)
    h16 = estimate("llama-3.1-8b", "h100-sxm", "bf16", "fp16", batch=32, prompt=4096, output=128)
    h8 = estimate("llama-3.1-8b", "h100-sxm", "bf16", "fp8", batch=32, prompt=4096, output=128)
    assert a8.decode.latency_ms_per_token > a16.decode.latency_ms_per_token
    assert h8.decode.latency_ms_per_token < h16.decode.latency_ms_per_token


def test_fp4_weight_only_never_runs_at_the_fp4_peak():
    """MXFP4 is weight-only: B200 GEMMs run at bf16 (2,250 TFLOP/s), not FP4 (9,000); NVFP4 (weights and
    activations) uses the FP4 peak on Blackwell and dequantizes on Hopper (fp8)."""
    assert estimate("llama-3.1-8b", "b200", "mxfp4").roofline.dtypes["matmul"] == "bf16"
    assert estimate("llama-3.1-8b", "b200", "nvfp4").roofline.dtypes["matmul"] == "fp4"
    assert estimate("llama-3.1-8b", "h100-sxm", "nvfp4").roofline.dtypes["matmul"] == "fp8"


def test_trtllm_profile_does_not_cap_b200():
    """The fitted TensorRT-LLM profile used to cap GEMMs at tdp x 1.625 TFLOP/s/W = 1.6 PFLOP/s on a 1,000 W B200;
    the power cap is no longer fitted (planner/accuracy/fit.py FIT_POWER_CAP), so an fp8 prefill runs at
    compute_fraction x 4,500 TFLOP/s."""
    from planner.runtimes import load_runtime
    assert all(c.efficiency.matmul_tflops_per_watt == 0 for c in load_runtime("trtllm").classes)
