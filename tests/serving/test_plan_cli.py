"""The capacity plan: what it picks meets the SLOs when simulated again through the public API; rejections carry
a reason; prices and scenarios; the CLI commands (text and --json) and their one-line errors."""

import json
import math

import pytest

from planner.cli import main
from planner.serving import get_scenario, plan, simulate

N = 300  # simulated requests per configuration: enough for a p95, quick for CI


@pytest.fixture(scope="module")
def chat_plan():
    return plan("llama-3.1-8b", "chat", qps=6, hardware=["h100-sxm", "l4", "a10", "rtx-3060-12gb"], n_requests=N)


def test_plan_never_picks_a_configuration_that_misses_the_slo(chat_plan):
    sc = chat_plan.scenario
    ok = chat_plan.table[chat_plan.table["status"] == "ok"]
    assert len(ok) >= 2
    for r in ok.to_dict(orient="records"):
        cfg = {"hardware": r["hardware"], "weights": r["weights"], "tp": int(r["tp"]), "pp": int(r["pp"]),
               "replicas": int(r["replicas"]), "max_num_seqs": int(r["max_num_seqs"])}
        res = simulate("llama-3.1-8b", cfg, sc.workload, N, seed=0)
        assert res.summary["ttft_ms"]["p95"] <= sc.ttft_p95_ms
        assert res.summary["tpot_ms"]["p95"] <= sc.tpot_p95_ms
        # the plan's own numbers are this simulation's
        assert res.summary["ttft_ms"]["p95"] == pytest.approx(r["ttft_p95_ms"], rel=1e-12)


def test_plan_costs_and_ranking(chat_plan):
    t = chat_plan.table
    ok = t[t["status"] == "ok"]
    assert list(ok["rank"]) == list(range(1, len(ok) + 1))
    priced = ok[ok["usd_per_hour"].notna()]
    assert priced["usd_per_hour"].is_monotonic_increasing
    for r in priced.to_dict(orient="records"):
        assert r["usd_per_hour"] == pytest.approx(r["gpus"] * r["usd_per_gpu_hour"])
        out_tok_s = chat_plan.scenario.workload.qps * 250  # the preset's mean output (sampled mean within ~2%)
        in_tok_s = chat_plan.scenario.workload.qps * 1000  # and mean prompt
        # the hour is split between input and output by the prefill share f_in; both parts add up to the hour
        f = r["prefill_time_share"]
        assert 0 < f < 1
        assert r["usd_per_m_output_tokens"] == pytest.approx(r["usd_per_hour"] * (1 - f) / (out_tok_s * 3600) * 1e6,
                                                             rel=0.05)
        assert r["usd_per_m_input_tokens"] == pytest.approx(r["usd_per_hour"] * f / (in_tok_s * 3600) * 1e6, rel=0.05)
        assert r["usd_per_m_tokens_blended"] == pytest.approx(
            r["usd_per_hour"] / ((in_tok_s + out_tok_s) * 3600) * 1e6, rel=0.05)
    # the RTX 3060 has no price in its spec: ranked after priced devices, said so
    row = t[t["hardware"] == "rtx-3060-12gb"].iloc[0]
    assert row["status"] == "rejected" or math.isnan(row["usd_per_hour"])
    assert {"quantization", "batch size", "chunked prefill", "FlashAttention", "paged KV",
            "speculative decoding"} <= {r["topic"] for r in chat_plan.recommendations}
    # the batch recommendation reads the simulated time-average (Little's law) and the busy-time batch
    best = chat_plan.best
    rec = next(x for x in chat_plan.recommendations if x["topic"] == "batch size")["recommendation"]
    assert f"{best['mean_running']:.1f} sequences running on average" in rec
    assert f"{best['mean_batch_busy']:.1f} while the engine is busy" in rec


def test_price_override_and_rejection_reason():
    r = plan("llama-3.1-70b", "chat", qps=1, hardware=["h100-sxm", "rtx-3060-12gb"], n_requests=N,
             prices={"h100-sxm": 1.0}, recommend=False)
    t = r.table.set_index("hardware")
    assert t.loc["h100-sxm", "usd_per_hour"] == t.loc["h100-sxm", "gpus"] * 1.0
    assert t.loc["rtx-3060-12gb", "status"] == "rejected"
    assert t.loc["rtx-3060-12gb", "reason"]  # says why (TTFT/fit), never empty


def test_speculative_recommendation_for_a_model_with_a_draft():
    r = plan("llama-3.1-8b", "chat", qps=1, hardware=["h100-sxm"], n_requests=N)
    rec = next(x for x in r.recommendations if x["topic"] == "speculative decoding")
    assert "llama-3" in rec["recommendation"] and rec["results"][0]["speedup"] > 1
    # 70B bf16 runs at TP2 there: target + draft (145 GB) do not fit one H100, so no speed-up is quoted for it
    r = plan("llama-3.1-70b", "chat", qps=1, hardware=["h100-sxm"], n_requests=N)
    rec = next(x for x in r.recommendations if x["topic"] == "speculative decoding")
    assert "does not fit" in rec["recommendation"] and rec["results"][0]["speedup"] is None


def test_scenarios_exist():
    for name in ("chat", "batch", "long-doc", "on-device"):
        assert get_scenario(name).ttft_p95_ms > 0


@pytest.mark.parametrize("scenario, hw", [("chat", "h100-sxm"), ("batch", "h100-sxm"), ("long-doc", "h200-sxm"),
                                          ("on-device", "rtx-4090")])
def test_cli_plan_each_scenario(capsys, scenario, hw):
    assert main(["plan", "--model", "llama-3.1-8b", "--scenario", scenario, "--hardware", hw,
                 "--requests", str(N)]) == 0
    out = capsys.readouterr().out
    assert hw in out and "recommendations" in out
    assert main(["plan", "--model", "llama-3.1-8b", "--scenario", scenario, "--hardware", hw,
                 "--requests", str(N), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # strict JSON: no NaN
    assert data["ranking"][0]["hardware"] == hw


def test_cli_simulate_batching_speculative(capsys):
    assert main(["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-w", "bf16", "--requests", "500"]) == 0
    assert "TTFT ms" in capsys.readouterr().out
    assert main(["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--requests", "500", "--chunked-prefill",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"]["completed"] == 500
    assert main(["batching", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--batch", "1,8,32,64"]) == 0
    assert "<- knee" in capsys.readouterr().out
    assert main(["speculative", "-m", "llama-3.1-70b", "--draft", "llama-3.1-8b", "-H", "h100-sxm",
                 "--gamma", "2,4", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


@pytest.mark.parametrize("argv, msg", [
    (["plan", "-m", "llama-3.1-8b", "--scenario", "nope"], "--scenario: unknown scenario 'nope'; allowed: chat"),
    (["plan", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--price", "l4=1"], "--price: 'l4'"),
    (["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tp", "3"], "--tp: 3 does not divide"),
    (["simulate", "-m", "llama-3.1-8b", "-H", "l4", "--tp", "16"], "--tp: 16 exceeds"),
])
def test_cli_bad_input_one_line(capsys, argv, msg):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and msg in err and err.count("\n") == 1


def test_simulate_of_a_config_that_does_not_fit_is_a_verdict(capsys):
    # Llama-3.1-405B fp16 = 405.85e9 x 2 B = 812 GB of weights against one 24 GB L4: a verdict on stdout, exit 0
    assert main(["simulate", "-m", "llama-3.1-405b", "-H", "l4"]) == 0
    out = capsys.readouterr()
    assert "does not fit: needs" in out.out and out.err == ""


def test_pipeline_parallel_when_no_node_holds_the_model():
    # llama-3.1-405b in fp8 (~406 GB) does not fit 8 x 48 GB L40S: two nodes, tensor 8 x pipeline 2 (fp8 only: in
    # int4 one node holds it, and two such replicas cost as much as the 16 GPUs of TP8 x PP2)
    import dataclasses

    from planner.serving.scenarios import get_scenario
    sc = dataclasses.replace(get_scenario("batch"), formats=("fp8",))
    r = plan("llama-3.1-405b", sc, qps=0.5, hardware=["l40s"], n_requests=N, recommend=False)
    row = r.best
    assert (row["weights"], row["tp"], row["pp"]) == ("fp8", 8, 2)
    res = simulate("llama-3.1-405b", {k: row[k] for k in ("hardware", "weights", "tp", "pp", "replicas",
                                                          "max_num_seqs")}, r.scenario.workload, N)
    assert res.summary["tpot_ms"]["p95"] <= r.scenario.tpot_p95_ms


def test_public_surface_and_light_imports():
    import subprocess
    import sys

    import planner.serving as s

    assert all(hasattr(s, name) for name in s.__all__)
    code = ("import sys, planner, planner.cli_serving; "
            "bad = [m for m in ('torch', 'streamlit', 'pandas', 'planner.serving') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_plan_with_vllm_runs_vllms_scheduler_per_device():
    # --engine vllm: every simulated row chunks its prompts, at vLLM V1's budget for the device (2048 tokens on an
    # L40S, 8192 on an H100: planner/scheduler_defaults.py), as `planner simulate --engine vllm` does
    r = plan("llama-3.1-8b", "chat", qps=1, hardware=["l40s", "h100-sxm"], n_requests=N, engine="vllm")
    assert r.configs["chunked_prefill"].all()
    rec = next(x for x in r.recommendations if x["topic"] == "chunked prefill")
    assert "engine's default here" in rec["recommendation"]
    assert f"({ {'l40s': 2048, 'h100-sxm': 8192}[r.best['hardware']] } tokens/step)" in rec["recommendation"]
    plain = plan("llama-3.1-8b", "chat", qps=1, hardware=["l40s"], n_requests=N, recommend=False)
    assert not plain.configs["chunked_prefill"].any()


def test_rejected_configs_of_one_reason_share_one_entry():
    """A device rejected for one reason at every format and TP degree reads as that reason once, with the configs
    it covers (the first four named, then a count); distinct reasons keep their order, latency misses before 'does
    not fit', three at most."""
    from planner.serving.plan import _summarize_reasons

    why = "--runtime: trtllm (TensorRT-LLM) runs on NVIDIA GPUs only, and mi300x is AMD's"
    cfgs = [f"{f} tp{t}" for f in ("bf16", "fp8") for t in (1, 2, 4)]
    assert _summarize_reasons([f"{c}: {why}" for c in cfgs]) == f"bf16 tp1, bf16 tp2, bf16 tp4, fp8 tp1 (+2): {why}"
    got = _summarize_reasons(["bf16 tp1: does not fit: needs 141 GB of 80 GB", "bf16 tp2: TTFT 900 ms > 500 ms",
                              "fp8 tp2: TTFT 900 ms > 500 ms", "int4 tp1: TPOT 60 ms > 50 ms", "int8 tp1: x", "y"])
    assert got == ("bf16 tp2, fp8 tp2: TTFT 900 ms > 500 ms; int4 tp1: TPOT 60 ms > 50 ms; int8 tp1: x (+2 more)")
    assert _summarize_reasons([]) == "no weight format runs on this device"


def test_plan_names_an_engine_that_cannot_run_on_a_candidate_once(capsys):
    assert main(["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm,mi300x", "--runtime", "lmdeploy"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("mi300x:"))
    # plan tries 4 weight formats (bf16, fp8, int8, int4-g128) at plan.TP_DEGREES 1, 2, 4 and 8 on an MI300X node: 16
    # configs, all refused for the one reason, the first 4 named and the other 12 counted
    assert line.count("runs on NVIDIA GPUs only") == 1 and "bf16 tp1, bf16 tp2, bf16 tp4, bf16 tp8 (+12)" in line
