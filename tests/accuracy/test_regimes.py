"""Regime efficiencies (planner/regimes.py): each formula checked against a hand computation."""

from __future__ import annotations

import dataclasses

import numpy as np
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


# ---------------------------------------------------------------- regime curves fitted to measured kernels


def _regime(**kw):
    base = dict(tile_m=128, ridge_sharpness=2.5, grouped_tile_m=64, kernel_compute_fraction={"bf16": 0.75},
                vendors=["nvidia"])
    return regimes.GemmRegime(**{**base, **kw})


def test_tile_padding_only_past_one_tile():
    # up to one tile the library runs a GEMV / smaller tile: no padding; M = 129 in 128-row tiles pays 256 rows
    assert regimes.tile_padding_efficiency(1, 128) == 1.0
    assert regimes.tile_padding_efficiency(128, 128) == 1.0
    assert regimes.tile_padding_efficiency(129, 128) == pytest.approx(129 / 256)
    assert regimes.tile_padding_efficiency(300, 128) == pytest.approx(300 / 384)


def test_weight_gemm_time_by_hand():
    g = _regime()
    # t_c = t_m = 1 ms, 1024 rows (whole tiles), kernel compute 0.5 ms: t = (1 + 1)^(1/2.5) = 2^0.4 ms
    t, c = regimes.weight_gemm_time_s(1e-3, 1e-3, 1024, g, 0.5e-3)
    assert float(t) == pytest.approx(2 ** 0.4 * 1e-3, rel=1e-12)
    assert float(c) == pytest.approx(1e-3)
    # 129 rows: the padded tiles take 0.8 ms x 256 / 129 = 1.5876 ms > t_c = 1 ms; t_m = 1 ms
    t_tile = 0.8e-3 * 256 / 129
    t, c = regimes.weight_gemm_time_s(1e-3, 1e-3, 129, g, 0.8e-3)
    assert float(c) == pytest.approx(t_tile)
    assert float(t) == pytest.approx((t_tile ** 2.5 + 1e-3 ** 2.5) ** 0.4, rel=1e-12)
    # grouped expert GEMM, 65 tokens per expert in 64-row tiles: 65 / 128
    t, c = regimes.weight_gemm_time_s(0.0, 1e-9, 65, g, 1e-3, grouped=True)
    assert float(c) == pytest.approx(1e-3 * 128 / 65)


def test_committed_regime_constants_load_with_provenance():
    c = regimes.regime_constants()
    assert (c.gemm.tile_m, c.gemm.ridge_sharpness, c.gemm.grouped_tile_m) == (128, 2.5, 64)
    assert c.gemm.vendors == ["nvidia"] and set(c.gemm.kernel_compute_fraction) == {"bf16", "fp16", "fp8", "fp4"}
    assert 0.3 < c.gemm.kernel_compute_fraction["fp8"] < c.gemm.kernel_compute_fraction["bf16"] < 1
    prov = c.provenance
    assert "aiconfigurator-core==0.12.0" in prov["source"] and "Apache-2.0" in prov["source"]
    assert prov["gemm_files"]["h100_sxm"]["spec"] == "h100-sxm" and len(prov["gemm_files"]["h100_sxm"]["sha256"]) == 64
    # the fitted shape beats the plain roofline on the kernels it was fitted to
    fit = prov["fit"]
    assert fit["gemm"]["median_abs_log_error"] < fit["gemm_plain_roofline"]["median_abs_log_error"]
    assert fit["moe"]["median_abs_log_error"] < fit["moe_plain_roofline"]["median_abs_log_error"]


def test_regime_applies_to_nvidia_fp16_bf16_fp8_with_an_sm_count():
    assert regimes.gemm_regime_for("NVIDIA", 132, "bf16", "bf16") is not None
    assert regimes.gemm_regime_for("NVIDIA", 132, "fp8", "fp8") is not None
    assert regimes.gemm_regime_for("NVIDIA", None, "bf16", "bf16") is None   # no SM count: today's roofline
    assert regimes.gemm_regime_for("AMD", 304, "bf16", "bf16") is None       # kernels of another vendor
    assert regimes.gemm_regime_for("NVIDIA", 132, "q4_0", "fp16") is None    # GEMV / dequantizing kernels
    assert regimes.gemm_regime_for("NVIDIA", 132, "fp8", "int8") is None     # no kernel fraction for the dtype


def test_nvfp4_takes_the_fp4_regime_only_where_the_unit_computes_fp4():
    """NVFP4 GEMMs are measured (the nvfp4 tables) where Blackwell's tensor cores run them in fp4; on Hopper the
    format dequantizes (fp8 math) and is a weight-only format like MXFP4, outside the curve without mixed-input
    kernels."""
    assert regimes.gemm_regime_for("NVIDIA", 148, "nvfp4", "fp4") is not None
    assert regimes.gemm_regime_for("NVIDIA", 132, "nvfp4", "fp8") is None
    assert regimes.gemm_regime_for("NVIDIA", 148, "mxfp4", "bf16") is None
    assert regimes.gemm_regime_for("AMD", 256, "nvfp4", "fp4") is None


def test_b200_nvfp4_prefill_runs_at_the_measured_fp4_kernel_share():
    """Llama-3.3-70B NVFP4 on one B200 (9,000 TFLOP/s dense FP4), TensorRT-LLM profile, an 8,192-token prompt. Its
    linear layers hold 80 x (2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672) = 68.45e9 weights, so the prompt's
    weight GEMMs are 2 x 68.45e9 x 8192 = 1.1215e15 flop; at the committed fp4 kernel share of the peak (0.367, the
    median over aiconfigurator's Blackwell nvfp4 tables) they take at least 1.1215e15 / (9e15 x 0.367) = 340 ms.
    Before the fp4 tables were fitted the engine's own compute fraction (0.94) applied: GEMMs at ~133 ms, TTFT 206 ms, 1.7x too fast
    against TensorRT-LLM's published 2048/128 throughput (data/pending/trtllm_perf_overview_v1.0_2025.csv)."""
    share = regimes.regime_constants().gemm.kernel_compute_fraction["fp4"]
    floor_s = 2 * 68.45e9 * 8192 / (9000e12 * share)
    e = estimate("llama-3.3-70b", "b200", "nvfp4", runtime="trtllm", prompt=8192, output=2)
    ttft_s = e.prefill.latency_ms / 1e3
    assert floor_s == pytest.approx(2 * 68.45e9 * 8192 / (9000e12 * 0.3672), rel=0.05)
    assert floor_s <= ttft_s < 1.6 * floor_s


def test_h100_prefill_gemm_by_hand():
    """One bf16 GEMM of 4096 tokens x 1e8 parameters on an H100 SXM (989.4 TFLOP/s, 3,350 GB/s), engine fractions
    0.7 / 0.8: t_c = 2 x 4096 x 1e8 / (989.4e12 x 0.7), the 128-row tiles at 0.748 are faster (4096 is whole
    tiles), t_m = 2e8 / (3350e9 x 0.8); t = (t_c^2.5 + t_m^2.5)^(1/2.5)."""
    from planner.hardware import Efficiency, load_hardware
    from planner.ops import OpCost
    from planner.quantization import weight_format
    from planner.roofline import device_model, time_ops

    spec = load_hardware("h100-sxm")
    dev = device_model(spec, spec.units[0], weight_format("bf16"), Efficiency(bandwidth_fraction=0.8,
                                                                             compute_fraction=0.7))
    assert dev.gemm_regime is not None and spec.units[0].sm_count == 132
    (ot,) = time_ops([OpCost("mlp", "prefill", 1, 2 * 4096 * 1e8, 2e8, 0.0)], dev)
    t_c, t_m = 2 * 4096 * 1e8 / (989.4e12 * 0.7), 2e8 / (3350e9 * 0.8)
    t = (t_c ** 2.5 + t_m ** 2.5) ** 0.4
    assert float(ot.time_s) == pytest.approx(t, rel=1e-9)
    assert max(float(ot.compute_s), float(ot.memory_s)) == pytest.approx(t, rel=1e-9)  # decode_sum_s reads these
    assert float(ot.compute_s) / float(ot.memory_s) == pytest.approx(t_c / t_m, rel=1e-9)


def test_sm_count_needs_a_source():
    from pydantic import ValidationError

    from planner.hardware import ComputeUnit
    with pytest.raises(ValidationError, match="sm_count_source"):
        ComputeUnit(name="gpu", kind="gpu", peak_tflops={"bf16": 100.0}, source="datasheet", sm_count=132)
    assert ComputeUnit(name="gpu", kind="gpu", peak_tflops={"bf16": 100.0}, source="datasheet").sm_count is None


def test_fp8_gemm_pays_the_measured_launch_cost_bf16_does_not():
    """regimes.yaml launch_us (median t0 of aiconfigurator's GEMM tables): fp8 13.669 us, bf16 3.389 us. An fp8 weight
    GEMM on an H100 costs 13.669 - 3.389 = 10.28 us more per launch than the engine's per-op overhead (activation
    quantization and scaling); a bf16 GEMM and any non-GEMM op pay only the engine's overhead."""
    from planner.hardware import Efficiency, load_hardware
    from planner.ops import VECTOR, OpCost
    from planner.quantization import weight_format
    from planner.roofline import device_model, time_ops

    g = regimes.regime_constants().gemm
    assert g.launch_us["fp8"] == pytest.approx(13.669) and g.launch_us["bf16"] == pytest.approx(3.389)
    assert g.extra_launch_s("fp8") == pytest.approx(10.28e-6)
    assert g.extra_launch_s("bf16") == 0.0 and g.extra_launch_s("fp16") == 0.0
    spec = load_hardware("h100-sxm")
    eff = Efficiency(bandwidth_fraction=0.8, compute_fraction=0.7, kernel_overhead_us=3.0)
    gemm = OpCost("mlp", "decode", 2, 2 * 1e8, 1e8, 0.0)   # two launches
    norm = OpCost("norm", "decode", 2, 1e4, 0.0, 1e4, compute=VECTOR)
    for fmt, extra in (("fp8", 10.28e-6), ("bf16", 0.0)):
        dev = device_model(spec, spec.units[0], weight_format(fmt), eff)
        ot_gemm, ot_norm = time_ops([gemm, norm], dev)
        assert float(ot_gemm.overhead_s) == pytest.approx(2 * (3e-6 + extra), rel=1e-9)
        assert float(ot_norm.overhead_s) == pytest.approx(2 * 3e-6, rel=1e-9)


def test_an_engine_with_its_own_kernel_tables_takes_its_library_constants():
    """regimes.yaml libraries (aiconfigurator's gemm/vllm tables fitted at the shared shape): vLLM's fp8 GEMM costs
    7.687 - 3.628 = 4.059 us beyond its bf16 one (TensorRT-LLM's 10.28 us) and its tiles run at 0.4206 of the fp8
    peak (H100 SXM 1,979 TFLOP/s: 832.4 TFLOP/s); an fp8 GEMM of one row and 1e8 bytes on an H100 under a vLLM
    efficiency set then pays 2 x (3 + 4.059) us of overhead for two launches. An engine without tables (llama.cpp)
    and one that names TensorRT-LLM keep the default constants."""
    from planner.hardware import Efficiency, load_hardware
    from planner.ops import OpCost
    from planner.quantization import weight_format
    from planner.roofline import device_model, time_ops

    g = regimes.regime_constants().gemm
    assert regimes.kernel_library("vllm") == "vllm" and regimes.kernel_library("sglang") == "sglang"
    assert regimes.kernel_library("llamacpp") == "" and regimes.kernel_library(None) == ""
    lib = g.libraries["vllm"]
    assert lib.launch_us["fp8"] == pytest.approx(7.687) and lib.launch_us["bf16"] == pytest.approx(3.628)
    assert g.for_library("vllm").extra_launch_s("fp8") == pytest.approx(4.059e-6)
    assert g.for_library("vllm") is g.for_library("vllm")  # one object: device models stay cached by identity
    assert g.for_library("llamacpp") is g
    spec = load_hardware("h100-sxm")
    gemm = OpCost("mlp", "decode", 2, 2 * 1e8, 1e8, 0.0)
    for library, extra, share in (("vllm", 4.059e-6, 0.4206), ("", 10.28e-6, 0.5362), ("trtllm", 10.28e-6, 0.5362)):
        eff = Efficiency(bandwidth_fraction=0.8, compute_fraction=0.7, kernel_overhead_us=3.0, kernel_library=library)
        dev = device_model(spec, spec.units[0], weight_format("fp8"), eff)
        assert dev.gemm_launch_s == pytest.approx(extra, rel=1e-9)
        assert dev.kernel_peak_flops == pytest.approx(spec.units[0].peak_tflops["fp8"] * 1e12 * share, rel=1e-9)
        assert float(time_ops([gemm], dev)[0].overhead_s) == pytest.approx(2 * (3e-6 + extra), rel=1e-9)
    assert spec.units[0].peak_tflops["fp8"] * 0.4206 == pytest.approx(832.4, abs=0.5)
    # the text names the library only where the regime applies (NVIDIA units with an SM count)
    from planner.report import estimate_text
    on, off = estimate("llama-3.1-8b", "h100-sxm", runtime="vllm"), estimate("llama-3.1-8b", "gaudi-2", runtime="vllm")
    assert on.roofline.gemm_regime and not off.roofline.gemm_regime
    assert "GEMM regime from vllm's measured kernels" in estimate_text(on)
    assert "GEMM regime from" not in estimate_text(off)


def test_grouped_compute_ratio_is_the_median_of_moe_over_dense_fractions():
    """regimes.yaml grouped_compute_ratio = median over the tables measured both ways of f_moe / f_dense: the ten
    committed pairs (provenance.fit) give b200 bf16 0.5097 / 0.7073, ..., h100 bf16 0.6371 / 0.814 = 0.7827, ...;
    sorted, the middle two are 0.7827 (h100 bf16) and 0.7854 (l40s fp8): median 0.784."""
    from planner.accuracy.kernel_tables import grouped_compute_ratio

    c = regimes.regime_constants()
    fit = c.provenance["fit"]
    assert grouped_compute_ratio(fit) == pytest.approx(c.gemm.grouped_compute_ratio, abs=1e-4)
    assert c.gemm.grouped_compute_ratio == pytest.approx(0.784, abs=1e-4)
    assert regimes.grouped_compute_ratio() == c.gemm.grouped_compute_ratio
    toy = {"gemm": {"tables": {"a/bf16": {"compute_fraction": 0.8}, "b/bf16": {"compute_fraction": 0.5}}},
           "moe": {"tables": {"a/bf16": {"compute_fraction": 0.6}, "b/bf16": {"compute_fraction": 0.45},
                              "c/bf16": {"compute_fraction": 0.3}}}}  # c has no dense table: not a pair
    assert grouped_compute_ratio(toy) == pytest.approx((0.75 + 0.9) / 2)
    assert grouped_compute_ratio({"gemm": {"tables": {}}}) is None


def test_expert_gemm_computes_at_the_grouped_ratio_of_the_dense_rate():
    """A compute-bound bf16 expert GEMM (moe_experts, 8192 tokens x 4 of 64 experts = 512 rows per expert: whole
    64-row tiles) on an H100 SXM, engine fraction 0.7: t_c = flops / (989.4e12 x 0.7 x 0.784); the same op named
    as a dense MLP runs at flops / (989.4e12 x 0.7). On an AMD MI300X (no fitted regime) the ratio applies too."""
    from planner.hardware import Efficiency, load_hardware
    from planner.ops import OpCost
    from planner.quantization import weight_format
    from planner.roofline import device_model, time_ops

    r = regimes.grouped_compute_ratio()
    flops, nbytes = 2 * 8192 * 4 * 3 * 4096 * 14336 / 8, 64 * 3 * 4096 * 14336 * 2 / 8
    eff = Efficiency(bandwidth_fraction=0.8, compute_fraction=0.7)
    spec = load_hardware("h100-sxm")
    dev = device_model(spec, spec.units[0], weight_format("bf16"), eff)
    expert = OpCost("moe_experts", "prefill", 1, flops, nbytes, 0.0)
    dense = OpCost("mlp", "prefill", 1, flops, nbytes, 0.0)
    (te,), (td,) = time_ops([expert], dev), time_ops([dense], dev)
    t_m = nbytes / (3350e9 * 0.8)
    for ot, rate in ((te, 989.4e12 * 0.7 * r), (td, 989.4e12 * 0.7)):
        t_c = flops / rate
        assert float(ot.time_s) == pytest.approx((t_c ** 2.5 + t_m ** 2.5) ** 0.4, rel=1e-9)
    amd = load_hardware("mi300x")
    dev = device_model(amd, amd.units[0], weight_format("bf16"), eff)
    (te,), (td,) = time_ops([expert], dev), time_ops([dense], dev)
    assert float(te.compute_s) == pytest.approx(float(td.compute_s) / r, rel=1e-9)


def test_grouped_width_efficiency_by_hand():
    """w / (w + kappa x P): Qwen3-235B's experts (I = 1,536) on an H100 SXM (989.4 TFLOP/s bf16), kappa 0.7:
    whole (TP1) 1,536 / (1,536 + 692.58) = 0.6892; at TP8 (w = 192) 192 / 884.58 = 0.2171, 0.315 of the TP1 rate
    (the measured TensorRT-LLM table: 0.222 / 0.639 = 0.347). A slower GPU loses less: an L40S (362.05 TFLOP/s)
    at TP8 192 / (192 + 253.4) = 0.431. Width 0 (not known) or kappa 0: 1."""
    assert regimes.grouped_width_efficiency(1536.0, 989.4, 0.7) == pytest.approx(1536 / (1536 + 692.58), rel=1e-12)
    assert regimes.grouped_width_efficiency(192.0, 989.4, 0.7) == pytest.approx(0.21705, rel=1e-4)
    assert regimes.grouped_width_efficiency(192.0, 362.05, 0.7) == pytest.approx(0.43105, rel=1e-4)
    assert regimes.grouped_width_efficiency(0.0, 989.4, 0.7) == 1.0
    assert regimes.grouped_width_efficiency(192.0, 989.4, 0.0) == 1.0
    arr = regimes.grouped_width_efficiency(np.array([0.0, 192.0, 1536.0]), np.array([989.4, 989.4, 989.4]), 0.7)
    assert arr == pytest.approx([1.0, 0.21705, 0.68923], rel=1e-4)


def test_committed_width_model_comes_from_the_width_fit():
    """regimes.yaml grouped_wide_ratio = the width fit's MoE f over the dense f, median over the bf16 tables
    (kernel_tables.grouped_wide_ratio on the committed provenance); kappa is the fit's; the width fit beats the same
    rows without the width term by far (median |log error| 0.124 vs 0.199)."""
    from planner.accuracy.kernel_tables import grouped_wide_ratio

    c = regimes.regime_constants()
    fit = c.provenance["fit"]
    assert grouped_wide_ratio(fit) == pytest.approx(c.gemm.grouped_wide_ratio, abs=1e-4)
    assert c.gemm.grouped_width_per_tflops == fit["moe_width"]["grouped_width_per_tflops"] == pytest.approx(0.7)
    assert fit["moe_width"]["median_abs_log_error"] < fit["moe_width_without_width"]["median_abs_log_error"] - 0.05
    assert regimes.grouped_width_model() == (c.gemm.grouped_wide_ratio, c.gemm.grouped_width_per_tflops)


def test_expert_gemm_rate_chooses_the_width_model_only_where_it_applies():
    """regimes.expert_gemm_rate, the one rule roofline.time_ops and the fit's predict_time_s share: grouped_wide_ratio
    x w / (w + kappa P) where the regime applies and the width is known, the flat grouped_compute_ratio otherwise;
    per element for arrays."""
    wide, kappa = regimes.grouped_width_model()
    flat = regimes.grouped_compute_ratio()
    g = 192 / (192 + kappa * 989.4)
    assert regimes.expert_gemm_rate(192.0, 989.4, True) == pytest.approx(wide * g, rel=1e-12)
    assert regimes.expert_gemm_rate(192.0, 989.4, False) == flat
    assert regimes.expert_gemm_rate(0.0, 989.4, True) == flat
    assert regimes.expert_gemm_rate(192.0, 989.4, np.True_) == pytest.approx(wide * g, rel=1e-12)
    arr = regimes.expert_gemm_rate(np.array([192.0, 192.0, 0.0]), 989.4, np.array([True, False, True]))
    assert arr == pytest.approx([wide * g, flat, flat], rel=1e-12)


def test_expert_gemm_width_term_where_the_regime_applies():
    """A compute-bound bf16 expert GEMM of per-GPU width 192 (OpCost.expert_width) on an H100 SXM, engine fraction
    0.7: t_c = flops / (989.4e12 x 0.7 x grouped_wide_ratio x 192 / (192 + 0.7 x 989.4)); the same op at width
    1,536 computes 3.18x as fast. On an MI300X (no fitted regime) the flat grouped ratio applies whatever
    the width."""
    from planner.hardware import Efficiency, load_hardware
    from planner.ops import OpCost
    from planner.quantization import weight_format
    from planner.roofline import device_model, time_ops

    wide, kappa = regimes.grouped_width_model()
    flops, nbytes = 2 * 8192 * 8 * 3 * 4096 * 192, 128 * 3 * 4096 * 192 * 2
    eff = Efficiency(bandwidth_fraction=0.8, compute_fraction=0.7)
    spec = load_hardware("h100-sxm")
    dev = device_model(spec, spec.units[0], weight_format("bf16"), eff)
    narrow = OpCost("moe_experts", "prefill", 1, flops, nbytes, 0.0, expert_width=192.0)
    broad = OpCost("moe_experts", "prefill", 1, flops, nbytes, 0.0, expert_width=1536.0)
    (tn,), (tb,) = time_ops([narrow], dev), time_ops([broad], dev)
    g = 192 / (192 + kappa * 989.4)
    t_c, t_m = flops / (989.4e12 * 0.7 * wide * g), nbytes / (3350e9 * 0.8)
    assert float(tn.time_s) == pytest.approx((t_c ** 2.5 + t_m ** 2.5) ** 0.4, rel=1e-9)
    t_cb = flops / (989.4e12 * 0.7 * wide * 1536 / (1536 + kappa * 989.4))
    assert float(tb.time_s) == pytest.approx((t_cb ** 2.5 + t_m ** 2.5) ** 0.4, rel=1e-9)
    assert t_c / t_cb == pytest.approx(3.1754, rel=1e-4)
    amd = load_hardware("mi300x")
    dev = device_model(amd, amd.units[0], weight_format("bf16"), eff)
    (ta,), (ta0,) = time_ops([narrow], dev), time_ops([dataclasses.replace(narrow, expert_width=0.0)], dev)
    assert float(ta.compute_s) == float(ta0.compute_s)
    assert float(ta.compute_s) == pytest.approx(flops / (1307.4e12 * 0.7 * regimes.grouped_compute_ratio()), rel=1e-9)


def test_explain_gives_the_expert_gemms_share_of_the_peak():
    """`estimate --explain` for Qwen3-235B-A22B bf16 at TP8 on H100s under the vLLM profile: a compute-bound prefill
    of 64 x 2,048 tokens puts the routed-expert GEMMs at compute_fraction x grouped_wide_ratio x 192 / (192 + kappa
    x 989.4) of the peak (0.53 x 0.991 x 0.217 = 11.4%; the ridge roll-off adds < 1%), the other weight GEMMs near
    the engine's own fraction."""
    from planner.report import explain, explain_text

    e = estimate("qwen3-235b-a22b", "h100-sxm", "bf16", batch=64, prompt=2048, output=16, tp=8, runtime="vllm")
    wide, kappa = regimes.grouped_width_model()
    x = explain(e)["prefill"]
    cf = e.efficiency.compute_fraction
    assert x["expert_gemm_compute_share"] == pytest.approx(cf * wide * 192 / (192 + kappa * 989.4), rel=0.01)
    assert x["other_gemm_compute_share"] == pytest.approx(cf, rel=0.05)
    assert "split" in explain_text(e) and "grouped_width_efficiency" in explain_text(e)
    dense = estimate("llama-3.1-8b", "h100-sxm", "bf16", batch=8, prompt=1024, runtime="vllm")
    assert "expert_gemm_compute_share" not in explain(dense)["prefill"]


def test_tensor_parallelism_narrows_the_experts_and_expert_parallelism_does_not():
    """Qwen3-235B-A22B (expert_intermediate_size 1,536): the moe_experts op is 1,536 wide on one GPU, 192 per GPU
    under TP8 (parallelism.split_ops); every other op has no width."""
    from planner.architecture import load_model
    from planner.ops import step_ops
    from planner.quantization import weight_format
    from planner.serving.parallelism import split_ops

    m = load_model("qwen3-235b-a22b")
    ops = step_ops(m, weight_format("bf16"), "bf16", "prefill", 1, 512, 0)
    (moe,) = [o for o in ops if o.name == "moe_experts"]
    assert moe.expert_width == m.moe.expert_intermediate_size == 1536
    assert all(o.expert_width == 0.0 for o in ops if o.name != "moe_experts")
    (moe8,) = [o for o in split_ops(ops, m, 8) if o.name == "moe_experts"]
    assert moe8.expert_width == 192.0


def test_weight_only_formats_take_the_regime_only_under_mixed_input_kernels():
    assert regimes.gemm_regime_for("NVIDIA", 108, "mxfp4", "bf16") is None  # the engine's own R / (R + half) shape
    assert regimes.gemm_regime_for("NVIDIA", 108, "mxfp4", "bf16", mixed_input=True) is not None
    assert regimes.gemm_regime_for("AMD", 304, "gptq-int4", "fp16", mixed_input=True) is None  # unmeasured kernels


def test_mixed_input_weight_only_gemm_by_hand():
    """One MXFP4 expert GEMM at decode on an A100 80GB SXM (bf16 312 TFLOP/s, 2,039 GB/s): 1 token per expert, 1e8
    parameters = 2e8 flops and 1e8 x 4.25 / 8 = 53.125 MB. Engine fractions 0.8 / 0.7, compute_half_rows 86.

    Marlin-style kernels (weight_only_regime, bandwidth share 0.5): t_m = 53.125e6 / (2039e9 x 0.8 x 0.5) =
    65.1 us; t_c = 2e8 / (312e12 x 0.7 x 0.784) = 1.17 us (the 64-row tile pads nothing below one tile); t =
    (t_c^2.5 + t_m^2.5)^(1/2.5) ~ t_m: memory bound. The engine's shape instead: t_c = 2e8 / (312e12 x 0.7 x
    0.784 x 1 / (1 + 86)) = 102 us against t_m = 32.6 us: compute bound, 3.1x the memory time (what made vLLM's
    gpt-oss-120b on one A100 predict 1.9x slow against GPUStack's measured TPOT, data/pending/README.md)."""
    from planner.hardware import Efficiency, load_hardware
    from planner.ops import OpCost
    from planner.quantization import weight_format
    from planner.roofline import device_model, time_ops

    spec, fmt = load_hardware("a100-80gb-sxm"), weight_format("mxfp4")
    flops, nbytes = 2e8, 1e8 * 4.25 / 8
    op = OpCost("moe_experts", "decode", 1, flops, nbytes, 0.0)
    r = regimes.grouped_compute_ratio()
    base = dict(bandwidth_fraction=0.8, compute_fraction=0.7, compute_half_rows=86.0)
    marlin = device_model(spec, spec.units[0], fmt, Efficiency(**base, weight_only_regime=True,
                                                                 weight_only_bandwidth_share=0.5))
    (ot,) = time_ops([op], marlin)
    t_m, t_c = nbytes / (2039e9 * 0.8 * 0.5), flops / (312e12 * 0.7 * r)
    assert float(ot.time_s) == pytest.approx((t_c ** 2.5 + t_m ** 2.5) ** 0.4, rel=1e-9)
    assert float(ot.time_s) == pytest.approx(65.1e-6, rel=2e-3)
    # the same expert GEMM stored in MXFP4 under a bf16 model (gpt-oss's published layout, OpCost.weight_format):
    # the same kernels, so the same time
    bf16 = device_model(spec, spec.units[0], weight_format("bf16"), Efficiency(**base, weight_only_regime=True,
                                                                               weight_only_bandwidth_share=0.5))
    (ob,) = time_ops([OpCost("moe_experts", "decode", 1, flops, nbytes, 0.0, weight_format="mxfp4")], bf16)
    assert float(ob.time_s) == pytest.approx(float(ot.time_s), rel=1e-12)
    own = device_model(spec, spec.units[0], fmt, Efficiency(**base))
    (ot,) = time_ops([op], own)
    assert float(ot.time_s) == pytest.approx(flops / (312e12 * 0.7 * r / 87), rel=1e-9)
    assert float(ot.time_s) == pytest.approx(101.6e-6, rel=2e-3)


def test_mixed_input_engines_share_the_measured_bandwidth_share():
    """vLLM's NVIDIA class fits weight_only_bandwidth_share from its MXFP4 rows; SGLang and TGI, which have no
    weight-only row, take that measured share (the same kernels), not the prior centre (0.8); llama.cpp does not run
    mixed-input kernels and keeps 1."""
    from planner.accuracy.fit import PRIOR
    from planner.runtimes import load_runtime

    def eff(rt):
        return next(c.efficiency for c in load_runtime(rt).classes if c.vendor == "nvidia")

    vllm = eff("vllm")
    assert vllm.weight_only_regime and 0.3 < vllm.weight_only_bandwidth_share < PRIOR["weight_only_bandwidth_share"]
    for rt in ("sglang", "tgi"):
        assert eff(rt).weight_only_regime
        assert eff(rt).weight_only_bandwidth_share == pytest.approx(vllm.weight_only_bandwidth_share, rel=1e-3)
    assert not eff("llamacpp").weight_only_regime and eff("llamacpp").weight_only_bandwidth_share == 1.0


def test_explain_names_the_mixed_input_share_where_it_applies(capsys):
    """gpt-oss-120b MXFP4 under vLLM on an A100 runs the mixed-input kernels: --explain names their share and the
    bandwidth it gives (the engine's effective bandwidth x the share). Under bf16 (the published layout) its routed
    experts stay MXFP4 and run them too. On an MI300X (no fitted regime for AMD CUs) and for a dense 16-bit model
    the share is 1 and no such line is printed."""
    import json

    from planner.cli import main
    from planner.runtimes import load_runtime

    share = next(c.efficiency for c in load_runtime("vllm").classes
                 if c.vendor == "nvidia").weight_only_bandwidth_share
    args = ["estimate", "-m", "gpt-oss-120b", "-H", "a100-80gb-sxm", "-w", "mxfp4", "--runtime", "vllm", "-b", "4"]
    assert main(args + ["--json"]) == 0
    roof = json.loads(capsys.readouterr().out)["roofline"]
    assert roof["weight_bandwidth_share"] == pytest.approx(share)
    assert main(args + ["--explain"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "Mixed-input" in x)
    assert f"{roof['effective_bandwidth_gbs'] * share:,.0f} GB/s" in line and "mxfp4 weight GEMMs" in line
    assert main(args[:-5] + ["bf16", "--runtime", "vllm", "-b", "4", "--json"]) == 0
    roof = json.loads(capsys.readouterr().out)["roofline"]
    assert roof["weight_bandwidth_share"] == pytest.approx(share)
    assert roof["mixed_input_weights"] == "routed experts (mxfp4)"
    for other in (["-m", "gpt-oss-120b", "-H", "mi300x", "-w", "mxfp4"],
                  ["-m", "llama-3.1-8b", "-H", "a100-80gb-sxm", "-w", "bf16"]):
        a = ["estimate", "--runtime", "vllm", "-b", "4"] + other
        assert main(a + ["--json"]) == 0
        assert json.loads(capsys.readouterr().out)["roofline"]["weight_bandwidth_share"] == 1.0
        assert main(a + ["--explain"]) == 0
        assert "Mixed-input" not in capsys.readouterr().out


def test_gpt_oss_rows_map_to_the_published_layout_except_llamacpp_files():
    """A serving engine's gpt-oss 'mxfp4' row is the published checkpoint: bf16 tensors and MXFP4 experts, the
    planner's bf16 for that model (the experts stay MXFP4: 13.75 GB of weights for gpt-oss-20b, by hand 19.1B expert
    parameters x 4.25 / 8 + the rest x 2 bytes); llama.cpp's MXFP4_MOE files keep their label; other models too."""
    from planner.accuracy.data import published_layout

    assert published_layout("gpt-oss-20b", "mxfp4", "vllm") == "bf16"
    assert published_layout("gpt-oss-120b", "mxfp4", "sglang") == "bf16"
    assert published_layout("gpt-oss-20b", "mxfp4", "llamacpp") == "mxfp4_moe"  # the GGUF: MXFP4_MOE
    assert published_layout("qwen3-30b-a3b", "mxfp4", "vllm") == "mxfp4"
    assert published_layout("gpt-oss-20b", "fp8", "vllm") == "fp8"


def test_an_op_in_its_own_weight_only_format_takes_the_engine_shape_without_mixed_input_kernels():
    """gpt-oss's MXFP4 expert GEMM under a bf16 model on an A100, for an engine without mixed-input kernels
    (llama.cpp-like: weight_only_regime off): the engine's R / (R + half) shape at R = 1 token per expert, rows
    counted at MXFP4's bytes per weight: t = max(2e8 / (312e12 x 0.7 x 0.784 / 87), 53.125e6 / (2039e9 x 0.8)) =
    101.6 us, not the bf16 regime's memory-bound 32.6 us."""
    from planner.hardware import Efficiency, load_hardware
    from planner.ops import OpCost
    from planner.quantization import weight_format
    from planner.roofline import device_model, time_ops

    spec = load_hardware("a100-80gb-sxm")
    dev = device_model(spec, spec.units[0], weight_format("bf16"),
                       Efficiency(bandwidth_fraction=0.8, compute_fraction=0.7, compute_half_rows=86.0))
    flops, nbytes = 2e8, 1e8 * 4.25 / 8
    (ot,) = time_ops([OpCost("moe_experts", "decode", 1, flops, nbytes, 0.0, weight_format="mxfp4")], dev)
    r = regimes.grouped_compute_ratio()
    assert float(ot.time_s) == pytest.approx(max(flops / (312e12 * 0.7 * r / 87), nbytes / (2039e9 * 0.8)), rel=1e-9)
    assert float(ot.time_s) == pytest.approx(101.6e-6, rel=2e-3)


def test_an_op_in_its_own_format_computes_at_the_engines_fraction_not_the_model_formats():
    """vLLM-ROCm's profile lists a compute fraction of its own for bf16 GEMMs (format_compute_fraction); gpt-oss's
    MXFP4 experts under a bf16 model are not bf16 GEMMs: a compute-bound expert op on an MI300X (1,307.4 TFLOP/s
    bf16, no regime: the engine's R / (R + half), half 0 here) takes compute_fraction 0.7 x the grouped ratio, a
    bf16 expert op 0.1 x the grouped ratio."""
    from planner.hardware import Efficiency, load_hardware
    from planner.ops import OpCost
    from planner.quantization import weight_format
    from planner.roofline import device_model, time_ops

    spec = load_hardware("mi300x")
    dev = device_model(spec, spec.units[0], weight_format("bf16"),
                       Efficiency(bandwidth_fraction=0.8, compute_fraction=0.7, format_compute_fraction={"bf16": 0.1}))
    flops, nbytes = 1e15, 1e9
    (own,), (bf16,) = (time_ops([OpCost("moe_experts", "prefill", 1, flops, nbytes, 0.0, weight_format=f)], dev)
                       for f in ("mxfp4", None))
    r, peak = regimes.grouped_compute_ratio(), spec.units[0].peak_tflops["bf16"] * 1e12
    assert float(own.compute_s) == pytest.approx(flops / (peak * 0.7 * r), rel=1e-9)
    assert float(bf16.compute_s) == pytest.approx(flops / (peak * 0.1 * r), rel=1e-9)


def test_experts_in_a_format_of_their_own_take_that_formats_kernels():
    """llama.cpp's MXFP4_MOE gpt-oss files under the llama.cpp NVIDIA profile on an RTX A5000: the routed experts'
    GEMMs run at the matmul peak x the profile's format_compute_fraction['mxfp4'] and pay no dequantization factor
    (MXFP4 has none fitted), the other GEMMs at compute_fraction with Q8_0's fitted dequantization cost (the format's
    kernel_name); a format the profile lists no fraction for takes compute_fraction."""
    from planner.hardware import load_hardware
    from planner.quantization import weight_format
    from planner.roofline import TERA, device_model
    from planner.runtimes import load_runtime

    spec = load_hardware("rtx-a5000")
    unit = spec.units[0]
    eff = load_runtime("llamacpp").for_unit(spec, unit).efficiency
    dev = device_model(spec, unit, weight_format("mxfp4_moe"), eff)
    peak = dev.peak_tflops["matmul"] * TERA
    assert dev.own_format_flops("mxfp4") == pytest.approx(peak * eff.format_compute_fraction["mxfp4"], rel=1e-12)
    assert dev.own_format_dequant("mxfp4") == 1.0
    assert dev.dequant_factor == pytest.approx(1.0 + eff.dequant_overhead["q8_0"], rel=1e-12)
    assert dev.own_format_flops("nvfp4") == pytest.approx(peak * eff.compute_fraction, rel=1e-12)
    assert dev.own_format_dequant("q4_0") == pytest.approx(1.0 + eff.dequant_overhead["q4_0"], rel=1e-12)
    # the estimate names the experts' format and the report its fraction
    from planner.estimate import estimate
    from planner.report import estimate_text

    e = estimate("gpt-oss-20b", "rtx-a5000", "mxfp4_moe", runtime="llamacpp")
    assert e.expert_weights == "mxfp4" and estimate("llama-2-7b", "rtx-a5000").expert_weights is None
    assert f"({eff.format_compute_fraction['mxfp4']:.2f} for the mxfp4 expert GEMMs)" in estimate_text(e)


def test_blackwell_sms_stream_more_than_the_caps_were_fitted_on():
    """regimes.sm_streaming_scale: NVIDIA's decode-attention kernels stream 47.62 GB/s per SM on a B200 (92% of 7.7
    TB/s over 148 SMs) against 27.56 on the H200, the fastest GPU with published runs in the data; so a per-SM cap
    fitted in GB/s per SM on those GPUs (TensorRT-LLM 30.28) scales by 47.62 / 27.56 = 1.728 on the B200, and the
    TensorRT-LLM profile's effective bandwidth there is min(0.9498 x 7,700, 148 x 30.28 x 1.728) = 7,313 GB/s
    (was 4,481: 58% of the datasheet, where the same kernels measured reach 92%). Every GPU the caps were fitted
    on keeps a scale of 1."""
    from planner.hardware import load_hardware
    from planner.roofline import device_model, select_unit
    from planner.runtimes import load_runtime
    from planner.quantization import weight_format

    st = regimes.regime_constants().sm_streaming
    assert st.reference_gbs_per_sm == max(st.gbs_per_sm[s] for s in st.reference_systems) == st.gbs_per_sm["h200-sxm"]
    assert regimes.sm_streaming_scale("b200") == pytest.approx(st.gbs_per_sm["b200"] / st.gbs_per_sm["h200-sxm"])
    assert regimes.sm_streaming_scale("b200") == pytest.approx(47.62 / 27.56, rel=1e-3)
    assert all(regimes.sm_streaming_scale(s) == 1.0 for s in st.reference_systems)
    assert regimes.sm_streaming_scale("rtx-4090") == 1.0  # no table measured it
    spec, fmt = load_hardware("b200"), weight_format("fp8")
    u = select_unit(spec, fmt)
    eff = load_runtime("trtllm").for_unit(spec, u).efficiency
    dev = device_model(spec, u, fmt, eff)
    want = min(eff.bandwidth_fraction * 7700, 148 * eff.sm_bandwidth_gbs * 47.62 / 27.56) * 1e9
    assert dev.eff_bandwidth_bytes_s == pytest.approx(want, rel=1e-3)
    assert dev.eff_bandwidth_bytes_s > 1.5 * 148 * eff.sm_bandwidth_gbs * 1e9


def test_the_streaming_reference_covers_every_fitted_gpu_with_a_table():
    """The reference of sm_streaming_scale must hold every GPU with published rows in the fitted data that a table
    measured, so that the leave-one-source-out predictions (scale 1 on those GPUs) are what the profiles predict."""
    import pandas as pd
    from pathlib import Path

    st = regimes.regime_constants().sm_streaming
    rows = pd.read_csv(Path(__file__).resolve().parents[2] / "reports" / "accuracy_rows.csv", usecols=["hardware"])
    measured = set(rows["hardware"]) & set(st.gbs_per_sm)
    assert measured and measured <= set(st.reference_systems)
