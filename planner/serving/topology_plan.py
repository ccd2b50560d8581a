"""`plan --parallel ep|dp-attention|pd`: the topology's cheapest configuration per device, beside the aggregated
(tensor-parallel) plan of planner.serving.plan for the same devices, prices and seed. Plain dicts; nothing prints.
The rules are in expert_parallel.py (EP / DP-attention) and disaggregated.py (xPyD).
"""

from __future__ import annotations

from ..errors import PlannerError
from .expert_parallel import DEFAULT_IMBALANCE

LAYOUTS = ("ep", "dp-attention", "pd")


def plan_parallel(model, scenario, parallel: str, ep: int | None = None, imbalance: float = DEFAULT_IMBALANCE,
                  prefill_gpus: int | None = None, decode_gpus: int | None = None, qps: float | None = None,
                  ttft_p95_ms: float | None = None, tpot_p95_ms: float | None = None,
                  hardware: list[str] | None = None, trace: str | None = None, prices: dict | None = None,
                  n_requests: int = 1200, seed: int = 0, efficiency="auto", kv_dtype: str = "fp16",
                  runtime: str | None = None) -> dict:
    """Per candidate device: the layout's best configuration, its explanation, and the aggregated plan's row;
    devices ranked by cost per hour (unpriced after priced, impossible last). runtime: the engine profile whose
    efficiency times both the EP / DP-attention steps and the aggregated plan's (not for pd, whose queueing model
    takes the calibrated / default efficiencies)."""
    from ..architecture import load_model
    from ..quantization import kv_dtype as norm_kv
    from .plan import candidate_devices, plan
    from .scenarios import Scenario, get_scenario

    if parallel not in LAYOUTS:
        raise PlannerError(f"--parallel: unknown layout {parallel!r}; allowed: tp, {', '.join(LAYOUTS)}")
    if runtime is not None and parallel == "pd":
        raise PlannerError("--runtime: --parallel pd times its pools with the calibrated / default efficiencies; "
                           "allowed: no --runtime (or --parallel tp, ep, dp-attention)")
    m = model if not isinstance(model, str) else load_model(model)
    sc = scenario if isinstance(scenario, Scenario) else get_scenario(scenario)
    sc = sc.with_overrides(qps, ttft_p95_ms, tpot_p95_ms, trace)
    kvd = norm_kv(kv_dtype)
    prices = dict(prices or {})
    specs, _ = candidate_devices(sc, hardware)
    if parallel in ("ep", "dp-attention"):
        from .expert_parallel import check_ep

        if ep is not None:
            check_ep(m, parallel, ep, imbalance)
        elif not m.moe:
            check_ep(m, parallel, 2, 1.0)  # the one-line error for a dense model
    agg = plan(m, sc, hardware=[s.id for s in specs], prices=prices, n_requests=n_requests, seed=seed,
               efficiency=efficiency, kv_dtype=kvd, recommend=False, runtime=runtime)
    agg_rows = {r["hardware"]: r for r in agg.to_dict()["ranking"]}
    rows = []
    for spec in specs:
        price = prices.get(spec.id, spec.price.usd_per_hour if spec.price else None)
        a = _agg_brief(agg_rows.get(spec.id))
        if parallel == "pd":
            rows.append(_pd_device(m, spec, sc, kvd, prefill_gpus, decode_gpus, efficiency, seed, price, a))
        else:
            rows.append(_ep_device(m, spec, sc, parallel, ep, imbalance, kvd, efficiency, n_requests, seed, price, a,
                                   runtime))

    def key(r):
        b = r["best"]
        if not b:
            return (2, 0.0, r["hardware"])
        usd = b.get("usd_per_hour")
        return (0 if usd is not None else 1, usd if usd is not None else b["gpus"], r["hardware"])

    rows.sort(key=key)
    return {"model": m.name, "scenario": sc.name, "workload": sc.workload.describe(), "parallel": parallel,
            "slo": {"ttft_p95_ms": sc.ttft_p95_ms, "tpot_p95_ms": sc.tpot_p95_ms}, "devices": rows}


def _agg_brief(a: dict | None) -> dict | None:
    if a is None:
        return None
    return {k: a.get(k) for k in ("status", "weights", "tp", "pp", "replicas", "gpus", "ttft_p95_ms", "tpot_p95_ms",
                                  "usd_per_hour", "reason")}


def _ep_device(m, spec, sc, mode, ep, imbalance, kvd, efficiency, n_requests, seed, price, agg,
               runtime: str | None = None) -> dict:
    from .expert_parallel import plan_ep_device

    try:
        r = plan_ep_device(m, spec, sc, mode, ep, imbalance, kvd, efficiency, n_requests, seed, price,
                           runtime=runtime)
    except PlannerError as exc:
        return {"hardware": spec.id, "best": None, "aggregated": agg, "summary": "not possible",
                "explanation": [str(exc)], "tried": []}
    b = r["best"]
    expl = list(b["explanation"]) if b else ["no weight format meets the targets: " + "; ".join(
        f"{t['weights']}: {t['reason']}" for t in r["tried"] if t.get("reason"))[:600]]
    if b and agg and agg.get("gpus"):
        d = b["gpus"] - agg["gpus"]
        expl.append(f"aggregated plan: {agg['gpus']} devices ({agg['weights']} tp{agg['tp']} x{agg['replicas']}); "
                    + (f"{mode} saves {-d}" if d < 0 else f"{mode} needs {d} more" if d > 0 else "same device count"))
    elif agg and agg.get("reason"):
        expl.append(f"aggregated plan: {agg['reason']}")
    best = None if b is None else {k: v for k, v in b.items() if k != "explanation"}
    summ = f"{b['weights']} ep{b['ep']} x{b['replicas']}" if b else "none"
    return {"hardware": spec.id, "best": best, "aggregated": agg, "summary": summ, "explanation": expl,
            "tried": [{k: v for k, v in t.items() if k != "memory"} for t in r["tried"]]}


def _pd_device(m, spec, sc, kvd, prefill_gpus, decode_gpus, efficiency, seed, price, agg) -> dict:
    from .disaggregated import pd_plan
    from .plan import _format_name

    names = ([agg["weights"]] if agg and agg.get("weights") else []) + list(sc.formats)
    last = None
    for name in dict.fromkeys(names):
        try:
            fmt, _ = _format_name(spec, name)
            r = pd_plan(m, spec, fmt, kvd, sc.workload, sc.ttft_p95_ms, sc.tpot_p95_ms, price, efficiency,
                        sc.max_num_seqs, seed, prefill_gpus, decode_gpus, agg)
        except PlannerError as exc:
            last = str(exc)
            continue
        b = r["best"]
        return {"hardware": spec.id, "best": b and (b | {"weights": fmt.name, "usd_per_hour": r["usd_per_hour"]}),
                "aggregated": agg, "summary": f"{fmt.name} {b['layout']}" if b else "none",
                "explanation": r["explanation"], "options": r["options"], "workload": r["workload"]}
    return {"hardware": spec.id, "best": None, "aggregated": agg, "summary": "not possible",
            "explanation": [last or "no weight format runs"]}
