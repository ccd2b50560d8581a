"""Serving commands use the engine profiles of `planner estimate`: --runtime/--engine, p10-p90 ranges, the highest
rate that meets latency limits (Server) never above the Offline throughput; --json for every outcome; hard limits."""

import json

import numpy as np
import pytest

from planner import estimate
from planner.cli import main
from planner.serving import make_workload, simulate
from planner.serving.engine import max_rate

MODEL, HW = "llama-3.1-8b", "h100-sxm"
P, O = 512, 64


def _fixed(qps):
    return make_workload(qps, {"kind": "fixed", "mean": P}, {"kind": "fixed", "mean": O})


def test_runtime_profile_drives_the_step_model_and_ranges_match_estimate():
    # requests far apart (0.01 req/s): each is served alone, so TTFT = estimate's prefill + the engine's HTTP request
    # path (trtllm-serve: 40 ms, runtimes.REQUEST_PATH_MS; estimate prints the sum as its server TTFT) and TPOT =
    # estimate's decode at batch 1 with the same runtime profile; the ranges are estimate's latency_low/high (the
    # step times divided by the profile's p90 and p10 of measured / predicted speed: prefill regime for the prompt,
    # decode regime at batch 1 for the output tokens), the TTFT's plus the same fixed path
    e = estimate(MODEL, HW, "bf16", batch=1, prompt=P, output=O, runtime="trtllm")
    r = simulate(MODEL, {"hardware": HW, "weights": "bf16", "runtime": "trtllm"}, _fixed(0.01), 60)
    s = r.summary
    assert e.prefill.request_path_ms == 40.0
    assert s["ttft_ms"]["p50"] == pytest.approx(e.prefill.latency_ms + 40.0, rel=1e-9)
    assert e.prefill.server_ttft_ms == pytest.approx(e.prefill.latency_ms + 40.0, rel=1e-12)
    assert s["tpot_ms"]["p50"] == pytest.approx(e.decode.latency_ms_per_token, rel=1e-4)  # core: 32-point sum
    rg = s["range"]
    assert rg["ttft_ms_p50"] == pytest.approx([e.prefill.latency_ms_low + 40.0, e.prefill.latency_ms_high + 40.0],
                                              rel=1e-9)
    assert rg["tpot_ms_p50"] == pytest.approx([e.decode.latency_ms_per_token_low,
                                                e.decode.latency_ms_per_token_high], rel=1e-4)
    # without a runtime the device's efficiency differs: the figures differ from the trtllm ones
    plain = simulate(MODEL, {"hardware": HW, "weights": "bf16"}, _fixed(0.01), 60).summary
    assert plain["tpot_ms"]["p50"] != pytest.approx(s["tpot_ms"]["p50"], rel=1e-3)


def test_engine_kv_rule_sizes_the_pool():
    # --engine vllm: the pool is the one `planner estimate --engine vllm` reports (gpu_memory_utilization 0.9,
    # profiling run at max_num_batched_tokens 8192; it does not depend on the batch or lengths), in tokens =
    # pool bytes / KV bytes per token (Llama-3.1-8B fp16: 32 layers x 2 x 8 KV heads x 128 x 2 B = 131,072 B)
    e = estimate(MODEL, HW, "bf16", batch=1, prompt=P, output=O, engine="vllm")
    r = simulate(MODEL, {"hardware": HW, "weights": "bf16", "engine": "vllm"}, _fixed(1), 50, ranges=False)
    assert r.kv_pool_tokens == int(e.engine.kv_pool_gb * 1e9 // 131072)
    assert r.kv_pool_tokens > 0


def test_server_rate_never_exceeds_offline_and_tightens_with_the_limits():
    w = make_workload(5, {"kind": "lognormal", "mean": 1000, "sigma": 0.8, "max": 8192},
                      {"kind": "lognormal", "mean": 250, "sigma": 0.7, "max": 2048})
    cfg = {"hardware": HW, "weights": "bf16"}
    loose = max_rate(MODEL, cfg, w, 1e6, 1e6, n_requests=600, ranges=False)
    tight = max_rate(MODEL, cfg, w, 300, 25, n_requests=600, ranges=False)
    for r in (loose, tight):
        assert r["max_requests_per_s"] <= r["offline_requests_per_s"] * (1 + 1e-12)
    assert loose["max_requests_per_s"] == pytest.approx(loose["offline_requests_per_s"])  # no limit: Offline
    assert tight["max_requests_per_s"] < loose["max_requests_per_s"]
    assert tight["ttft_ms_p95"] <= 300 and tight["tpot_ms_p95"] <= 25
    # simulated at the rate found, the limits hold
    s = simulate(MODEL, cfg, w.model_copy(update={"qps": tight["max_requests_per_s"]}), 600, ranges=False).summary
    assert s["ttft_ms"]["p95"] <= 300 and s["tpot_ms"]["p95"] <= 25


def test_max_rate_with_ranges_and_replicas():
    w = _fixed(1)
    one = max_rate(MODEL, {"hardware": HW, "weights": "bf16"}, w, 500, 50, n_requests=300)
    two = max_rate(MODEL, {"hardware": HW, "weights": "bf16", "replicas": 2}, w, 500, 50, n_requests=300,
                   ranges=False)
    assert two["max_requests_per_s"] == pytest.approx(2 * one["max_requests_per_s"], rel=1e-9)  # 2 engines
    lo, hi = one["range"]["max_requests_per_s"]
    assert lo <= one["max_requests_per_s"] <= hi


def test_an_end_of_the_range_that_meets_the_limits_at_no_rate_is_zero(capsys):
    # a TTFT limit between a lone request's p95 TTFT at the predicted speed (t0) and at the slow end of the profile's
    # prefill range (t0 / prefill_p10): the predicted engine meets it at a low rate, the slow one at no rate, so the
    # range's low end is 0 req/s (a number, printed as 0), not an unknown
    w = make_workload(10, {"kind": "lognormal", "mean": 1000, "sigma": 0.8, "max": 8192},
                      {"kind": "lognormal", "mean": 250, "sigma": 0.7, "max": 2048})
    cfg = {"hardware": HW, "weights": "fp8", "tp": 4, "runtime": "vllm"}
    iv = max_rate("llama-3.1-70b", cfg, w, 1e6, 1e6, n_requests=300)["range"]["interval"]
    t0 = simulate("llama-3.1-70b", cfg, w.model_copy(update={"qps": 0.01}), 300, ranges=False).summary["ttft_ms"]["p95"]
    limit = t0 / iv["prefill_p10"] ** 0.5  # the geometric middle of t0 and t0 / prefill_p10
    assert iv["prefill_p10"] < 0.8
    r = max_rate("llama-3.1-70b", cfg, w, limit, 1e6, n_requests=300)
    lo, hi = r["range"]["max_requests_per_s"]
    assert lo == 0.0 and 0 < r["max_requests_per_s"] <= hi
    assert main(["simulate", "-m", "llama-3.1-70b", "-H", HW, "-w", "fp8", "--tp", "4", "--runtime", "vllm",
                 "--max-rate", "--requests", "300", "--ttft-ms", f"{limit:.3f}", "--tpot-ms", "1000000"]) == 0
    out = capsys.readouterr().out
    assert "(p10-p90 0-" in out and "--" not in out.split("Server")[1].split(",")[0]


def test_simulate_json_for_every_outcome(capsys):
    # fits: JSON; does not fit (405B fp16 = 812 GB on a 24 GB L4): JSON with the verdict, exit 0
    assert main(["simulate", "-m", MODEL, "-H", HW, "--requests", "200", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is True and d["engine"]["preemptions"] == 0
    assert main(["simulate", "-m", "llama-3.1-405b", "-H", "l4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is False and d["verdict"].startswith("llama-3.1-405b fp16 on 1 x l4: does not fit")
    assert main(["simulate", "-m", "llama-3.1-405b", "-H", "l4", "--json", "--max-rate"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is False
    assert main(["simulate", "-m", MODEL, "-H", HW, "--max-rate", "--requests", "200", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["max_requests_per_s"] <= d["offline_requests_per_s"]


def test_plan_batching_speculative_json_when_nothing_fits(capsys):
    assert main(["plan", "-m", "llama-3.1-405b", "-H", "rtx-3060-12gb", "--requests", "60", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ranking"][0]["status"] == "rejected" and d["ranking"][0]["reason"]
    assert main(["batching", "-m", "llama-3.1-405b", "-H", "l4", "--batch", "1,8", "--json"]) == 0
    assert [r["fits"] for r in json.loads(capsys.readouterr().out)] == [False, False]
    assert main(["speculative", "-m", "llama-3.1-405b", "--draft", "llama-3.1-8b", "-H", "l4", "--gamma", "2",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["fits"] is False


def test_plan_takes_its_candidates_as_estimate_does(capsys):
    """`plan -H a b`, `-H a,b` (estimate's comma list) and `-H a -H b` name the same two candidates (the flag
    repeated had kept only the last one)."""
    ranked = []
    for hw in (["rtx-3060-12gb", "l4"], ["rtx-3060-12gb,l4"], ["rtx-3060-12gb", "-H", "l4"]):
        assert main(["plan", "-m", "llama-3.1-405b", "-H", *hw, "--requests", "60", "--json"]) == 0
        ranked.append(sorted(r["hardware"] for r in json.loads(capsys.readouterr().out)["ranking"]))
    assert ranked[0] == ranked[1] == ranked[2] == ["l4", "rtx-3060-12gb"]
    # a list of separators names no device: a one-line error, never the whole catalog
    assert main(["plan", "-m", "llama-3.1-405b", "-H", ",", "--requests", "60"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --hardware: names no device") and err.count("\n") == 1


@pytest.mark.parametrize("argv, flag", [
    (["simulate", "-m", MODEL, "-H", HW, "--qps", "1e-310"], "--qps"),
    (["simulate", "-m", MODEL, "-H", HW, "--qps", "inf"], "--qps"),
    (["simulate", "-m", MODEL, "-H", HW, "--qps", "nan"], "--qps"),
    (["simulate", "-m", MODEL, "-H", HW, "--requests", "1000001"], "--requests"),
    (["simulate", "-m", MODEL, "-H", HW, "--replicas", "100001"], "--replicas"),
    (["simulate", "-m", MODEL, "-H", HW, "--seed", "-1"], "--seed"),
    (["simulate", "-m", MODEL, "-H", HW, "--seed", "99999999999999999999"], "--seed"),
    (["simulate", "-m", MODEL, "-H", HW, "--max-rate", "--ttft-ms", "1e400"], "--ttft-ms"),
    (["simulate", "-m", MODEL, "-H", HW, "--engine", "nope"], "--engine"),
    (["simulate", "-m", MODEL, "-H", HW, "--runtime", "nope"], "--runtime"),
    (["plan", "-m", MODEL, "-H", HW, "--price", "h100-sxm=inf"], "--price"),
    (["plan", "-m", MODEL, "-H", HW, "--requests", "10"], "--requests"),
    (["plan", "-m", MODEL, "-H", HW, "--tpot-p95-ms", "-5"], "--tpot-p95-ms"),
    (["batching", "-m", MODEL, "-H", HW, "--batch", "1,99999999"], "--batch"),
    (["speculative", "-m", MODEL, "--draft", "llama-3.2-1b", "-H", HW, "--gamma", "1000"], "--gamma"),
])
def test_bounds_are_one_line_errors_naming_the_flag(capsys, argv, flag):
    with pytest.raises(SystemExit) as exc:
        rc = main(argv)
        raise SystemExit(rc)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(("error:", f"{argv[0]}: error:", "planner")) and flag in err[-1]


def test_trace_routing_is_round_robin_without_materializing_every_engine(tmp_path):
    # 10,000 replicas of a 3-row trace: engine 0 takes rows 0, 10000, 20000, ... = rows 0, 1, 2, 0 of the cycled
    # trace (10000 mod 3 = 1), arrival offsets by whole trace spans (span = 2 s + mean gap 1 s = 3 s)
    from planner.serving.engine import engine_requests
    from planner.serving.workload import Workload, load_trace

    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,1\n1,20,2\n2,30,3\n")
    w = Workload(qps=float(load_trace(f).rate_per_s), prompt={"kind": "fixed", "mean": 1},
                 output={"kind": "fixed", "mean": 1}, trace=str(f))
    r = engine_requests(w, 10_000, 4)
    assert list(r.prompt) == [10, 20, 30, 10]
    assert r.arrival_s == pytest.approx(np.array([0, 3333 * 3 + 1, 6666 * 3 + 2, 10000 * 3]) * (1.0 / 1.0))
