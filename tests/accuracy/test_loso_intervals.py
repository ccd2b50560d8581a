"""planner.accuracy.benchmark.loso_intervals: a row's p10-p90 is the union of the ranges of its regime and of its
regime x parallelism group, each from the leave-one-source-out residuals of *other* sources only."""

import numpy as np
import pandas as pd
import pytest

from planner.accuracy.benchmark import loso_intervals


def _frame():
    # source A: 20 single-GPU rows, all exactly right (log-ratio 0)
    # source B: 20 tensor-parallel rows, log-ratios spread evenly over [-0.5, 0.5]
    # source C: 1 tensor-parallel row (the row whose range we check)
    src = ["A"] * 20 + ["B"] * 20 + ["C"]
    tp = [1] * 20 + [2] * 20 + [2]
    lr = np.concatenate([np.zeros(20), np.linspace(-0.5, 0.5, 20), [0.3]])
    df = pd.DataFrame({"source": src, "regime": "decode_batched", "tp": tp, "anomalous": ""})
    return df, lr, np.array(["engine"] * len(src), dtype=object)


def test_multi_gpu_row_gets_the_wider_of_its_regime_and_its_parallelism_group():
    df, lr, level = _frame()
    lo, hi = loso_intervals(df, lr, level)
    # regime group for C = A and B (40 rows: 20 zeros + B): p10/p90 of that pool
    q_reg = np.quantile(np.concatenate([np.zeros(20), lr[20:40]]), [0.1, 0.9])
    # parallelism group for C = B only (the tensor-parallel rows of other sources)
    q_tp = np.quantile(lr[20:40], [0.1, 0.9])
    assert q_tp[0] < q_reg[0] and q_tp[1] > q_reg[1]        # B alone is wider than the pooled regime
    assert lo[40] == pytest.approx(np.exp(q_tp[0]), rel=1e-12)
    assert hi[40] == pytest.approx(np.exp(q_tp[1]), rel=1e-12)
    # by hand: B's 20 evenly spaced values over [-0.5, 0.5] have p10 at index 1.9 -> -0.5 + 1.9 / 19 = -0.4
    assert np.log(lo[40]) == pytest.approx(-0.4, abs=1e-12)
    assert np.log(hi[40]) == pytest.approx(0.4, abs=1e-12)


def test_single_gpu_row_never_sees_its_own_source():
    df, lr, level = _frame()
    lo, hi = loso_intervals(df, lr, level)
    # A's rows: regime group = B + C (21 rows); no other single-GPU source, so the parallelism group falls back to
    # every other row (the same 21): the range is that pool's p10-p90, whatever A's own residuals are
    q = np.quantile(lr[20:], [0.1, 0.9])
    assert lo[0] == pytest.approx(np.exp(q[0]), rel=1e-12) and hi[0] == pytest.approx(np.exp(q[1]), rel=1e-12)


def test_extrapolated_rows_are_widened_around_each_groups_median():
    df, lr, level = _frame()
    level[40] = "family"
    lo, hi = loso_intervals(df, lr, level)
    q10, q50, q90 = np.quantile(lr[20:40], [0.1, 0.5, 0.9])
    assert np.log(lo[40]) == pytest.approx(q50 + (q10 - q50) * 1.3, abs=1e-12)
    assert np.log(hi[40]) == pytest.approx(q50 + (q90 - q50) * 1.3, abs=1e-12)
