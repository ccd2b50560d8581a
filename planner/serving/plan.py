"""Capacity plan: for each candidate device, the cheapest configuration that meets the SLOs at the request rate,
checked by simulation, and the recommendations that follow, each computed by comparing alternatives with the model.

Per device (ids from hardware_specs/; default: every device of kind gpu or soc, or consumer GPUs and SoCs for the
on-device preset):
  1. candidates: weight format x tensor-parallel degree (1, 2, 4, 8 inside a node, dividing the attention heads);
     pipeline stages across nodes only when no single node holds the model.
  2. cheap rejections with the cost model alone: the weights do not fit; the KV pool cannot hold the longest
     request; TTFT of the p95 prompt alone, or TPOT of one sequence, already misses the SLO.
  3. a lower bound on replicas: one engine can serve at most mu = 1 / (prefill(mean prompt) +
     (mean output - 1) x step(b) / b) requests/s, b the largest batch whose decode step meets the TPOT target
     and whose KV fits; r >= qps / mu.
  4. the (at most three) candidates with the lowest estimate of GPUs (the bound, raised by an M/D/1 estimate of
     prefill queueing against the TTFT slack) (ties: higher precision first); for each, the smallest
     replica count whose simulation meets both p95 targets (from the bound; else checked at 16x the bound, nearly
     unloaded, and bisected in between), trying a
     smaller batch limit (the largest batch whose step meets the TPOT target) when only TPOT misses; screening
     runs simulate a fifth of the requests, and the answer is confirmed with the full count. Bisection stops
     when its bracket is within 5% of the replica count (the answer returned always met the targets). The search stops when no remaining candidate
     can need fewer GPUs. The chosen configuration met the SLOs in its own simulation (same seed).
Work done once per plan (none of it changes an answer; tests/serving/test_plan_fast_paths.py compares with the
path that redoes it): a simulation is a pure function of (step model, requests, scheduler limits), so each runs once
(the quantization recommendation searches the chosen device again; a bisection may revisit a count); the requests
of one (engines, count) are drawn once for every device; a device model is resolved once per (device, format,
unit). The notes say how many devices the cost model screened out, how many were simulated, and how many engine
simulations ran (screening, confirmation and the two runs of each range).
Costs: GPUs x price per GPU-hour (the spec's price, or --price overrides). Per million tokens at the offered rate,
so that plans compare with API prices: the fleet's hour is split between prefill and decode work in proportion to
the time the mean request spends in each on the chosen engine, f_in = t_prefill / (t_prefill + t_decode) with
t_prefill = prefill(mean prompt) and t_decode = (mean output - 1) x step(b) / b (b = the simulated mean batch while
busy, each sequence paying 1/b of a batched step); then
  $/M input = usd_h x f_in / (input tok/s x 3600) x 1e6,   $/M output = usd_h x (1 - f_in) / (output tok/s x 3600) x 1e6
and blended = usd_h / ((input + output) tok/s x 3600) x 1e6, the token-weighted mean of the two at the workload's ratio.
Energy: the power each device draws at the modeled utilization, not TDP:
  P = P_idle + (TDP - P_idle) x u,   P_idle = IDLE_POWER_FRACTION x TDP (0.15, see below)
  u = busy fraction x (f_in x r_prefill + (1 - f_in) x r_decode)
where r = (datasheet roofline time of the step: max(flops / peak, bytes / bandwidth) per op) / (modeled step time) is
how busy the binding unit (tensor cores or memory) is while the step runs. Energy per output token = GPUs x P /
output tok/s; on one device (on-device preset) P at u = the request's own mix x mean request time / mean output.
Linear power in utilization between idle and TDP is the usual server power model (Barroso & Hoelzle, "The Case for
Energy-Proportional Computing", IEEE Computer 2007); idle near 10-20% of TDP matches nvidia-smi idle readings of
data-center GPUs (e.g. H100 SXM ~70-100 W of 700 W) and the ML.ENERGY measurements (Chung et al., "Reducing
Energy Bloat in Large Model Training", SOSP 2024: GPUs draw well below TDP when memory bound).
Ranking: objective "cost": priced devices by cost per hour; devices without a price after them, by energy per
token ("no price"); objective "latency" (on-device): by quality tier of the weight format first (16-bit, 8-bit,
5-6-bit, 4-bit), then TPOT p95 inside a tier, so an int4 device never ranks above a bf16 one as if equal. Rejected
devices last, with the reason.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import PlannerError
from ..latency import first_token_from_decode_s
from ..runtimes import first_token_from_decode
from .engine import STEP_TABLE_MAX_TOKENS, engine_requests, meets_slo
from .parallelism import check_tp, node_for, tp_step_time_s
from .scenarios import Scenario, get_scenario
from .simulator import EngineLimits, run_engine, summarize
from .step_model import StepModel, replica_memory
from .workload import generate

PRECISION_ORDER = ("fp32", "bf16", "fp16", "fp8", "int8", "w8a8-int8", "q8_0", "q6_k", "q5_1", "q5_k_m", "q5_k_s",
                   "q5_0", "int4-g128", "q4_k_m", "awq-int4", "gptq-int4", "q4_1", "q4_k_s", "q4_0", "iq4_nl",
                   "iq4_xs", "mxfp4", "nvfp4", "q3_k_l", "q3_k_m", "q3_k_s", "q2_k")
QUALITY_TIERS = {"16-bit": ("fp32", "bf16", "fp16"), "8-bit": ("fp8", "int8", "w8a8-int8", "q8_0"),
                 "5-6-bit": ("q6_k", "q5_1", "q5_k_m", "q5_k_s", "q5_0"),
                 "4-bit": ("int4-g128", "q4_k_m", "awq-int4", "gptq-int4", "q4_1", "q4_k_s", "q4_0", "iq4_nl",
                           "iq4_xs", "mxfp4", "nvfp4"),
                 "2-3-bit": ("q3_k_l", "q3_k_m", "q3_k_s", "q2_k")}
IDLE_POWER_FRACTION = 0.15   # P_idle / TDP (module docstring)
TP_DEGREES = (1, 2, 4, 8)
MAX_GPUS = 1024
REPLICA_PRECISION = 0.05   # the replica search stops when its bracket is within 5% (the answer still met the SLOs)
MAX_SEARCHED = 3   # candidates simulated per device, in order of their lower bound on devices


@dataclass
class PlanResult:
    model: str
    scenario: Scenario
    table: Any                      # pandas DataFrame, one row per device, ranked
    configs: Any                    # pandas DataFrame, every configuration simulated or rejected
    recommendations: list[dict]
    elapsed_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> dict | None:
        ok = self.table[self.table["status"] == "ok"]
        return None if ok.empty else _records(ok.iloc[:1])[0]

    def to_dict(self) -> dict:
        sc = self.scenario
        return {
            "model": self.model, "scenario": sc.name, "workload": sc.workload.describe(),
            "slo": {"ttft_p95_ms": sc.ttft_p95_ms, "tpot_p95_ms": sc.tpot_p95_ms}, "objective": sc.objective,
            "ranking": _records(self.table), "recommendations": self.recommendations, "notes": self.notes,
            "elapsed_s": self.elapsed_s,
        }


def quality_tier(fmt_name: str) -> tuple[int, str]:
    """(order, label) of a weight format's quality tier (QUALITY_TIERS); unknown formats last."""
    for i, (label, names) in enumerate(QUALITY_TIERS.items()):
        if fmt_name in names:
            return i, label
    return len(QUALITY_TIERS), "other"


def _records(df) -> list[dict]:
    ints = ("rank", "tp", "pp", "replicas", "gpus", "max_num_seqs", "preemptions")
    out = []
    for rec in df.to_dict(orient="records"):
        row = {}
        for k, v in rec.items():
            v = v.item() if isinstance(v, np.generic) else v
            if isinstance(v, float) and not math.isfinite(v):
                v = None
            if k in ints and v is not None:
                v = int(v)
            row[k] = v
        out.append(row)
    return out


@dataclass
class _Stats:
    """What the plan needs to know about the workload, from a sample of it."""

    prompt_mean: float
    prompt_p95: int
    prompt_p99: int
    prompt_max: int
    output_mean: float
    length_max: int
    lengths: np.ndarray
    output_tokens_per_s: float


def _workload_stats(sc: Scenario, seed: int) -> _Stats:
    r = generate(sc.workload, 4000, seed)
    lens = r.prompt + r.output
    return _Stats(float(r.prompt.mean()), int(np.percentile(r.prompt, 95)), int(np.percentile(r.prompt, 99)), int(r.prompt.max()),
                  float(r.output.mean()), int(lens.max()), lens, sc.workload.qps * float(r.output.mean()))


def candidate_devices(sc: Scenario, hardware: list[str] | None):
    from ..hardware import list_hardware_ids, load_hardware

    if hardware:  # ids, paths or HardwareSpec objects (an upload is used as given, never looked up by name)
        specs = [h if not isinstance(h, str) else load_hardware(h) for h in hardware]
        return list({s.id: s for s in specs}.values()), []  # a device named twice is one candidate
    specs, skipped = [], []
    for hid in list_hardware_ids():
        try:
            s = load_hardware(hid)
        except PlannerError as exc:
            skipped.append(f"{hid}: {exc}")
            continue
        if sc.devices == "consumer":
            if s.kind == "soc" or "geforce" in s.name.lower():
                specs.append(s)
        elif s.kind in ("gpu", "soc"):
            specs.append(s)
    return specs, skipped


def _format_name(spec, name: str):
    """The weight format as it runs here: bf16 on a unit without a bf16 peak runs (and is labelled) fp16."""
    from ..quantization import weight_format
    from ..roofline import pick_dtype, select_unit

    fmt = weight_format(name)
    u = select_unit(spec, fmt)
    if fmt.name == "bf16" and pick_dtype(u, fmt.compute_dtypes) != "bf16":
        fmt = weight_format("fp16")
        u = select_unit(spec, fmt)
    return fmt, u


@dataclass
class _Cand:
    fmt: Any
    unit: Any
    tp: int
    pp: int
    pool_tokens: int
    r_lb: int
    b_slo: int
    reason: str = ""
    r_est: int = 0

    @property
    def gpus_est(self) -> int:
        return max(self.r_est, self.r_lb) * self.tp * self.pp

    @property
    def gpus_lb(self) -> int:
        return self.r_lb * self.tp * self.pp


class _Planner:
    # a simulation (and the requests it serves) is worked out once per plan; False re-runs every one: the
    # reference the property test compares with (tests/serving/test_plan_fast_paths.py)
    reuse_simulations = True

    def __init__(self, m, sc: Scenario, st: _Stats, n_requests: int, seed: int, efficiency, kv_dtype: str,
                 budget_tokens: int = 8192, runtime=None, engine: str = "none"):
        self.m, self.sc, self.st, self.n, self.seed, self.eff, self.kvd = m, sc, st, n_requests, seed, efficiency, kv_dtype
        self.budget = budget_tokens
        self.runtime, self.engine_rule = runtime, engine
        self.prices: dict = {}
        self.rows: list[dict] = []
        self.engines: dict = {}
        self._cands: dict = {}
        self._splits: dict = {}
        self._prefill_work: dict = {}
        self._devs: dict = {}
        self._sims: dict = {}     # run(): summaries by configuration
        self._reqs: dict = {}     # _requests(): engine_requests by (workload, engines, n)
        self.sim_runs = 0         # engine simulations run (each range adds two)

    # ------------------------------------------------------------ per configuration

    def _dev(self, spec, fmt, unit, datasheet: bool = False):
        """The device model estimate uses (efficiency.py precedence, the runtime profile when named); a pure
        function of its arguments within one plan, so resolved once per (device, format, unit)."""
        key = (id(spec), fmt.name, unit.name, datasheet)
        hit = self._devs.get(key)
        if hit is None:
            hit = self._devs[key] = (spec, self._resolve_dev(spec, fmt, unit, datasheet))
        return hit[1]

    def _resolve_dev(self, spec, fmt, unit, datasheet: bool):
        from ..efficiency import resolve_efficiency
        from ..roofline import device_model

        if datasheet:
            return device_model(spec, unit, fmt, resolve_efficiency(spec, unit, "datasheet"))
        prof = self.prof
        if prof is None and self.engine_rule != "none":  # the engine's own profile where it covers this device
            from ..runtimes import load_runtime, runtime_for_engine

            rid = runtime_for_engine(self.engine_rule, spec)
            prof = load_runtime(rid) if rid else None
        return device_model(spec, unit, fmt, resolve_efficiency(spec, unit, self.eff, prof))

    @property
    def request_path_s(self) -> float:
        """The served engine's HTTP request path (runtimes.REQUEST_PATH_MS): its runtime, else its --engine."""
        from ..runtimes import request_path_ms
        return request_path_ms(self.runtime or (self.engine_rule if self.engine_rule != "none" else None)) / 1e3

    @property
    def prof(self):
        if self.runtime is None:
            return None
        from ..runtimes import load_runtime

        return load_runtime(self.runtime)

    def _sched(self, spec) -> tuple[int, bool]:
        """(tokens per step, chunked prefill) the engine runs on this device: the engine's own defaults where
        --engine (or else --runtime) names vLLM, SGLang or TensorRT-LLM (planner/scheduler_defaults.py
        scheduler_engine, as `planner simulate`), else the scenario's."""
        from ..scheduler_defaults import scheduler_defaults

        if self.sched_engine is not None:
            d = scheduler_defaults(self.sched_engine, spec)
            return d.max_num_batched_tokens, d.chunked_prefill
        return self.budget, self.sc.chunked_prefill

    @property
    def sched_engine(self) -> str | None:
        """Whose scheduler the plan runs: scheduler_defaults.scheduler_engine of its --engine and --runtime."""
        from ..scheduler_defaults import scheduler_engine

        return scheduler_engine(self.engine_rule, self.runtime)

    def _limits(self, spec, c: _Cand, seqs: int, chunked: bool) -> EngineLimits:
        """The scheduler one engine of candidate `c` runs: its budget and chunking (_sched), and how --engine builds
        a step (scheduler_defaults.step_policy: SGLang's prefill steps apart, TensorRT-LLM's reserved outputs)."""
        from ..scheduler_defaults import step_policy

        budget, chunked_default = self._sched(spec)
        chunked = chunked or chunked_default
        policy = step_policy(self.sched_engine, chunked)
        return EngineLimits(c.pool_tokens, seqs, budget, chunked, mixed_prefill=policy.mixed_prefill,
                            reserve_output=policy.reserve_output, request_path_s=self.request_path_s,
                            first_token_decode=first_token_from_decode(self.runtime))

    def _memory(self, spec, fmt, tp, pp):
        if self.engine_rule == "none":
            return replica_memory(self.m, fmt, self.kvd, spec, tp, pp, self.budget,
                                  max_num_seqs=self.sc.max_num_seqs)
        from .engine import engine_pool, make_config

        cfg = make_config(hardware=spec.id, weights=fmt.name, kv_dtype=self.kvd, tp=tp, pp=pp,
                          max_num_seqs=self.sc.max_num_seqs, max_num_batched_tokens=self._sched(spec)[0],
                          engine=self.engine_rule)
        return engine_pool(self.m, fmt, self.kvd, spec, cfg, self.st.length_max)

    def candidate(self, spec, fmt, unit, tp: int, pp: int) -> _Cand:
        """The cost-model screen of one configuration (module docstring, steps 2-3); a pure function of its
        arguments within one plan, so worked out once (the quantization recommendation asks again)."""
        sc = self.sc   # the recommendations narrow sc.formats only; key on everything else it reads as well
        key = (id(spec), fmt.name, unit.name, tp, pp, sc.max_num_seqs, sc.ttft_p95_ms, sc.tpot_p95_ms,
               sc.workload.qps)
        if key not in self._cands:
            self._cands[key] = (spec, self._candidate(spec, fmt, unit, tp, pp))
        return dataclasses.replace(self._cands[key][1])

    def _candidate(self, spec, fmt, unit, tp: int, pp: int) -> _Cand:
        m, sc, st = self.m, self.sc, self.st
        node = node_for(spec)
        c = _Cand(fmt, unit, tp, pp, 0, 0, 0)
        try:
            mem = self._memory(spec, fmt, tp, pp)
            dev = self._dev(spec, fmt, unit)
        except PlannerError as exc:
            c.reason = str(exc)
            return c
        if not mem.fits:
            c.reason = mem.verdict
            return c
        c.pool_tokens = mem.kv_pool_tokens // pp
        if c.pool_tokens < st.length_max:
            c.reason = (f"KV pool of {c.pool_tokens:,} tokens per engine cannot hold the longest request "
                        f"({st.length_max:,} tokens)")
            return c
        link = node.intra_link() if tp > 1 else None  # allreduce_time_s applies the topology for the group size
        # the p95 prompt alone (the TTFT screen) and the mean prompt (the service rate) in one vectorized call
        # (elementwise, the same floats as two scalar calls)
        ttft0, prefill = (float(t) for t in tp_step_time_s(m, fmt, self.kvd, dev, "prefill", 1,
                                                            np.array([st.prompt_p95, st.prompt_mean]), 0, tp, link))
        if first_token_from_decode(self.runtime):  # its first token comes out of a decode step (the simulator's rule)
            ttft0 = float(first_token_from_decode_s(
                lambda n: tp_step_time_s(m, fmt, self.kvd, dev, "prefill", 1, n, 0, tp, link),
                lambda past: tp_step_time_s(m, fmt, self.kvd, dev, "decode", 1, 1, past, tp, link),
                st.prompt_p95)[0])
        ttft0 += self.request_path_s  # the engine's HTTP request path is in every TTFT (summarize)
        ctx = st.prompt_mean + st.output_mean / 2
        b_max = max(1, min(self.sc.max_num_seqs, int(c.pool_tokens // (st.prompt_mean + st.output_mean))))
        bs = np.arange(1, b_max + 1, dtype=np.float64)
        step = np.asarray(tp_step_time_s(m, fmt, self.kvd, dev, "decode", bs, 1, ctx, tp, link)) * 1.0
        if pp > 1:
            step = step + (pp - 1) * node.inter_link().send_time_s(bs * m.hidden_size * 2.0)
        if ttft0 * 1e3 > sc.ttft_p95_ms:
            c.reason = (f"TTFT of the p95 prompt ({st.prompt_p95:,} tokens) alone is {ttft0 * 1e3:,.0f} ms "
                        f"> {sc.ttft_p95_ms:g} ms")
            return c
        if step[0] * 1e3 > sc.tpot_p95_ms:
            c.reason = f"TPOT of one sequence is {step[0] * 1e3:.1f} ms > {sc.tpot_p95_ms:g} ms"
            return c
        ok = np.nonzero(step * 1e3 <= sc.tpot_p95_ms)[0]
        c.b_slo = int(ok[-1]) + 1
        mu = 1.0 / (prefill + max(st.output_mean - 1, 0) * step[c.b_slo - 1] / c.b_slo)
        c.r_lb = max(1, math.ceil(sc.workload.qps / (mu * pp) - 1e-9))
        # a starting estimate that also respects TTFT (not a bound): prefill-first queueing as M/D/1 on the prefill
        # work S = prefill(mean prompt), mean wait rho S / (2 (1 - rho)), p95 ~ 3x the mean (exponential tail);
        # the slack is the TTFT target less the p95 prompt's own prefill and one decode step in progress
        slack = sc.ttft_p95_ms / 1e3 - ttft0 - step[c.b_slo - 1]
        if slack <= 0:
            c.r_est = 16 * c.r_lb
        else:
            x = slack / (1.5 * prefill)
            rho = x / (1 + x)
            c.r_est = max(c.r_lb, math.ceil(sc.workload.qps * prefill / (rho * pp) - 1e-9))
        if c.gpus_lb > MAX_GPUS:
            c.reason = f"needs more than {MAX_GPUS} devices"
        return c

    def _engine(self, spec, c: _Cand) -> StepModel:
        key = (spec.id, c.fmt.name, c.tp, c.pp)
        if key not in self.engines:
            node = node_for(spec)
            self.engines[key] = StepModel.build(
                self.m, c.fmt, self.kvd, self._dev(spec, c.fmt, c.unit), c.tp, c.pp,
                node.intra_link() if c.tp > 1 else None, node.inter_link() if c.pp > 1 else None, True,
                min(max(self._sched(spec)[0], self.st.prompt_max), STEP_TABLE_MAX_TOKENS))
        return self.engines[key]

    def run(self, spec, c: _Cand, replicas: int, seqs: int, chunked: bool = False,
            screen: bool = False) -> tuple[bool, str, dict]:
        """Simulate one engine of the configuration; screening runs use a quarter of the requests."""
        sm = self._engine(spec, c)
        engines = replicas * c.pp
        n = max(100, self.n // 5) if screen else self.n
        lim = self._limits(spec, c, seqs, chunked)
        # a simulation is a pure function of (step model, requests, limits): run once per plan (the quantization
        # recommendation searches the chosen device again; a bisection may revisit a count)
        key = (spec.id, c.fmt.name, c.tp, c.pp, engines, n, lim, self.sc.workload)
        s = self._sims.get(key) if self.reuse_simulations else None
        if s is None:
            s = self._sims[key] = summarize(run_engine(sm, self._requests(engines, n), lim))
            self.sim_runs += 1
        ok, why = meets_slo(s, self.sc.ttft_p95_ms, self.sc.tpot_p95_ms)
        status = ("meets SLO" if ok else "misses SLO") + (" (screening)" if screen else "")
        self.rows.append(self._row(spec, c, replicas, seqs, s, status, why, chunked) | {"simulated_requests": n})
        return ok, why, s

    def _requests(self, engines: int, n: int):
        """The n requests one of `engines` engines sees (engine_requests; the same arrays for every device)."""
        key = (self.sc.workload, engines, n)
        reqs = self._reqs.get(key) if self.reuse_simulations else None
        if reqs is None:
            reqs = self._reqs[key] = engine_requests(self.sc.workload, engines, n, self.seed)
        return reqs

    def with_ranges(self, spec, c: _Cand, row: dict) -> dict:
        """The chosen row with p10-p90 ranges of its p95 latencies: the same simulation with every step time
        divided by the p10 and the p90 of the speed interval `planner estimate` would attach (engine.py)."""
        from .engine import slow_fast, speed_interval

        iv = speed_interval(spec, c.unit, self.eff, self.prof, max(1, int(round(row["mean_running"] or 1))),
                            multi_gpu=c.tp > 1, model=self.m)
        if iv is None:
            return dict(row, ttft_p95_ms_range=None, tpot_p95_ms_range=None, range_source=None)
        sm = self._engine(spec, c)
        reqs = self._requests(row["replicas"] * c.pp, self.n)
        lim = self._limits(spec, c, row["max_num_seqs"], bool(row["chunked_prefill"]))
        sm_slow, sm_fast = slow_fast(sm, iv)
        slow = summarize(run_engine(sm_slow, reqs, lim))
        fast = summarize(run_engine(sm_fast, reqs, lim))
        self.sim_runs += 2
        rng = {}
        for k, key in (("ttft_p95_ms_range", "ttft_ms"), ("tpot_p95_ms_range", "tpot_ms")):
            a, b = fast[key]["p95"], slow[key]["p95"]
            rng[k] = None if a is None or b is None else [min(a, b), max(a, b)]
        return dict(row, **rng, range_source=f"p10 {iv['p10']:g} / p90 {iv['p90']:g} of measured/predicted speed, "
                                             f"{iv['source']}")

    def _work_split(self, spec, c: _Cand, s) -> tuple[float, float]:
        """(f_in, u_busy): the share of the engine's time in prefill work, and how busy the binding unit is while
        the engine runs (module docstring)."""
        from .parallelism import tp_step_time_s as step

        st, m = self.st, self.m
        b = max(1, int(round((s or {}).get("mean_batch_busy") or 1)))
        key = (id(spec), c.fmt.name, c.unit.name, c.tp, b)
        if key in self._splits:  # a pure function of these within one plan
            return self._splits[key][1]
        node = node_for(spec)
        link = node.intra_link() if c.tp > 1 else None
        ctx = st.prompt_mean + st.output_mean / 2
        p = max(1, int(round(st.prompt_mean)))
        dev, ds = self._dev(spec, c.fmt, c.unit), self._dev(spec, c.fmt, c.unit, datasheet=True)
        pkey = key[:-1]   # the prefill of the mean prompt does not depend on the batch
        if pkey not in self._prefill_work:
            self._prefill_work[pkey] = (spec, float(step(m, c.fmt, self.kvd, dev, "prefill", 1, p, 0, c.tp, link)),
                                        float(step(m, c.fmt, self.kvd, ds, "prefill", 1, p, 0, c.tp, link)))
        _, t_p, t_pd = self._prefill_work[pkey]
        t_s = float(step(m, c.fmt, self.kvd, dev, "decode", b, 1, ctx, c.tp, link))
        t_sd = float(step(m, c.fmt, self.kvd, ds, "decode", b, 1, ctx, c.tp, link))
        t_d = max(st.output_mean - 1, 0) * t_s / b
        f_in = t_p / (t_p + t_d) if t_p + t_d > 0 else 0.0
        out = f_in, min(1.0, f_in * t_pd / t_p + (1 - f_in) * t_sd / t_s)
        self._splits[key] = (spec, out)
        return out

    def _row(self, spec, c: _Cand, replicas, seqs, s, status, why, chunked=False) -> dict:
        gpus = replicas * c.tp * c.pp
        price = self.prices.get(spec.id, spec.price.usd_per_hour if spec.price else None)
        tdp = spec.power.tdp_w if spec.power else None
        usd_h = gpus * price if price else None
        out_s = self.st.output_tokens_per_s
        in_s = self.sc.workload.qps * self.st.prompt_mean
        f_in, u_busy = self._work_split(spec, c, s)
        busy = (s or {}).get("busy_fraction") or 0.0
        watts = None
        energy = None
        if tdp:
            u = u_busy if self.sc.single_device else busy * u_busy
            watts = tdp * (IDLE_POWER_FRACTION + (1 - IDLE_POWER_FRACTION) * u)
            if self.sc.single_device and s:
                energy = watts * s["e2e_s"]["mean"] / self.st.output_mean
            else:
                energy = gpus * watts / out_s
        return {
            "hardware": spec.id, "status": status, "weights": c.fmt.name, "quality_tier": quality_tier(c.fmt.name)[1],
            "unit": c.unit.name, "tp": c.tp,
            "pp": c.pp, "replicas": replicas, "gpus": gpus, "max_num_seqs": seqs,
            "chunked_prefill": bool(chunked or self._sched(spec)[1]),
            "ttft_p95_ms": s["ttft_ms"]["p95"] if s else None, "tpot_p95_ms": s["tpot_ms"]["p95"] if s else None,
            "e2e_p95_s": s["e2e_s"]["p95"] if s else None, "mean_running": s["mean_running"] if s else None,
            "mean_batch_busy": s["mean_batch_busy"] if s else None,
            "preemptions": s["preemptions"] if s else None,
            "usd_per_gpu_hour": price, "usd_per_hour": usd_h, "prefill_time_share": f_in,
            "usd_per_m_input_tokens": usd_h * f_in / (in_s * 3600) * 1e6 if usd_h else None,
            "usd_per_m_output_tokens": usd_h * (1 - f_in) / (out_s * 3600) * 1e6 if usd_h else None,
            "usd_per_m_tokens_blended": usd_h / ((in_s + out_s) * 3600) * 1e6 if usd_h else None,
            "busy_fraction": busy if s else None, "watts_per_device": watts,
            "energy_j_per_output_token": energy,
            "reason": why,
        }

    # ------------------------------------------------------------ search

    def search(self, spec, c: _Cand, r_max: int | None = None) -> tuple[dict | None, str]:
        """Smallest replica count (and batch limit) meeting the SLOs in simulation; (row, reason if none).

        r_max: only counts up to r_max are of interest (another candidate already needs fewer devices above it)."""
        seq_opts = [self.sc.max_num_seqs] + ([max(1, c.b_slo)] if c.b_slo < self.sc.max_num_seqs else [])
        seq_opts = list(dict.fromkeys(seq_opts))
        r_cap = max(1, MAX_GPUS // (c.tp * c.pp)) if r_max is None else min(r_max, MAX_GPUS // (c.tp * c.pp))
        if r_cap < c.r_lb:
            return None, "cannot need fewer devices than the best so far"

        def trial(r, screen=True):
            why = ""
            for seqs in seq_opts:
                ok, why, s = self.run(spec, c, r, seqs, screen=screen)
                if ok:
                    return self.rows[-1], why
                # a smaller batch limit can only help TPOT, and only if the batch reached it
                if "TPOT" not in why or "TTFT" in why or s["max_running"] <= seq_opts[-1]:
                    break
            return None, why

        def bisect(lo, hi, screen):
            """Smallest r in [lo, hi] that meets the targets, given that hi does (to REPLICA_PRECISION)."""
            best = None
            while lo < hi and hi - lo > int(REPLICA_PRECISION * hi):
                mid = (lo + hi) // 2
                row, _ = trial(mid, screen)
                if row is not None:
                    best, hi = row, mid
                else:
                    lo = mid + 1
            return hi, best

        # screening: start at the estimate (or the cap), bracket, bisect
        r = min(max(c.r_est, c.r_lb), r_cap)
        row, why = trial(r)
        if row is not None:
            hi, _ = bisect(c.r_lb, r, True)
        else:
            r_hi = min(r_cap, 16 * r)
            if r_hi == r:
                return None, f"{why} even with {r} replicas"
            row, why_hi = trial(r_hi)
            if row is None:
                return None, f"{why_hi} even nearly unloaded ({r_hi} replicas)"
            hi, _ = bisect(r + 1, r_hi, True)
        # confirm with the full request count, growing by 10% while it misses; what is returned met the targets
        # in this simulation
        while True:
            row, why = trial(hi, screen=False)
            if row is not None:
                return row, ""
            if hi >= r_cap:
                return None, f"{why} with {hi} replicas"
            hi = min(r_cap, max(hi + 1, math.ceil(hi * 1.1)))

    def device(self, spec, ranges: bool = True) -> dict:
        """The device's row: its best configuration (with the p10-p90 ranges of its latencies unless `ranges` is
        False: the quantization recommendation compares formats on the simulated figures alone), or why none."""
        m, sc = self.m, self.sc
        node = node_for(spec)
        cands, reasons = [], []
        for name in sc.formats:
            try:
                fmt, unit = _format_name(spec, name)
            except PlannerError as exc:
                reasons.append(f"{name}: {exc}")
                continue
            if any(c.fmt.name == fmt.name for c in cands) or any(r.startswith(f"{fmt.name}:") for r in reasons):
                continue
            tps = [1] if sc.single_device else [t for t in TP_DEGREES if t <= node.gpus_per_node]
            fitted = False
            for tp in tps:
                try:
                    check_tp(m, tp)
                except PlannerError:
                    continue
                c = self.candidate(spec, fmt, unit, tp, 1)
                if c.reason:
                    reasons.append(f"{fmt.name} tp{tp}: {c.reason}")
                    if c.pool_tokens or not c.reason.startswith("does not fit"):
                        fitted = True
                    continue
                fitted = True
                cands.append(c)
            if not fitted and not sc.single_device and node.inter_link() is not None:
                for pp in (2, 4, 8):
                    c = self.candidate(spec, fmt, unit, max(tps), pp)
                    if c.reason.startswith("does not fit"):
                        continue
                    if c.reason:
                        reasons.append(f"{fmt.name} tp{max(tps)} pp{pp}: {c.reason}")
                    else:
                        cands.append(c)
                    break
        if not cands:
            return self._rejected(spec, _summarize_reasons(reasons))
        if sc.single_device:
            return self._single(spec, cands, ranges)
        rank = {n: i for i, n in enumerate(PRECISION_ORDER)}
        cands.sort(key=lambda c: (c.gpus_est, c.gpus_lb, rank.get(c.fmt.name, 99), c.tp))
        best, fails = None, []
        for c in cands[:MAX_SEARCHED]:
            r_max = None
            if best is not None:
                # fewer devices, or as many at a higher precision
                higher = rank.get(c.fmt.name, 99) < rank.get(best["weights"], 99)
                limit = best["gpus"] if higher else best["gpus"] - 1
                if limit < c.gpus_lb:
                    continue
                r_max = limit // (c.tp * c.pp)
            row, why = self.search(spec, c, r_max)
            if row is None:
                fails.append(f"{c.fmt.name} tp{c.tp}" + (f" pp{c.pp}" if c.pp > 1 else "") + f": {why}")
                continue
            if best is None or row["gpus"] < best["gpus"] or (
                    row["gpus"] == best["gpus"] and rank.get(row["weights"], 99) < rank.get(best["weights"], 99)):
                best, best_c = row, c
        if best is None:
            return self._rejected(spec, _summarize_reasons(fails + reasons))
        row = dict(best, status="ok", reason="")
        return self.with_ranges(spec, best_c, row) if ranges else row

    def _single(self, spec, cands: list[_Cand], ranges: bool = True) -> dict:
        """On-device: one device, batch 1; the highest-precision format that meets both targets."""
        rank = {n: i for i, n in enumerate(PRECISION_ORDER)}
        cands = sorted((c for c in cands if c.tp == 1), key=lambda c: rank.get(c.fmt.name, 99))
        fails = []
        for c in cands:
            ok, why, _ = self.run(spec, c, 1, 1)
            if ok:
                row = dict(self.rows[-1], status="ok", reason="")
                return self.with_ranges(spec, c, row) if ranges else row
            fails.append(f"{c.fmt.name}: {why}")
        return self._rejected(spec, _summarize_reasons(fails))

    def _rejected(self, spec, reason: str) -> dict:
        price = self.prices.get(spec.id, spec.price.usd_per_hour if spec.price else None)
        row = {k: None for k in ("weights", "quality_tier", "unit", "tp", "pp", "replicas", "gpus", "max_num_seqs",
                                 "chunked_prefill", "ttft_p95_ms", "tpot_p95_ms", "e2e_p95_s", "mean_running", "mean_batch_busy",
                                 "preemptions", "usd_per_hour", "prefill_time_share", "usd_per_m_input_tokens",
                                 "usd_per_m_output_tokens", "usd_per_m_tokens_blended", "busy_fraction", "watts_per_device",
                                 "energy_j_per_output_token")}
        row.update({"hardware": spec.id, "status": "rejected", "usd_per_gpu_hour": price, "reason": reason,
                    "ttft_p95_ms_range": None, "tpot_p95_ms_range": None, "range_source": None})
        self.rows.append(dict(row))
        return row


def _summarize_reasons(reasons: list[str]) -> str:
    """The most telling reasons first: a latency miss says more than 'does not fit' at a small TP degree. Configs
    ('bf16 tp2: why') that fail for the same reason share one entry ('bf16 tp1, bf16 tp2, fp8 tp1: why'), so a
    device an engine cannot run on reads as one reason, not sixteen copies of it."""
    if not reasons:
        return "no weight format runs on this device"
    reasons = sorted(reasons, key=lambda r: "does not fit" in r)
    groups: dict[str, list[str]] = {}
    for r in reasons:
        label, sep, why = r.partition(": ")
        key, label = (why, label) if sep else (r, "")
        groups.setdefault(key, []).append(label)
    parts = []
    for why, labels in groups.items():
        labels = [x for x in labels if x]
        named = ", ".join(labels[:4]) + (f" (+{len(labels) - 4})" if len(labels) > 4 else "")
        parts.append(f"{named}: {why}" if named else why)
    return "; ".join(parts[:3]) + (f" (+{len(parts) - 3} more)" if len(parts) > 3 else "")


def _rank(df, objective: str):
    ok = df["status"] == "ok"
    df = df.copy()
    if objective == "latency":
        key = np.where(ok, df["tpot_p95_ms"].astype(float).fillna(np.inf), np.inf)
        tier = np.array([quality_tier(w)[0] if isinstance(w, str) else 99 for w in df["weights"]])
        df["_k1"], df["_k2"] = np.where(ok, tier, 100), key
    else:
        priced = ok & df["usd_per_hour"].notna()
        df["_k1"] = np.where(priced, 0, np.where(ok, 1, 2))
        df["_k2"] = np.where(priced, df["usd_per_hour"].astype(float),
                             df["energy_j_per_output_token"].astype(float).fillna(np.inf))
    df = df.sort_values(["_k1", "_k2", "hardware"], kind="stable").drop(columns=["_k1", "_k2"])
    df.insert(0, "rank", np.where(df["status"] == "ok", np.arange(1, len(df) + 1), 0))
    df["rank"] = df["rank"].where(df["status"] == "ok", None)
    return df.reset_index(drop=True)


def plan(model, scenario: str | Scenario = "chat", qps: float | None = None, ttft_p95_ms: float | None = None,
         tpot_p95_ms: float | None = None, hardware: list[str] | None = None, trace: str | None = None,
         prices: dict[str, float] | None = None, n_requests: int = 1200, seed: int = 0, efficiency="auto",
         kv_dtype: str = "fp16", recommend: bool = True, runtime=None, engine: str = "none") -> PlanResult:
    """The capacity plan (module docstring). Returns a PlanResult whose .table is the ranked DataFrame."""
    import pandas as pd

    from ..architecture import load_model
    from ..quantization import kv_dtype as norm_kv

    t0 = time.perf_counter()
    m = model if not isinstance(model, str) else load_model(model)
    sc = scenario if isinstance(scenario, Scenario) else get_scenario(scenario)
    sc = sc.with_overrides(qps, ttft_p95_ms, tpot_p95_ms, trace)
    if isinstance(n_requests, bool) or not isinstance(n_requests, int) or not 50 <= n_requests <= 100_000:
        raise PlannerError(f"--requests: must be an integer in [50, 100,000] simulated requests per configuration, "
                           f"got {n_requests!r}")
    if runtime is not None:
        from ..runtimes import load_runtime

        load_runtime(runtime)
    from ..memory import ENGINES

    if engine not in ENGINES:
        raise PlannerError(f"--engine: unknown engine '{engine}'; allowed: {', '.join(ENGINES)}")
    prices = dict(prices or {})
    for k, v in prices.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 1e4):
            raise PlannerError(f"--price: {k}={v!r}: must be a finite number of USD per device-hour in (0, 1e4]")
    st = _workload_stats(sc, seed)
    specs, skipped = candidate_devices(sc, hardware)
    for k in prices:
        if k not in {s.id for s in specs}:
            raise PlannerError(f"--price: '{k}' is not among the candidate devices")
    P = _Planner(m, sc, st, n_requests, seed, efficiency, norm_kv(kv_dtype), sc.max_num_batched_tokens, runtime,
                 engine)
    P.prices = prices
    rows = [P.device(s) for s in specs]
    table = _rank(pd.DataFrame(rows), sc.objective)
    notes = [f"skipped unreadable spec {s}" for s in skipped]
    simulated = {r["hardware"] for r in P.rows if "simulated_requests" in r}
    screened = sum(1 for s in specs if s.id not in simulated)
    notes.append(f"{screened} of {len(specs)} devices screened out with the cost model alone (weights or KV pool do "
                 f"not fit, or the roofline bound on TTFT or TPOT already misses a target); "
                 f"{len(simulated)} simulated ({P.sim_runs} engine runs)")
    if sc.objective == "cost" and ((table["status"] == "ok") & table["usd_per_hour"].isna()).any():
        notes.append("devices without a price are ranked after priced ones, by energy per output token ('no price')")
    res = PlanResult(m.name, sc, table, pd.DataFrame(P.rows), [], 0.0, notes)
    best = res.best
    if best is not None:  # the recommended device's figures may rest on numbers its vendor does not publish
        w = next(s for s in specs if s.id == best["hardware"]).unpublished_warning()
        if w:
            notes.append(w)
    if recommend and best is not None:
        from .recommend import recommendations

        res.recommendations = recommendations(P, specs, best)
    res.elapsed_s = time.perf_counter() - t0
    return res
