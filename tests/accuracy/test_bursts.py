"""planner/accuracy/bursts.py and the burst mapping of serving_rows.py: every request of a `vllm bench serve` run sent
at once with no concurrency limit, timed by the serving simulator in `planner accuracy --data`."""

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from planner.accuracy import bursts, external
from planner.accuracy.serving_rows import BURST_NOT_FITTED, map_serving_rows, serving_runtime

HEADER = ["source_id", "hardware", "hardware_detail", "framework", "model", "params_b", "weight_format", "kv_dtype",
          "batch", "input_len", "output_len", "metric", "value", "unit", "notes"]
BURST_FW = ("vLLM v0.11.0; serve: vllm serve Qwen/Qwen3-14B; bench: vllm bench serve --dataset-name random, request "
            "rate inf (all prompts at once), no max concurrency")


def _row(metric, value, unit="ms", batch=64, prompt=2000, output=100, fw=BURST_FW, notes="dataset: random",
         model="Qwen/Qwen3-14B", detail="1 x NVIDIA H100 SXM, TP1"):
    return ["my_bursts", "NVIDIA H100 SXM", detail, fw, model, 14.8, "bf16", "", batch, prompt, output, metric, value,
            unit, notes]


def _frame(rows):
    import pandas as pd
    return pd.DataFrame(rows, columns=HEADER)


def test_a_burst_maps_to_the_simulator_and_stays_out_of_the_fit():
    """A burst's TTFT, mean TPOT, median ITL and throughput map with ttft_mode 'burst' (its lengths fixed for a
    random dataset, 'sharegpt' where the notes say so; the ITL from the simulator's token gaps, session 45); the
    fit's loader (bursts=False) lists every burst with BURST_NOT_FITTED."""
    rows = [_row("ttft_ms", 20000.0), _row("tpot_ms", 150.0), _row("throughput_tok_s", 300.0, "output tok/s total"),
            _row("itl_ms", 40.0), _row("ttft_ms", 9000.0, batch=1000, prompt=215, output=194,
                                       notes="dataset: sharegpt (variable lengths)")]
    mapped, unmapped = map_serving_rows(_frame(rows), "x.csv")
    assert [r["ttft_mode"] for r in mapped] == ["burst"] * 5 and not unmapped
    assert [r["lengths"] for r in mapped] == ["fixed", "fixed", "fixed", "fixed", "sharegpt"]
    assert [r["kind"] for r in mapped] == ["ttft", "tpot", "throughput", "tpot", "ttft"]
    assert mapped[3]["metric"] == "itl_ms"
    fit_mapped, fit_unmapped = map_serving_rows(_frame(rows), "x.csv", bursts=False)
    assert fit_mapped == [] and [u["reason"] for u in fit_unmapped] == [BURST_NOT_FITTED] * 5


def test_speculative_runs_and_engine_labels():
    """A run with speculative decoding is listed, not timed as a plain one; a TensorRT-LLM or SGLang server measured
    with `vllm bench serve` (both names in its label) is that engine's; "no speculative decoding" is not a draft."""
    spec = _row("tpot_ms", 5.0, notes="speculative decoding: --speculative-algorithm EAGLE3")
    plain = _row("tpot_ms", 5.0, notes="no speculative decoding, CUDA graphs on")
    mapped, unmapped = map_serving_rows(_frame([spec, plain]), "x.csv")
    assert len(mapped) == 1 and "speculative decoding" in unmapped[0]["reason"]
    assert serving_runtime("TensorRT-LLM v1.2.0rc1; serve: trtllm-serve m; bench: vllm bench serve") == "trtllm"
    assert serving_runtime("TensorRT-LLM v0.9.0 (gptSessionBenchmark)") is None  # a static batch: data.py's
    assert serving_runtime("SGLang v0.5.3; serve: python3 -m sglang.launch_server; bench: vllm bench serve") == "sglang"
    assert serving_runtime("vLLM v0.11.0; serve: vllm serve m") == "vllm"


def test_burst_requests_fixed_and_sharegpt():
    """Fixed lengths are the means exactly, all arriving at t = 0; ShareGPT draws are lognormal about the means within
    vLLM's ShareGPT filter: prompt <= 1,024 and prompt + output <= 2,048 (clipping can only lower the means: the
    unclipped lognormal with mu = ln(mean) - sigma^2 / 2 has the requested mean, E = exp(mu + sigma^2 / 2))."""
    r = bursts.burst_requests(5, 300, 40, "fixed")
    assert r.prompt.tolist() == [300] * 5 and r.output.tolist() == [40] * 5
    assert r.arrival_s.tolist() == [0.0] * 5
    s = bursts.burst_requests(20000, 215, 194, "sharegpt")
    assert s.prompt.max() <= 1024 and (s.prompt + s.output).max() <= 2048 and s.output.min() >= 1
    assert 0.85 * 215 < s.prompt.mean() <= 215 * 1.03 and 0.85 * 194 < s.output.mean() <= 194 * 1.03
    cv = s.output.std() / s.output.mean()  # sigma 0.8: sqrt(exp(0.64) - 1) = 0.95 before clipping
    assert 0.7 < cv < 1.0
    assert math.isclose(math.sqrt(math.exp(bursts.SHAREGPT_SIGMA ** 2) - 1), 0.947, abs_tol=0.001)


def test_a_lone_request_burst_is_its_prefill_then_its_decode():
    """One request of 1,000 + 50 tokens on an H100 under vLLM's defaults there (V1: 8,192 tokens and 1,024 sequences
    per step): its TTFT is one prefill step of its whole prompt plus vLLM's 50 ms HTTP request path
    (runtimes.REQUEST_PATH_MS), its TPOT the mean of its 49 decode steps at contexts 1,000 .. 1,048, and the
    throughput 50 / (TTFT + 49 TPOT): the figures vllm bench serve defines, read from the simulator's trace and
    checked against the engine's step model directly."""
    from planner.architecture import load_model
    from planner.hardware import load_hardware
    from planner.serving.engine import build_engine, make_config

    base = {"runtime": "vllm", "hardware": "h100-sxm", "weights": "bf16", "kv_dtype": "bf16", "tp": 1,
            "model": "qwen3-8b", "batch": 1, "prompt": 1000, "output": 50, "lengths": "fixed", "work_div": 1.0}
    ttft = bursts.simulate_burst({**base, "metric": "ttft_ms"})
    tpot = bursts.simulate_burst({**base, "metric": "tpot_ms"})
    thr = bursts.simulate_burst({**base, "metric": "throughput_tok_s"})
    cfg = make_config(hardware="h100-sxm", weights="bf16", kv_dtype="bf16", runtime="vllm", engine="vllm")
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (8192, 1024)
    sm = build_engine(load_model("qwen3-8b"), load_hardware("h100-sxm"), cfg, "auto", 1000, 1050).step_model
    assert ttft == pytest.approx(sm.prefill_time([1000]) * 1e3 + 50.0, rel=1e-9)
    assert tpot == pytest.approx(np.mean([sm.decode_time(1, 1000 + k) for k in range(49)]) * 1e3, rel=1e-4)
    assert thr == pytest.approx(50 / ((ttft + 49 * tpot) / 1e3), rel=1e-6)


def test_external_check_times_bursts_with_the_simulator(tmp_path):
    """`planner accuracy --data` predicts a burst row with bursts.simulate_burst (the profile) and the datasheet
    roofline, keeps the estimate's range around it, and lists a burst the model cannot fit with the reason."""
    rows = [_row("throughput_tok_s", 300.0, "output tok/s total"),
            _row("ttft_ms", 9000.0, model="DeepSeek-R1", detail="1 x NVIDIA H100 SXM, TP1")]
    p = tmp_path / "b.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows(rows)
    out = external.check([p])
    res, un = out["results"], out["unmapped"]
    assert len(res) == 1 and len(un) == 1 and "cannot run this burst" in un.iloc[0]["reason"]
    r = res.iloc[0].to_dict()
    assert r["pred"] == pytest.approx(bursts.simulate_burst(r), rel=1e-9)
    assert r["pred_datasheet"] == pytest.approx(bursts.simulate_burst(r, "datasheet"), rel=1e-9)
    assert r["pred_datasheet"] > r["pred"]  # the datasheet runs at 100% of every peak
    assert r["low"] < r["pred"] < r["high"]
    # a burst is a server under load: the range `planner simulate` prints, the vLLM H100 class's '_served' one
    from planner.hardware import load_hardware
    from planner.runtimes import interval_regime, load_runtime
    spec = load_hardware("h100-sxm")
    iv = interval_regime(load_runtime("vllm").for_unit(spec, spec.unit("gpu")), "decode", 64, served=True)
    assert r["low"] == pytest.approx(r["pred"] * iv.p10) and r["high"] == pytest.approx(r["pred"] * iv.p90)


def test_the_gpustack_pending_set_maps_through_the_simulator():
    """data/pending/gpustack_performance_lab_2025-2026.csv (README there): every row maps to a finite positive
    prediction or is listed with one of the reasons its README names."""
    path = Path(__file__).resolve().parents[2] / "data" / "pending" / "gpustack_performance_lab_2025-2026.csv"
    out = external.check([path])
    res, un = out["results"], out["unmapped"]
    assert len(res) + len(un) == 996 and len(res) > 600
    assert np.isfinite(res["pred"]).all() and (res["pred"] > 0).all() and not res["in_fit"].any()
    known = ("median inter-token latency of a burst", "speculative decoding", "data-parallel attention",
             "data-parallel replicas", "cannot run this burst", "pipeline parallelism")
    assert un["reason"].map(lambda x: any(k in x for k in known)).all()


def test_a_served_ttft_carries_the_request_path_and_an_offline_one_does_not():
    """predict.served_request_path_s: a TTFT measured through an engine's HTTP server (ttft_mode single, queue or
    burst) holds the server's request path (vLLM 50 ms, SGLang 18, runtimes.REQUEST_PATH_MS); a static batch's
    (LMDeploy profile_generation, gptSessionBenchmark: mode batch) and every other kind hold none."""
    from planner.accuracy.predict import served_request_path_s

    assert served_request_path_s({"kind": "ttft", "ttft_mode": "single", "runtime": "vllm"}) == pytest.approx(0.05)
    assert served_request_path_s({"kind": "ttft", "ttft_mode": "queue", "runtime": "sglang"}) == pytest.approx(0.018)
    assert served_request_path_s({"kind": "ttft", "ttft_mode": "batch", "runtime": "lmdeploy"}) == 0.0
    assert served_request_path_s({"kind": "ttft", "ttft_mode": "batch", "runtime": "trtllm"}) == 0.0
    assert served_request_path_s({"kind": "tpot", "ttft_mode": "single", "runtime": "vllm"}) == 0.0
    assert served_request_path_s({"kind": "ttft", "ttft_mode": "single", "runtime": "exllamav2"}) == 0.0


def test_the_trtllm_overview_set_maps_through_the_simulator_and_b200_nvfp4_holds(tmp_path):
    """data/pending/trtllm_perf_overview_v1.0_2025.csv (README there): trtllm-bench throughput runs queue every
    request at once, so they are bursts; the TP x PP runs are listed unmapped with that reason, every other row maps,
    the MoE runs at TP > 1 (enable_attention_dp) as attention-DP groups of their GPUs (serving.expert_parallel: one
    rank of ceil(N / GPUs) requests). On the B200 (NVFP4, one GPU) the predicted throughput over the published one
    lies within 0.5-1.4 on every run and 0.8-1.1 in the median: NVFP4 GEMMs at the measured FP4 kernels' share of
    the peak and the B200's SMs streaming 1.73x the bytes of the H200's (regimes.sm_streaming_scale); at the
    engine's own compute fraction (before session 45) the prefill-heavy runs were 1.5-1.7x fast (2048/128: 1.69x),
    and with the FP4 share but Hopper's per-SM cap the median was 0.80."""
    import pandas as pd

    path = Path(__file__).resolve().parents[2] / "data" / "pending" / "trtllm_perf_overview_v1.0_2025.csv"
    raw = pd.read_csv(path)
    detail = raw["hardware_detail"]
    mapped, unmapped = map_serving_rows(raw, path.name)
    pp = detail.str.contains(r"\bPP[2-9]", regex=True)
    assert len(raw) == 328 and len(unmapped) == int(pp.sum()) == 69 and len(mapped) == 259
    assert all("pipeline parallelism" in u["reason"] for u in unmapped)
    assert {m["ttft_mode"] for m in mapped} == {"burst"} and {m["runtime"] for m in mapped} == {"trtllm"}
    dp = [m for m in mapped if m.get("parallel") == "dp-attention"]
    assert len(dp) == int((detail.str.contains("dp-attention", regex=False) & ~pp).sum()) == 99
    one = next(m for m in dp if m["model"] == "qwen3-235b-a22b" and m["prompt"] == 1000 and m["output"] == 1000)
    assert one["ep"] == 8 and one["batch"] == 3000 // 8 and one["work_div"] == pytest.approx(1 / 8)
    b200 = raw[(raw["hardware"] == "NVIDIA B200") & detail.str.startswith("1 x ")]
    b200.to_csv(tmp_path / "b200.csv", index=False)
    res = external.check([tmp_path / "b200.csv"])["results"]
    assert len(res) == len(b200) == 30 and (res["weights"] == "nvfp4").all()
    ratio = res["pred"] / res["measured"]
    assert ratio.between(0.5, 1.4).all() and 0.8 <= ratio.median() <= 1.1  # measured 0.63-1.27, median 0.94


def test_the_trtllm_v017_overview_maps_whole_and_llama_8b_holds_on_five_gpus(tmp_path):
    """data/pending/trtllm_perf_overview_v0.17_2025.csv (README there): every one of its 373 runs maps to a
    TensorRT-LLM burst (trtllm-bench throughput, GH200 through gptManagerBenchmark --type IFB); Llama-3.1-8B (FP8 on
    the H200 / H100 / GH200 / L40S, FP16 on the A100) is predicted within 0.8-1.2 of the published throughput on every
    one of its 45 runs (measured 0.86-1.13, median 0.95), on data none of the profiles was fitted to."""
    import pandas as pd

    path = Path(__file__).resolve().parents[2] / "data" / "pending" / "trtllm_perf_overview_v0.17_2025.csv"
    raw = pd.read_csv(path)
    mapped, unmapped = map_serving_rows(raw, path.name)
    assert len(raw) == len(mapped) == 373 and not unmapped
    assert {m["ttft_mode"] for m in mapped} == {"burst"} and {m["runtime"] for m in mapped} == {"trtllm"}
    small = raw[raw["model"] == "Llama-3.1-8B"]
    small.to_csv(tmp_path / "llama8b.csv", index=False)
    res = external.check([tmp_path / "llama8b.csv"])["results"]
    ratio = res["pred"] / res["measured"]
    assert len(res) == 45 and set(res["hardware"]) == {"h200-sxm", "h100-sxm", "gh200", "l40s", "a100-80gb-sxm"}
    assert ratio.between(0.8, 1.2).all() and 0.9 <= ratio.median() <= 1.05


def test_a_paced_run_arrives_at_its_rate_and_the_triton_frontend_adds_no_path(tmp_path):
    """data/pending/trtllm_perf_overview_online_v0.14_2024.csv (README there): TensorRT-LLM 0.14 behind Triton's
    backend, 500 requests paced at 2-32 req/s (Poisson arrivals) or all at once. Every row maps to the simulator
    (`qps` set for a paced run, NaN for a burst; Triton's C++ frontend adds no HTTP path). A paced run's arrivals
    have mean gap 1 / qps and start at 0. At 2 req/s the 8B's 467-token prompts (256 out) find ~4 sequences
    decoding: the mean TTFT is estimate's prefill of one 467-token prompt on the H100 (14.9 ms, no request path)
    plus the decode step it joins and waits out, within 1.0-1.6x of that prefill; the published 19 ms is within
    0.8-1.25x of the prediction (20.8 ms)."""
    import pandas as pd
    from planner import estimate

    reqs = bursts.burst_requests(2000, 100, 10, "fixed", qps=4.0)
    assert reqs.arrival_s[0] == 0.0 and np.mean(np.diff(reqs.arrival_s)) == pytest.approx(0.25, rel=0.05)
    path = Path(__file__).resolve().parents[2] / "data" / "pending" / "trtllm_perf_overview_online_v0.14_2024.csv"
    raw = pd.read_csv(path)
    mapped, unmapped = map_serving_rows(raw, path.name)
    assert len(raw) == len(mapped) == 216 and not unmapped
    assert {m["ttft_mode"] for m in mapped} == {"burst"} and {m["request_path_ms"] for m in mapped} == {0.0}
    paced = [m for m in mapped if "qps" in m]
    assert sorted({m["qps"] for m in paced}) == [2, 4, 8, 16, 32] and len(mapped) - len(paced) == 36  # 12 at INF x 3
    row = raw[(raw["model"] == "Llama-3.1-8B") & (raw["hardware"] == "NVIDIA H100 SXM") & (raw["input_len"] == 467)
              & (raw["output_len"] == 256) & raw["framework"].str.contains("paced at 2 req/s") & (raw["metric"] == "ttft_ms")]
    row.to_csv(tmp_path / "one.csv", index=False)
    res = external.check([tmp_path / "one.csv"])["results"]
    e = estimate("llama-3.1-8b", "h100-sxm", "bf16", kv_dtype="bf16", prompt=467, output=2, runtime="trtllm")
    pred = float(res["pred"].iloc[0])
    assert e.prefill.latency_ms <= pred <= 1.6 * e.prefill.latency_ms
    assert 0.8 <= float(res["measured"].iloc[0]) / pred <= 1.25
