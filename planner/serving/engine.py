"""One serving configuration end to end: (model, device, format, TP/PP, replicas, scheduler limits) + workload ->
simulated latency percentiles and throughput. `simulate(...)` is the function API behind `planner simulate`.

Efficiency and ranges follow `planner estimate`: `runtime` names a serving-runtime profile (planner/runtimes.py,
hardware_specs/runtimes/) whose fitted efficiency the step model uses (resolved by planner/efficiency.py, the same
precedence as estimate); `engine` names the KV sizing rules (planner/memory.py plan_memory: vllm, sglang, trtllm,
llamacpp; 'none' = the replica rule in step_model.replica_memory). Ranges: where estimate would attach a p10-p90
interval (a runtime profile, or the kind defaults' fitted intervals), the simulation is run again with every step
time divided by the interval's p10 (slow end) and p90 (fast end) of measured / predicted speed (decode work by the
'decode' regime at a mean batch of 1, 'throughput' above; prompt work by the 'prefill' regime: runtimes.
interval_regime, as estimate picks them), at the same offered load, so queueing shows in the range as it would on
such a system. At low load (no queueing) the ranges are estimate's latency_low/high exactly.

A deployment of r replicas of t x p GPUs runs r x p engines (a p-stage pipeline keeps p micro-batches in flight,
see parallelism.py); requests are routed round-robin, so one engine sees 1/(r p) of the traffic. For a parametric
workload the engine's share is simulated directly as a Poisson stream at qps / (r p) (Poisson thinning); a trace is
split round-robin. All engines are identical, so one engine's percentiles are the deployment's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import DoesNotFit, PlannerError, pydantic_one_line
from ..runtimes import first_token_from_decode, request_path_ms
from ..scheduler_defaults import scheduler_engine, step_policy
from .parallelism import check_tp, node_for
from .simulator import EngineLimits, EngineTrace, run_engine, summarize
from .step_model import ReplicaMemory, StepModel, replica_memory
from .workload import Requests, Workload, generate


MAX_REPLICAS = 100_000
MAX_REQUESTS = 1_000_000
STEP_TABLE_MAX_TOKENS = 1 << 18  # step tables stop here; beyond, StepModel extrapolates linearly (compute bound)
MAX_PROBE_REQUESTS = 100_000   # per probe of the --max-rate search (about 20 simulations, x3 with ranges)
# host link for swap when a spec gives no PCIe figure: PCIe 4.0 x16, 32 GB/s per direction nominal (PCI-SIG)
DEFAULT_SWAP_GBS = 32.0


_SCHEDULER_FIELDS = ("max_num_seqs", "max_num_batched_tokens", "chunked_prefill")


class ServingConfig(BaseModel):
    """How one deployment is configured. Scheduler names follow vLLM's engine arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hardware: str
    weights: str = "fp16"
    kv_dtype: str = "fp16"
    tp: int = Field(1, ge=1, le=64)
    pp: int = Field(1, ge=1, le=64)
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)
    max_num_seqs: int = Field(None, ge=1, le=65536, validate_default=False,
                              description="None: the engine's own default (planner/scheduler_defaults.py)")
    max_num_batched_tokens: int = Field(None, ge=1, le=1 << 20, validate_default=False,
                                        description="None: the engine's own default")
    chunked_prefill: bool = Field(None, validate_default=False, description="None: the engine's own default")
    scheduler_source: str = Field("", description="where the scheduler limits come from (filled in)")
    block_size: int = Field(16, ge=1, le=4096)
    flash_attention: bool = True
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, allow_inf_nan=False)
    preemption: Literal["recompute", "swap"] = "recompute"
    runtime: str | None = None
    engine: str = "none"

    @model_validator(mode="before")
    @classmethod
    def _engine_scheduler(cls, data):
        """Scheduler limits left unset take the engine's own defaults on this device (vLLM V1's and SGLang's by
        device memory, planner/scheduler_defaults.py), as `planner estimate --engine` sizes memory with them."""
        if not isinstance(data, dict) or all(data.get(k) is not None for k in _SCHEDULER_FIELDS):
            return data
        from ..errors import PlannerError
        from ..hardware import load_hardware
        from ..scheduler_defaults import resolve_scheduler, scheduler_engine

        try:
            spec = load_hardware(data.get("hardware"))
            engine = scheduler_engine(data.get("engine", "none"), data.get("runtime"))
        except (PlannerError, TypeError):  # the unknown device is reported where the config is used
            spec, engine = None, None      # (the planner's defaults need no device)
        given = {k: data[k] for k in _SCHEDULER_FIELDS if data.get(k) is not None}
        d = resolve_scheduler(engine, spec, *(given.get(k) if isinstance(given.get(k), (int, bool)) else None
                                              for k in _SCHEDULER_FIELDS))
        # the user's own values (as given: the fields validate them) over the engine's defaults
        return {**data, "max_num_seqs": d.max_num_seqs, "max_num_batched_tokens": d.max_num_batched_tokens,
                "chunked_prefill": d.chunked_prefill, **given,
                "scheduler_source": data.get("scheduler_source") or d.source}

    @model_validator(mode="after")
    def _budget_holds_the_batch(self):
        """vLLM's SchedulerConfig check: every running sequence takes at least one token of the step's budget."""
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                             f"({self.max_num_seqs}): a step holds at least one token per running sequence")
        return self

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas

    @property
    def engines(self) -> int:
        return self.replicas * self.pp


def make_config(**kw) -> ServingConfig:
    try:
        return ServingConfig(**kw)
    except ValidationError as exc:
        raise pydantic_one_line("serving config", exc) from None


@dataclass
class Engine:
    """A built engine: its step model, memory and scheduler limits."""

    step_model: StepModel
    memory: ReplicaMemory
    limits: EngineLimits


def device_for(m, spec, fmt, efficiency="auto", runtime=None):
    """(unit, DeviceModel, runtime profile or None) as `planner estimate` resolves them (planner/efficiency.py)."""
    from ..efficiency import resolve_efficiency
    from ..roofline import device_model, select_unit

    prof = None
    unit = None
    if runtime is not None:
        from ..runtimes import load_runtime

        prof = load_runtime(runtime)
        unit = prof.default_unit(spec)
    u = select_unit(spec, fmt, unit)
    return u, device_model(spec, u, fmt, resolve_efficiency(spec, u, efficiency, prof)), prof


def speed_interval(spec, unit, efficiency="auto", prof=None, batch: int = 2, multi_gpu: bool = False,
                   model=None, served: bool | None = None):
    """The p10-p90 interval of measured / predicted speed that `planner estimate` would attach (runtimes.py):
    the runtime profile's class, or the kind defaults' interval when the default efficiencies apply; None when
    none applies (calibration, device efficiency or the datasheet roofline). multi_gpu: a tensor-parallel group;
    model: the ModelArch, whose MoE layers and architecture traits widen the range outside the fit
    (runtimes.interval_regime). served: figures of a server under load, which take the profile's '_served' ranges
    (runtimes.interval_regime); None = under load where more than one request runs at a time (batch > 1), so that
    at low load the range is estimate's."""
    from ..efficiency import efficiency_origin
    from ..runtimes import default_interval_class, interval_key, interval_regime

    origin = efficiency_origin(spec, unit, efficiency, prof)
    pc = prof.for_unit(spec, unit) if origin == "runtime" else default_interval_class() if origin == "default" else None
    if pc is None:
        return None
    xp = {"multi_gpu": multi_gpu, "served": batch > 1 if served is None else served} | (
        {"moe": model.moe is not None, "traits": model.traits} if model is not None else {})
    iv = interval_regime(pc, "decode", batch, **xp)
    if iv is None:
        return None
    ip = interval_regime(pc, "prefill", batch, **xp) or iv
    load = " under load" if xp["served"] else ""
    regime = interval_key(pc.intervals, "decode" if batch == 1 else "throughput") + load  # the key it read
    return {"p10": iv.p10, "p90": iv.p90, "rows": iv.rows, "regime": regime, "prefill_regime": "prefill" + load,
            "prefill_p10": ip.p10, "prefill_p90": ip.p90,
            "source": f"{prof.id if prof else 'kind defaults'} ({pc.key}): "
                      + (pc.fit.interval_source if pc.fit else "no fit record")
                      + ("; under load, widened to the leave-one-source-out residuals of published runs through a "
                         "server under load (bursts, waves, steady queues)" if xp["served"] else "")}


def slow_fast(sm: StepModel, iv: dict) -> tuple[StepModel, StepModel]:
    """The step model at the slow (p10) and fast (p90) ends of the interval: decode work / the decode-regime
    quantile, prompt work / the prefill-regime quantile (as estimate's latency_low/high)."""
    return (sm.scaled(1 / iv["p10"], 1 / iv["prefill_p10"]), sm.scaled(1 / iv["p90"], 1 / iv["prefill_p90"]))


def swap_gbs(spec) -> float:
    """Host link per direction for swapping KV: half the spec's PCIe bidirectional figure, else DEFAULT_SWAP_GBS."""
    ic = spec.interconnect
    if ic is not None and ic.pcie_bidirectional_gbs:
        return ic.pcie_bidirectional_gbs / 2
    return DEFAULT_SWAP_GBS


def engine_pool(m, fmt, kvd, spec, cfg: "ServingConfig", max_len: int) -> ReplicaMemory:
    """KV pool of one engine: step_model.replica_memory for engine 'none', else the engine's own rule, the one
    `planner estimate --engine` applies (planner/memory.py), at the scheduler's max_num_seqs sequences of the
    workload's longest request (llama.cpp allocates n_ctx for them up front; the others' pools do not depend on it)."""
    mem = replica_memory(m, fmt, kvd, spec, cfg.tp, cfg.pp, cfg.max_num_batched_tokens, cfg.flash_attention,
                         cfg.gpu_memory_utilization, cfg.max_num_seqs)
    if cfg.engine == "none":
        return mem
    from ..memory import EngineSettings, check_engine, plan_memory
    check_engine(cfg.engine, spec, kvd)
    from ..units import GB
    from .parallelism import kv_split

    ways = kv_split(m, cfg.tp)
    prompt = max(1, max_len - 1)
    st = EngineSettings(max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
                        block_size=cfg.block_size,
                        gpu_memory_utilization=cfg.gpu_memory_utilization if cfg.engine == "vllm" else None)
    mb = plan_memory(m, fmt, kvd, cfg.max_num_seqs, prompt, 1, spec, cfg.engine, st, cfg.tp, ways,
                     cfg.flash_attention, pp=cfg.pp)
    pool, rule_ok, rule = mb.kv_pool_bytes, mb.fits, f"{cfg.engine} rule of planner/memory.py"
    per_tok = mem.kv_bytes_per_token / ways / cfg.pp
    tokens = int(pool // per_tok) * cfg.pp if pool > 0 else 0
    fits = tokens > 0 and (rule_ok or cfg.engine != "llamacpp")  # llama.cpp allocates n_ctx up front
    verdict = (f"fits ({cfg.engine}: {rule}): KV pool of {tokens:,} tokens" if fits else
               f"does not fit ({cfg.engine}: {rule}): KV pool {max(pool, 0.0) / GB:.2f} GB per device")
    return ReplicaMemory(fits, verdict, mem.weights_gb_per_gpu, tokens, mem.kv_bytes_per_token,
                         mem.capacity_gb_per_gpu)


def build_engine(m, spec, cfg: ServingConfig, efficiency="auto", max_prompt: int = 0, max_len: int = 0) -> Engine:
    """Step-time tables and KV pool for cfg; raises DoesNotFit when the weights do not fit."""
    from ..quantization import kv_dtype as norm_kv, weight_format
    from .parallelism import kv_split

    fmt = weight_format(cfg.weights)
    kvd = norm_kv(cfg.kv_dtype)
    check_tp(m, cfg.tp)
    node = node_for(spec)
    if cfg.tp > node.gpus_per_node:
        raise PlannerError(f"--tp: {cfg.tp} exceeds the {node.gpus_per_node} device(s) of one {node.name} node "
                           f"(tensor parallelism stays inside a node; use --pp across nodes)")
    if cfg.pp > 1 and node.inter_link() is None:
        raise PlannerError(f"--pp: {spec.id} nodes have no network between them ({node.name})")
    if cfg.pp > m.num_layers:
        raise PlannerError(f"--pp: {cfg.pp} stages exceed {m.name}'s {m.num_layers} layers")
    _, dev, _ = device_for(m, spec, fmt, efficiency, cfg.runtime)
    mem = engine_pool(m, fmt, kvd, spec, cfg, max(max_len, max_prompt + 1))
    if not mem.fits:
        raise DoesNotFit(f"{m.name} {fmt.name} on {cfg.tp * cfg.pp} x {spec.id}: {mem.verdict}")
    max_tokens = min(max(cfg.max_num_batched_tokens, max_prompt, cfg.max_num_seqs), STEP_TABLE_MAX_TOKENS)
    sm = StepModel.build(m, fmt, kvd, dev, cfg.tp, cfg.pp, node.intra_link() if cfg.tp > 1 else None,
                         node.inter_link() if cfg.pp > 1 else None, cfg.flash_attention, max_tokens)
    policy = config_step_policy(cfg)
    lim = EngineLimits(kv_pool_tokens=mem.kv_pool_tokens // cfg.pp, max_num_seqs=cfg.max_num_seqs,
                       max_num_batched_tokens=cfg.max_num_batched_tokens, chunked_prefill=cfg.chunked_prefill,
                       mixed_prefill=policy.mixed_prefill, reserve_output=policy.reserve_output,
                       block_size=cfg.block_size, preemption=cfg.preemption,
                       kv_bytes_per_token=mem.kv_bytes_per_token / kv_split(m, cfg.tp) / cfg.pp,
                       swap_gbs=swap_gbs(spec), request_path_s=request_path_ms(served_engine(cfg)) / 1e3,
                       first_token_decode=first_token_from_decode(cfg.runtime))
    return Engine(sm, mem, lim)


def config_step_policy(cfg: ServingConfig):
    """How the deployment's scheduler builds a step (planner/scheduler_defaults.py step_policy): the engine whose
    scheduler it runs, its --engine or a --runtime that names one, with its chunked prefill on or off."""
    return step_policy(scheduler_engine(cfg.engine, cfg.runtime), cfg.chunked_prefill)


def served_engine(cfg: ServingConfig) -> str | None:
    """The engine whose HTTP server the deployment runs (its request path, runtimes.REQUEST_PATH_MS): the runtime
    profile's, else the --engine named for its memory rules; None for neither."""
    return cfg.runtime or (cfg.engine if cfg.engine != "none" else None)


def engine_requests(w: Workload, engines: int, n: int, seed: int = 0) -> Requests:
    """The requests one of `engines` engines sees (module docstring)."""
    if w.trace:
        return generate(w, n, seed, stride=engines)
    return generate(w.model_copy(update={"qps": max(w.qps / engines, 1e-300)}), n, seed)


@dataclass
class SimulationResult:
    model: str
    config: ServingConfig
    workload: str
    summary: dict[str, Any]   # one engine's percentiles (= the deployment's) and its throughput
    totals: dict[str, Any]    # deployment totals: throughput x engines, GPUs
    memory_verdict: str
    kv_pool_tokens: int
    trace: EngineTrace

    def to_dict(self) -> dict:
        return {"model": self.model, "config": self.config.model_dump(), "workload": self.workload,
                "memory": self.memory_verdict, "kv_pool_tokens_per_engine": self.kv_pool_tokens,
                "engine": self.summary, "deployment": self.totals}

    def requests_frame(self):
        """Per-request times (one engine) as a DataFrame."""
        import pandas as pd

        t = self.trace
        return pd.DataFrame({"arrival_s": t.arrival_s, "prompt_tokens": t.prompt, "output_tokens": t.output,
                             "queue_ms": (t.admit_s - t.arrival_s) * 1e3, "ttft_ms": (t.first_s - t.arrival_s) * 1e3,
                             "e2e_s": t.finish_s - t.arrival_s})


RANGE_KEYS = (("requests_per_s", None), ("output_tokens_per_s", None), ("ttft_ms", "p50"), ("ttft_ms", "p95"),
              ("ttft_ms", "p99"), ("tpot_ms", "p50"), ("tpot_ms", "p95"), ("tpot_ms", "p99"), ("itl_ms", "p50"),
              ("itl_ms", "p95"), ("e2e_s", "p50"), ("e2e_s", "p95"))


def _fig(s: dict, key: str, q: str | None):
    return s[key] if q is None else s[key][q]


def _ranges(lo: dict, hi: dict) -> dict:
    """{figure: [low, high]} from the slow-end and fast-end summaries (a latency's low is the fast end's)."""
    out = {}
    for key, q in RANGE_KEYS:
        a, b = _fig(lo, key, q), _fig(hi, key, q)
        name = key if q is None else f"{key}_{q}"
        out[name] = None if a is None or b is None else [min(a, b), max(a, b)]
    return out


def simulate(model, config: ServingConfig | dict, workload: Workload, n_requests: int = 2000, seed: int = 0,
             efficiency="auto", warmup_fraction: float = 0.1, engine: Engine | None = None,
             ranges: bool = True, burst: bool = False) -> SimulationResult:
    """Simulate one engine of the deployment on its share of the workload (n_requests of them); with `ranges`,
    also at the two ends of the speed interval (module docstring) -> result.summary['range']. burst: the requests
    (the workload's lengths) all arrive at t = 0 and none is left out as warm-up: `vllm bench serve` with its
    default --request-rate inf and no --max-concurrency; the throughput is then output tokens / the run's span."""
    from ..architecture import load_model
    from ..hardware import load_hardware
    from .workload import check_requests

    check_requests(n_requests)
    m = model if not isinstance(model, str) else load_model(model)
    cfg = config if isinstance(config, ServingConfig) else make_config(**config)
    spec = load_hardware(cfg.hardware)
    reqs = engine_requests(workload, cfg.engines, n_requests, seed)
    if burst:
        reqs, warmup_fraction = reqs.at_once(), 0.0
    eng = engine or build_engine(m, spec, cfg, efficiency, int(reqs.prompt.max()), int((reqs.prompt + reqs.output).max()))
    tr = run_engine(eng.step_model, reqs, eng.limits)
    s = summarize(tr, warmup_fraction)
    iv = _interval(m, spec, cfg, efficiency, s) if ranges else None
    if iv is not None:
        slow, fast = slow_fast(eng.step_model, iv)
        lo = summarize(run_engine(slow, reqs, eng.limits), warmup_fraction)
        hi = summarize(run_engine(fast, reqs, eng.limits), warmup_fraction)
        s["range"] = _ranges(lo, hi) | {"interval": iv}
    else:
        s["range"] = None
    totals = {"gpus": cfg.gpus, "engines": cfg.engines,
              "requests_per_s": s["requests_per_s"] * cfg.engines,
              "output_tokens_per_s": s["output_tokens_per_s"] * cfg.engines,
              "offered_requests_per_s": None if burst else workload.qps}
    if s["range"]:
        for k in ("requests_per_s", "output_tokens_per_s"):
            totals[f"{k}_range"] = [v * cfg.engines for v in s["range"][k]]
    what = (f"a burst of {len(reqs):,} requests at once (per engine), " + workload.describe().split(", ", 1)[-1]
            if burst else workload.describe())
    return SimulationResult(m.name, cfg, what, s, totals, eng.memory.verdict, eng.limits.kv_pool_tokens,
                            tr)


def _interval(m, spec, cfg: ServingConfig, efficiency, s: dict) -> dict | None:
    from ..quantization import weight_format

    fmt = weight_format(cfg.weights)
    u, _, prof = device_for(m, spec, fmt, efficiency, cfg.runtime)
    return speed_interval(spec, u, efficiency, prof, max(1, round(s["mean_batch_busy"])), multi_gpu=cfg.tp > 1,
                          model=m)


def offline_throughput(m, spec, cfg: ServingConfig, workload: Workload, n_requests: int = 1000, seed: int = 0,
                       efficiency="auto", engine: Engine | None = None) -> dict:
    """Offline (MLPerf Inference's scenario, no latency limit): every request of the engine's share queued at
    t = 0. The saturated rate is measured while the queue is not empty, up to the last admission t_a, in output
    tokens: tokens out by t_a (a request in flight has produced 1 + (output - 1) x (t_a - first) / (finish - first)
    of them) / t_a; requests/s = that / the mean output of all the requests. Counting whole requests completed
    instead would favour the short ones that finish first, and counting to the last completion would add the drain
    of the longest request at a shrinking batch. Every prompt is prefilled by t_a but not every output decoded, so
    the window holds more than its share of prefill work: the figure errs low. When every request is admitted at
    once, it is completed / time to finish them all. One engine; x engines for a deployment."""
    reqs = engine_requests(workload, cfg.engines, n_requests, seed)
    eng = engine or build_engine(m, spec, cfg, efficiency, int(reqs.prompt.max()), int((reqs.prompt + reqs.output).max()))
    tr = run_engine(eng.step_model, reqs.at_once(), eng.limits)
    s = summarize(tr, 0.0)
    ok = np.isfinite(tr.finish_s)
    t_a = float(np.max(tr.admit_s[ok])) if ok.any() else 0.0
    if t_a > 0:
        first, fin, out = tr.first_s[ok], tr.finish_s[ok], tr.output[ok].astype(np.float64)
        frac = np.clip((t_a - first) / np.maximum(fin - first, 1e-300), 0.0, 1.0)
        tokens = np.where(fin <= t_a, out, np.where(first <= t_a, 1 + (out - 1) * frac, 0.0)).sum()
        s["output_tokens_per_s"] = float(tokens / t_a)
        s["requests_per_s"] = s["output_tokens_per_s"] / float(out.mean())
    s["offline_window_s"] = t_a
    return s


def max_rate(model, config: ServingConfig | dict, workload: Workload, ttft_ms: float, tpot_ms: float,
             percentile: int = 95, n_requests: int = 1000, seed: int = 0, efficiency="auto",
             precision: float = 0.02, ranges: bool = True) -> dict:
    """The highest request rate whose simulated TTFT and TPOT percentiles meet the limits (Server scenario), by a
    geometric bisection over the rate in [Offline / 1000, Offline]: the bracket's top is the Offline throughput
    (no latency limit), so the answer can never exceed it. Each probe simulates n_requests per engine with the
    same seed (common random numbers). Stops when the bracket is within `precision` (relative)."""
    from ..architecture import load_model
    from ..hardware import load_hardware
    from .workload import check_requests

    check_requests(n_requests)
    if n_requests > MAX_PROBE_REQUESTS:
        raise PlannerError(f"--requests: at most {MAX_PROBE_REQUESTS:,} per probe with --max-rate (each probe is a "
                           f"simulation), got {n_requests:,}")
    if percentile not in (50, 90, 95, 99):
        raise PlannerError(f"--percentile: must be one of 50, 90, 95, 99, got {percentile!r}")
    for flag, v in (("--ttft-ms", ttft_ms), ("--tpot-ms", tpot_ms)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 1e9):
            raise PlannerError(f"{flag}: must be a finite number of milliseconds in (0, 1e9], got {v!r}")
    m = model if not isinstance(model, str) else load_model(model)
    cfg = config if isinstance(config, ServingConfig) else make_config(**config)
    spec = load_hardware(cfg.hardware)
    probe = engine_requests(workload, cfg.engines, n_requests, seed)
    eng = build_engine(m, spec, cfg, efficiency, int(probe.prompt.max()), int((probe.prompt + probe.output).max()))
    q = f"p{percentile}"

    def search(sm) -> dict:
        e = Engine(sm, eng.memory, eng.limits)
        off = offline_throughput(m, spec, cfg, workload, n_requests, seed, efficiency, e)
        top = off["requests_per_s"]  # per engine
        if not top > 0:
            return {"offline_requests_per_s": 0.0, "max_requests_per_s": None,
                    "reason": f"no request completes: {off['rejected']} of {off['requests']} are longer than the KV "
                              f"pool ({eng.limits.kv_pool_tokens:,} tokens)"}

        def ok(rate):
            w = workload.model_copy(update={"qps": rate * cfg.engines})
            s = summarize(run_engine(sm, engine_requests(w, cfg.engines, n_requests, seed), eng.limits))
            good, why = meets_slo(s, ttft_ms, tpot_ms, q)
            return good, why, s

        lo_rate, hi_rate = top / 1000, top
        good, why, s_hi = ok(hi_rate)
        if good:
            best, s_best, why_lo = hi_rate, s_hi, ""
        else:
            good, why_lo, s_lo = ok(lo_rate)
            if not good:
                return {"offline_requests_per_s": float(top * cfg.engines), "max_requests_per_s": None,
                        "reason": f"misses the limits even at {lo_rate * cfg.engines:.4g} req/s: {why_lo}"}
            best, s_best = lo_rate, s_lo
            while hi_rate / lo_rate > 1 + precision:
                mid = math.sqrt(lo_rate * hi_rate)
                good, _, s_mid = ok(mid)
                if good:
                    lo_rate, best, s_best = mid, mid, s_mid
                else:
                    hi_rate = mid
        tok_per_req = s_best["output_tokens_per_s"] / max(s_best["requests_per_s"], 1e-300)
        return {"offline_requests_per_s": float(top * cfg.engines), "max_requests_per_s": float(best * cfg.engines),
                "max_output_tokens_per_s": float(best * tok_per_req * cfg.engines),
                "offline_output_tokens_per_s": float(off["output_tokens_per_s"] * cfg.engines),
                f"ttft_ms_{q}": s_best["ttft_ms"][q], f"tpot_ms_{q}": s_best["tpot_ms"][q],
                "preemptions": s_best["preemptions"], "reason": ""}

    out = search(eng.step_model)
    out.update({"model": m.name, "config": cfg.model_dump(), "workload": workload.describe(),
                "limits": {f"ttft_ms_{q}": ttft_ms, f"tpot_ms_{q}": tpot_ms}, "memory": eng.memory.verdict,
                "requests_per_probe": n_requests, "precision": precision, "range": None})
    unit, _, prof = device_for(m, spec, eng.step_model.fmt, efficiency, cfg.runtime)
    iv = speed_interval(spec, unit, efficiency, prof, 2, multi_gpu=cfg.tp > 1, model=m) if ranges else None
    if iv is not None:
        slow, fast = (search(x) for x in slow_fast(eng.step_model, iv))
        # an end of the range at which no rate meets the limits sustains 0 req/s under them (not an unknown)
        keys = ("max_requests_per_s", "offline_requests_per_s")
        out["range"] = {k: [slow[k] or 0.0, fast[k] or 0.0] for k in keys} | {"interval": iv}
    return out


def meets_slo(summary: dict, ttft_p95_ms: float, tpot_p95_ms: float, q: str = "p95") -> tuple[bool, str]:
    """(ok, reason): TTFT and TPOT percentile q against their targets; rejected requests fail it."""
    if summary["rejected"]:
        return False, f"{summary['rejected']} requests longer than the KV pool"
    ttft = summary["ttft_ms"][q]
    tpot = summary["tpot_ms"][q]
    bad = []
    if ttft is None or ttft > ttft_p95_ms:
        bad.append(f"TTFT {q} {ttft:,.0f} ms > {ttft_p95_ms:g}" if ttft is not None else "no TTFT")
    if tpot is not None and tpot > tpot_p95_ms:
        bad.append(f"TPOT {q} {tpot:.1f} ms > {tpot_p95_ms:g}")
    return (not bad), "; ".join(bad)


def ceil_div(a: float, b: float) -> int:
    return max(1, math.ceil(a / b - 1e-12))
