"""Plan: on-device ranking by quality tier, energy at the modeled utilization, the runtime profile in plan."""

import pytest

from planner.hardware import load_hardware
from planner.serving import plan
from planner.serving.plan import IDLE_POWER_FRACTION, quality_tier

N = 100


def test_on_device_ranks_by_quality_tier_before_speed():
    # Llama-3.1-8B bf16 (16.1 GB) does not fit a 10 GB RTX 3080, which runs int4; the RTX 4090 runs bf16. The
    # int4 card decodes faster (fewer bytes per token), yet the bf16 card ranks first: a higher quality tier.
    r = plan("llama-3.1-8b", "on-device", hardware=["rtx-3080", "rtx-4090"], n_requests=N, recommend=False)
    rows = r.to_dict()["ranking"]
    assert [(x["hardware"], x["quality_tier"]) for x in rows] == [("rtx-4090", "16-bit"), ("rtx-3080", "4-bit")]
    assert rows[1]["tpot_p95_ms"] < rows[0]["tpot_p95_ms"]  # faster, but ranked after
    assert quality_tier("q8_0") == (1, "8-bit") and quality_tier("q4_k_m")[1] == "4-bit"


def test_energy_uses_power_at_modeled_utilization():
    # With the datasheet roofline (efficiency 1, no overheads) the modeled step time is the roofline time, so the
    # binding unit is busy the whole step (r = 1) and u = the simulated busy fraction:
    # P = TDP x (0.15 + 0.85 x busy); energy per output token = devices x P / output tokens per second.
    r = plan("llama-3.1-8b", "chat", qps=4, hardware=["h100-sxm"], n_requests=300, efficiency="datasheet",
             recommend=False)
    b = r.best
    tdp = load_hardware("h100-sxm").power.tdp_w
    assert b["watts_per_device"] == pytest.approx(tdp * (IDLE_POWER_FRACTION + (1 - IDLE_POWER_FRACTION)
                                                         * b["busy_fraction"]), rel=1e-9)
    assert b["watts_per_device"] < tdp
    out_tok_s = 4 * r.scenario.workload.output.mean  # ~1000 tok/s (sampled mean within 2%)
    assert b["energy_j_per_output_token"] == pytest.approx(b["gpus"] * b["watts_per_device"] / out_tok_s, rel=0.03)


def test_plan_takes_the_runtime_profile():
    # the trtllm profile's efficiency (faster decode on NVIDIA GPUs than the kind defaults) changes the simulated
    # TPOT, and its interval gives the TPOT range
    a = plan("llama-3.1-8b", "chat", qps=2, hardware=["h100-sxm"], n_requests=N, recommend=False).best
    b = plan("llama-3.1-8b", "chat", qps=2, hardware=["h100-sxm"], n_requests=N, recommend=False,
             runtime="trtllm").best
    assert a["tpot_p95_ms"] != pytest.approx(b["tpot_p95_ms"], rel=1e-3)
    lo, hi = b["tpot_p95_ms_range"]
    assert lo <= b["tpot_p95_ms"] <= hi and "trtllm" in b["range_source"]
