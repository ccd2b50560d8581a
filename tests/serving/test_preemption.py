"""KV blocks allocated as tokens arrive, preemption (recompute and swap), and Little's law for the mean batch."""

import numpy as np
import pytest

from planner.architecture import load_model
from planner.hardware import load_hardware
from planner.serving import EngineLimits, Requests, make_config, run_engine, summarize
from planner.serving.engine import build_engine

MODEL, HW = "llama-3.1-8b", "h100-sxm"


def _sm():
    cfg = make_config(hardware=HW, weights="bf16")
    return build_engine(load_model(MODEL), load_hardware(HW), cfg).step_model


def test_two_requests_overflow_a_four_block_pool_recompute():
    # Pool 4 blocks of 16 tokens (watermark 0). A and B: prompt 16, output 33 -> 48 cached tokens = 3 blocks each at
    # the end, 6 > 4. Hand trace:
    #  t=0: both admitted (1 block each, free 2); one prefill of [16, 16]; first tokens out.
    #  decode step 1: lengths 16 -> 17, each takes a block (free 0); steps 2..16: lengths up to 32, no new block.
    #  step 17 needs 2 blocks, 0 free: B (latest admitted) is preempted (frees 2); A takes one (free 1).
    #     B has produced 1 + 16 = 17 tokens; it will prefill 16 + 17 = 33 tokens (3 blocks > 1 free: waits).
    #  A decodes alone 16 steps (32 -> 48 cached, 33 tokens out): finish_A; frees 3 (free 4).
    #  B: prefill of 33 tokens (token 18 out), then 15 decode steps from 33 cached tokens.
    sm = _sm()
    lim = EngineLimits(kv_pool_tokens=64, max_num_seqs=8, block_size=16, watermark=0.0)
    tr = run_engine(sm, Requests(np.zeros(2), np.array([16, 16]), np.array([33, 33])), lim)
    t_pf = sm.prefill_time([16, 16])
    fin_a = t_pf + sm.decode_run_time(2, 32, 16) + sm.decode_run_time(1, 32, 16)
    fin_b = fin_a + sm.prefill_time([33]) + sm.decode_run_time(1, 33, 15)
    assert tr.first_s == pytest.approx([t_pf, t_pf], rel=1e-12)
    assert tr.finish_s == pytest.approx([fin_a, fin_b], rel=1e-12)
    assert list(tr.preempted) == [0, 1] and tr.recomputed_tokens == 32
    s = summarize(tr, warmup_fraction=0)
    assert s["preemptions"] == 1 and s["preempted_requests"] == 1
    # B's TPOT carries the stall and the recompute: (finish_B - first_B) / 32
    assert s["tpot_ms"]["p50"] * 2 == pytest.approx(((fin_a - t_pf) + (fin_b - t_pf)) / 32 * 1e3, rel=1e-9)


def test_two_requests_overflow_swap():
    # Same case with swap: B's 2 blocks (32 tokens) go to host memory at step 17 and come back when A finishes
    # (free 4 >= 2); each copy takes 2 x 16 tokens x bytes/token / host bandwidth. B resumes with 32 cached tokens
    # and decodes its remaining 16 tokens (no recompute).
    sm = _sm()
    per_tok, gbs = 131072.0, 25.0   # Llama-3.1-8B fp16 KV: 32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B/token
    lim = EngineLimits(kv_pool_tokens=64, max_num_seqs=8, block_size=16, watermark=0.0, preemption="swap",
                       kv_bytes_per_token=per_tok, swap_gbs=gbs)
    tr = run_engine(sm, Requests(np.zeros(2), np.array([16, 16]), np.array([33, 33])), lim)
    copy = 32 * per_tok / (gbs * 1e9)
    t_pf = sm.prefill_time([16, 16])
    fin_a = t_pf + sm.decode_run_time(2, 32, 16) + copy + sm.decode_run_time(1, 32, 16)
    fin_b = fin_a + copy + sm.decode_run_time(1, 32, 16)
    assert tr.finish_s == pytest.approx([fin_a, fin_b], rel=1e-12)
    assert tr.swapped_bytes == pytest.approx(32 * per_tok) and tr.recomputed_tokens == 0


def test_output_heavy_concurrency_is_not_halved():
    # 64 reasoning requests at t=0, prompt 100, output 3000, pool of 10 x 3100 tokens. The old oracle reserved
    # prompt + output at admission: at most 10 running. Allocating as tokens arrive, a sequence holds on average
    # about prompt + output / 2 = 1600 tokens over its life, so about 31,000 / 1600 = 19 fit on average: the decode
    # batch must be well above 10 (we require >= 1.5 x 10), with preemptions counted.
    sm = _sm()
    n, P, O = 64, 100, 3000
    lim = EngineLimits(kv_pool_tokens=10 * (P + O), max_num_seqs=256, block_size=16)
    s = summarize(run_engine(sm, Requests(np.zeros(n), np.full(n, P), np.full(n, O)), lim), warmup_fraction=0)
    assert s["completed"] == n
    assert s["mean_batch_busy"] >= 15 and s["mean_batch_busy"] <= 31000 / 1600 * 1.1
    assert s["preemptions"] > 0


@pytest.mark.parametrize("chunked", [False, True])
def test_mean_running_is_littles_law(chunked):
    # L = lambda x W over the whole span, W the time each request runs (admission to finish when never preempted).
    # Poisson chat-like trace near saturation, KV pool ample (no preemption): W = finish - admit.
    sm = _sm()
    rng = np.random.default_rng(3)
    n = 3000
    arr = np.cumsum(rng.exponential(1 / 40.0, n))
    reqs = Requests(arr, rng.integers(200, 2000, n), rng.integers(50, 600, n))
    lim = EngineLimits(kv_pool_tokens=400_000, max_num_seqs=256, chunked_prefill=chunked)
    tr = run_engine(sm, reqs, lim)
    s = summarize(tr, warmup_fraction=0)
    assert s["preemptions"] == 0
    span = np.nanmax(tr.finish_s) - tr.arrival_s[0]
    lam = n / span
    W = np.mean(tr.finish_s - tr.admit_s)
    assert s["mean_running"] == pytest.approx(lam * W, rel=0.01)
    # prefill steps count: the time-average is well above what counting only decode steps over the span gives
    assert s["mean_running"] > 1.0


def test_swap_through_the_serving_config():
    # --preemption swap: the engine copies KV over the host link, half the spec's PCIe bidirectional figure
    # (H100 SXM: PCIe Gen5 x16, 128 GB/s both ways -> 64 GB/s), 131,072 B per token for Llama-3.1-8B fp16 KV
    from planner.serving.engine import build_engine as build

    cfg = make_config(hardware=HW, weights="bf16", preemption="swap", gpu_memory_utilization=0.3)
    eng = build(load_model(MODEL), load_hardware(HW), cfg)
    assert eng.limits.swap_gbs == pytest.approx(load_hardware(HW).interconnect.pcie_bidirectional_gbs / 2)
    assert eng.limits.kv_bytes_per_token == 131072
    n = 48
    reqs = Requests(np.zeros(n), np.full(n, 200), np.full(n, 4000))
    s = summarize(run_engine(eng.step_model, reqs, EngineLimits(
        kv_pool_tokens=40_000, max_num_seqs=256, preemption="swap", kv_bytes_per_token=131072,
        swap_gbs=eng.limits.swap_gbs)), warmup_fraction=0)
    assert s["completed"] == n and s["preemptions"] > 0 and s["swapped_gb"] > 0 and s["recomputed_tokens"] == 0
