"""The continuous-batching simulation: low-load latency = service time, M/D/1 queueing (Pollaczek-Khinchine),
saturation at the predicted maximum throughput, KV admission, chunked prefill."""

import numpy as np
import pytest

from planner import estimate
from planner.architecture import load_model
from planner.hardware import load_hardware
from planner.serving import EngineLimits, Requests, make_config, make_workload, run_engine, simulate, summarize
from planner.serving.engine import build_engine

MODEL, HW = "llama-3.1-8b", "h100-sxm"
P, O = 512, 64


def _engine(max_num_seqs=1, chunked=False, budget=8192):
    cfg = make_config(hardware=HW, weights="bf16", max_num_seqs=max_num_seqs, chunked_prefill=chunked,
                      max_num_batched_tokens=budget)
    return build_engine(load_model(MODEL), load_hardware(HW), cfg)


def _poisson(qps, n, seed=0, prompt=P, output=O):
    gaps = np.random.default_rng(seed).exponential(1 / qps, n)
    return Requests(np.cumsum(gaps), np.full(n, prompt), np.full(n, output))


def _service_time_s():
    # one request alone: prefill + (O - 1) decode steps, from the public estimate
    e = estimate(MODEL, HW, "bf16", batch=1, prompt=P, output=O)
    return e.end_to_end.latency_s, e.end_to_end.ttft_ms


def test_low_load_latency_is_service_time():
    D, ttft_ms = _service_time_s()
    eng = _engine(max_num_seqs=8)
    s = summarize(run_engine(eng.step_model, _poisson(0.01, 300), eng.limits))
    assert s["ttft_ms"]["p50"] == pytest.approx(ttft_ms, rel=1e-9)  # no queueing: TTFT is the prefill
    assert s["e2e_s"]["p50"] == pytest.approx(D, rel=1e-4)  # core integrates decode with 32 samples; ours is exact
    assert s["queue_ms"]["p99"] == 0


@pytest.mark.parametrize("rho", [0.3, 0.5])
def test_md1_mean_wait_pollaczek_khinchine(rho):
    # one sequence at a time: a single server with deterministic service D = the request's latency alone;
    # Poisson arrivals -> M/D/1, mean wait in queue W = rho D / (2 (1 - rho))  (Pollaczek-Khinchine)
    D, _ = _service_time_s()
    eng = _engine(max_num_seqs=1)
    tr = run_engine(eng.step_model, _poisson(rho / D, 40_000, seed=7), eng.limits)
    s = summarize(tr)
    assert s["queue_ms"]["mean"] / 1e3 == pytest.approx(rho * D / (2 * (1 - rho)), rel=0.08)
    assert s["e2e_s"]["mean"] == pytest.approx(D + rho * D / (2 * (1 - rho)), rel=0.03)


def test_saturates_at_predicted_throughput():
    # offered 1.5x capacity: completions come at 1/D per second (one at a time, D each)
    D, _ = _service_time_s()
    eng = _engine(max_num_seqs=1)
    s = summarize(run_engine(eng.step_model, _poisson(1.5 / D, 3000, seed=1), eng.limits))
    assert s["requests_per_s"] == pytest.approx(1 / D, rel=0.01)
    assert s["busy_fraction"] == pytest.approx(1.0, abs=0.01)


def test_batched_saturation_matches_step_model():
    # a batch of B identical requests admitted together (all arrive at t=0): one prefill of B prompts, then O-1
    # decode steps at batch B; throughput = B / (prefill(B) + sum of decode steps) from the core estimate
    B = 16
    e = estimate(MODEL, HW, "bf16", batch=B, prompt=P, output=O)
    eng = _engine(max_num_seqs=B)
    reqs = Requests(np.zeros(B), np.full(B, P), np.full(B, O))
    s = summarize(run_engine(eng.step_model, reqs, eng.limits), warmup_fraction=0)
    assert s["e2e_s"]["p50"] == pytest.approx(e.end_to_end.latency_s, rel=1e-4)
    assert s["max_running"] == B


def test_kv_pool_limits_concurrency_and_rejects_oversize():
    eng = _engine(max_num_seqs=256)
    lim = EngineLimits(kv_pool_tokens=2 * (P + O) + 10, max_num_seqs=256, block_size=16)
    reqs = Requests(np.zeros(6), np.array([P] * 5 + [5000]), np.array([O] * 6))
    tr = run_engine(eng.step_model, reqs, lim)
    assert tr.max_running <= 2  # two sequences of 576 tokens (36 blocks each) fit in 1162 tokens (72 blocks)
    assert np.isnan(tr.finish_s[-1]) and np.isfinite(tr.finish_s[:-1]).all()  # longer than the pool: rejected


def test_chunked_prefill_ttft_is_sum_of_chunks():
    eng = _engine(max_num_seqs=8, chunked=True, budget=256)
    sm = eng.step_model
    reqs = Requests(np.array([0.0]), np.array([1000]), np.array([10]))
    tr = run_engine(sm, reqs, eng.limits)
    # chunks of 256, 256, 256, 232 after 0, 256, 512, 768 cached tokens; only the last samples a token
    expect = sum(sm.prefill_time([n], [p], logits=int(p + n == 1000)) for n, p in
                 ((256, 0), (256, 256), (256, 512), (232, 768)))
    assert tr.first_s[0] == pytest.approx(expect, rel=1e-12)


def test_simulate_api_and_replicas_split_traffic():
    w = make_workload(20, {"kind": "fixed", "mean": P}, {"kind": "fixed", "mean": O})
    one = simulate(MODEL, {"hardware": HW, "weights": "bf16"}, w, 2000)
    four = simulate(MODEL, {"hardware": HW, "weights": "bf16", "replicas": 4}, w, 2000)
    assert one.totals["requests_per_s"] == pytest.approx(20, rel=0.05)
    assert four.totals["requests_per_s"] == pytest.approx(20, rel=0.05)  # 4 engines x 5 req/s
    assert four.summary["mean_running"] < one.summary["mean_running"]
    assert four.to_dict()["deployment"]["gpus"] == 4


def test_the_servers_request_path_adds_to_ttft_and_end_to_end_only():
    """An engine's OpenAI server adds its request path (runtimes.REQUEST_PATH_MS) to every TTFT and end-to-end time,
    not to TPOT nor to the engine's throughput (it runs beside the GPU's steps): at low load, TTFT = the estimate's
    prefill + the path exactly, and the same requests through the same step model without the path differ by it."""
    from dataclasses import replace

    from planner.runtimes import REQUEST_PATH_MS, request_path_ms

    assert REQUEST_PATH_MS["vllm"] == 50.0 and request_path_ms("vLLM") == 50.0 and request_path_ms("llamacpp") == 0.0
    cfg = make_config(hardware=HW, weights="bf16", runtime="vllm", engine="vllm")
    eng = build_engine(load_model(MODEL), load_hardware(HW), cfg)
    assert eng.limits.request_path_s == pytest.approx(0.050, rel=1e-12)
    reqs = _poisson(0.01, 200)
    served = summarize(run_engine(eng.step_model, reqs, eng.limits))
    bare = summarize(run_engine(eng.step_model, reqs, replace(eng.limits, request_path_s=0.0)))
    for q in ("p50", "p90", "p99"):
        assert served["ttft_ms"][q] == pytest.approx(bare["ttft_ms"][q] + 50.0, rel=1e-12)
        assert served["e2e_s"][q] == pytest.approx(bare["e2e_s"][q] + 0.050, rel=1e-12)
        assert served["tpot_ms"][q] == bare["tpot_ms"][q]
    assert served["output_tokens_per_s"] == bare["output_tokens_per_s"]
    e = estimate(MODEL, HW, "bf16", batch=1, prompt=P, output=O, runtime="vllm")
    assert served["ttft_ms"]["p50"] == pytest.approx(e.prefill.server_ttft_ms, rel=1e-9)
    assert e.prefill.server_ttft_ms == pytest.approx(e.prefill.latency_ms + 50.0, rel=1e-12)
    # no engine named: no server path (the planner's generic scheduler)
    plain = build_engine(load_model(MODEL), load_hardware(HW), make_config(hardware=HW, weights="bf16"))
    assert plain.limits.request_path_s == 0.0


def test_a_burst_arrives_at_once_and_counts_every_request():
    """simulate(burst=True) / `planner simulate --burst`: the workload's requests all arrive at t = 0 and none is
    left out as warm-up: with one sequence at a time (max_num_seqs 1) and fixed lengths, request i waits for the i
    before it, so the mean TTFT is the prefill + (N - 1) / 2 whole services (prefill + O - 1 decode steps), and the
    throughput is N x O / (N services)."""
    from planner.serving import simulate

    N = 40
    D, ttft_ms = _service_time_s()
    cfg = {"hardware": HW, "weights": "bf16", "max_num_seqs": 1, "max_num_batched_tokens": 8192,
           "chunked_prefill": False}
    w = make_workload(5.0, {"kind": "fixed", "mean": P}, {"kind": "fixed", "mean": O})
    r = simulate(MODEL, cfg, w, N, burst=True, ranges=False)
    s = r.summary
    assert s["requests"] == N and r.totals["offered_requests_per_s"] is None and r.workload.startswith("a burst of 40")
    assert s["ttft_ms"]["mean"] == pytest.approx(ttft_ms + (N - 1) / 2 * D * 1e3, rel=1e-4)
    assert s["output_tokens_per_s"] == pytest.approx(N * O / (N * D), rel=1e-4)


def test_simulate_cli_burst(capsys):
    from planner.cli import main

    assert main(["simulate", "-m", MODEL, "-H", HW, "-w", "bf16", "--burst", "--requests", "200"]) == 0
    out = capsys.readouterr().out
    assert "a burst of 200 requests at once" in out and "all at once: over the run's span" in out
    assert main(["simulate", "-m", MODEL, "-H", HW, "--burst", "--qps", "3"]) == 2
    assert "--burst: every request arrives at once" in capsys.readouterr().err


def test_sglang_runs_prefill_steps_apart_and_the_decodes_wait():
    """SGLang's default scheduler (chunked, not mixed; scheduler_defaults.step_policy): N requests at t = 0 with a
    one-prompt budget take N prefill steps of one prompt each, back to back, and only then o - 1 decode steps at
    batch N; every request finishes at N x prefill(p) + decode_run(N, N p)(o - 1), and request 0's TPOT carries the
    N - 1 prefills after its own. vLLM V1's rule (mixed) on the same requests puts request 0's decodes into those
    steps, so its TPOT is lower."""
    from dataclasses import replace

    N, p, o = 6, 256, 20
    eng = _engine(max_num_seqs=N, chunked=True, budget=p)
    sm = eng.step_model
    lim = replace(eng.limits, mixed_prefill=False)
    reqs = Requests(np.zeros(N), np.full(N, p), np.full(N, o))
    tr = run_engine(sm, reqs, lim)
    pf = sm.prefill_time([p], [0], logits=1)
    assert tr.first_s == pytest.approx(pf * np.arange(1, N + 1), rel=1e-12)
    end = N * pf + sm.decode_run(N, N * p)(o - 1)
    assert tr.finish_s == pytest.approx(np.full(N, end), rel=1e-12)
    tpot0 = (tr.finish_s[0] - tr.first_s[0]) / (o - 1)
    assert tpot0 == pytest.approx(((N - 1) * pf + sm.decode_run(N, N * p)(o - 1)) / (o - 1), rel=1e-12)
    mixed = run_engine(sm, reqs, replace(eng.limits, mixed_prefill=True))
    assert (mixed.finish_s[0] - mixed.first_s[0]) / (o - 1) < tpot0


def test_reserved_outputs_admit_only_what_completes_and_never_preempt():
    """TensorRT-LLM's GUARANTEED_NO_EVICT (reserve_output): P = 512, O = 64, 16-token blocks: a prompt takes 32 blocks
    and the whole request ceil(575 / 16) = 36. In a 100-block pool (watermark int(0.01 x 100) = 1 block) three
    prompts fit (96 <= 99), so vLLM's rule admits all three and must preempt when they grow (3 x 36 = 108 > 100);
    reserving, the third (36 > 100 - 1 - 72 = 27) waits for a completion and nothing is preempted."""
    from dataclasses import replace

    eng = _engine(max_num_seqs=8, chunked=False, budget=8192)
    reqs = Requests(np.zeros(3), np.full(3, P), np.full(3, O))
    lim = replace(eng.limits, kv_pool_tokens=100 * 16, block_size=16, mixed_prefill=True)
    plain = run_engine(eng.step_model, reqs, lim)
    assert plain.max_running == 3 and plain.preemptions > 0
    held = run_engine(eng.step_model, reqs, replace(lim, reserve_output=True))
    assert held.max_running == 2 and held.preemptions == 0
    assert held.admit_s[2] == pytest.approx(min(held.finish_s[:2]), rel=1e-12)
    assert np.isfinite(held.finish_s).all()


def test_whole_prompts_beside_the_decodes_are_not_chunked():
    """In-flight batching without context chunking (TensorRT-LLM; chunked_prefill False, mixed_prefill True): a
    1,000-token prompt alone runs whole in one step even past a 256-token budget (the chunked engine takes four
    steps, test_chunked_prefill_ttft_is_sum_of_chunks), and a second one queued with it waits for the next step."""
    from dataclasses import replace

    eng = _engine(max_num_seqs=8, chunked=False, budget=256)
    sm = eng.step_model
    lim = replace(eng.limits, mixed_prefill=True)
    tr = run_engine(sm, Requests(np.zeros(2), np.array([1000, 1000]), np.array([1, 1])), lim)
    one = sm.prefill_time([1000], [0], logits=1)
    assert tr.first_s == pytest.approx([one, 2 * one], rel=1e-12)


def test_an_engine_that_samples_the_first_token_in_a_decode_step_matches_its_estimate():
    """--runtime lmdeploy (TurboMind, runtimes.FIRST_TOKEN_FROM_DECODE): a prompt's prefill runs P - 1 tokens and its
    first token comes out of the first decode step it runs in, so its O tokens take O decode steps. At low load,
    under every step policy, TTFT, TPOT and end-to-end equal `planner estimate --runtime lmdeploy` (one code path
    for both); a 1-token prompt goes straight to decoding. Under load (preemption, recompute and swap) every
    request that completes has its first token before its last, and no block is lost: the run does the same work
    as the engine without the rule, to within the one decode step per request it adds."""
    from dataclasses import replace

    m, spec = load_model("llama-2-7b"), load_hardware("a100-80gb-sxm")
    for chunked in (False, True):
        eng = build_engine(m, spec, make_config(hardware="a100-80gb-sxm", weights="fp16", runtime="lmdeploy",
                                                chunked_prefill=chunked))
        assert eng.limits.first_token_decode
        for p, o in ((128, 64), (1, 16)):
            s = summarize(run_engine(eng.step_model, _poisson(0.01, 100, prompt=p, output=o), eng.limits))
            e = estimate("llama-2-7b", "a100-80gb-sxm", "fp16", batch=1, prompt=p, output=o, runtime="lmdeploy")
            assert s["ttft_ms"]["p50"] == pytest.approx(e.prefill.latency_ms, rel=1e-9)
            assert s["tpot_ms"]["p50"] == pytest.approx(e.decode.latency_ms_per_token, rel=1e-9)
            assert s["e2e_s"]["p50"] == pytest.approx(e.end_to_end.latency_s, rel=1e-9)
    small = load_hardware("a10g")
    for chunked in (False, True):
        for pre in ("recompute", "swap"):
            eng = build_engine(m, small, make_config(hardware="a10g", weights="fp16", runtime="lmdeploy",
                                                     chunked_prefill=chunked, preemption=pre))
            for p in (1, 700):
                reqs = _poisson(20, 300, prompt=p, output=300)
                tr = run_engine(eng.step_model, reqs, eng.limits)
                done = ~np.isnan(tr.finish_s)
                assert done.all() and tr.preempted.sum() > 0
                assert (tr.first_s[done] <= tr.finish_s[done]).all() and not np.isnan(tr.first_s[done]).any()
                base = run_engine(eng.step_model, reqs, replace(eng.limits, first_token_decode=False))
                assert tr.busy_s == pytest.approx(base.busy_s, rel=0.1)


def test_inter_token_gaps_by_hand_and_their_sum_is_every_decode_time():
    """ITL (summarize's itl_ms): SGLang's rule on N requests at t = 0 with a one-prompt budget (the test above) runs
    N prefill steps, request i's first token at (i + 1) pf, then o - 1 decode steps at batch N taking T together.
    Request i's first gap is the N - 1 - i prefills after its own plus the first decode step, (N - 1 - i) pf + T /
    (o - 1); its other o - 2 gaps are T / (o - 1) each. So the recorded gaps are exactly that multiset, they add up to
    every request's finish - first token, and the median is T / (o - 1)."""
    from dataclasses import replace

    N, p, o = 6, 256, 20
    eng = _engine(max_num_seqs=N, chunked=True, budget=p)
    sm = eng.step_model
    reqs = Requests(np.zeros(N), np.full(N, p), np.full(N, o))
    tr = run_engine(sm, reqs, replace(eng.limits, mixed_prefill=False))
    pf = sm.prefill_time([p], [0], logits=1)
    T = sm.decode_run(N, N * p)(o - 1)
    step = T / (o - 1)
    got = sorted(v for v, c in zip(tr.itl_s, tr.itl_n) for _ in range(int(c)))
    want = sorted([(N - 1 - i) * pf + step for i in range(N)] + [step] * (N * (o - 2)))
    assert got == pytest.approx(want, rel=1e-9)
    assert float(np.dot(tr.itl_s, tr.itl_n)) == pytest.approx(float(np.sum(tr.finish_s - tr.first_s)), rel=1e-12)
    s = summarize(tr, 0.0)
    assert s["itl_ms"]["p50"] == pytest.approx(step * 1e3, rel=1e-9)
    assert s["itl_ms"]["p99"] == pytest.approx(((N - 2) * pf + step) * 1e3, rel=1e-9)  # 114 gaps: the 2nd largest
