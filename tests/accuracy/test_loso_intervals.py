"""planner.accuracy.benchmark.loso_intervals: a row's p10-p90 comes from the leave-one-source-out residuals of *other*
sources only, each weighted 1 / sqrt(rows of its source), so that one large source does not set every range."""

import numpy as np
import pandas as pd
import pytest

from planner.accuracy.benchmark import loso_intervals, source_weights, weighted_quantiles


def test_weighted_quantiles_by_hand():
    # equal weights: the midpoints of [0, 1, 2, 3] sit at 1/8, 3/8, 5/8, 7/8 -> the median interpolates to 1.5
    assert weighted_quantiles(np.array([3.0, 0.0, 2.0, 1.0]), np.ones(4), [0.5])[0] == pytest.approx(1.5)
    assert weighted_quantiles(np.array([0.0, 1.0, 2.0, 3.0]), np.ones(4), [0.1, 0.9]) == pytest.approx(
        np.quantile([0.0, 1.0, 2.0, 3.0], [0.1, 0.9], method="hazen"))
    # a value with 3x the weight of the other holds 3/4 of the mass: midpoints 3/8 (value 0) and 7/8 (value 1)
    assert weighted_quantiles(np.array([0.0, 1.0]), np.array([3.0, 1.0]), [0.5])[0] == pytest.approx(0.25)


def test_source_weights_are_one_over_sqrt_rows():
    w = source_weights(["a", "a", "a", "a", "b"])
    assert w == pytest.approx([0.5, 0.5, 0.5, 0.5, 1.0])


def _frame():
    # source A: 20 rows exactly right (log-ratio 0); source B: 2 rows 1.0 too slow; source C: the row we check
    src = ["A"] * 20 + ["B"] * 2 + ["C"]
    lr = np.concatenate([np.zeros(20), [1.0, 1.0], [0.3]])
    df = pd.DataFrame({"source": src, "regime": "decode_b1", "tp": 1, "anomalous": ""})
    return df, lr, np.array(["engine"] * len(src), dtype=object)


def test_a_small_source_is_not_drowned_by_a_large_one():
    """For C, by hand: A's rows weigh 1/sqrt(20) = 0.2236 each (4.472 in all), B's 1/sqrt(2) = 0.7071 each (1.414).
    Weighted midpoints: A's last (4.472 - 0.112) / 5.886 = 0.741, B's first (4.472 + 0.354) / 5.886 = 0.820, so the
    p90 is B's value: exp(1.0). Counting rows instead, B's first midpoint is 20.5 / 22 = 0.932 and the p90 would be
    interpolated to 0.3: the 2-row source would barely move the range."""
    df, lr, level = _frame()
    lo, hi = loso_intervals(df, lr, level)
    assert np.log(hi[22]) == pytest.approx(1.0, abs=1e-12)
    assert np.log(lo[22]) == pytest.approx(0.0, abs=1e-12)
    assert np.quantile(lr[:22], 0.9, method="hazen") == pytest.approx(0.3, abs=0.01)


def test_a_row_never_sees_its_own_source():
    df, lr, level = _frame()
    lo, hi = loso_intervals(df, lr, level)
    # B's rows: the pool is A (20 zeros) and C (0.3): B's own 1.0 never widens its range
    assert np.log(hi[20]) <= 0.3 + 1e-12


def test_extrapolated_rows_are_widened_around_the_median():
    df, lr, level = _frame()
    level[22] = "family"
    lo, hi = loso_intervals(df, lr, level)
    q10, q50, q90 = weighted_quantiles(lr[:22], source_weights(df["source"][:22]), [0.1, 0.5, 0.9])
    assert np.log(lo[22]) == pytest.approx(q50 + (q10 - q50) * 1.3, abs=1e-12)
    assert np.log(hi[22]) == pytest.approx(q50 + (q90 - q50) * 1.3, abs=1e-12)


def test_profile_intervals_are_measured_over_predicted_speed():
    """A profile's range is the p10-p90 of measured / predicted *speed* (runtimes.Interval), which is predicted /
    measured *time*: the `ratio` column. An engine whose every row ran 2x slower than predicted (predicted time =
    measured / 2, ratio 0.5) gets p10 = p90 = 0.5, so an estimate's speed range is [0.5, 0.5] x its headline and its
    latency range [2, 2] x its headline (estimate: latency_low = latency / p90). The sign was inverted before
    2026-12-01 (a vLLM TTFT range said 1.3-4x faster where every source measured it slower)."""
    from planner.accuracy.benchmark import profile_intervals

    n = 12
    res = pd.DataFrame({"source": ["A"] * 6 + ["B"] * 6, "runtime": "vllm", "regime": "prefill", "tp": 1,
                        "anomalous": "", "level": "engine", "ratio": 0.5})
    iv, _ = profile_intervals(res, "vllm")
    assert iv["prefill"] == (pytest.approx(0.5), pytest.approx(0.5), n)
    res["ratio"] = np.where(res["source"] == "A", 0.5, 2.0)  # A: 2x slower than predicted, B: 2x faster
    lo, hi, _ = profile_intervals(res, "vllm")[0]["prefill"]
    assert lo == pytest.approx(0.5, rel=0.2) and hi == pytest.approx(2.0, rel=0.2) and lo < 1 < hi


def _two_sources(names: str, regime: str, ratio, **cols) -> pd.DataFrame:
    """12 LOSO rows of vLLM at TP 1, predicted by its own fit (level engine): 6 from each of two sources."""
    return pd.DataFrame({"source": [names[0]] * 6 + [names[1]] * 6, "runtime": "vllm", "regime": regime, "tp": 1,
                         "anomalous": "", "level": "engine", "ratio": ratio, **cols})


@pytest.mark.parametrize("regime, suffix, base, subset", [
    ("prefill", "_moe", {"moe": False}, {"moe": True}),
    ("decode_batched", "_served", {"ttft_mode": "batch"}, {"ttft_mode": np.r_[["queue"] * 6, ["steady"] * 6]}),
])
def test_moe_and_served_rows_get_a_range_of_their_own(regime, suffix, base, subset):
    """The issue's dense-vs-MoE ranges, and those of figures measured through a server under load (bursts, waves,
    steady queues: data.served_under_load, which also carry the engine's admission and interleaving). An engine's 12
    dense (static) rows ran exactly as predicted (ratio 1) and its 12 MoE (served) rows of two sources 2x slower and
    1.25x faster: the key stays [1, 1] while '<key>_moe' ('<key>_served') is [min p10, max p90] of those rows' range
    and the key's, about [0.5, 1.25]; an engine with none of its own takes every engine's (here the same 12), and
    there is none at all when fewer than MIN_INTERVAL_ROWS such rows exist."""
    from planner.accuracy.benchmark import profile_intervals

    key = {"prefill": "prefill", "decode_batched": "throughput"}[regime]
    plain = _two_sources("AB", regime, 1.0, **base)
    sub = _two_sources("CD", regime, np.r_[[0.5] * 6, [1.25] * 6], **subset)
    iv, _ = profile_intervals(pd.concat([plain, sub], ignore_index=True), "vllm")
    lo, hi, n = iv[key + suffix]
    assert n == 12 and lo == pytest.approx(0.5, rel=0.1) and hi == pytest.approx(1.25, rel=0.1)
    assert iv[key][0] <= 1.0 <= iv[key][1]
    other = pd.concat([plain.assign(runtime="sglang"), sub], ignore_index=True)  # sglang: plain rows only
    assert profile_intervals(other, "sglang")[0][key + suffix][2] == 12
    assert key + suffix not in profile_intervals(pd.concat([plain, sub.head(6)], ignore_index=True), "vllm")[0]


def test_a_thin_class_range_spans_the_engine_elsewhere_and_the_extrapolation_range():
    """An engine measured on one hardware class only (12 rows on amd-gpu, every one 2x slower than predicted: ratio
    0.5) and predicted on nvidia-gpu, where it has no row: the nvidia range is [min p10, max p90] of the engine's own
    rows (0.5-0.5) and the rows predicted by extrapolation (ratios 0.8-1.25 of two other sources), i.e. 0.5 to about
    1.2, and it contains 1 (before: 0.5-0.5, a range that excluded the class's own estimate). The amd range stays the
    engine's own rows there."""
    from planner.accuracy.benchmark import profile_intervals

    own = pd.DataFrame({"source": ["A"] * 6 + ["B"] * 6, "runtime": "vllm", "hw_class": "amd-gpu",
                        "regime": "decode_b1", "tp": 1, "anomalous": "", "level": "engine", "ratio": 0.5})
    ext = pd.DataFrame({"source": ["C"] * 6 + ["D"] * 6, "runtime": "tgi", "hw_class": "nvidia-gpu",
                        "regime": "decode_b1", "tp": 1, "anomalous": "", "level": "family",
                        "ratio": np.r_[np.linspace(0.8, 1.25, 6), np.linspace(0.8, 1.25, 6)]})
    res = pd.concat([own, ext], ignore_index=True)
    lo, hi, n = profile_intervals(res, "vllm", "nvidia-gpu")[0]["decode"]
    assert lo == pytest.approx(0.5) and 1.1 < hi <= 1.25 and n == 24
    assert profile_intervals(res, "vllm", "amd-gpu")[0]["decode"] == (pytest.approx(0.5), pytest.approx(0.5), 12)


def test_a_one_source_engine_takes_an_engine_fits_new_source_range():
    """An engine with 12 decode rows from one source, each predicted in LOSO by its family (level `family`, ratio
    0.7): those residuals are the family's error, not that of its profile (fitted on the same 12 rows). Its range is
    the p10-p90 of the rows other engines' own fits predicted for held-out sources (level `engine`: ratios 0.9-1.1
    over two sources), widened x1.3 in log space around their median. By hand: their source-weighted p10 / p90 are
    0.90 / 1.10, the median of the logs c = (ln 0.98 + ln 1.02) / 2 = -0.0002, so p10 = exp(c + 1.3 (ln 0.90 - c)) =
    0.872 and p90 = exp(c + 1.3 (ln 1.10 - c)) = 1.132; never 0.7-0.7."""
    from planner.accuracy.benchmark import EXTRAPOLATION_WIDEN, profile_intervals

    one = pd.DataFrame({"source": "X", "runtime": "exllamav2", "hw_class": "nvidia-gpu", "regime": "decode_b1",
                        "tp": 1, "anomalous": "", "level": "family", "ratio": np.full(12, 0.7)})
    r = np.r_[np.linspace(0.9, 1.1, 6), np.linspace(0.9, 1.1, 6)]
    eng = pd.DataFrame({"source": ["A"] * 6 + ["B"] * 6, "runtime": "llamacpp", "hw_class": "nvidia-gpu",
                        "regime": "decode_b1", "tp": 1, "anomalous": "", "level": "engine", "ratio": r})
    res = pd.concat([one, eng], ignore_index=True)
    lo, hi, n = profile_intervals(res, "exllamav2", "nvidia-gpu")[0]["decode"]
    x = np.log(r)
    q10, q90 = weighted_quantiles(x, source_weights(eng["source"]), [0.1, 0.9])
    c = np.median(x)
    assert lo == pytest.approx(np.exp(c + (q10 - c) * EXTRAPOLATION_WIDEN))
    assert hi == pytest.approx(np.exp(c + (q90 - c) * EXTRAPOLATION_WIDEN))
    assert lo == pytest.approx(0.872, abs=5e-4) and hi == pytest.approx(1.132, abs=5e-4)
    assert lo < 1.0 < hi and n == 12
    # an engine whose own fit did predict 12 of its rows (of three sources) from its other sources keeps them
    one["level"] = "engine"
    one["source"] = ["X"] * 4 + ["Y"] * 4 + ["Z"] * 4
    assert profile_intervals(pd.concat([one, eng], ignore_index=True), "exllamav2", "nvidia-gpu")[0]["decode"] == (
        pytest.approx(0.7), pytest.approx(0.7), 12)


def test_a_class_measured_by_one_source_is_extrapolated_like_a_thin_one():
    """vLLM with 12 prefill rows of one source A on amd-gpu, predicted in LOSO by its own fit (level `engine`) 2x
    too fast (ratio 0.5), and 12 rows of sources B and C on nvidia-gpu (ratios 0.9-1.1); other engines' rows
    predicted by extrapolation (D, E: 0.8-1.25). A's residuals are its offset from B and C, which the AMD profile
    fitted on A has absorbed: the AMD range is not 0.5-0.5 (a range excluding its own estimate) but [min p10, max
    p90] of the engine's rows on every class and the extrapolation range. By hand: A holds 12/sqrt(12) = 3.46 of
    the 3.46 + 2 x 6/sqrt(6) = 8.36 source weight of the engine's rows, over 10%, so p10 = 0.5; the p90 is the
    extrapolation range's, between 1.1 and 1.25. With A's rows split over three sources the class keeps 0.5-0.5."""
    from planner.accuracy.benchmark import profile_intervals

    r = np.linspace(0.9, 1.1, 6)
    amd = pd.DataFrame({"source": "A", "runtime": "vllm", "hw_class": "amd-gpu", "regime": "prefill", "tp": 1,
                        "anomalous": "", "level": "engine", "ratio": np.full(12, 0.5)})
    nv = pd.DataFrame({"source": ["B"] * 6 + ["C"] * 6, "runtime": "vllm", "hw_class": "nvidia-gpu",
                       "regime": "prefill", "tp": 1, "anomalous": "", "level": "engine", "ratio": np.r_[r, r]})
    ext = pd.DataFrame({"source": ["D"] * 6 + ["E"] * 6, "runtime": "tgi", "hw_class": "nvidia-gpu",
                        "regime": "prefill", "tp": 1, "anomalous": "", "level": "family",
                        "ratio": np.r_[np.linspace(0.8, 1.25, 6), np.linspace(0.8, 1.25, 6)]})
    res = pd.concat([amd, nv, ext], ignore_index=True)
    lo, hi, n = profile_intervals(res, "vllm", "amd-gpu")[0]["prefill"]
    assert lo == pytest.approx(0.5) and 1.1 < hi <= 1.25 and n == 36
    amd["source"] = ["A"] * 4 + ["A2"] * 4 + ["A3"] * 4
    res = pd.concat([amd, nv, ext], ignore_index=True)
    assert profile_intervals(res, "vllm", "amd-gpu")[0]["prefill"] == (pytest.approx(0.5), pytest.approx(0.5), 12)


def test_a_two_source_class_range_is_their_shape_around_the_engines_offsets():
    """vLLM on amd-gpu: 10 rows of source A at log-ratio 0.2 +- 0.1 and 10 of B at -0.3 (its own fit on held-out
    sources, level `engine`), and on nvidia-gpu C, D, E (10 rows each at 0.0, 0.4, -0.6). Two sources' residuals
    are two offsets, not their spread, so the AMD range is A's and B's rows centred on their own medians (shape
    -0.1..0.1 and 0) around each offset of the engine's five sources (A 0.2, B -0.3, C 0, D 0.4, E -0.6), each
    offset weighing sqrt(10). By hand: the lowest cluster (E, -0.6 +- 0.1) holds 1/5 of the weight, so p10 lies in
    [-0.7, -0.5]; the highest (D, 0.4 +- 0.1) holds p90, in [0.3, 0.5]. A's and B's residuals alone gave
    about -0.3 to 0.2."""
    from planner.accuracy.benchmark import profile_intervals

    shape = np.linspace(-0.1, 0.1, 10)
    lr = np.r_[0.2 + shape, np.full(10, -0.3), np.zeros(10), np.full(10, 0.4), np.full(10, -0.6)]
    src = ["A"] * 10 + ["B"] * 10 + ["C"] * 10 + ["D"] * 10 + ["E"] * 10
    res = pd.DataFrame({"source": src, "runtime": "vllm", "hw_class": ["amd-gpu"] * 20 + ["nvidia-gpu"] * 30,
                        "regime": "prefill", "tp": 1, "anomalous": "", "level": "engine", "ratio": np.exp(lr)})
    lo, hi, n = profile_intervals(res, "vllm", "amd-gpu")[0]["prefill"]
    assert -0.7 <= np.log(lo) <= -0.5 and 0.3 <= np.log(hi) <= 0.5 and n == 20
    centred = np.r_[shape, np.zeros(10)]
    x = np.concatenate([o + centred for o in (0.2, -0.3, 0.0, 0.4, -0.6)])
    q10, q90 = weighted_quantiles(x, np.full(len(x), 1.0), [0.1, 0.9])
    assert np.log(lo) == pytest.approx(q10, abs=1e-12) and np.log(hi) == pytest.approx(q90, abs=1e-12)


def test_the_estimate_range_of_a_row_is_drawn_without_its_source():
    """profile_range_loso: llama.cpp rows of sources A, B, C on nvidia-gpu at ratios 0.8, 1.0, 1.25 (20 rows
    each, level `engine`). A row of A takes the range of B's and C's rows: two sources, so their shape (none: each
    is constant) around the offsets of the engine's other held-out sources in the key, which are B and C again:
    p10 1.0, p90 1.25, and A's 0.8 is outside. A row of B takes A's and C's: 0.8-1.25, and B's 1.0 is inside."""
    from planner.accuracy.benchmark import profile_range_loso

    res = pd.DataFrame({"source": ["A"] * 20 + ["B"] * 20 + ["C"] * 20, "runtime": "llamacpp",
                        "hw_class": "nvidia-gpu", "regime": "decode_b1", "kind": "decode_rate", "tp": 1,
                        "anomalous": "", "level": "engine", "ratio": np.repeat([0.8, 1.0, 1.25], 20)})
    lo, hi = profile_range_loso(res)
    assert lo[0] == pytest.approx(1.0) and hi[0] == pytest.approx(1.25)
    assert lo[20] == pytest.approx(0.8) and hi[20] == pytest.approx(1.25)
    assert lo[40] == pytest.approx(0.8) and hi[40] == pytest.approx(1.0)


def test_committed_profile_ranges_hold_on_their_own_rows():
    """The committed vLLM prefill ranges of its AMD class (whose 20 own prefill/TTFT rows, measured slower than
    predicted, are of one source: dstack's vLLM-ROCm 0.6.3) and of its NVIDIA class (fewer than 10 prefill rows)
    reach from the engine-wide low end (below 0.5) up to the extrapolation range's high end (above 1); and the committed
    ranges (per hardware class where the class has >= 10 of the engine's rows) cover 60-95% of
    each engine's own rows in reports/accuracy_rows.csv (about 80% by construction, the quantiles being
    source-weighted): the rows its own fit predicted from its other sources (benchmark.OWN_FIT_LEVELS), which are
    what its range is drawn from. An engine measured by one source has no such row (its LOSO rows came from its
    family); its range, an engine fit's error on a new source, must contain its own estimate and hold at least 75%
    of the rows its profile was fitted to (pred_fitted), where ExLlamaV2's decode range had been 1.07-1.51 x a
    headline fitted to those rows."""
    from pathlib import Path

    from planner.accuracy.benchmark import MIN_INTERVAL_ROWS, OWN_FIT_LEVELS
    from planner.accuracy.data import interval_keys
    from planner.runtimes import load_runtime

    rows = pd.read_csv(Path(__file__).resolve().parents[2] / "reports" / "accuracy_rows.csv")
    rows = rows[rows["anomalous"].isna()]
    vllm = load_runtime("vllm")
    by_class = {c.key: c.intervals["prefill"] for c in vllm.classes}
    for cls in ("amd-gpu", "nvidia-gpu"):
        assert by_class[cls].p10 < 0.5 and by_class[cls].p90 > 1.0, cls
    pred_t_over_meas_t = np.where(rows["kind"].isin(["ttft", "tpot", "e2e"]), rows["pred_loso"] / rows["measured"],
                                  rows["measured"] / rows["pred_loso"])
    fitted = np.where(rows["kind"].isin(["ttft", "tpot", "e2e"]), rows["pred_fitted"] / rows["measured"],
                      rows["measured"] / rows["pred_fitted"])
    rows = rows.assign(speed_ratio=pred_t_over_meas_t, fitted_ratio=fitted, key=interval_keys(rows),
                       own_fit=rows["level"].isin(OWN_FIT_LEVELS))
    checked = one_source = 0
    for (rt, key), g in rows.groupby(["runtime", "key"]):
        ivs = {c.key: c.intervals[key] for c in load_runtime(rt).classes}  # per hardware class where it has rows
        lo = g["hw_class"].map(lambda c: ivs[c].p10)
        hi = g["hw_class"].map(lambda c: ivs[c].p90)
        own = g["own_fit"]
        if own.sum() >= 30:
            inside = ((g["speed_ratio"] >= lo) & (g["speed_ratio"] <= hi))[own].mean()
            assert 0.6 <= inside <= 0.95, (rt, key, inside)
            checked += 1
        elif own.sum() == 0 and len(g) >= MIN_INTERVAL_ROWS:
            assert (lo < 1.0).all() and (hi > 1.0).all(), (rt, key)
            inside = ((g["fitted_ratio"] >= lo) & (g["fitted_ratio"] <= hi)).mean()
            assert inside >= 0.75, (rt, key, inside)
            one_source += 1
    assert checked >= 5 and one_source >= 4


def test_a_regime_with_one_other_source_takes_its_shape_and_the_offsets_of_the_key():
    """e2e row of source A; the regime's only other source B (10 rows, log-ratios 0.2 +- 0.1: its offset 0.2 and a
    narrow shape); the interval key (throughput) adds C (4 rows at 0.5) and D (9 rows at -0.3). One other source's
    residuals are its offset, not a spread, so the range is B's shape around each key source's offset: three
    clusters -0.3 +- 0.1 (weight sqrt(9) = 3), 0.2 +- 0.1 (sqrt(10) = 3.16) and 0.5 +- 0.1 (sqrt(4) = 2). By hand:
    the lowest cluster holds 3 / 8.16 = 37% of the weight and the highest 25%, so p10 lies in [-0.4, -0.2] and p90
    in [0.4, 0.6]; B's residuals alone would have given 0.1-0.3."""
    b = 0.2 + np.linspace(-0.1, 0.1, 10)
    lr = np.concatenate([b, np.full(4, 0.5), np.full(9, -0.3), [0.0]])
    src = ["B"] * 10 + ["C"] * 4 + ["D"] * 9 + ["A"]
    reg = ["e2e"] * 10 + ["decode_batched"] * 13 + ["e2e"]
    df = pd.DataFrame({"source": src, "regime": reg, "tp": 8, "anomalous": ""})
    lo, hi = loso_intervals(df, lr, np.array(["engine"] * len(src), dtype=object))
    assert -0.4 <= np.log(lo[23]) <= -0.2 and 0.4 <= np.log(hi[23]) <= 0.6
    centred = np.linspace(-0.1, 0.1, 10)
    x = np.concatenate([o + centred for o in (0.2, 0.5, -0.3)])
    w = np.concatenate([np.full(10, np.sqrt(n) / 10) for n in (10, 4, 9)])
    q10, q90 = weighted_quantiles(x, w, [0.1, 0.9])
    assert np.log(lo[23]) == pytest.approx(q10, abs=1e-12) and np.log(hi[23]) == pytest.approx(q90, abs=1e-12)


def test_a_regime_with_two_other_sources_takes_their_shapes_and_the_offsets_of_the_key():
    """As above with a second e2e source E (10 rows at -0.1 +- 0.05): two sources' medians are two draws of an
    offset, not its spread, so the range is B's and E's rows, each centred on its own source's median, around every
    key offset (B 0.2, E -0.1, C 0.5, D -0.3). By hand: a shape row weighs 1/sqrt(10) within each offset and an
    offset sqrt(rows of its source); the lowest cluster (D, -0.3, weight 3 of 3.16 + 3.16 + 2 + 3 = 11.32) holds 26%
    of the weight, so p10 lies in D's cluster, [-0.4, -0.2]; the highest (C, 0.5, 2 / 11.32 = 18%) holds p90, in
    [0.4, 0.6]. Pooling B's and E's rows (the rule for three or more sources) would have given -0.13 to 0.27."""
    b = 0.2 + np.linspace(-0.1, 0.1, 10)
    e = -0.1 + np.linspace(-0.05, 0.05, 10)
    lr = np.concatenate([b, e, np.full(4, 0.5), np.full(9, -0.3), [0.0]])
    src = ["B"] * 10 + ["E"] * 10 + ["C"] * 4 + ["D"] * 9 + ["A"]
    reg = ["e2e"] * 20 + ["decode_batched"] * 13 + ["e2e"]
    df = pd.DataFrame({"source": src, "regime": reg, "tp": 8, "anomalous": ""})
    lo, hi = loso_intervals(df, lr, np.array(["engine"] * len(src), dtype=object))
    assert -0.4 <= np.log(lo[33]) <= -0.2 and 0.4 <= np.log(hi[33]) <= 0.6
    shape = np.concatenate([np.linspace(-0.1, 0.1, 10), np.linspace(-0.05, 0.05, 10)])
    offsets, n = (0.2, -0.1, 0.5, -0.3), (10, 10, 4, 9)
    x = np.concatenate([o + shape for o in offsets])
    w = np.concatenate([np.full(20, np.sqrt(k) / np.sqrt(10)) for k in n])
    q10, q90 = weighted_quantiles(x, w, [0.1, 0.9])
    assert np.log(lo[33]) == pytest.approx(q10, abs=1e-12) and np.log(hi[33]) == pytest.approx(q90, abs=1e-12)
    pooled = weighted_quantiles(lr[:20], source_weights(src[:20]), [0.1, 0.9])
    assert pooled[0] > -0.2 and pooled[1] < 0.3  # the pooled pair would have been far narrower


def test_a_whole_request_rate_at_batch_1_informs_the_throughput_range_not_the_decode_one():
    """A batch-1 `throughput` row (output tokens over the whole request, prefill included) keys as 'throughput', as
    an end-to-end latency does; batch-1 TPOT and tg rows key as 'decode'. So an engine whose only batch-1 rows with
    a range of their own are whole-request rates 5x slower than predicted (ratio 0.2: a 128k-token prompt's
    prefill, 98% of the request) takes the extrapolation range for decode (0.8-1.25 here), not 0.2."""
    from planner.accuracy.benchmark import profile_intervals
    from planner.accuracy.data import interval_keys

    frame = pd.DataFrame({"regime": ["decode_b1", "decode_b1", "decode_b1", "decode_batched", "e2e", "prefill"],
                          "kind": ["throughput", "tpot", "decode_rate", "tpot", "e2e", "ttft"]})
    assert list(interval_keys(frame)) == ["throughput", "decode", "decode", "throughput", "throughput", "prefill"]
    own = pd.DataFrame({"source": ["A"] * 12, "runtime": "vllm", "hw_class": "amd-gpu", "regime": "decode_b1",
                        "kind": "throughput", "tp": 1, "anomalous": "", "level": "engine", "ratio": 0.2})
    ext = pd.DataFrame({"source": ["C"] * 6 + ["D"] * 6, "runtime": "tgi", "hw_class": "nvidia-gpu",
                        "regime": "decode_b1", "kind": "tpot", "tp": 1, "anomalous": "", "level": "family",
                        "ratio": np.r_[np.linspace(0.8, 1.25, 6), np.linspace(0.8, 1.25, 6)]})
    iv = profile_intervals(pd.concat([own, ext], ignore_index=True), "vllm", "amd-gpu")[0]
    lo, hi, n = iv["decode"]
    assert 0.8 <= lo < 0.9 and 1.1 < hi <= 1.25 and n == 12  # the extrapolated tpot rows
    assert iv["throughput"] == (pytest.approx(0.2), pytest.approx(0.2), 12)  # the engine's own whole-request rows


def test_a_served_rows_loso_range_spans_the_served_rows_of_other_sources():
    """loso_intervals: a row measured under load takes [min p10, max p90] of its regime's range and that of the
    served rows of other sources (here two served sources at 0.5x and 1.25x the predicted speed, beside two static
    ones at 1x); the same row measured as a static batch keeps the regime's range, never wider."""
    n_static, n_served = 20, 6
    src = ["A"] * 10 + ["B"] * 10 + ["C"] * n_served + ["D"] * n_served + ["E"]
    lr = np.r_[np.zeros(n_static), np.full(n_served, np.log(0.5)), np.full(n_served, np.log(1.25)), 0.0]
    mode = ["batch"] * n_static + ["queue"] * (2 * n_served) + ["queue"]
    df = pd.DataFrame({"source": src, "regime": "decode_batched", "anomalous": "", "ttft_mode": mode})
    level = np.array(["engine"] * len(df), dtype=object)
    lo, hi = loso_intervals(df, lr, level)
    q10, q50, q90 = weighted_quantiles(lr[n_static:-1], source_weights(src[n_static:-1]), [0.1, 0.5, 0.9])
    assert lo[-1] == pytest.approx(np.exp(q10)) and hi[-1] == pytest.approx(np.exp(q90))
    assert lo[-1] < 0.6 and hi[-1] > 1.2
    static = df.assign(ttft_mode="batch")
    lo_s, hi_s = loso_intervals(static, lr, level)
    assert lo_s[-1] >= lo[-1] and hi_s[-1] <= hi[-1]
