"""Disaggregated prefill/decode: KV transfer time by hand, the pool sizing rules on synthetic step costs worked
by hand, and the x:y search / CLI on the catalog."""

import json
import math

import numpy as np
import pytest

from planner.architecture import load_model
from planner.cli import main
from planner.errors import PlannerError
from planner.hardware import load_hardware
from planner.quantization import weight_format
from planner.serving import get_scenario
from planner.serving.disaggregated import (decode_operating_point, kv_transfer_time_s, md1_p95_wait_s, pd_plan,
                                           size_decode_pool, size_prefill_pool)
from planner.serving.parallelism import Link

IB = Link("infiniband", 50, 25.0)   # DGX H100: one 400 Gb/s ConnectX-7 per GPU = 50 GB/s per direction, 25 us


def test_kv_transfer_gqa_prompt():
    """Llama-3.1-70B, fp16 KV: 80 layers x 2 (K, V) x 8 KV heads x 128 x 2 bytes = 327,680 B per token; a
    2,000-token prompt is 655.36 MB; from a TP2 prefill instance each GPU sends its 4 KV heads (half):
    327.68 MB / 50 GB/s = 6.5536 ms + 25 us = 6.5786 ms."""
    t = float(kv_transfer_time_s(load_model("llama-3.1-70b"), "fp16", 2000, IB, tp_prefill=2))
    assert t * 1e3 == pytest.approx(6.5786, abs=1e-6)


def test_kv_transfer_mla_prompt_is_not_split():
    """DeepSeek-V3, bf16 latent: (512 + 64) x 2 bytes x 61 layers = 70,272 B per token; 4,000 tokens =
    281.088 MB; the latent is whole on every GPU of the TP8 prefill instance, so one link carries all of it:
    281.088e6 / 50e9 = 5.62176 ms + 25 us = 5.64676 ms."""
    t = float(kv_transfer_time_s(load_model("deepseek-v3"), "bf16", 4000, IB, tp_prefill=8))
    assert t * 1e3 == pytest.approx(5.64676, abs=1e-6)


def test_md1_wait():
    """rho = 10/s x 0.05 s = 0.5: mean wait 0.5 x 0.05 / (2 x 0.5) = 25 ms, p95 taken as 3x = 75 ms."""
    assert md1_p95_wait_s(10, 0.05) == pytest.approx(0.075, rel=1e-12)
    assert md1_p95_wait_s(20, 0.05) == math.inf


def test_prefill_pool_size_by_hand():
    """qps 10, prefill 50 ms (mean prompt) / 120 ms (p95 prompt), KV transfer 10 ms, TTFT target 160 ms.
    x = 1: rho 0.5, wait p95 75 ms -> TTFT 120 + 10 + 75 = 205 ms > 160.
    x = 2: rho 0.25, mean wait 0.25 x 50 / 1.5 = 8.333 ms, p95 25 ms -> 155 ms <= 160: x = 2."""
    x, ttft = size_prefill_pool(10, 0.05, 0.12, 0.01, 0.160)
    assert x == 2 and ttft == pytest.approx(0.155, rel=1e-12)
    assert size_prefill_pool(10, 0.05, 0.12, 0.01, 0.500) == (1, pytest.approx(0.205))
    # the p95 prompt alone misses the target: no pool size helps
    assert size_prefill_pool(10, 0.05, 0.12, 0.01, 0.100)[0] is None


def test_decode_pool_size_by_hand():
    """step(b) = 10 ms + 0.2 ms x b; TPOT target 30.1 ms -> b* = 100 (30 ms). qps 10 x 200 output tokens:
    Little's law holds 10 x 200 x 0.030 = 60 sequences -> y = 1; qps 50: 300 sequences -> y = ceil(3.0) = 3.
    With y = 4 instances at qps 50 each settles at the smallest b with 50 x 200 x step(b) / 4 <= b:
    (100 + 2 b) / 4 <= b -> b >= 50, step(50) = 20 ms."""
    steps = 0.010 + 0.0002 * np.arange(1, 257)
    assert size_decode_pool(10, 200, steps, 0.0301, 256) == (1, 100, pytest.approx(0.030))
    assert size_decode_pool(50, 200, steps, 0.0301, 256)[0] == 3
    b, step = decode_operating_point(50, 200, steps, 4)
    assert b == 50 and step == pytest.approx(0.020, rel=1e-12)
    # the KV pool limits the batch to 20: b* = 20 (14 ms), y = ceil(50 x 200 x 0.014 / 20) = 7
    assert size_decode_pool(50, 200, steps, 0.0301, 20) == (7, 20, pytest.approx(0.014))
    assert size_decode_pool(50, 200, steps, 0.005, 256)[0] is None


def test_xy_search_picks_the_fewest_devices():
    m, spec, fmt = load_model("llama-3.1-70b"), load_hardware("h100-sxm"), weight_format("fp8")
    sc = get_scenario("chat").with_overrides(qps=20)
    r = pd_plan(m, spec, fmt, "fp8", sc.workload, sc.ttft_p95_ms, sc.tpot_p95_ms, 2.5)
    ok = [o for o in r["options"] if o["gpus"] is not None]
    b = r["best"]
    assert b is not None and b["gpus"] == min(o["gpus"] for o in ok)
    assert b["gpus"] == b["x"] * b["tp_prefill"] + b["y"] * b["tp_decode"]
    assert b["ttft_p95_ms"] <= sc.ttft_p95_ms and b["tpot_ms"] <= sc.tpot_p95_ms
    assert r["usd_per_hour"] == pytest.approx(b["gpus"] * 2.5)
    # a fixed split that is too small says why
    small = pd_plan(m, spec, fmt, "fp8", sc.workload.model_copy(update={"qps": 200.0}), sc.ttft_p95_ms,
                    sc.tpot_p95_ms, 2.5, prefill_gpus=2, decode_gpus=2)
    assert small["best"] is None and all(o["reason"] for o in small["options"])


def test_cli_plan_pd_side_by_side(capsys):
    assert main(["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--qps", "4", "--requests", "100",
                 "--parallel", "pd", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    dev = d["devices"][0]
    assert d["parallel"] == "pd" and dev["best"]["gpus"] >= 2   # at least one prefill and one decode device
    assert dev["aggregated"]["gpus"] >= 1
    assert any("aggregated plan" in line for line in dev["explanation"])
    assert main(["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--qps", "4", "--requests", "100",
                 "--parallel", "pd"]) == 0
    assert "cheapest split" in capsys.readouterr().out


def test_cli_pd_errors(capsys):
    assert main(["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--parallel", "pd", "--prefill-gpus", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --prefill-gpus/--decode-gpus:")
    assert main(["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--prefill-gpus", "2", "--decode-gpus", "2"]) == 2
    assert capsys.readouterr().err.startswith("error: --prefill-gpus/--decode-gpus: apply to --parallel pd")
    assert main(["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--parallel", "pd", "--prefill-gpus", "1",
                 "--decode-gpus", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layout"] == "pd" and d["options"]
    with pytest.raises(PlannerError):
        kv_transfer_time_s(load_model("llama-3.1-8b"), "fp16", 100, None)
