"""Fit engine profiles to published rows (which rows: planner/accuracy/benchmark.py, leave-one-source-out).
Rows the data's own caveats call anomalous are never fitted.

Parameters per (runtime, class) (see planner/runtimes.py): bandwidth_fraction, compute_fraction,
compute_half_rows, kernel_overhead_us, step_overhead_ms, dequant_overhead per weight-only quantized format
present, a compute fraction per other weight format where two or more have enough rows (own_fraction_formats),
sm_bandwidth_gbs (the bandwidth one SM sustains, roofline.effective_bandwidth_bytes_s), and where some decode
attention op of the rows makes more than one pass over a K/V head, kv_reread_share (the DRAM cost of each pass after
the first, roofline.kv_passes; log space, prior centre 1). The SM cap is
a model choice made by the data: the class is fitted without it and with it, and it is kept only when it binds on
some row and lowers the objective by more than the BIC price of one parameter (2 x gain / RESIDUAL_SD^2 > ln n);
otherwise sm_bandwidth_gbs = 0 (no cap), so an engine whose kernels saturate memory gets no arbitrary cap that
would bite on a faster GPU it was never fitted on. It is fitted only from the engine's own rows on the class
(benchmark._fit): a cap is a property of one engine's kernels on one kind of hardware. They are fitted in an unconstrained space (logit for fractions, log for the rest) by Gauss-Newton with
Levenberg-Marquardt damping and Huber weights (delta 0.15 in log ratio) on r = log(predicted time / measured
time), plus a weak Gaussian prior (sd 2 in that space) towards the documented GPU defaults
(hardware_specs/defaults/efficiency.yaml) so that parameters the rows do not constrain (e.g. compute terms for a
class with decode rows only) stay at physical values instead of drifting. numpy only.

Intervals come from leave-one-source-out residuals (benchmark.loso_intervals, benchmark.profile_intervals).
"""

from __future__ import annotations

import numpy as np

from ..quantization import DEQUANT_FITTED_FORMATS, dequant_overhead_for
from .predict import Design, predict_time_s

HUBER_DELTA = 0.15
CAP_ITERATIONS = 20  # the capped fit starts from the uncapped solution: a few steps move the other parameters
PRIOR_SD = 2.0
RESIDUAL_SD = 0.1
# prior centre: the GPU kind defaults, a small GEMM half point, 10% dequantization cost
PRIOR = {"bandwidth_fraction": 0.80, "compute_fraction": 0.70, "compute_half_rows": 16.0, "kernel_overhead_us": 3.0,
         "step_overhead_ms": 0.3, "matmul_tflops_per_watt": 1.0, "dequant": 0.10,
         # mixed-input (Marlin-style) weight-only GEMMs: a share of the engine's bandwidth, centred below 1 (they
         # unpack and scale in registers beside the loads); fitted only where the engine has such rows
         "weight_only_bandwidth_share": 0.8,
         # GB/s per SM where the cap is tried: binding on HBM parts (A100 18.9, H100 SXM 25.4 datasheet GB/s per SM),
         # not on GDDR ones (RTX 4090 7.9); the fit moves it where the rows say
         "sm_bandwidth_gbs": 10.0,
         # a decode attention's K/V passes after the first (roofline.kv_passes): each from DRAM; fitted only where
         # the engine's rows make such passes
         "kv_reread_share": 1.0}
KV_REREAD_MAX = 8.0  # Efficiency.kv_reread_share's upper bound
POWER_STARTS = (0.3, 1.0, 5.0)  # TFLOP/s per W
# The sustained-power cap on GEMMs (tdp_w x matmul_tflops_per_watt) is not fitted any more (issue 11): TFLOP/s per
# watt differs by a factor 3-4 between GPU generations (A100 0.78, H100 1.41, B200 2.25 dense fp16 TFLOP/s per W),
# so one value per vendor class capped newer parts far below their peak (TensorRT-LLM's 1.625 TFLOP/s/W put a
# 1,000 W B200 at 1.6 PFLOP/s whatever the format). 0 = no cap; the GEMM roll-off is compute_half_rows' job.
FIT_POWER_CAP = False
POWER_INDEX, CAP_INDEX = 5, 6  # slots of matmul_tflops_per_watt and sm_bandwidth_gbs in the fitted vector
BASE = ("bandwidth_fraction", "compute_fraction", "compute_half_rows", "kernel_overhead_us", "step_overhead_ms",
        "matmul_tflops_per_watt")


def _logit(p):
    return np.log(p / (1 - p))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


class _Problem:
    def __init__(self, d: Design, formats: list[str], fp16_accumulate: bool = False, sm_cap: bool = False,
                 frac_formats: tuple[str, ...] = (), sync_mma: bool = False, dequant_tile=0,
                 weight_only_regime=False):
        self.d, self.formats, self.fp16_accumulate, self.sm_cap = d, formats, fp16_accumulate, sm_cap
        self.sync_mma, self.dequant_tile, self.weight_only_regime = sync_mma, dequant_tile, weight_only_regime
        self.frac_formats = list(frac_formats)
        self.fmt_idx = np.array([formats.index(f) if f in formats else -1 for f in d.fmt])
        self.frac_idx = np.array([self.frac_formats.index(f) if f in self.frac_formats else -1 for f in d.fmt])
        # the mixed-input share is a parameter only where some row runs such a GEMM (else: the prior centre)
        self.wo_share = bool(np.any(d.mixed & (np.broadcast_to(np.asarray(weight_only_regime, dtype=np.float64),
                                                               (d.n_rows,))[d.row] > 0)))
        # the re-read share is a parameter only where some decode attention op makes more than one pass
        self.reread = bool(np.any(d.kv_reread > 0))
        self.x0 = np.array([_logit(PRIOR["bandwidth_fraction"]), _logit(PRIOR["compute_fraction"]),
                            np.log(PRIOR["compute_half_rows"]), np.log(PRIOR["kernel_overhead_us"]),
                            np.log(PRIOR["step_overhead_ms"]), np.log(PRIOR["matmul_tflops_per_watt"]),
                            np.log(PRIOR["sm_bandwidth_gbs"])]
                           + [np.log(PRIOR["dequant"])] * len(formats)
                           + [_logit(PRIOR["compute_fraction"])] * len(self.frac_formats)
                           + [_logit(PRIOR["weight_only_bandwidth_share"])] * self.wo_share
                           + [np.log(PRIOR["kv_reread_share"])] * self.reread)

    @property
    def unused(self) -> set[int]:
        """Indices of the vector that unpack ignores (the power cap unless FIT_POWER_CAP, the SM cap unless tried)."""
        return ({POWER_INDEX} if not FIT_POWER_CAP else set()) | ({CAP_INDEX} if not self.sm_cap else set())

    def unpack(self, x) -> dict:
        v = {"bandwidth_fraction": float(_sigmoid(x[0])), "compute_fraction": float(_sigmoid(x[1])),
             "compute_half_rows": float(np.exp(x[2])), "kernel_overhead_us": float(np.exp(x[3])),
             "step_overhead_ms": float(np.exp(x[4])),
             "matmul_tflops_per_watt": float(np.exp(x[POWER_INDEX])) if FIT_POWER_CAP else 0.0}
        v["sm_bandwidth_gbs"] = float(np.exp(x[CAP_INDEX])) if self.sm_cap else 0.0
        v["dequant_overhead"] = {f: float(np.exp(x[7 + i])) for i, f in enumerate(self.formats)}
        k = 7 + len(self.formats)
        v["format_compute_fraction"] = {f: float(_sigmoid(x[k + i])) for i, f in enumerate(self.frac_formats)}
        v["weight_only_bandwidth_share"] = (float(_sigmoid(x[k + len(self.frac_formats)])) if self.wo_share
                                            else PRIOR["weight_only_bandwidth_share"])
        k_re = k + len(self.frac_formats) + self.wo_share
        v["kv_reread_share"] = (float(min(np.exp(x[k_re]), KV_REREAD_MAX)) if self.reread
                                else PRIOR["kv_reread_share"])
        v["fp16_accumulate"] = bool(np.all(self.fp16_accumulate))
        v["sync_mma"] = bool(np.all(self.sync_mma))
        v["weight_only_regime"] = bool(np.all(self.weight_only_regime))
        return v

    def times(self, x) -> np.ndarray:
        v = self.unpack(x)
        n = self.d.n_rows
        p = {k: np.full(n, v[k]) for k in BASE}
        p["sm_bandwidth_gbs"] = np.full(n, v["sm_bandwidth_gbs"])
        p["fp16_accumulate"] = np.broadcast_to(np.asarray(self.fp16_accumulate, dtype=np.float64), (n,))
        p["sync_mma"] = np.broadcast_to(np.asarray(self.sync_mma, dtype=np.float64), (n,))
        p["dequant_tile_tokens"] = np.broadcast_to(np.asarray(self.dequant_tile, dtype=np.float64), (n,))
        p["weight_only_regime"] = np.broadcast_to(np.asarray(self.weight_only_regime, dtype=np.float64), (n,))
        p["weight_only_bandwidth_share"] = np.full(n, v["weight_only_bandwidth_share"])
        p["kv_reread_share"] = np.full(n, v["kv_reread_share"])
        dq = np.array([v["dequant_overhead"][f] for f in self.formats] + [0.0])
        p["dequant_factor"] = 1.0 + dq[self.fmt_idx]
        if self.frac_formats:
            fr = np.array([v["format_compute_fraction"][f] for f in self.frac_formats] + [0.0])
            p["matmul_fraction"] = fr[self.frac_idx]
        return predict_time_s(self.d, p)

    def residuals(self, x) -> np.ndarray:
        return np.log(self.times(x) / self.d.measured_time_s)


def fit_design(d: Design, formats: list[str], fp16_accumulate: bool = False,
               iterations: int = 60, x_init=None, sm_cap: bool = True,
               frac_formats: tuple[str, ...] = (), sync_mma: bool = False,
               dequant_tile=0, weight_only_regime=False) -> tuple[dict, np.ndarray]:
    """MAP fit of one class; returns (parameters, residuals log(pred/measured) of the design's rows).
    fp16_accumulate, sync_mma, dequant_tile (tokens per dequantizing tile, Efficiency.dequant_tile_tokens) and
    weight_only_regime (Efficiency.weight_only_regime) are not fitted: they are what the runtime's code does (set per
    runtime in benchmark.py; scalars or per-row arrays).
    sm_cap: try the SM bandwidth cap (module docstring); False = no cap. frac_formats: native weight formats that
    get a compute fraction of their own (own_fraction_formats)."""
    if x_init is not None:
        return _solve(_Problem(d, formats, fp16_accumulate, sm_cap, frac_formats, sync_mma, dequant_tile,
                               weight_only_regime),
                      np.array(x_init, dtype=np.float64), iterations)
    prob = _Problem(d, formats, fp16_accumulate, False, frac_formats, sync_mma, dequant_tile, weight_only_regime)
    v, r, f, x = _solve(prob, prob.x0.copy(), iterations, full=True)
    if sm_cap and np.any(d.sm > 0):  # try the cap, from the uncapped solution
        capped = _Problem(d, formats, fp16_accumulate, True, frac_formats, sync_mma, dequant_tile,
                          weight_only_regime)
        vc, rc, fc, _ = _solve(capped, np.where(np.arange(len(capped.x0)) == CAP_INDEX, capped.x0, x), CAP_ITERATIONS,
                               full=True)
        if sm_cap_binds(d, vc) and 2 * (f - fc) / RESIDUAL_SD ** 2 > np.log(max(d.n_rows, 2)):
            return vc, rc  # the cap earns its parameter (BIC)
    return v, r


def sm_cap_binds(d: Design, v: dict) -> bool:
    """Whether sm_count x sm_bandwidth_gbs is below bandwidth x bandwidth_fraction on some op of the design."""
    return bool(np.any((d.sm > 0) & (d.sm * v["sm_bandwidth_gbs"] * 1e9 < d.bw * v["bandwidth_fraction"])))


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
            if j in prob.unused:  # the residuals do not read it: a zero column, without evaluating them
                J[:, j] = 0.0
                continue
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
                     np.log(v["matmul_tflops_per_watt"] or PRIOR["matmul_tflops_per_watt"]),
                     np.log(v.get("sm_bandwidth_gbs") or PRIOR["sm_bandwidth_gbs"])]
                    + [np.log(v["dequant_overhead"][f]) for f in prob_formats])


WEIGHT_FORMATS_SET = set(DEQUANT_FITTED_FORMATS)  # formats with a fitted dequant_overhead
# a format's own compute fraction needs as many rows as a level's fit (benchmark.MIN_FIT_ROWS): at 20, the
# 12 gpt-oss (MXFP4 expert) prefill rows left once the DGX Spark's llama.cpp source is held out shared the
# 16-bit fraction, and the fit put their slowness on Q8_0's dequant_overhead (2.1: gpt-oss's non-expert
# weights), which then made the Spark's dense Q8_0 prompts 0.6x too slow
FORMAT_FRACTION_MIN_ROWS = 10


def own_fraction_formats(row_formats) -> tuple[str, ...]:
    """Weight formats without a fitted dequant_overhead (not DEQUANT_FITTED_FORMATS: fp16, bf16, fp8, mxfp4) that get
    a compute fraction of their own (Efficiency.format_compute_fraction): where at least two such formats have >=
    FORMAT_FRACTION_MIN_ROWS rows each, every one of them but the one with the most rows (that one sets
    compute_fraction). A format with fewer rows shares compute_fraction."""
    fmts, counts = np.unique([f for f in row_formats if f not in WEIGHT_FORMATS_SET], return_counts=True)
    big = [(int(c), str(f)) for f, c in zip(fmts, counts) if c >= FORMAT_FRACTION_MIN_ROWS]
    if len(big) < 2:
        return ()
    big.sort(key=lambda t: (-t[0], t[1]))
    return tuple(sorted(f for _, f in big[1:]))


def predict_with(d: Design, v: dict) -> np.ndarray:
    """Times of the design's rows under one parameter dict (as fit_design returns)."""
    n = d.n_rows
    p = {k: np.full(n, v[k]) for k in BASE}
    p["sm_bandwidth_gbs"] = np.full(n, v.get("sm_bandwidth_gbs", 0.0))
    p["fp16_accumulate"] = np.full(n, float(v.get("fp16_accumulate", False)))
    p["sync_mma"] = np.full(n, float(v.get("sync_mma", False)))
    p["dequant_tile_tokens"] = np.full(n, float(v.get("dequant_tile_tokens", 0)))
    p["weight_only_regime"] = np.full(n, float(v.get("weight_only_regime", False)))
    p["weight_only_bandwidth_share"] = np.full(n, float(v.get("weight_only_bandwidth_share", 1.0)))
    p["kv_reread_share"] = np.full(n, float(v.get("kv_reread_share", 1.0)))
    dq = v.get("dequant_overhead") or {}
    p["dequant_factor"] = np.array([1.0 + dequant_overhead_for(dq, f)[0] for f in d.fmt])
    fcf = v.get("format_compute_fraction") or {}
    if fcf:
        p["matmul_fraction"] = np.array([fcf.get(f, 0.0) for f in d.fmt])
    return predict_time_s(d, p)
