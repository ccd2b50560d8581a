"""Timing helpers and roofline probes, on small sizes (numbers are not asserted, only sanity)."""

from __future__ import annotations

import json
import time

import pytest
import torch

import validate.timing as timing
import validate.tolerances as tolerances
from validate.timing import device_fingerprint, gemm_peak_tflops, stream_bandwidth_gbs, time_fn


def test_time_fn_stats_are_ordered_and_measure_the_call():
    stats = time_fn(lambda: time.sleep(0.002), warmup=1, reps=7, device="cpu")
    assert stats["reps"] == 7 and not stats["flushed"]
    assert stats["min_ms"] <= stats["p10_ms"] <= stats["median_ms"] <= stats["p90_ms"]
    assert stats["min_ms"] >= 2.0
    assert stats["std_ms"] >= 0


def test_time_fn_cold_flushes_between_reps():
    calls = []
    stats = time_fn(lambda: calls.append(1), warmup=2, reps=3, device="cpu", flush_bytes=1 << 20)
    assert len(calls) == 5 and stats["flushed"] and stats["flush_bytes"] == 1 << 20
    with pytest.raises(ValueError):
        time_fn(lambda: None, warmup=0, reps=0, device="cpu")


def test_fingerprint_is_json_and_names_the_host():
    fp = device_fingerprint("cpu")
    json.dumps(fp)
    assert fp["cpu_count"] >= 1 and fp["torch_threads"] >= 1
    assert fp["torch_version"] == torch.__version__
    assert "triton_version" in fp and fp["cpu_model"]


def test_probes_return_positive_numbers():
    bw = stream_bandwidth_gbs("cpu", n_bytes=8 * 2**20, reps=2)
    assert bw["array_bytes"] == 8 * 2**20 and bw["copy_gbs"] > 0 and bw["triad_gbs"] > 0
    assert gemm_peak_tflops("cpu", torch.float32, n=128, reps=2) > 0


def test_tolerance_table_is_complete_and_explained():
    keys = {"fp32", "bf16", "fp16", "int8_kv", "fp8_kv", "int8_weight", "int4_weight"}
    assert keys <= set(tolerances.TOLERANCES)
    for tol in tolerances.TOLERANCES.values():
        assert tol.atol > 0 and tol.rtol > 0 and tol.why
    with pytest.raises(KeyError):
        tolerances.get_tolerance("int3")


def test_public_surface():
    for module in (timing, tolerances):
        for name in module.__all__:
            assert hasattr(module, name)


def test_noisy_calls_are_repeated_and_their_spread_recorded():
    """Calls alternating 1 ms and 6 ms sleeps: (p90 - p10) / median stays far above the 10 % bound, so time_fn runs
    all MAX_ROUNDS rounds of reps (every rep kept) and records the spread instead of hiding it."""
    flip = [0]

    def noisy():
        flip[0] ^= 1
        time.sleep(0.001 if flip[0] else 0.006)

    st = time_fn(noisy, warmup=0, reps=4, device="cpu", max_spread_pct=timing.MAX_SPREAD_PCT)
    assert st["rounds"] == timing.MAX_ROUNDS and st["reps"] == 4 * timing.MAX_ROUNDS
    assert st["spread_pct"] > timing.MAX_SPREAD_PCT and st["method"] == "perf_counter"
    once = time_fn(noisy, warmup=0, reps=4, device="cpu")  # no bound asked: one round
    assert once["rounds"] == 1 and once["reps"] == 4
