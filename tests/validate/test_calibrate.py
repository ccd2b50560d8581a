"""Predictions from records (validate/predict.py) and the calibration fit (validate/calibrate.py).

Expected numbers are derived by hand from the roofline (time = max(flops / (peak x c), bytes / (bw x b)) + overhead)
on a made-up device, or are known parameters that synthetic records were generated with.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.efficiency import _parse_calibration
from planner.hardware import Efficiency, parse_hardware
from planner.ops import decode_ops
from planner.quantization import weight_format
from validate.calibrate import (
    calibration_dict,
    fit,
    is_holdout,
    load_calibration,
    report_text,
    tolerance_from,
    write_calibration,
)
from validate.predict import evaluate, predict, prepare, stack_arch
from validate.records import DecodeStepParams, MatmulParams, Measured, PagedAttentionParams, Record, Work

# a made-up CPU: 100 GB/s, 1 TFLOP/s fp32, 4 TFLOP/s bf16
SPEC = parse_hardware({
    "id": "test-cpu", "name": "test", "kind": "cpu", "vendor": "test",
    "memory": {"capacity_gb": 64, "bandwidth_gbs": 100, "source": "test fixture"},
    "units": [{"name": "cpu", "kind": "cpu", "peak_tflops": {"fp32": 1.0, "bf16": 4.0}, "source": "test fixture"}],
}, "test")
FP = {"device_type": "cpu", "cpu_model": "test", "cpu_count": 2, "llc_bytes": 32 * 2**20}
HALF = Efficiency(bandwidth_fraction=0.5, compute_fraction=0.5, source="test")


def _rec(params, work, ms=1.0) -> Record:
    meas = Measured(median_ms=ms, p10_ms=ms, p90_ms=ms, min_ms=ms, mean_ms=ms, std_ms=0.0, reps=3, warmup=1,
                    flushed=True, flush_bytes=1, threads=2)
    return Record(run_id="t", created="2026-01-01T00:00:00+00:00", device_id="test-cpu", fingerprint=FP,
                  params=params, status="ok", work=work, measured=meas)


def matmul_rec(m, fmt="bf16", g=None, n=4096, k=4096, ms=1.0) -> Record:
    bits = {"bf16": 16, "fp32": 32, "int8": 8, "int4": 4}[fmt]
    a = 4 if fmt == "fp32" else 2
    scale = n * 2 if fmt == "int8" else (n * (k // g) * 2 if fmt == "int4" else 0)
    work = Work(flops=2 * m * n * k, weight_bytes=n * k * bits // 8, scale_bytes=scale,
                zero_bytes=scale if fmt == "int4" else 0, act_in_bytes=m * k * a, act_out_bytes=m * n * a)
    p = MatmulParams(m=m, n=n, k=k, weight_format=fmt, act_dtype="fp32" if fmt == "fp32" else "bf16", group_size=g)
    return _rec(p, work, ms)


def attn_rec(batch, ctx, kv="bf16", ms=1.0) -> Record:
    hq, hkv, d, bs = 32, 8, 128, 16
    el = {"bf16": 2, "fp32": 4, "int8": 1}[kv]
    tokens = batch * ctx
    blocks = batch * -(-ctx // bs)
    work = Work(flops=4 * tokens * hq * d, kv_bytes=2 * tokens * hkv * d * el,
                scale_bytes=2 * blocks * hkv * 4 if kv == "int8" else 0, other_bytes=blocks * 4,
                act_in_bytes=batch * hq * d * 2, act_out_bytes=batch * hq * d * 2)
    p = PagedAttentionParams(batch=batch, context_lens=[ctx] * batch, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                             block_size=bs, kv_dtype=kv, q_dtype="bf16", backend="torch")
    return _rec(p, work, ms)


def step_rec(batch, ctx, fmt="bf16", g=None, ms=1.0) -> Record:
    p = DecodeStepParams(config="t", hidden=256, n_heads=4, n_kv_heads=2, head_dim=64, intermediate=512, n_layers=2,
                         weight_format=fmt, dtype="bf16", group_size=g, batch=batch, context_lens=[ctx] * batch,
                         block_size=16)
    return _rec(p, Work(flops=1), ms)


def test_matmul_prediction_by_hand():
    """bf16 M=1, 4096 x 4096: bytes = 33,554,432 + 8,192 + 8,192 = 33,570,816 -> at 50 GB/s 0.67142 ms;
    FLOPs 33,554,432 at 2 TFLOP/s = 0.0168 ms: memory bound, 0.6714163 ms (no overheads)."""
    (pred,) = predict([matmul_rec(1)], SPEC, HALF)
    assert pred.predicted_ms == pytest.approx(33_570_816 / 50e9 * 1e3, rel=1e-9)
    assert pred.bound == "memory" and pred.hardware_id == "test-cpu" and pred.efficiency_source == "test"


def test_compute_bound_matmul_and_half_rows():
    """bf16 M=256: FLOPs 2*256*4096^2 = 8.59e9 at 2 TFLOP/s x 256 / (256 + 256) = 1 TFLOP/s -> 8.59 ms;
    bytes 33.55e6 + 2 * 2.1e6 = 37.75e6 -> 0.755 ms at 50 GB/s: compute bound."""
    eff = HALF.model_copy(update={"format_half_rows": {"bf16": 256.0}, "compute_half_rows": 1e6})
    (pred,) = predict([matmul_rec(256)], SPEC, eff)
    assert pred.predicted_ms == pytest.approx(2 * 256 * 4096**2 / 1e12 * 1e3, rel=1e-9)
    assert pred.bound == "compute"


def test_attention_prediction_by_hand():
    """Decode attention, batch 2 x 1000 tokens, 32 q / 8 kv heads, d 128, bf16 KV, class_compute_fraction
    attention 0.1 (0.4 TFLOP/s of the bf16 peak): scores and values each 2 * 2000 * 32 * 128 = 16.4 MFLOP ->
    0.041 ms of compute, less than their memory time (K or V 4,096,000 B plus q and block table or the output,
    at 50 GB/s: 0.082 ms), so both are memory bound; softmax 5 * 64,000 FLOPs at the fp32 peak x 0.5
    = 0.00064 ms; kernel overhead 10 us x 3 ops."""
    eff = HALF.model_copy(update={"class_compute_fraction": {"attention": 0.1}, "kernel_overhead_us": 10.0})
    (pred,) = predict([attn_rec(2, 1000)], SPEC, eff)
    kv_half = 2 * 1000 * 8 * 128 * 2  # K (or V) bytes = 4,096,000
    scores = max(2 * 2000 * 32 * 128 / 0.4e12, (kv_half + 2 * 32 * 128 * 2 + 2 * 63 * 4) / 50e9)
    values = max(2 * 2000 * 32 * 128 / 0.4e12, (kv_half + 2 * 32 * 128 * 2) / 50e9)
    softmax = 5 * 2000 * 32 / 0.5e12
    assert pred.predicted_ms == pytest.approx((scores + values + softmax + 3 * 10e-6) * 1e3, rel=1e-9)


def test_decode_step_runs_the_planners_decode_ops():
    """The whole-step prediction is planner.ops.decode_ops minus embedding and LM head; its linear weights are the
    stack's projection parameters (DecodeStackConfig.params_per_layer counts them independently:
    hidden (q + 2 kv) + q hidden + 3 hidden I + 2 hidden norms = 256*512 + 256*256 + 3*256*512 + 512 = 590,336
    per layer, of which 589,824 are projections)."""
    r = step_rec(4, 100)
    m = stack_arch(r.params)
    assert m.param_breakdown()["attention"] + m.param_breakdown()["dense_mlp"] == 2 * (590_336 - 512)
    (g,) = prepare([r])
    names = [op.name for op in g.ops]
    assert "embedding" not in names and "lm_head" not in names and g.is_step
    expected = [op.name for op in decode_ops(m, weight_format("bf16"), "bf16", 4, 99)]
    assert names == [n for n in expected if n not in ("embedding", "lm_head")]
    # with datasheet efficiency and tiny FLOPs the step is memory bound: bytes / 100 GB/s
    eff = Efficiency(bandwidth_fraction=1.0, compute_fraction=1.0, source="t")
    ms, _, _ = evaluate([g], 1, SPEC, eff)
    total_bytes = sum(np.max([op.count * np.asarray(op.bytes, dtype=float)]) for op in g.ops)
    assert ms[0] == pytest.approx(total_bytes / 100e9 * 1e3, rel=0.02)  # attention/vector FLOPs add < 2 %


def test_holdout_is_deterministic_and_about_30_percent():
    recs = [matmul_rec(m, n=n) for m in range(1, 41) for n in (1024, 2048, 4096, 8192, 16384)]
    flags = [is_holdout(r) for r in recs]
    assert flags == [is_holdout(r) for r in recs]
    assert 0.2 < np.mean(flags) < 0.4


def _synthetic(true_eff: Efficiency, noise: float = 0.0):
    """Records whose 'measured' times are the planner's own predictions under true_eff (x lognormal noise)."""
    recs = []
    for n in (1024, 4096):
        for m in (1, 2, 4, 8, 16, 64):
            recs += [matmul_rec(m, "bf16", n=n), matmul_rec(m, "int8", n=n), matmul_rec(m, "int4", 128, n=n)]
    for b in (1, 4, 16):
        for c in (128, 512, 2048):
            recs += [attn_rec(b, c), attn_rec(b, c, "int8")]
            recs.append(step_rec(b, c))
    ms, _, _ = evaluate(prepare(recs), len(recs), SPEC, true_eff)
    rng = np.random.default_rng(0)
    ms = ms * np.exp(noise * rng.standard_normal(len(recs)))
    return [r.model_copy(update={"measured": r.measured.model_copy(update={
        "median_ms": float(t), "p10_ms": float(t), "p90_ms": float(t), "min_ms": float(t), "mean_ms": float(t)})})
        for r, t in zip(recs, ms)]


TRUE = Efficiency(bandwidth_fraction=0.6, compute_fraction=0.7, kernel_overhead_us=20.0, step_overhead_ms=0.5,
                  compute_half_rows=4.0, format_half_rows={"bf16": 24.0},
                  dequant_overhead={"int8": 0.8, "int4-g128": 1.5}, class_compute_fraction={"attention": 0.05},
                  kv_dequant_overhead={"int8": 0.5}, source="truth")


def test_fit_recovers_known_parameters():
    """Noise-free synthetic records generated with TRUE: the fit finds TRUE (the identifiable parameters) and the
    held-out error is ~0; the kind defaults are far off before."""
    res = fit(_synthetic(TRUE), SPEC)
    e = res["efficiency"]
    assert e.bandwidth_fraction == pytest.approx(0.6, rel=0.02)
    assert e.class_compute_fraction["attention"] == pytest.approx(0.05, rel=0.02)
    assert e.kernel_overhead_us == pytest.approx(20.0, rel=0.05)
    assert e.step_overhead_ms == pytest.approx(0.5, rel=0.05)
    # the bf16 GEMMs below 64 rows are memory bound here, so only the 64-row point pins the compute curve:
    # compute_fraction x R / (R + half_rows) at R = 64 is identifiable, 0.7 x 64 / (64 + 24) = 0.509
    assert e.compute_fraction * 64 / (64 + e.format_half_rows["bf16"]) == pytest.approx(0.7 * 64 / 88, rel=0.02)
    # int8 KV is converted into the math dtype: 1.5x the attention compute time of the bf16 cache
    assert e.kv_dequant_overhead["int8"] == pytest.approx(0.5, rel=0.05)
    # compute fraction and dequant overhead enter int8 GEMMs only as c / (1 + dq): check that product
    assert e.compute_fraction / (1 + e.dequant_overhead["int8"]) == pytest.approx(0.7 / 1.8, rel=0.05)
    assert e.compute_fraction / (1 + e.dequant_overhead["int4-g128"]) == pytest.approx(0.7 / 2.5, rel=0.05)
    after = res["report"]["after"]["held_out"]["all"]
    before = res["report"]["before"]["held_out"]["all"]
    assert after["median_pct"] < 0.5 and after["p90_pct"] < 1.0
    assert before["median_pct"] > 20
    assert "kernel:paged_attention" in res["report"]["after"]["held_out"]
    assert "held_out" in report_text(res)


def test_fit_with_noise_reaches_the_noise_floor():
    """5 % lognormal noise: held-out median |error| ~ 0.67 x 5 % = 3.4 % (median of a half-normal), p90 ~ 8 %."""
    res = fit(_synthetic(TRUE, noise=0.05), SPEC)
    after = res["report"]["after"]["held_out"]["all"]
    assert after["median_pct"] < 6 and after["p90_pct"] < 12


def test_calibration_file_roundtrip_and_planner_reads_it(tmp_path):
    res = fit(_synthetic(TRUE), SPEC)
    tol = tolerance_from(res)
    assert tol.median_pct >= 2 and tol.p90_pct >= tol.median_pct
    path = tmp_path / "test-cpu.yaml"
    write_calibration(path, calibration_dict(res, SPEC, ["records/test-cpu/x.jsonl"], tol))
    cal = load_calibration(path)
    assert cal.hardware_id == "test-cpu" and cal.provenance["n_records"] == len(res["records"])
    eff = _parse_calibration(str(path))["cpu"]  # what planner.efficiency.resolve_efficiency reads for this device
    assert eff.bandwidth_fraction == pytest.approx(res["efficiency"].bandwidth_fraction)
    assert eff.class_compute_fraction == res["efficiency"].class_compute_fraction
    assert "calibration" in eff.source


def test_fit_needs_records():
    from planner.errors import PlannerError
    with pytest.raises(PlannerError, match="usable records"):
        fit([matmul_rec(1)], SPEC)
