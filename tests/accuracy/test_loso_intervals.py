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
