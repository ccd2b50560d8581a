"""Fit engine profiles to published rows (which rows: planner/accuracy/benchmark.py, leave-one-source-out).
Rows the data's own caveats call anomalous are never fitted.

Parameters per (runtime, class) (see planner/runtimes.py): bandwidth_fraction, compute_fraction,
compute_half_rows, kernel_overhead_us, step_overhead_ms and dequant_overhead per weight-only quantized format
present. They are fitted in an unconstrained space (logit for fractions, log for the rest) by Gauss-Newton with
Levenberg-Marquardt damping and Huber weights (delta 0.15 in log ratio) on r = log(predicted time / measured
time), plus a weak Gaussian prior (sd 2 in that space) towards the documented GPU defaults
(hardware_specs/defaults/efficiency.yaml) so that parameters the rows do not constrain (e.g. compute terms for a
class with decode rows only) stay at physical values instead of drifting. numpy only.

Intervals come from leave-one-source-out residuals (benchmark.loso_intervals, benchmark.profile_intervals).
"""

from __future__ import annotations

import numpy as np

from .predict import Design, predict_time_s

HUBER_DELTA = 0.15
PRIOR_SD = 2.0
RESIDUAL_SD = 0.1
WEIGHT_ONLY_QUANTIZED = ("q4_0", "q8_0", "q4_k_m", "q5_k_m", "q6_k", "int8", "int4-g32", "int4-g64", "int4-g128",
                         "gptq-int4", "awq-int4", "nf4", "nf4-dq")
# prior centre: the GPU kind defaults, a small GEMM half point, 10% dequantization cost
PRIOR = {"bandwidth_fraction": 0.80, "compute_fraction": 0.70, "compute_half_rows": 16.0, "kernel_overhead_us": 3.0,
         "step_overhead_ms": 0.3, "matmul_tflops_per_watt": 1.0, "dequant": 0.10}
POWER_STARTS = (0.3, 1.0, 5.0)  # TFLOP/s per W
# The sustained-power cap on GEMMs (tdp_w x matmul_tflops_per_watt) is not fitted any more (issue 11): TFLOP/s per
# watt differs by a factor 3-4 between GPU generations (A100 0.78, H100 1.41, B200 2.25 dense fp16 TFLOP/s per W),
# so one value per vendor class capped newer parts far below their peak (TensorRT-LLM's 1.625 TFLOP/s/W put a
# 1,000 W B200 at 1.6 PFLOP/s whatever the format). 0 = no cap; the GEMM roll-off is compute_half_rows' job.
FIT_POWER_CAP = False
BASE = ("bandwidth_fraction", "compute_fraction", "compute_half_rows", "kernel_overhead_us", "step_overhead_ms",
        "matmul_tflops_per_watt")


def _logit(p):
    return np.log(p / (1 - p))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


class _Problem:
    def __init__(self, d: Design, formats: list[str], fp16_accumulate: bool = False):
        self.d, self.formats, self.fp16_accumulate = d, formats, fp16_accumulate
        self.fmt_idx = np.array([formats.index(f) if f in formats else -1 for f in d.fmt])
        self.x0 = np.array([_logit(PRIOR["bandwidth_fraction"]), _logit(PRIOR["compute_fraction"]),
                            np.log(PRIOR["compute_half_rows"]), np.log(PRIOR["kernel_overhead_us"]),
                            np.log(PRIOR["step_overhead_ms"]), np.log(PRIOR["matmul_tflops_per_watt"])]
                           + [np.log(PRIOR["dequant"])] * len(formats))

    def unpack(self, x) -> dict:
        v = {"bandwidth_fraction": float(_sigmoid(x[0])), "compute_fraction": float(_sigmoid(x[1])),
             "compute_half_rows": float(np.exp(x[2])), "kernel_overhead_us": float(np.exp(x[3])),
             "step_overhead_ms": float(np.exp(x[4])),
             "matmul_tflops_per_watt": float(np.exp(x[5])) if FIT_POWER_CAP else 0.0}
        v["dequant_overhead"] = {f: float(np.exp(x[6 + i])) for i, f in enumerate(self.formats)}
        v["fp16_accumulate"] = bool(np.all(self.fp16_accumulate))
        return v

    def times(self, x) -> np.ndarray:
        v = self.unpack(x)
        n = self.d.n_rows
        p = {k: np.full(n, v[k]) for k in BASE}
        p["fp16_accumulate"] = np.broadcast_to(np.asarray(self.fp16_accumulate, dtype=np.float64), (n,))
        dq = np.array([v["dequant_overhead"][f] for f in self.formats] + [0.0])
        p["dequant_factor"] = 1.0 + dq[self.fmt_idx]
        return predict_time_s(self.d, p)

    def residuals(self, x) -> np.ndarray:
        return np.log(self.times(x) / self.d.measured_time_s)


def fit_design(d: Design, formats: list[str], fp16_accumulate: bool = False,
               iterations: int = 60, x_init=None) -> tuple[dict, np.ndarray]:
    """MAP fit of one class; returns (parameters, residuals log(pred/measured) of the design's rows).
    fp16_accumulate is not fitted: it is what the runtime's code does (set per runtime in benchmark.py)."""
    prob = _Problem(d, formats, fp16_accumulate)
    if x_init is not None:
        return _solve(prob, np.array(x_init, dtype=np.float64), iterations)
    best = None
    for tpw in (POWER_STARTS if FIT_POWER_CAP else POWER_STARTS[1:2]):  # the power cap is flat where it does not bind: start on both sides of it
        x0 = prob.x0.copy()
        x0[5] = np.log(tpw)
        v, r, f, x = _solve(prob, x0, iterations, full=True)
        if best is None or f < best[2]:
            best = (v, r, f, x)
    return best[0], best[1]


def _solve(prob: "_Problem", x: np.ndarray, iterations: int, full: bool = False):
    k = len(x)
    prior_w = (RESIDUAL_SD / PRIOR_SD) ** 2

    def objective(x):
        r = prob.residuals(x)
        a = np.abs(r)
        hub = np.where(a <= HUBER_DELTA, 0.5 * r ** 2, HUBER_DELTA * (a - 0.5 * HUBER_DELTA))
        return hub.sum() + 0.5 * prior_w * np.sum((x - prob.x0) ** 2), r

    f, r = objective(x)
    lam = 1e-2
    for _ in range(iterations):
        J = np.empty((len(r), k))
        h = 1e-5
        for j in range(k):
            xp = x.copy()
            xp[j] += h
            J[:, j] = (prob.residuals(xp) - r) / h
        w = np.minimum(1.0, HUBER_DELTA / np.maximum(np.abs(r), 1e-12))
        A = J.T @ (J * w[:, None]) + prior_w * np.eye(k)
        g = J.T @ (w * r) + prior_w * (x - prob.x0)
        improved = False
        for _ in range(10):
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-9), -g)
            xn = np.clip(x + step, -20, 20)
            fn, rn = objective(xn)
            if fn < f:
                x, f, r, lam, improved = xn, fn, rn, max(lam / 3, 1e-7), True
                break
            lam *= 4
        if not improved or np.max(np.abs(step)) < 1e-6:
            break
    return (prob.unpack(x), r, f, x) if full else (prob.unpack(x), r)


def pack(prob_formats: list[str], v: dict) -> np.ndarray:
    """Unconstrained vector of a parameter dict (the inverse of _Problem.unpack), for warm starts."""
    return np.array([_logit(v["bandwidth_fraction"]), _logit(v["compute_fraction"]), np.log(v["compute_half_rows"]),
                     np.log(v["kernel_overhead_us"]), np.log(v["step_overhead_ms"]),
                     np.log(v["matmul_tflops_per_watt"] or PRIOR["matmul_tflops_per_watt"])]
                    + [np.log(v["dequant_overhead"][f]) for f in prob_formats])


WEIGHT_FORMATS_SET = set(WEIGHT_ONLY_QUANTIZED)


def predict_with(d: Design, v: dict) -> np.ndarray:
    """Times of the design's rows under one parameter dict (as fit_design returns)."""
    n = d.n_rows
    p = {k: np.full(n, v[k]) for k in BASE}
    p["fp16_accumulate"] = np.full(n, float(v.get("fp16_accumulate", False)))
    dq = v.get("dequant_overhead") or {}
    p["dequant_factor"] = np.array([1.0 + dq.get(f, 0.0) for f in d.fmt])
    return predict_time_s(d, p)
