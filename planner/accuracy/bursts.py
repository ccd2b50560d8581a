"""Bursts: every request of a serving benchmark sent at once, with no concurrency limit (`vllm bench serve
--request-rate inf` without --max-concurrency, the tool's default), timed by the serving simulator
(planner/serving/simulator.py) as `planner simulate` would run that engine: its runtime profile, its own scheduler
defaults on the device (planner/scheduler_defaults.py: vLLM V1 runs 1,024 sequences and 8,192 tokens per step on an
H100, 256 and 2,048 on an A100) and its KV pool (planner/memory.py). Such a run is no fixed-shape step: the engine
admits what its pool and running limit allow, prefills in chunks beside the decodes, preempts when the pool runs
out, and the run lasts until its longest request ends. A per-row step model cannot time that; the simulator does.

The measured figures are those `vllm bench serve` prints (benchmark_serving definitions, as the simulator's):
  ttft_ms           mean over requests of first token - arrival, + the engine's HTTP request path
                    (planner/runtimes.py REQUEST_PATH_MS: the client sees every token that much later)
  tpot_ms           mean over requests with more than one output token of (finish - first token) / (output - 1)
  itl_ms            the median gap between consecutive tokens of a request, over every token after the first
                    (the simulator records each decode step's gap and how many sequences it gave a token)
  throughput_tok_s  output tokens of all requests / (last finish + the path - first arrival), over the whole GPU set
The row records only mean lengths (the printed totals over the requests), so the requests are drawn:
  fixed     every request the mean prompt and output (random datasets: fixed lengths; a run that stopped some
            outputs early at EOS keeps the mean)
  sharegpt  prompt and output lengths lognormal about their means with SHAREGPT_SIGMA, clipped to ShareGPT's
            filter in vLLM's benchmark (prompt <= 1,024 and prompt + output <= 2,048 tokens); the spread matters
            for a burst: the run lasts until its longest output ends, in decode steps of ever fewer sequences
A paced run (`qps` on the row: the framework label says "requests paced at Q req/s") is timed the same way with
its N requests arriving at that rate (Poisson, seeded) instead of at once; its throughput is still output tokens
over the first arrival to the last finish, as the benchmark clients print it.
  itl_mean_ms       the mean gap between consecutive tokens over every token after the first (all requests pooled)
Data-parallel replicas (work_div = 1 / DP) each serve N / DP of the requests; the throughput counts all of them.
Data-parallel attention (SGLang --enable-dp-attention, TensorRT-LLM enable_attention_dp; `parallel` dp-attention,
`ep` the group's GPUs): every GPU is an attention engine of its own with N / ep of the requests and its own KV
pool, the routed experts split ep ways behind an all-to-all (serving.expert_parallel.ep_engine, the engine
`planner simulate --parallel dp-attention --runtime R` runs); one engine is simulated and the throughput counts ep.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

SHAREGPT_SIGMA = 0.8       # spread of ln(length): a coefficient of variation of ~0.95, near an exponential's 1 (chosen)
SHAREGPT_MAX_PROMPT = 1024  # vLLM benchmarks/benchmark_dataset.py ShareGPT filter: prompt_len > 1024 is skipped
SHAREGPT_MAX_TOTAL = 2048   # ... and prompt_len + output_len > 2048
SEED = 0


def burst_requests(n: int, prompt: int, output: int, lengths: str, seed: int = SEED, qps: float | None = None):
    """The n requests of a burst (module docstring), all arriving at t = 0 (Requests.at_once); with `qps`, a paced
    run's: Poisson arrivals at that rate (exponential gaps of mean 1 / qps, seeded), the first at t = 0."""
    from ..serving.workload import Requests

    if lengths == "sharegpt":
        rng = np.random.default_rng(seed)

        def draw(mean, hi):
            mu = math.log(mean) - SHAREGPT_SIGMA ** 2 / 2
            return np.clip(np.floor(rng.lognormal(mu, SHAREGPT_SIGMA, size=n)), 4, hi).astype(np.int64)

        p = draw(prompt, SHAREGPT_MAX_PROMPT)
        o = np.minimum(draw(output, SHAREGPT_MAX_TOTAL), SHAREGPT_MAX_TOTAL - p)
    else:
        p, o = np.full(n, int(prompt), dtype=np.int64), np.full(n, int(output), dtype=np.int64)
    if qps is not None and qps == qps and qps > 0:
        gaps = np.random.default_rng(seed + 1).exponential(1.0 / qps, n)
        return Requests(np.concatenate([[0.0], np.cumsum(gaps[:-1])]), p, np.maximum(o, 1))
    return Requests(np.zeros(n), p, np.maximum(o, 1))  # all at t = 0, as Requests.at_once and simulate --burst


def simulate_burst(r: dict, efficiency="auto") -> float:
    """The row's metric (ms, or output tok/s for the whole set) of a burst of r['batch'] requests per replica, as the
    simulator times it with the row's engine profile (`efficiency`: 'auto' the profile, 'datasheet' the plain
    roofline)."""
    from ..architecture import load_model
    from ..errors import PlannerError
    from ..hardware import load_hardware
    from ..memory import ENGINES
    from ..serving.engine import build_engine, make_config
    from ..serving.simulator import run_engine, summarize

    runtime = r["runtime"]
    cfg = make_config(hardware=r["hardware"], weights=r["weights"], kv_dtype=r["kv_dtype"], tp=int(r["tp"]),
                      runtime=runtime, engine=runtime if runtime in ENGINES else "none")
    reqs = burst_requests(int(r["batch"]), int(r["prompt"]), int(r["output"]), r.get("lengths", "fixed"),
                          qps=r.get("qps"))
    m = load_model(r["model"])
    spec = load_hardware(r["hardware"])
    if r.get("parallel") == "dp-attention":  # one attention-DP rank of an EP group (serving.expert_parallel)
        from ..quantization import kv_dtype as norm_kv, weight_format
        from ..serving.expert_parallel import ep_engine
        eng = ep_engine(m, spec, weight_format(cfg.weights), norm_kv(cfg.kv_dtype), "dp-attention", int(r["ep"]),
                        efficiency, runtime, cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.chunked_prefill,
                        cfg.block_size, max_prompt=int(reqs.prompt.max()))
    else:
        eng = build_engine(m, spec, cfg, efficiency, int(reqs.prompt.max()), int((reqs.prompt + reqs.output).max()))
    lim = eng.limits
    path = r.get("request_path_ms")
    if path is not None and path == path:  # a frontend other than the runtime's own server (serving_rows)
        lim = dataclasses.replace(lim, request_path_s=float(path) / 1e3)
    tr = run_engine(eng.step_model, reqs, lim)
    done = np.isfinite(tr.finish_s)
    if not done.all():
        raise PlannerError(f"{int((~done).sum())} of {len(done)} requests ({int(r['prompt'])} + {int(r['output'])} "
                           f"tokens) exceed the engine's KV pool of {eng.limits.kv_pool_tokens:,} tokens per replica")
    if r["metric"].startswith("ttft"):  # with the engine's HTTP request path, as simulator.summarize
        return float(np.mean((tr.first_s - tr.arrival_s)[done]) + tr.request_path_s) * 1e3
    if r["metric"].startswith("tpot"):
        many = done & (tr.output > 1)
        return float(np.mean(((tr.finish_s - tr.first_s) / np.maximum(tr.output - 1, 1))[many])) * 1e3
    if r["metric"] in ("itl_ms", "itl_mean_ms"):  # the median / mean gap between consecutive tokens (summarize)
        return float(summarize(tr, 0.0)["itl_ms"]["p50" if r["metric"] == "itl_ms" else "mean"])
    span = float(np.max(tr.finish_s[done]) + tr.request_path_s - np.min(tr.arrival_s))  # the client's duration
    return float(np.sum(tr.output[done])) / span / r.get("work_div", 1.0)


def burst_predictions(rows) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """(profile prediction, datasheet prediction, why not) of each burst row of a frame, in the row's unit; a row
    the simulator refuses (the model does not fit the row's GPUs with room for a KV pool, ...) gets NaN and the
    one-line reason."""
    from ..errors import PlannerError

    pred, pred_ds, why = [], [], []
    for r in rows.to_dict("records"):
        try:
            pred.append(simulate_burst(r))
            pred_ds.append(simulate_burst(r, "datasheet"))
            why.append(None)
        except PlannerError as exc:  # DoesNotFit is one
            pred.append(np.nan)
            pred_ds.append(np.nan)
            why.append(f"the serving simulator cannot run this burst: {exc}")
    return np.array(pred, dtype=np.float64), np.array(pred_ds, dtype=np.float64), why
