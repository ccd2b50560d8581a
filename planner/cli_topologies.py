"""`--parallel ep|dp-attention|pd` for `planner plan` / `planner simulate`, and `planner speculative --method`:
arguments, handlers and rendering. planner/cli_serving.py registers the arguments and calls in here; the logic lives
in planner/serving/{expert_parallel,disaggregated,speculative}.py. Heavy imports stay inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import math

from .cli import positive_int

LAYOUTS = ("tp", "ep", "dp-attention", "pd")


def _at_least_one(what: str):
    """An argparse type: a finite number >= 1, with `what` it counts in the message."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number >= 1 ({what}), got {text!r}") from None
        if not (math.isfinite(v) and v >= 1):
            raise argparse.ArgumentTypeError(f"must be a number >= 1 ({what}), got {text}")
        return v
    return parse


_imbalance = _at_least_one("max/mean tokens per expert")
_tau = _at_least_one("tokens per target pass")


def _pool_size(text: str) -> int:
    from .cli_serving import _bounded_int
    return _bounded_int(1, 4096)(text)


def add_parallel_args(p) -> None:
    """--parallel and its sizes (plan and simulate)."""
    g = p.add_argument_group("serving topology")
    g.add_argument("--parallel", choices=LAYOUTS, default="tp",
                   help="tp: tensor/pipeline/data parallel (default); ep: experts split over --ep ranks, attention "
                        "tensor-parallel; dp-attention: experts split, attention data-parallel per rank; pd: "
                        "disaggregated prefill/decode pools")
    g.add_argument("--ep", type=positive_int, default=None,
                   help="expert-parallel ranks (default: plan searches the smallest group that fits; simulate: 8)")
    g.add_argument("--expert-imbalance", type=_imbalance, default=None,
                   help="max/mean routed tokens per expert rank (1 = perfectly balanced; default: the assumption "
                        "documented in planner/serving/expert_parallel.py)")
    g.add_argument("--prefill-gpus", type=_pool_size, default=None, help="pd: devices in the prefill pool (1-4096)")
    g.add_argument("--decode-gpus", type=_pool_size, default=None, help="pd: devices in the decode pool (1-4096)")


def register(sub) -> None:
    """Add the topology arguments to `plan`, `simulate` and `speculative` (registered before by planner.cli_serving)
    and route a command here when one of them is used; otherwise the command runs unchanged."""
    for name, handler in (("plan", "cmd_plan_parallel"), ("simulate", "cmd_simulate_parallel")):
        p = sub.choices.get(name)
        if p is None:
            continue
        add_parallel_args(p)
        p.set_defaults(func=_route(p.get_default("func"), globals()[handler]))
    p = sub.choices.get("speculative")
    if p is not None:
        add_speculative_args(p)
        p.set_defaults(func=_route_speculative(p.get_default("func")))


def _route(base, handler):
    def run(args) -> int:
        return handler(args) if uses_topology(args) else base(args)

    return run


def _route_speculative(base):
    def run(args) -> int:
        if args.method != "draft":
            return cmd_speculative_method(args)
        if args.draft is None or args.tp != 1 or args.acceptance_length is not None:
            from .errors import PlannerError

            raise PlannerError("--draft: the draft method needs a draft model (same vocabulary), on one device "
                               "(--tp 1), with --acceptance; or --method mtp|eagle|ngram")
        return base(args)

    return run


def uses_topology(args) -> bool:
    """True when a topology argument was given (the handler then checks that they go together)."""
    return getattr(args, "parallel", "tp") != "tp" or any(
        getattr(args, k, None) is not None for k in ("ep", "expert_imbalance", "prefill_gpus", "decode_gpus"))


def add_speculative_args(p) -> None:
    # the method names are checked by planner.serving.speculative (not imported here: `planner estimate` stays light)
    p.add_argument("--method", default="draft",
                   help="draft: a separate draft model (--draft); mtp: DeepSeek-V3 multi-token-prediction module; "
                        "eagle: an EAGLE draft head; ngram: prompt lookup (no draft compute)")
    p.add_argument("--acceptance-length", type=_tau, default=None,
                   help="mean tokens per target pass (EAGLE's tau); replaces --acceptance for mtp/eagle/ngram")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree of the target (mtp/eagle/ngram)")
    p.add_argument("--kv-dtype", default="fp16")


def _dump(obj) -> str:
    return json.dumps(obj, indent=2, default=lambda o: o.item() if hasattr(o, "item") else str(o))


def _check_sizes(args, simulate: bool) -> None:
    from .errors import PlannerError

    if args.parallel != "pd" and (args.prefill_gpus or args.decode_gpus):
        raise PlannerError(f"--prefill-gpus/--decode-gpus: apply to --parallel pd, not {args.parallel}; allowed: "
                           "--parallel pd")
    if args.parallel == "pd" and (args.prefill_gpus is None) != (args.decode_gpus is None):
        raise PlannerError("--prefill-gpus/--decode-gpus: give both pool sizes, or neither to search the x:y split")
    if args.parallel not in ("ep", "dp-attention") and args.ep is not None:
        raise PlannerError(f"--ep: applies to --parallel ep or dp-attention, not {args.parallel}")
    if simulate and args.parallel != "tp" and (args.tp != 1 or args.pp != 1):
        raise PlannerError(f"--tp/--pp: --parallel {args.parallel} sets its own layout (--ep, or --prefill-gpus/"
                           "--decode-gpus); allowed: --tp 1 --pp 1")
    if simulate and args.parallel == "pd" and args.replicas != 1:
        raise PlannerError("--replicas: --parallel pd sizes its pools with --prefill-gpus/--decode-gpus")
    if args.parallel not in ("ep", "dp-attention") and args.expert_imbalance is not None:
        raise PlannerError(f"--expert-imbalance: applies to --parallel ep or dp-attention, not {args.parallel}")
    # --engine and --runtime are checked as the tensor-parallel paths check them (an unknown id is refused); the
    # topologies size each pool or rank with their own rule, so --engine is refused, not ignored; EP and
    # DP-attention time their steps with a named runtime profile (expert_parallel.ep_device), the pd queueing
    # model with the calibrated / default efficiencies only
    from .cli_serving import _check_engine
    engine = _check_engine(getattr(args, "engine", "none") or "none")
    if engine != "none":
        raise PlannerError(f"--engine: --parallel {args.parallel} sizes each pool or rank with its own rule "
                           "(planner/serving/); allowed: --engine none (or --parallel tp)")
    if getattr(args, "runtime", None):
        from .runtimes import load_runtime
        load_runtime(args.runtime)
        if args.parallel == "pd":
            raise PlannerError("--runtime: --parallel pd times its pools with the calibrated / default "
                               "efficiencies; allowed: no --runtime (or --parallel tp, ep, dp-attention)")
    if simulate and args.parallel == "pd":  # the queueing model has no scheduler and no rate search
        given = [flag for flag, on in (("--max-rate", getattr(args, "max_rate", False)),
                                       ("--chunked-prefill", getattr(args, "chunked_prefill", None) is not None),
                                       ("--max-num-batched-tokens", getattr(args, "max_num_batched_tokens", None)
                                        is not None),
                                       ("--requests", getattr(args, "requests", None) is not None)) if on]
        if given:
            raise PlannerError(f"{given[0]}: --parallel pd is a queueing model (M/D/1 prefill pool, Little's law "
                               "decode pool), not the event simulation; drop it")
    if args.expert_imbalance is None:
        from .serving.expert_parallel import DEFAULT_IMBALANCE

        args.expert_imbalance = DEFAULT_IMBALANCE


def _fmt(x, f="{:,.1f}") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f.format(x)


# ---------------------------------------------------------------- plan


def cmd_plan_parallel(args) -> int:
    """`planner plan --parallel ep|dp-attention|pd`: the topology's cheapest configuration per device beside the
    aggregated (tensor-parallel) plan (planner.serving.topology_plan.plan_parallel)."""
    from .report import table
    from .serving.topology_plan import plan_parallel

    _check_sizes(args, False)
    out = plan_parallel(args.model, args.scenario, args.parallel, args.ep, args.expert_imbalance, args.prefill_gpus,
                        args.decode_gpus, args.qps, args.ttft_p95_ms, args.tpot_p95_ms, args.hardware, args.trace,
                        dict(args.price), args.requests, args.seed, _eff(args), args.kv_dtype,
                        getattr(args, "runtime", None))
    if args.json:
        print(_dump(out))
        return 0
    rows, slo = out["devices"], out["slo"]
    print(f"{out['model']}, scenario {out['scenario']}: {out['workload']}")
    print(f"targets: TTFT p95 <= {slo['ttft_p95_ms']:g} ms, TPOT p95 <= {slo['tpot_p95_ms']:g} ms; layout "
          f"{args.parallel} beside the aggregated tensor-parallel plan")
    print()
    ok = [r for r in rows if r["best"]]
    rej = [r for r in rows if not r["best"]]
    shown = ok + (rej if args.all else rej[:8])
    trows = []
    for r in shown:
        b, a = r["best"], r["aggregated"]
        trows.append({"hardware": r["hardware"], args.parallel: r["summary"],
                      "devices": _fmt(b and b.get("gpus"), "{:,}"),
                      "$/h": _fmt(b and b.get("usd_per_hour"), "{:,.2f}"),
                      "aggregated": (f"{a['weights']} tp{a['tp']}x{a['pp']} x{a['replicas']}" if a and a.get("gpus")
                                     else "none"),
                      "agg devices": _fmt(a and a.get("gpus"), "{:,}"),
                      "agg $/h": _fmt(a and a.get("usd_per_hour"), "{:,.2f}")})
    print(table(trows, list(trows[0])) if trows else "no candidate device")
    if len(shown) < len(rows):
        print(f"... {len(rows) - len(shown)} more devices where {args.parallel} is not possible (--all)")
    for r in shown:
        print()
        print(f"{r['hardware']}:")
        for line in r["explanation"]:
            print(f"  - {line}")
    return 0


def _eff(args) -> str:
    return "datasheet" if args.datasheet else ("default" if args.no_calibration else "auto")


# ---------------------------------------------------------------- simulate


def cmd_simulate_parallel(args) -> int:
    """`planner simulate --parallel ep|dp-attention|pd`."""
    from .architecture import load_model
    from .errors import DoesNotFit
    from .hardware import load_hardware
    from .quantization import kv_dtype as norm_kv, weight_format
    from .serving import get_scenario

    _check_sizes(args, True)
    m = load_model(args.model)
    spec = load_hardware(args.hardware)
    sc = get_scenario(args.scenario).with_overrides(qps=args.qps, trace=args.trace)
    fmt, kvd = weight_format(args.weights), norm_kv(args.kv_dtype)
    from .scheduler_defaults import resolve_scheduler, scheduler_engine

    sched = resolve_scheduler(scheduler_engine(args.engine, args.runtime), spec, args.max_num_seqs,
                              args.max_num_batched_tokens, args.chunked_prefill)
    if args.parallel == "pd":
        from .serving.disaggregated import pd_plan

        price = spec.price.usd_per_hour if spec.price else None
        try:
            r = pd_plan(m, spec, fmt, kvd, sc.workload, sc.ttft_p95_ms, sc.tpot_p95_ms, price, _eff(args),
                        sched.max_num_seqs, args.seed, args.prefill_gpus, args.decode_gpus)
        except DoesNotFit as exc:  # a verdict, not an error (exit 0; JSON under --json)
            if args.json:
                print(_dump({"fits": False, "verdict": str(exc), "layout": "pd"}))
            else:
                print(str(exc))
            return 0
        r["method"] = "queueing model (M/D/1 prefill pool, Little's law decode pool), not the event simulation"
        if args.json:
            print(_dump(r))
            return 0
        print(f"{m.name} on {spec.id}, {fmt.name}, disaggregated prefill/decode; workload {sc.workload.describe()}; "
              f"targets TTFT p95 <= {sc.ttft_p95_ms:g} ms, TPOT <= {sc.tpot_p95_ms:g} ms ({r['method']})")
        for line in r["explanation"]:
            print(f"  - {line}")
        from .report import table

        rows = [{"prefill tp": o["tp_prefill"], "decode tp": o["tp_decode"], "x": _fmt(o["x"], "{}"),
                 "y": _fmt(o["y"], "{}"), "devices": _fmt(o["gpus"], "{}"),
                 "TTFT p95 ms": _fmt(o["ttft_p95_ms"], "{:,.0f}"),
                 "TPOT ms": _fmt(o["tpot_ms"]), "decode batch": o["decode_batch"],
                 "KV transfer ms": _fmt(o["kv_transfer_ms"], "{:.2f}"), "why not": o["reason"]} for o in r["options"]]
        print()
        print(table(rows, list(rows[0])))
        return 0
    from .serving.expert_parallel import ep_report, simulate_ep

    ep = args.ep or 8
    try:
        n = args.requests if args.requests is not None else 5000
        r = simulate_ep(m, spec, fmt, kvd, args.parallel, ep, sc.workload, args.replicas, n, args.seed,
                        _eff(args), sched.max_num_seqs, sched.max_num_batched_tokens, sched.chunked_prefill,
                        args.block_size, args.expert_imbalance, runtime=args.runtime)
    except DoesNotFit as exc:
        if args.json:
            print(_dump({"fits": False, "verdict": str(exc), "layout": args.parallel, "ep": ep}))
            return 0
        raise
    rep = ep_report(m, spec, fmt, kvd, args.parallel, ep, args.expert_imbalance,
                    max(1, round(r["engine"]["mean_running"] or 1)), efficiency=_eff(args),
                    max_tokens=sched.max_num_batched_tokens, runtime=args.runtime)
    r["explanation"] = rep["explanation"]
    r["all_to_all"] = rep["all_to_all"]
    if args.json:
        print(_dump(r))
        return 0
    s, t = r["engine"], r["deployment"]
    print(f"{m.name} on {args.replicas} x {args.parallel} {ep} x {spec.id}, {fmt.name}, KV {kvd}; "
          f"{r['engines']} engine(s) share the traffic; max_num_seqs {sched.max_num_seqs}")
    print(f"workload: {r['workload']}; one engine simulated with {s['requests']:,} requests")
    print(f"memory: {r['memory_verdict']}")
    print()
    from .cli_serving import print_latency_table

    print_latency_table(s, s.get("range"))
    print()
    rg = t.get("output_tokens_per_s_range")
    print(f"  throughput: {t['requests_per_s']:,.2f} req/s, {t['output_tokens_per_s']:,.0f} output tok/s"
          + (f" (p10-p90 {rg[0]:,.0f}-{rg[1]:,.0f})" if rg else "")
          + f" (offered {t['offered_requests_per_s']:g} req/s); {s['mean_running']:.1f} sequences running per engine")
    if s.get("range"):
        print(f"  ranges: {s['range']['interval']['source']}")
    print()
    for line in r["explanation"]:
        print(f"  - {line}")
    return 0


# ---------------------------------------------------------------- speculative


def cmd_speculative_method(args) -> int:
    """`planner speculative --method mtp|eagle|ngram`."""
    from .cli_serving import _x
    from .report import table
    from .serving.speculative import speculative_method

    from .errors import PlannerError

    tau = args.acceptance_length
    alpha = None if tau is not None else args.acceptance
    gammas = [g for g in args.gamma if tau is None or g + 1 >= tau]
    if not gammas:
        raise PlannerError(f"--acceptance-length: {tau:g} tokens per pass needs a draft length gamma >= {tau - 1:g}; "
                           f"got --gamma {','.join(map(str, args.gamma))}")
    rows = [speculative_method(args.model, args.hardware, args.method, g, alpha, tau, args.weights, args.kv_dtype,
                               args.context, args.batch, _eff(args), args.tp, runtime=args.runtime) for g in gammas]
    if args.json:
        print(_dump(rows))
        return 0
    r0 = rows[0]
    acc = (f"acceptance length {args.acceptance_length:g} tokens per pass" if args.acceptance_length is not None
           else f"acceptance rate {args.acceptance:g} per drafted token")
    print(f"{r0['target']} with {args.method} drafts ({r0['draft'] or 'prompt lookup, no draft model'}) on "
          f"{r0['verdict'].split(' on ')[-1]} ({r0['weights']}), context {args.context}, batch {args.batch}, {acc}")
    if not r0["fits"]:
        print(f"DOES NOT FIT{r0['verdict'][12:]} (try --tp, a smaller format such as --weights fp8 or int4-g128, "
              "or a larger device)")
        return 0
    print(r0["verdict"])
    print(f"target step {r0['target_step_ms']:.2f} ms, draft step {r0['draft_step_ms']:.3f} ms "
          f"(cost ratio {r0['cost_ratio']:.3f}); draft adds {r0['extra_params_b']:.2f} B parameters "
          f"({r0['extra_weights_gb']:.2f} GB)")
    out = [{"gamma": r["gamma"], "tokens/pass": f"{r['acceptance_length']:.3f}",
            "verify ms": _x(r["verify_step_ms"], "{:.2f}"),
            "speed-up": _x(r["speedup"], "{:.2f}x"), "break-even tokens/pass": f"{r['breakeven_acceptance_length']:.3f}",
            "break-even alpha": "never" if r["breakeven_alpha"] is None else f"{r['breakeven_alpha']:.3f}"}
           for r in rows]
    print(table(out, list(out[0])))
    return 0
