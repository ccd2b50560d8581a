"""The pieces under the accuracy benchmark: row mapping, the flat op table agreeing with the planner's own path,
runtime profiles in `estimate`, the new Efficiency fields being neutral by default, new catalog entries."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from planner import estimate
from planner.accuracy.benchmark import committed_profiles, prepare
from planner.accuracy.data import DATA_PATH, HARDWARE_IDS, load_rows
from planner.accuracy.predict import (closed_loop_waits, kv_concurrency, params_for_rows, predict_time_s,
                                      steps_of_row)
from planner.architecture import load_model
from planner.cli import main
from planner.errors import PlannerError
from planner.hardware import Efficiency, load_hardware
from planner.latency import decode_sum_s, prefill_time_s
from planner.ops import decode_ops, prefill_ops
from planner.quantization import weight_format
from planner.roofline import device_model, effective_bandwidth_bytes_s, fp16_accumulate_peak, select_unit, time_ops
from planner.runtimes import REQUEST_PATH_MS, load_runtime, parse_runtime


@pytest.fixture(scope="module")
def prepared():
    return prepare()


def test_every_published_row_is_mapped_or_listed_with_a_reason():
    from planner.accuracy.serving_rows import SERVING_PATH
    raw = pd.read_csv(DATA_PATH)
    serving = pd.read_csv(SERVING_PATH)
    mapped, unmapped = load_rows()
    # +288 public, +32 +9 +48 +40 serving (session 36: GPUStack's Qwen3-8B latency document); +12 public (session 39:
    # gpt-oss MXFP4 on NVIDIA from three llama.cpp pull requests)
    assert len(mapped) + len(unmapped) == len(raw) + len(serving) == 1044 + 647
    for name, n in (("measured_public.csv", len(raw)), ("measured_serving.csv", len(serving))):
        rows = set(mapped.loc[mapped["file"] == name, "row"]) | set(unmapped.loc[unmapped["file"] == name, "row"])
        assert rows == set(range(n))
    assert all(len(r) > 10 for r in unmapped["reason"])
    # measured_public: every row maps; every device label has a catalog id ('Nx ...' through the 1-GPU label)
    assert not (unmapped["file"] == "measured_public.csv").any()
    labels = {h.split("x ", 1)[1] if h[0].isdigit() else h for h in raw["hardware"]}
    assert labels <= set(HARDWARE_IDS)
    # tensor-parallel rows of measured_public: 'Nx' labels (gpt-fast) and 'TP=N' notes (TRT-LLM): 160 rows, TP 2/4/8
    # (66 before the TRT-LLM v0.9.0 / v0.6.1 / H200-blog rows: +69, +24, +1)
    pub = mapped[mapped["file"] == "measured_public.csv"]
    assert (pub["tp"] > 1).sum() == 160 and set(pub.loc[pub["tp"] > 1, "tp"]) == {2, 4, 8}


def _planner_path_time(r: dict, eff: Efficiency) -> float:
    """The row's time through planner.latency (the functions `estimate` uses), step by step."""
    m, fmt, spec = load_model(r["model"]), weight_format(r["weights"]), load_hardware(r["hardware"])
    eff = eff.model_copy(update={"kv_read_per_query_head": bool(r["kv_per_query_head"])})  # the row's build's kernel
    dev = device_model(spec, select_unit(spec, fmt, r["unit"]), fmt, eff)
    kv, fa = r["kv_dtype"], bool(r["flash_attention"])
    if r["tp"] > 1:
        return None
    if r["metric"] == "decode_tok_s_per_seq":    # steps at contexts P .. P+O-1 = decode_sum_s with O+1 outputs
        return _decode_midpoint(m, fmt, kv, dev, 1, r["prompt"], r["output"] + 1, fa)
    if r["metric"] == "prefill_tok_s":
        ub, d = r["ubatch"], r["depth"]
        return sum(float(prefill_time_s(m, fmt, kv, dev, 1, min(ub, d + r["prompt"] - s), s, fa))
                   for s in range(d, d + r["prompt"], ub))
    if r["metric"] == "ttft_ms":  # through an engine's HTTP server (single / queue / burst runs): + its request path
        served = r["ttft_mode"] in ("single", "queue", "burst")
        return float(prefill_time_s(m, fmt, kv, dev, 1, r["prompt"], 0, fa)) + (
            REQUEST_PATH_MS.get(r["runtime"], 0.0) / 1e3 if served else 0.0)
    if r["kind"] != "throughput" or r["file"] != "measured_public.csv":
        return None
    B, P, O = r["batch"], r["prompt"], r["output"]
    return float(prefill_time_s(m, fmt, kv, dev, B, P, 0, fa)) + _decode_midpoint(m, fmt, kv, dev, B, P, O, fa)


def _decode_midpoint(m, fmt, kv, dev, B, P, O, fa) -> float:
    """The fit's flat table integrates decode by the midpoint rule over 32 bins (predict.DECODE_SAMPLES), the
    planner in closed form (latency.decode_sum_s): the two agree exactly on every linear piece and differ only where
    a bin holds a compute/memory crossing. The table is compared with the planner's own midpoint rule (1e-9), and
    that with the closed form (1e-3)."""
    from planner.latency import _decode_sum_sampled, decode_step_time_s

    mid = float(_decode_sum_sampled(B, P, O, 32, lambda b, past: decode_step_time_s(m, fmt, kv, dev, b, past, fa),
                                    False))
    assert math.isclose(mid, float(decode_sum_s(m, fmt, kv, dev, B, P, O, fa)), rel_tol=1e-3)
    return mid


def test_flat_op_table_matches_the_planner_path(prepared):
    """The fit's vectorized table (planner/accuracy/predict.py) is the planner's roofline, not a copy that could
    drift: one row per (runtime, class, metric, format), timed both ways under the fitted profiles."""
    df, _, d = prepared
    profiles = committed_profiles(df)
    sample = df.groupby(["runtime", "hw_class", "metric", "weights", "kv_per_query_head", "flash_attention"]).head(1)
    hopper_sync = df[(df["runtime"] == "llamacpp") & df["hardware"].str.startswith("h100")]  # mma_sync_share
    assert len(hopper_sync) > 0
    sample = pd.concat([sample, hopper_sync.groupby(["metric", "weights"]).head(1)])
    effs = [profiles[r["runtime"]].for_unit(load_hardware(r["hardware"]),
                                            load_hardware(r["hardware"]).unit(r["unit"])).efficiency
            for r in df.to_dict("records")]
    t_flat = predict_time_s(d, params_for_rows(d, effs))
    checked = 0
    for i, r in zip(sample.index, sample.to_dict("records")):
        if _planner_path_time(r, effs[i]) is None:
            continue
        checked += 1
        assert math.isclose(t_flat[i], _planner_path_time(r, effs[i]), rel_tol=1e-9), r
    assert checked >= 10


def test_tensor_parallel_rows_match_tp_step_time(prepared):
    """TP rows of the flat table equal planner.serving.parallelism.tp_step_time_s step by step (per-GPU ops plus two
    ring all-reduces per layer), e.g. LMDeploy Llama-2-70B on 4 x A100 and vLLM 405B on 8 x MI300X."""
    from planner.serving.parallelism import node_for, tp_step_time_s
    df, _, d = prepared
    profiles = committed_profiles(df)
    sample = df[df["tp"] > 1].groupby(["source", "kind", "kv_per_query_head"]).head(1)
    effs = [profiles[r["runtime"]].for_unit(load_hardware(r["hardware"]),
                                            load_hardware(r["hardware"]).unit(r["unit"])).efficiency
            for r in df.to_dict("records")]
    t_flat = predict_time_s(d, params_for_rows(d, effs))
    for i, r in zip(sample.index, sample.to_dict("records")):
        spec = load_hardware(r["hardware"])
        fmt = weight_format(r["weights"])
        eff = effs[i].model_copy(update={"kv_read_per_query_head": bool(r["kv_per_query_head"])})
        dev = device_model(spec, spec.unit(r["unit"]), fmt, eff)
        link = node_for(spec).intra_link()
        steps, _ = steps_of_row(r)
        t = sum(w * float(tp_step_time_s(load_model(r["model"]), fmt, r["kv_dtype"], dev, st, B, S, P, r["tp"], link,
                                         True, r["identical_sequences"] in (True, 1))) for st, B, S, P, w in steps)
        if r["kind"] == "ttft" and r["ttft_mode"] in ("single", "queue", "burst"):  # the server's request path
            t += REQUEST_PATH_MS.get(r["runtime"], 0.0) / 1e3
        assert math.isclose(t_flat[i], t, rel_tol=1e-9), r


def test_serving_metric_steps_follow_their_definitions():
    """Queue mode (dstack, N requests at once): 64 prompts of 10,000 tokens = 640,000 tokens in k = ceil(640000 /
    8192) = 79 prefill steps run in order; request i has its first token when step ceil(10000 i / 8192) ends, so the
    mean TTFT is t(prefill) x sum_i ceil(10000 i / 8192) / (64 x 79) (the loop below, by hand: 2571 / 5056), and TPOT
    adds the remaining share over O - 1 = 99 steps. A lone 128,000-token prompt (16 steps) is all prefilled before
    its first token: TTFT = the whole prefill, no TPOT stall. e2e (benchmark_latency): prefill then O - 1 = 2047
    decode steps (32 samples of weight 2047/32)."""
    share = sum(math.ceil(10000 * i / 8192) for i in range(1, 65)) / (64 * 79)
    assert share == pytest.approx(2571 / 5056)
    r = {"kind": "ttft", "batch": 64, "prompt": 10000, "output": 100, "ttft_mode": "queue"}
    steps, work = steps_of_row(r)
    assert work == 0 and steps == [("prefill", 64, 10000, 0, pytest.approx(share))]
    steps, _ = steps_of_row({**r, "kind": "tpot"})
    assert steps[0] == ("decode", 64, 1, 10050, 1.0)
    assert steps[1][4] == pytest.approx((1 - share) / 99)
    # a median inter-token latency (itl_ms) of the same wave is one decode step: the stalled steps are a few of O - 1
    assert steps_of_row({**r, "kind": "tpot", "metric": "itl_ms"})[0] == [("decode", 64, 1, 10050, 1.0)]
    lone = {"kind": "ttft", "batch": 1, "prompt": 128000, "output": 150, "ttft_mode": "queue"}
    assert steps_of_row(lone)[0] == [("prefill", 1, 128000, 0, 1.0)]
    assert steps_of_row({**lone, "kind": "tpot"})[0] == [("decode", 1, 1, 128075, 1.0)]
    steps, work = steps_of_row({"kind": "e2e", "batch": 8, "prompt": 128, "output": 2048})
    assert work == 0 and steps[0] == ("prefill", 8, 128, 0, 1.0) and len(steps) == 33
    assert sum(s[4] for s in steps[1:]) == pytest.approx(2047)
    steps, work = steps_of_row({"kind": "throughput", "batch": 8, "prompt": 128, "output": 2048, "work_div": 1})
    assert work == 8 * 2048


def test_fixed_length_bench_serve_runs_are_waves_of_simultaneous_prefills(prepared):
    """`vllm bench serve --request-rate inf --max-concurrency N` with fixed lengths runs in waves: the N requests start
    together and finish together. The H200 dashboard run (640 prompts, 1024/1024, concurrency 64, 71.1 s = 10 waves of
    0.33 s TTFT + 1,023 steps of 6.6 ms) and the Arc Pro B60 runs (N x P = 76,800-102,400 prompt tokens each, TTFT
    7.6-8.6 s whatever N and P) are the queue case: 64 x 1024 = 65,536 tokens in k = 8 steps of 8,192, mean TTFT =
    t(prefill 64 x 1024) x 9/16. The FP8-KV blog's lengths vary by +-15%, so its requests fall out of step: single."""
    df = prepared[0]
    modes = df.groupby("source")["ttft_mode"].first()
    assert modes["vllm_perf_dashboard_h200_gptoss120b_2026-02"] == "queue"
    assert modes["vllm_blog_intel_arc_pro_b60_2025-11"] == "queue"
    assert modes["vllm_blog_fp8_kvcache_2026-04"] == "single"
    # silybench: exact lengths (--ignore-eos), a closed loop of N users: waves too (its rows are median ITL and
    # output tok/s, so the wave shows only in the throughput's prefill of N prompts per cycle)
    assert modes["silybench_qwen3_8b_h100sxm_vllm0.30_2026-09"] == "queue"
    r = df[(df["source"] == "vllm_perf_dashboard_h200_gptoss120b_2026-02") & (df["kind"] == "ttft")].iloc[0]
    steps, work = steps_of_row(r.to_dict())
    assert work == 0 and steps == [("prefill", 64, 1024, 0, pytest.approx(9 / 16))]
    assert 640 / 64 * (0.334 + 1023 * 6.62e-3) == pytest.approx(71.1, rel=0.03)  # the run's own duration


def test_row_steps_follow_the_benchmark_definitions():
    """llama-bench pp4096 with n_ubatch 512: 8 chunks at pasts 0, 512, ..., 3584; tg128: 32 midpoint samples of
    128 steps (weight 4 each) at contexts floor(4j + 2) = 2, 6, ..., 126."""
    steps, work = steps_of_row({"kind": "prefill_rate", "batch": 1, "prompt": 4096, "output": 0, "ubatch": 512})
    assert work == 4096 and [s[3] for s in steps] == list(range(0, 4096, 512)) and all(s[2] == 512 for s in steps)
    # pp2048 @ d4096 with n_ubatch 2048: one chunk of 2048 tokens attending to 4096 + earlier ones; pp3000 @ d100
    # with n_ubatch 2048: chunks of 2048 and 952 at pasts 100 and 2148
    steps, work = steps_of_row({"kind": "prefill_rate", "batch": 1, "prompt": 2048, "output": 0, "ubatch": 2048,
                                "depth": 4096})
    assert work == 2048 and [(s[2], s[3]) for s in steps] == [(2048, 4096)]
    steps, _ = steps_of_row({"kind": "prefill_rate", "batch": 1, "prompt": 3000, "output": 0, "ubatch": 2048,
                             "depth": 100})
    assert [(s[2], s[3]) for s in steps] == [(2048, 100), (952, 2148)]
    steps, work = steps_of_row({"kind": "decode_rate", "batch": 1, "prompt": 0, "output": 128, "ubatch": 0})
    assert work == 128 and len(steps) == 32 and sum(s[4] for s in steps) == 128
    assert [s[3] for s in steps[:3]] == [2.0, 6.0, 10.0]  # floor((j + 0.5) * 128 / 32) = floor(4j + 2)


def test_new_efficiency_fields_are_neutral_by_default():
    """compute_half_rows = 0, no dequant overhead, no power cap, fp32 accumulation: time_ops gives exactly the
    plain roofline max(flops / (peak x cf), bytes / (bw x bf)) + overhead."""
    m, fmt, spec = load_model("llama-2-7b"), weight_format("q4_0"), load_hardware("rtx-4090")
    base = Efficiency(bandwidth_fraction=0.8, compute_fraction=0.7, kernel_overhead_us=3, step_overhead_ms=0.3)
    dev = device_model(spec, select_unit(spec, fmt), fmt, base)
    for op, ot in zip(prefill_ops(m, fmt, "fp16", 1, 512), time_ops(prefill_ops(m, fmt, "fp16", 1, 512), dev)):
        peak = dev.peak_tflops[op.compute] * 1e12 * 0.7
        want = op.count * (max(float(op.flops) / peak, float(op.bytes) / (1008e9 * 0.8)) + 3e-6)
        assert math.isclose(float(ot.time_s), want, rel_tol=1e-12)


def test_refinements_apply_to_weight_gemms_only():
    """With compute_half_rows = R_half and dequant d, a weight GEMM of R rows runs at cf x R/(R+R_half)/(1+d)."""
    m, fmt, spec = load_model("llama-2-7b"), weight_format("q4_0"), load_hardware("a100-80gb-sxm")
    eff = Efficiency(bandwidth_fraction=1, compute_fraction=1, compute_half_rows=64, dequant_overhead={"q4_0": 0.5})
    dev = device_model(spec, select_unit(spec, fmt), fmt, eff)
    ops = prefill_ops(m, fmt, "fp16", 1, 512)
    for op, ot in zip(ops, time_ops(ops, dev)):
        if op.name == "qkv_proj":  # 512 rows: 312 TFLOP/s x 512 / 576 / 1.5
            assert math.isclose(float(ot.compute_s), op.count * float(op.flops) / (312e12 * 512 / 576 / 1.5),
                                rel_tol=1e-9)
        if op.name == "attn_scores":  # not a weight GEMM: plain peak
            assert math.isclose(float(ot.compute_s), op.count * float(op.flops) / 312e12, rel_tol=1e-9)


def test_fp16_accumulate_peak_from_the_int8_rate():
    """GeForce RTX 4090: fp16 listed at the fp32-accumulate rate 165.2; fp16-accumulate = int8 / 2 = 660.6 / 2 =
    330.3 (Ada whitepaper). A100: fp16 312 = int8 624 / 2, unchanged. Apple M2 Max: no int8 listed, unchanged."""
    assert fp16_accumulate_peak(load_hardware("rtx-4090").unit("gpu"), "fp16") == pytest.approx(330.3)
    assert fp16_accumulate_peak(load_hardware("a100-80gb-sxm").unit("gpu"), "bf16") == pytest.approx(312)
    assert fp16_accumulate_peak(load_hardware("apple-m2-max").unit("gpu"), "fp16") == pytest.approx(13.6)


def test_mma_sync_kernels_reach_half_the_hopper_peak():
    """Hopper lists the wgmma rate, 4096 dense fp16 FLOP/clk/SM (H100 SXM: 132 SMs x 4096 x 1.83 GHz = 989.4
    TFLOPS); an mma.sync runtime (llama.cpp) reaches the A100 SM's 2048, half: matmul 989.45 x 0.5 (fp16
    accumulate: max(989.4, 1978.9 / 2)) and attention 989.4 x 0.5. A wgmma runtime (TensorRT-LLM) keeps the
    listed peaks; an A100 (its listed peak is the mma.sync rate) and the cut-down H20 list no share."""
    from planner.ops import ATTENTION, MATMUL

    h100, fmt = load_hardware("h100-sxm"), weight_format("fp16")
    unit = h100.unit("gpu")
    sync = load_runtime("llamacpp").for_unit(h100, unit).efficiency
    wg = load_runtime("trtllm").for_unit(h100, unit).efficiency
    assert sync.sync_mma and not wg.sync_mma
    d_sync, d_wg = device_model(h100, unit, fmt, sync), device_model(h100, unit, fmt, wg)
    assert d_sync.peak_tflops[MATMUL] == pytest.approx(1978.9 / 2 * 0.5, rel=1e-12)
    assert d_sync.peak_tflops[ATTENTION] == pytest.approx(989.4 * 0.5, rel=1e-12)
    assert d_wg.peak_tflops[MATMUL] == pytest.approx(989.4, rel=1e-12)
    if d_sync.gemm_regime is not None:  # the padded tiles run at the same share
        assert d_sync.kernel_peak_flops == pytest.approx(d_wg.kernel_peak_flops * 0.5, rel=1e-12)
    # the estimate says why its matmul peak is not the listed one (text and JSON), and only then
    e = estimate("llama-3.1-8b", "h100-sxm", "q4_k_m", runtime="llamacpp")
    assert e.roofline.peak_tflops["matmul"] == pytest.approx(989.45 * 0.5, rel=1e-12)
    assert e.roofline.peak_note.startswith("listed 989.4;") and "mma.sync" in e.roofline.peak_note
    assert "fp16 accumulation" not in e.roofline.peak_note  # 1978.9 / 2 vs 989.4 is rounding, not a faster path
    assert "fp16 accumulation runs at int8 / 2 = 330.3" in estimate("llama-3.1-8b", "rtx-4090", "q4_k_m",
                                                                     runtime="llamacpp").roofline.peak_note
    assert estimate("llama-3.1-8b", "h100-sxm", "q4_k_m", runtime="trtllm").roofline.peak_note == ""
    for hw in ("a100-80gb-sxm", "h20", "rtx-4090"):
        spec = load_hardware(hw)
        assert spec.unit("gpu").mma_sync_share is None
        e = load_runtime("llamacpp").for_unit(spec, spec.unit("gpu")).efficiency
        assert device_model(spec, spec.unit("gpu"), fmt, e).peak_tflops[MATMUL] == pytest.approx(
            fp16_accumulate_peak(spec.unit("gpu"), "fp16"), rel=1e-12)


def test_no_runtime_and_datasheet_are_unchanged():
    a = estimate("llama-2-7b", "h100-sxm", "fp16")
    # no runtime: the kind defaults, with the default range (test below), never a runtime profile
    assert a.runtime is None and a.efficiency.source.startswith("default for gpu")
    ds = estimate("llama-2-7b", "h100-sxm", "fp16", efficiency="datasheet")
    ds_rt = estimate("llama-2-7b", "h100-sxm", "fp16", efficiency="datasheet", runtime="trtllm")
    assert ds_rt.decode.latency_ms_per_token == ds.decode.latency_ms_per_token
    assert ds_rt.prefill.latency_ms_low is None


def test_runtime_estimate_carries_the_profile_interval():
    """low = headline x p10, high = headline x p90 for speeds; latencies divide by p90 / p10."""
    e = estimate("llama-2-7b", "apple-m2-max", "q4_0", batch=1, prompt=512, output=128, runtime="llamacpp")
    iv = load_runtime("llamacpp").for_unit(load_hardware("apple-m2-max"), load_hardware("apple-m2-max").unit("gpu"))
    d, p = e.decode, e.prefill
    assert e.roofline.unit == "gpu"  # llama.cpp runs on Metal, not the Neural Engine
    assert d.tokens_per_s_per_sequence_low == pytest.approx(d.tokens_per_s_per_sequence * iv.intervals["decode"].p10)
    assert d.tokens_per_s_per_sequence_high == pytest.approx(d.tokens_per_s_per_sequence * iv.intervals["decode"].p90)
    assert d.latency_ms_per_token_low == pytest.approx(d.latency_ms_per_token / iv.intervals["decode"].p90)
    assert p.tokens_per_s_low == pytest.approx(p.tokens_per_s * iv.intervals["prefill"].p10)
    assert e.end_to_end.latency_s_low < e.end_to_end.latency_s < e.end_to_end.latency_s_high


def test_unknown_runtime_is_a_one_line_error(capsys):
    with pytest.raises(PlannerError, match="unknown runtime 'vllmx'; allowed: deepspeed-mii, exllamav2, gpt-fast, "
                                           "hf-eager, llamacpp, lmdeploy, sglang, tgi, trtllm, vllm"):
        estimate("llama-2-7b", "h100-sxm", runtime="vllmx")
    assert main(["estimate", "-m", "llama-2-7b", "-H", "h100-sxm", "--runtime", "vllmx"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --runtime:") and err.count("\n") == 1


@pytest.mark.parametrize("hw", ["arc-pro-b60", "x86-server-cpu"])
def test_an_engine_on_an_unmeasured_vendor_takes_the_kind_defaults_with_a_widened_range(hw, capsys):
    """llama.cpp on an Intel GPU or on a CPU: no published row covers it, so the estimate runs on the unit's kind
    default efficiency (efficiency.yaml: GPU 0.80 of bandwidth), says so in a warning, and its range is the kind
    defaults' range against published measurements (intervals.yaml) widened x1.3 in log space around its geometric
    centre c = sqrt(p10 p90): p10' = c (p10 / c)^1.3, p90' = c (p90 / c)^1.3."""
    import math

    from planner.hardware import efficiency_defaults
    from planner.runtimes import _default_intervals

    spec = load_hardware(hw)
    e = estimate("llama-2-7b", hw, "q4_0", runtime="llamacpp")
    kind = spec.units[0].kind
    assert e.efficiency.bandwidth_fraction == efficiency_defaults().by_unit_kind[kind].bandwidth_fraction
    assert any(w.startswith(f"llama.cpp has no published measurement on {spec.vendor} {kind} units") for w in e.warnings)
    iv = _default_intervals().intervals["decode"]
    c = math.sqrt(iv.p10 * iv.p90)
    p10, p90 = c * (iv.p10 / c) ** 1.3, c * (iv.p90 / c) ** 1.3
    assert p10 < iv.p10 and p90 > iv.p90
    d = e.decode
    assert d.tokens_per_s_per_sequence_low == pytest.approx(d.tokens_per_s_per_sequence * p10, rel=1e-9)
    assert d.tokens_per_s_per_sequence_high == pytest.approx(d.tokens_per_s_per_sequence * p90, rel=1e-9)
    assert main(["estimate", "-m", "llama-2-7b", "-H", hw, "-w", "q4_0", "--runtime", "llamacpp"]) == 0
    assert "has no published measurement" in capsys.readouterr().err


@pytest.mark.parametrize("rt, name", [("trtllm", "TensorRT-LLM"), ("lmdeploy", "LMDeploy TurboMind"),
                                      ("deepspeed-mii", "DeepSpeed-MII")])
def test_cuda_only_engines_refuse_amd_hardware(rt, name, capsys):
    """TensorRT-LLM, LMDeploy TurboMind and DeepSpeed-FastGen are CUDA code (benchmark.ENGINE_VENDORS): their
    profiles hold no AMD class (the pooled serving family would otherwise give one), and asking for one on an MI300X
    or an R9700 is a one-line error that says so, not an estimate of software that cannot run there."""
    prof = load_runtime(rt)
    assert prof.runs_on == ["nvidia"]
    assert [c.key for c in prof.classes] == ["nvidia-gpu"]
    for hw in ("mi300x", "radeon-ai-pro-r9700"):
        with pytest.raises(PlannerError, match=f"{rt} \\({name}\\) runs on NVIDIA GPUs only, and {hw} is AMD's"):
            estimate("llama-3.1-8b", hw, runtime=rt)
    assert main(["estimate", "-m", "llama-3.1-8b", "-H", "mi300x", "--runtime", rt]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --runtime:") and err.count("\n") == 1
    assert load_runtime("vllm").runs_on == []  # vLLM, SGLang and TGI have ROCm builds
    assert "amd-gpu" in [c.key for c in load_runtime("sglang").classes]


def test_runtime_profile_schema_rejects_unknown_keys():
    data = load_runtime("trtllm").model_dump(mode="json")
    data["classes"][0]["efficiency"]["bandwidth_fractoin"] = 0.9
    with pytest.raises(PlannerError, match="bandwidth_fractoin"):
        parse_runtime(data, "test")


@pytest.mark.parametrize("model_id, published, rel", [
    ("llama-3-8b", 8_030_261_248, 1e-9),     # HF safetensors index, Meta-Llama-3-8B
    ("llama-3-70b", 70_553_706_496, 1e-9),   # HF safetensors index, Meta-Llama-3-70B
    # GPT-J-6B: mesh-transformer-jax README 6,053,381,344; our count omits the LM-head bias (50,400) and the
    # LayerNorm biases it counts differently (~2.5 M, 0.04 %)
    ("gpt-j-6b", 6_053_381_344, 1e-3),
    # Falcon-180B: "180B" nominal (Almazrouei et al. 2023); 179.5 B by the config's shapes
    ("falcon-180b", 180e9, 0.01),
])
def test_new_catalog_models_match_published_counts(model_id, published, rel):
    assert load_model(model_id).total_params == pytest.approx(published, rel=rel)


def test_gptj_and_falcon_use_plain_mlps():
    """GPT-J: fc_in/fc_out of 4 x 4096 with biases, no gate; Falcon-180B: 4 x 14848, GQA with 8 KV heads."""
    g, f = load_model("gpt-j-6b"), load_model("falcon-180b")
    assert (g.mlp_gated, g.intermediate_size, g.mlp_bias, g.num_kv_heads) == (False, 16384, True, 16)
    assert (f.mlp_gated, f.intermediate_size, f.num_kv_heads, f.head_dim) == (False, 59392, 8, 64)


def test_estimate_without_runtime_carries_the_default_range():
    # the kind-default efficiencies carry the p10-p90 of measured / predicted speed over the fit rows
    # (hardware_specs/defaults/intervals.yaml): speed x [p10, p90], latency / [p90, p10]
    from planner.runtimes import _default_intervals

    iv = _default_intervals().intervals
    e = estimate("llama-3.1-8b", "rtx-4090", "q4_k_m", batch=1, prompt=512, output=128)
    d = e.decode
    assert d.tokens_per_s_per_sequence_low == pytest.approx(d.tokens_per_s_per_sequence * iv["decode"].p10)
    assert d.tokens_per_s_per_sequence_high == pytest.approx(d.tokens_per_s_per_sequence * iv["decode"].p90)
    assert e.prefill.latency_ms_low == pytest.approx(e.prefill.latency_ms / iv["prefill"].p90)
    assert e.intervals is not None and e.intervals.runtime.startswith("none")
    # batch 8 decode takes the throughput regime
    e8 = estimate("llama-3.1-8b", "rtx-4090", "q4_k_m", batch=8)
    assert e8.decode.tokens_per_s_total_low == pytest.approx(e8.decode.tokens_per_s_total * iv["throughput"].p10)
    # the plain roofline and a configuration that does not fit carry no range
    assert estimate("llama-3.1-8b", "rtx-4090", efficiency="datasheet").decode.tokens_per_s_total_low is None
    assert estimate("llama-3.1-70b", "rtx-4090").decode.tokens_per_s_total_low is None


def test_sm_bandwidth_cap_by_hand():
    """Efficiency.sm_bandwidth_gbs caps the effective bandwidth at sm_count x GB/s per SM (Little's law): with
    bandwidth_fraction 0.9 and 9 GB/s per SM an A100 80GB (2,039 GB/s, 108 SMs) gets min(1,835.1, 972) = 972 GB/s,
    an RTX 4090 (1,008 GB/s, 128 SMs) min(907.2, 1,152) = 907.2 GB/s (uncapped); a unit without an SM count and a
    cap of 0 are uncapped. A decode step then reads Llama-2-7B's q4_0 weights at 972 GB/s on the A100."""
    eff = Efficiency(bandwidth_fraction=0.9, compute_fraction=0.5, sm_bandwidth_gbs=9.0)
    for hw, want in (("a100-80gb-sxm", 972e9), ("rtx-4090", 907.2e9)):
        spec = load_hardware(hw)
        fmt = weight_format("q4_0")
        dev = device_model(spec, select_unit(spec, fmt), fmt, eff)
        assert math.isclose(dev.eff_bandwidth_bytes_s, want, rel_tol=1e-12), hw
    assert math.isclose(effective_bandwidth_bytes_s(2039.0, eff, 0), 2039e9 * 0.9, rel_tol=1e-12)
    no_cap = Efficiency(bandwidth_fraction=0.9, compute_fraction=0.5)
    assert math.isclose(effective_bandwidth_bytes_s(2039.0, no_cap, 108), 2039e9 * 0.9, rel_tol=1e-12)
    arr = effective_bandwidth_bytes_s(np.array([2039.0, 1008.0, 2039.0]), eff, np.array([108, 128, 0]))
    assert np.allclose(arr, [972e9, 907.2e9, 2039e9 * 0.9], rtol=1e-12)
    # the weight GEMMs of one decode step on the A100 are timed at 972 GB/s
    m, fmt, spec = load_model("llama-2-7b"), weight_format("q4_0"), load_hardware("a100-80gb-sxm")
    dev = device_model(spec, select_unit(spec, fmt), fmt, eff)
    ops = decode_ops(m, fmt, "fp16", 1, 512)
    for op, ot in zip(ops, time_ops(ops, dev)):
        if op.name == "qkv_proj":
            assert math.isclose(float(ot.memory_s), op.count * float(op.bytes) / 972e9, rel_tol=1e-9)


def test_fit_keeps_the_sm_cap_only_where_the_rows_need_it(prepared):
    """The fit's model choice (planner/accuracy/fit.py): rows generated with an SM cap of 9 GB/s per SM on a mix
    of HBM and GDDR GPUs get the cap back (within 3%); the same rows generated without a cap get none (0)."""
    from planner.accuracy.fit import fit_design

    d = _llamacpp_fp16_decode(prepared)
    for cap in (9.0, 0.0):
        synth = _synthetic(d, Efficiency(bandwidth_fraction=0.85, compute_fraction=0.4, kernel_overhead_us=4.0,
                                         step_overhead_ms=0.5, compute_half_rows=16.0, sm_bandwidth_gbs=cap))
        v, _ = fit_design(synth, [], np.zeros(d.n_rows))
        if cap:
            assert math.isclose(v["sm_bandwidth_gbs"], cap, rel_tol=0.03), v
        else:
            assert v["sm_bandwidth_gbs"] == 0.0, v


def _synthetic(d, eff):
    """A copy of design d whose measured times are its predictions under one Efficiency for every row."""
    synth = d.subset(np.ones(d.n_rows, bool))
    synth.measured_time_s = predict_time_s(d, params_for_rows(d, [eff] * d.n_rows))
    return synth


def _llamacpp_fp16_decode(prepared):
    """The design of llama.cpp's fp16 decode rows at batch 1 on NVIDIA GPUs (A100/H100, GeForce, workstation)."""
    df, _, d = prepared
    m = ((df["runtime"] == "llamacpp") & (df["hw_class"] == "nvidia-gpu") & (df["weights"] == "fp16")
         & (df["regime"] == "decode_b1")).to_numpy()
    return d.subset(m)


def test_format_compute_fraction_by_hand():
    """Efficiency.format_compute_fraction replaces compute_fraction for the weight GEMMs of the listed format
    only: on an MI300X (1,307.4 TFLOP/s bf16 dense) with compute_fraction 0.5 and {bf16: 0.1}, a bf16 prefill
    qkv_proj of Llama-2-7B at 512 tokens computes at 130.74 TFLOP/s, its attention at 0.5 x the attention peak;
    fp8 weights keep 0.5."""
    eff = Efficiency(bandwidth_fraction=1.0, compute_fraction=0.5, format_compute_fraction={"bf16": 0.1},
                     regime_curves=False)
    spec, m = load_hardware("mi300x"), load_model("llama-2-7b")
    for fmt_name, frac in (("bf16", 0.1), ("fp8", 0.5)):
        fmt = weight_format(fmt_name)
        dev = device_model(spec, select_unit(spec, fmt), fmt, eff)
        peak = dev.peak_tflops["matmul"] * 1e12
        assert fmt_name != "bf16" or math.isclose(peak, 1307.4e12, rel_tol=1e-12)
        ops = prefill_ops(m, fmt, "fp16", 1, 512)
        for op, ot in zip(ops, time_ops(ops, dev)):
            if op.name == "qkv_proj":
                assert math.isclose(float(ot.compute_s), op.count * float(op.flops) / (peak * frac), rel_tol=1e-12)
            if op.name == "attn_scores":
                want = op.count * float(op.flops) / (dev.peak_tflops["attention"] * 1e12 * 0.5)
                assert math.isclose(float(ot.compute_s), want, rel_tol=1e-12)


def test_own_fraction_formats_needs_two_big_native_formats():
    """A compute fraction of its own goes to every format without a dequant_overhead (fp16, bf16, fp8, mxfp4) with
    >= 10 rows (MIN_FIT_ROWS, what a level needs to be fitted at all) but the most common one; the weight-only
    integer formats and smaller formats share compute_fraction."""
    from planner.accuracy.fit import own_fraction_formats

    assert own_fraction_formats(["fp8"] * 64 + ["bf16"] * 60) == ("bf16",)
    assert own_fraction_formats(["fp8"] * 244 + ["fp16"] * 75 + ["bf16"] * 11) == ("bf16", "fp16")
    assert own_fraction_formats(["fp8"] * 244 + ["fp16"] * 75 + ["bf16"] * 9) == ("fp16",)
    assert own_fraction_formats(["fp16"] * 94 + ["mxfp4"] * 12) == ("mxfp4",)
    assert own_fraction_formats(["fp16"] * 94 + ["q4_k_m"] * 184 + ["q8_0"] * 20) == ()
    assert own_fraction_formats(["fp16"] * 94 + ["q4_k_m"] * 184 + ["mxfp4"] * 20) == ("mxfp4",)
    assert own_fraction_formats(["fp16"] * 180) == ()


def test_closed_loop_waits_by_hand():
    """4 threads, 2 slots, service 1. One round: two start at 0, two wait 1 -> mean 0.5, done at 2. Two rounds: the
    first two threads' second requests queue behind the two that waited since 0, so every request after the first
    two waits 1: (0 + 0 + 6 x 1) / 8 = 0.75, done at 4. Many rounds: Little's law, wait -> clients / slots - 1."""
    assert closed_loop_waits(4, 2, 1) == (0.5, 2.0)
    assert closed_loop_waits(4, 2, 2) == (0.75, 4.0)
    assert closed_loop_waits(8, 8, 3) == (0.0, 3.0)
    wait, makespan = closed_loop_waits(100, 10, 200)
    assert wait == pytest.approx(100 / 10 - 1, rel=0.01) and makespan == pytest.approx(100 * 200 / 10)


def test_lmdeploy_kv_capacity_queues_the_threads_that_do_not_fit(prepared):
    """LMDeploy v0.1.0 Llama-2-13B, 64 threads x 3 rounds of 2048 + 2048 tokens on one A100: the benchmark's config
    gives TurboMind 500 blocks x 128 = 64,000 tokens of KV cache (below the row's mem(GB) 77.09 GiB = 82.8 GB less
    26.0 GB of fp16 weights = 56.7 GB / 819,200 B per token = 69,000 tokens), so 64,000 / (2048 + 2048/2) = 20.8 ->
    20 sequences run at once and the other threads wait: the published mean first-token latency is 190 s where one
    prefill of 64 x 2048 takes about 20 s. The 70B run at TP4 (4000 blocks = 512,000 tokens) fits all 64."""
    df = prepared[0]
    rows = df[(df["source"] == "lmdeploy_a100_fp16_v0.1.0") & (df["batch"] == 64) & (df["prompt"] == 2048)
              & (df["output"] == 2048) & (df["kind"] == "ttft")]
    r13 = rows[rows["model"] == "llama-2-13b"].iloc[0].to_dict()
    assert r13["cache_tokens"] == 64000 and r13["rounds"] == 3 and r13["mem_gib"] == pytest.approx(77.09)
    assert kv_concurrency(r13) == 20
    assert r13["measured"] == pytest.approx(190453.0)
    assert kv_concurrency(rows[rows["model"] == "llama-2-70b"].iloc[0].to_dict()) == 64
    steps, work = steps_of_row(r13)
    wait, _ = closed_loop_waits(64, 20, 3)
    # TurboMind's first token: a prefill of 2047 tokens and a decode step (runtimes.FIRST_TOKEN_FROM_DECODE); the
    # wait is a whole service of the request ahead: that, then the 2047 later decode steps
    assert work == 0 and steps[:2] == [("prefill", 20, 2047, 0, 1.0), ("decode", 20, 1, 2047, 1.0)]
    assert steps[2:4] == [("prefill", 20, 2047, 0, wait), ("decode", 20, 1, 2047, wait)]
    assert sum(w for st, *_, w in steps if st == "decode") == pytest.approx(1 + 2048 * wait)


def test_internlm_20b_counts_by_hand():
    """InternLM-20B (HF config): 60 layers of MHA 40 x 128 (q, k, v, o: 4 x 5120^2) and a SwiGLU MLP of 13,824
    (3 x 5120 x 13824), no biases (bias: false), untied 103,168 x 5120 embedding and LM head, 2 RMSNorms per layer
    and a final one: 60 x 317,194,240 + 2 x 528,220,160 + 121 x 5120 = 20,088,714,240."""
    m = load_model("internlm-20b")
    assert (m.family, m.num_layers, m.num_kv_heads, m.attention_bias) == ("internlm", 60, 40, False)
    assert m.total_params == 60 * (4 * 5120 ** 2 + 3 * 5120 * 13824) + 2 * 103168 * 5120 + 121 * 5120
    assert m.total_params == 20_088_714_240


def test_lmdeploy_request_throughput_runs_are_steady_state(prepared):
    """LMDeploy profile_throughput (3000 ShareGPT prompts at once, max batch B): the mean lengths come from the
    printed totals, v0.1.0 Llama-2-7B at B = 64: O = 2562.435 / 10.275 = 249.4, P = (5283.547 - 2562.435) / 10.275 =
    264.8; the v0.2.0 tpot_s rows take the output tok/s of their run's throughput row (7B at 256: 3387.419 / 14.556
    = 232.7, (6981.159 - 3387.419) / 14.556 = 246.9). A cycle admits B requests whose prompts run fused into the
    decode steps: one prefill of B x (P - 1) tokens and O decode steps of B (TurboMind samples the first token in a
    decode step); TPOT adds a prefill of B x P over the O - 1 steps."""
    from planner.accuracy.serving_rows import steady_lengths

    notes = "Requests/s 10.275; total (in+out) tok/s 5283.547; FTL(ave/min/max) 0.092/0.036/1.145 s."
    P, O = steady_lengths(notes, 2562.435)
    assert (P, O) == (pytest.approx(2721.112 / 10.275), pytest.approx(2562.435 / 10.275))
    assert steady_lengths("no totals here", 100.0) is None and steady_lengths(notes, None) is None
    df = prepared[0]
    st = df[(df["ttft_mode"] == "steady") & (df["runtime"] == "lmdeploy")]
    assert len(st) == 17 and set(st["source"]) == {"lmdeploy_a100_fp16_v0.1.0", "lmdeploy_a100_fp16_v0.2.0"}
    r7 = st[(st["model"] == "llama-2-7b") & (st["batch"] == 64)].iloc[0].to_dict()
    assert (r7["prompt"], r7["output"], r7["kind"]) == (265, 249, "throughput")
    t7 = st[(st["model"] == "llama-2-7b") & (st["kind"] == "tpot")].iloc[0].to_dict()
    assert (t7["batch"], t7["prompt"], t7["output"], t7["measured"]) == (256, 247, 233, 66.0)
    steps, work = steps_of_row(r7)
    # TurboMind's first token comes from a decode step (runtimes.FIRST_TOKEN_FROM_DECODE): a prefill of P - 1 and
    # O decode steps per cycle
    assert work == 64 * 249 and steps[:2] == [("prefill", 64, 264, 0, 1.0), ("decode", 64, 1, 264, 1.0)]
    assert sum(s[4] for s in steps[1:]) == pytest.approx(249)
    steps, work = steps_of_row(t7)
    assert work == 0 and steps[0] == ("decode", 256, 1, 247 + 116, 1.0)
    assert steps[1] == ("prefill", 256, 247, 0, pytest.approx(1 / 232))


def test_a_local_engine_predicted_from_its_family_keeps_the_documented_compute_defaults(prepared):
    """Each local engine brings its own matmul kernels (benchmark.OWN_KERNEL_FAMILIES), so a local-family fit passes
    on no compute fraction or GEMM half point: fitted on llama.cpp's NVIDIA rows alone at level `family`, both are the
    prior's (fit.PRIOR: 0.70 and 16 rows, the GPU kind defaults), while the serving family's pooled fit keeps its own.
    ExLlamaV2's own profile (22 rows of its README on an RTX 3090 Ti and 4090, level `engine`) reproduces its
    LLaMA-7B GPTQ decode on the 3090 Ti, 181 tok/s, within 10% (in sample; the leave-one-source-out prediction, from
    the local family at the defaults, is 16% slow, where llama.cpp's 20-row half point made it 60% slow)."""
    from planner.accuracy.benchmark import _fit
    from planner.accuracy.fit import PRIOR

    df, d = prepared[0], prepared[2]
    fit_ok = (df["anomalous"] == "").to_numpy()
    local = fit_ok & (df["runtime"] == "llamacpp").to_numpy() & (df["hw_class"] == "nvidia-gpu").to_numpy()
    p = _fit(df, d, local, fp16_acc=False, cls="nvidia-gpu", level="family")
    assert p["compute_fraction"] == PRIOR["compute_fraction"] and p["compute_half_rows"] == PRIOR["compute_half_rows"]
    serving = fit_ok & (df["family"] == "serving").to_numpy() & (df["hw_class"] == "nvidia-gpu").to_numpy()
    q = _fit(df, d, serving, fp16_acc=False, cls="nvidia-gpu", level="family")
    assert q["compute_half_rows"] != PRIOR["compute_half_rows"]
    ex = load_runtime("exllamav2").classes[0]
    assert ex.fit.level == "engine" and ex.fit.rows_fit == 22
    e = estimate("llama-2-7b", "rtx-3090-ti", "gptq-int4", batch=1, prompt=128, output=128, runtime="exllamav2")
    assert 1000 / e.decode.latency_ms_per_token == pytest.approx(181.0, rel=0.10)
    rows = pd.read_csv("reports/accuracy_rows.csv")
    r = rows[(rows["source"] == "exllamav2_readme_2023-09") & (rows["hardware"] == "rtx-3090-ti")
             & (rows["model"] == "llama-2-7b") & (rows["weights"] == "gptq-int4")].iloc[0]
    assert r["level"] == "family" and r["pred_loso"] == pytest.approx(181.0, rel=0.20)


def test_offline_sharegpt_runs_are_steady_state_at_the_pool_the_engine_holds(prepared):
    """SGLang v0.3.0 vs vLLM 0.6.0, 5,000 ShareGPT prompts sent at once (sglang benchmark_vllm_060 README): the mean
    output is the printed output tok/s over req/s (SGLang, Llama-3.1-8B on one A100: 4,281.51 / 22.03 = 194.35), the
    mean prompt 453,502 / 2,000 = 226.75 tokens (the maintainers' rerun, sglang#1639: the source prints no input
    total). The engine keeps as many sequences in flight as its KV pool holds at P + O/2 tokens each, under the run's
    memory fraction (planner.memory.max_batch, the rule every command sizes memory with): SGLang's pool sets its
    batch, vLLM 0.6 stops at max_num_seqs 256. A cycle is then one static batch of B (steps_of_row, `steady`)."""
    from planner.accuracy.serving_rows import SHAREGPT_MEAN_PROMPT, offline_lengths
    from planner.memory import EngineSettings, max_batch

    notes = ("'Offline benchmark results' table: 5000 ShareGPT prompts sent at once (request rate inf); request "
             "throughput 22.03 req/s, output token throughput 4281.51 tok/s.")
    P, O = offline_lengths(notes)
    assert P == SHAREGPT_MEAN_PROMPT == pytest.approx(226.751) and O == pytest.approx(4281.51 / 22.03)
    assert offline_lengths("Median TTFT; request rate 4 req/s.") is None
    df = prepared[0]
    rows = df[df["source"] == "sglang_benchmark_vllm060_readme_2024-09"]
    assert len(rows) == 4 and set(rows["kind"]) == {"throughput"} and set(rows["ttft_mode"]) == {"steady"}
    sg = rows[(rows["runtime"] == "sglang") & (rows["tp"] == 1)].iloc[0].to_dict()
    vl = rows[(rows["runtime"] == "vllm") & (rows["tp"] == 1)].iloc[0].to_dict()
    assert (sg["prompt"], sg["output"], vl["output"]) == (227, 194, 194)  # 4132.37 / 21.27 = 194.28 for vLLM
    pool = max_batch(load_model("llama-3.1-8b"), weight_format("bf16"), "bf16", 227, 97,
                     load_hardware("a100-80gb-sxm"), "sglang", EngineSettings(gpu_memory_utilization=0.88))
    assert sg["batch"] == pool > 1000
    assert vl["batch"] == 256
    steps, work = steps_of_row(vl)
    assert work == 256 * 194 and steps[0] == ("prefill", 256, 227, 0, 1.0)


def test_committed_profiles_carry_the_dequant_tile_of_their_kernels():
    """Efficiency.dequant_tile_tokens is read from the kernels, not fitted (benchmark.DEQUANT_TILE_TOKENS): llama.cpp
    on Metal dequantizes each weight once per 32-token tile (ggml-metal.metal kernel_mul_mm, BLOCK_SIZE_N 32); every
    other committed class pays its dequantization share at any R (0)."""
    from planner.accuracy.benchmark import DEQUANT_TILE_TOKENS
    from planner.runtimes import list_runtime_ids, load_runtime

    seen = {}
    for rt in list_runtime_ids():
        for c in load_runtime(rt).classes:
            seen[(rt, c.key)] = c.efficiency.dequant_tile_tokens
    assert seen[("llamacpp", "apple-gpu")] == 32 and seen[("llamacpp", "nvidia-gpu")] == 0
    assert all(v == DEQUANT_TILE_TOKENS.get(k, 0) for k, v in seen.items()), seen


def test_gptsessionbenchmark_rows_are_one_sequence_repeated():
    """TensorRT-LLM's gptSessionBenchmark fills every prompt with the pad id and decodes greedily
    (data.IDENTICAL_SEQUENCE_TOOLS), so its rows, and only they, carry identical_sequences: their MoE decode touches
    one sequence's experts (planner.ops.step_ops). vLLM's and llama.cpp's tools send distinct or single prompts."""
    from planner.accuracy.data import load_rows

    df, _ = load_rows()
    same = df["identical_sequences"] == True  # noqa: E712  (a column of Python bools)
    assert set(df.loc[same, "source"]) == {"trtllm_perf_doc_v0.6.1", "trtllm_perf_doc_v0.8.0", "trtllm_perf_doc_v0.9.0"}
    assert df.loc[same, "identical_sequences"].map(type).eq(bool).all()
    assert not df.loc[df["runtime"] == "vllm", "identical_sequences"].any()


def test_a_serving_engine_without_rows_takes_the_engines_that_launch_as_it_does(prepared):
    """An engine short of rows on a class (SGLang on NVIDIA before session 36: 2 rows < MIN_FIT_ROWS) falls back,
    after its own rows on other hardware, to the serving engines that replay CUDA graphs in decode
    (benchmark.GRAPH_ENGINES: vLLM, SGLang, TGI), not to TensorRT-LLM's gptSessionBenchmark or LMDeploy TurboMind
    v0.1-v0.2, which launch every kernel. Since GPUStack's Qwen3-8B latency runs (20 SGLang rows on an H100) its
    NVIDIA class is its own (level engine); its leave-one-source-out folds still take that chain."""
    from planner.accuracy.benchmark import GRAPH_ENGINES, _chain
    from planner.runtimes import load_runtime

    df, _, _ = prepared
    ok = (df["anomalous"] == "").to_numpy()
    levels = _chain(df, ok, "sglang", "nvidia-gpu")
    assert [lvl for lvl, _ in levels] == ["engine", "engine-other-hw", "family", "family"]
    assert set(df.loc[levels[2][1], "runtime"]) <= GRAPH_ENGINES and "trtllm" in set(df.loc[levels[3][1], "runtime"])
    assert [lvl for lvl, _ in _chain(df, ok, "llamacpp", "nvidia-gpu")] == ["engine", "engine-other-hw", "family"]
    nv = next(c for c in load_runtime("sglang").classes if c.key == "nvidia-gpu")
    assert nv.fit.level == "engine"  # SGLang's own rows only (the GPUStack source also measured vLLM and TRT-LLM)
    assert set(nv.fit.sources) == {"gpustack_perflab_qwen3_8b_h100_latency", "sglang_benchmark_vllm060_readme_2024-09"}
    assert nv.fit.rows_fit == 22


def _serving_row(**kw):
    base = {"source_id": "mine", "hardware": "NVIDIA H100 SXM", "hardware_detail": "8 x H100 SXM, TP8",
            "framework": "vLLM 0.11, vllm bench serve", "model": "Qwen3-32B", "params_b": 32.8,
            "weight_format": "bf16", "kv_dtype": "auto", "batch": 100.0, "input_len": 2048.0, "output_len": 128.0,
            "metric": "throughput_tok_s", "value": 3000.0, "unit": "output tok/s total", "notes": ""}
    return {**base, **kw}


def test_data_parallel_replicas_split_the_requests_and_sum_the_tokens():
    """'TP4 DP2' (vllm serve --data-parallel-size 2 behind one endpoint): 100 requests are two replicas' 50 each, so
    every step is one TP4 replica's at batch 50, and the whole-set throughput counts both replicas: work = 50 x 128
    / (1/2) = 100 x 128 tokens per static-batch time of one replica. 101 requests do not split evenly: listed."""
    from planner.accuracy.serving_rows import map_serving_row
    from planner.architecture import list_model_ids
    from planner.hardware import list_hardware_ids
    known = (set(list_hardware_ids()), set(list_model_ids()))
    rec, why = map_serving_row(_serving_row(hardware_detail="8 x H100 SXM, TP4 DP2"), *known)
    assert why is None and (rec["tp"], rec["batch"], rec["work_div"]) == (4, 50, 0.5)
    _, work = steps_of_row(rec)
    assert work == 100 * 128
    rec, _ = map_serving_row(_serving_row(), *known)
    assert (rec["tp"], rec["batch"], rec["work_div"]) == (8, 100, 1.0)
    rec, why = map_serving_row(_serving_row(hardware_detail="8 x H100 SXM, TP4 DP2", batch=101.0), *known)
    assert rec is None and "2 data-parallel replicas" in why
    rec, why = map_serving_row(_serving_row(hardware_detail="8 x H100 SXM, TP8 DP0"), *known)
    assert rec is None and why.startswith("hardware_detail: DP0")


def test_a_logged_kv_pool_caps_the_users_that_run_at_once():
    """silybench's bf16 run logged a 377,024-token pool: 64 users of 8,192 + 512 tokens hold P + O/2 = 8,448 tokens
    each on average, so floor(377,024 / 8,448) = 44 run at once (serving_rows.logged_pool, predict.kv_concurrency),
    and 320 prompts from 64 users are 5 rounds; at 16 users all run; no pool in the notes: no cap."""
    from planner.accuracy.predict import kv_concurrency
    from planner.accuracy.serving_rows import logged_pool
    pool = logged_pool("num_prompts=320 ... kv_cache_tokens=377024 (logged)", 64)
    assert pool == {"cache_tokens": 377024.0, "rounds": 5}
    r = {"batch": 64, "prompt": 8192, "output": 512, **pool}
    assert kv_concurrency(r) == 377024 // 8448 == 44
    assert kv_concurrency({**r, "batch": 16}) == 16
    assert logged_pool("num_prompts=320", 64) == {}
    assert kv_concurrency({"batch": 64, "prompt": 8192, "output": 512}) == 64


def test_an_engine_without_measurements_takes_its_launch_family_with_a_wide_range():
    """DeepSpeed-MII (FastGen) has no published row here, so each datacenter class is the pooled fit of the serving
    engines that launch as it does (benchmark.GRAPH_ENGINES: FastGen's ragged kernels run without a CUDA graph, like
    TensorRT-LLM's gptSessionBenchmark and LMDeploy TurboMind), and its range is the extrapolation range of
    unmeasured engines, widened (x1.5 in log space), so wider than the range of the measured engine whose rows
    weigh most in that pool (TensorRT-LLM on the same class)."""
    from planner.runtimes import interval_regime
    spec = load_hardware("a100-80gb-sxm")
    mii = load_runtime("deepspeed-mii").for_unit(spec, spec.unit("gpu"))
    assert mii.fit.rows_fit > 0 and "pooled rows of the serving engines lmdeploy, trtllm" in mii.efficiency.source
    trt = load_runtime("trtllm").for_unit(spec, spec.unit("gpu"))
    wide, narrow = interval_regime(mii, "decode", 1), interval_regime(trt, "decode", 1)
    assert wide.p90 / wide.p10 > narrow.p90 / narrow.p10
    e = estimate("llama-2-7b", "a100-80gb-sxm", batch=8, prompt=512, output=128, runtime="mii")  # an alias
    assert e.runtime == "deepspeed-mii" and e.decode.latency_ms_per_token > 0


def test_turbomind_samples_the_first_token_in_a_decode_step():
    """TurboMind's context decoder caches all prompt tokens but the last, and the first generation step feeds the last
    one to the decoder with the batch (LlamaBatch InitializeSampling: sequence_lengths = context_length - 1): the
    first token costs a prefill of B x (P - 1) and one decode step of B at context P - 1; a 1-token prompt is one
    decode step. Its later O - 1 tokens are the usual O - 1 decode steps, so a static batch's e2e = prefill of
    P - 1 + O decode steps. Engines that sample from the prefill's logits keep one prefill of B x P. LMDeploy
    v0.1.0's own table shows it: Llama-2-7B on an A100, FTL 11 ms at P = 1 (one step; TPOT 9-10 ms), 22 ms at
    P = 128 (a ~12 ms prefill of 127 tokens + a 10 ms step), where a prefill alone would give ~12 ms."""
    r = {"kind": "ttft", "batch": 16, "prompt": 128, "output": 128, "ttft_mode": "batch", "runtime": "lmdeploy"}
    assert steps_of_row(r)[0] == [("prefill", 16, 127, 0, 1.0), ("decode", 16, 1, 127, 1.0)]
    assert steps_of_row({**r, "prompt": 1})[0] == [("decode", 16, 1, 0, 1.0)]
    assert steps_of_row({**r, "runtime": "turbomind"})[0] == steps_of_row(r)[0]  # aliases too
    assert steps_of_row({**r, "runtime": "vllm"})[0] == [("prefill", 16, 128, 0, 1.0)]
    steps, work = steps_of_row({**r, "kind": "e2e", "output": 2048})
    assert work == 0 and steps[:2] == [("prefill", 16, 127, 0, 1.0), ("decode", 16, 1, 127, 1.0)]
    assert len(steps) == 2 + 32 and sum(s[4] for s in steps[2:]) == pytest.approx(2047)
    assert min(s[3] for s in steps[2:]) >= 128  # the later steps attend to P .. P + O - 2 cached tokens
    # TPOT rows are one decode step, as for every engine
    assert steps_of_row({**r, "kind": "tpot"})[0] == [("decode", 16, 1, 128 + 64, 1.0)]


def test_fit_recovers_the_kv_reread_share(prepared):
    """Rows generated with a known kv_reread_share (llama.cpp's fp16 decode rows at batch 1 on NVIDIA GPUs, tg512 to
    tg8192 without flash attention: four passes over each K/V head of Llama-3) get it back from the fit within 10%,
    0.5 (the L2 holds the head between its query heads' passes) and 2.0 alike, shrunk towards the prior centre 1
    (fit.PRIOR) and never past the truth: Llama-3-8B's three extra passes at tg8192's mean context of 4,096 tokens
    are 3 x 0.54 GB against 16.1 GB of fp16 weights, so a 10% change of the share moves a row's time by under 1%
    and the 47 rows pin it less tightly than the weak prior pulls (0.547 for 0.5, 1.97 for 2.0; the other terms
    at the prior centres, as here)."""
    from planner.accuracy.fit import fit_design

    d = _llamacpp_fp16_decode(prepared)
    assert np.any(d.kv_reread > 0)
    for share in (0.5, 2.0):
        synth = _synthetic(d, Efficiency(bandwidth_fraction=0.85, compute_fraction=0.7, kernel_overhead_us=3.0,
                                         step_overhead_ms=0.3, compute_half_rows=16.0, kv_reread_share=share))
        v, _ = fit_design(synth, [], np.zeros(d.n_rows), sm_cap=False)
        assert math.isclose(v["kv_reread_share"], share, rel_tol=0.10), v
        assert min(share, 1.0) <= v["kv_reread_share"] <= max(share, 1.0)
