"""`planner plan`, `planner simulate`, `planner batching`, `planner speculative`: parse, call planner.serving, render.

Heavy imports (planner.serving, pandas) happen inside the handlers so that `planner estimate` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys

from .cli import int_list, positive_int


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text}")
    return v


def _price(text: str) -> tuple[str, float]:
    hid, sep, usd = text.partition("=")
    if not sep or not hid:
        raise argparse.ArgumentTypeError(f"expected HARDWARE=USD_PER_HOUR, e.g. h100-sxm=2.5, got {text!r}")
    return hid, _positive_float(usd)


def _efficiency_args(p) -> None:
    eff = p.add_mutually_exclusive_group()
    eff.add_argument("--no-calibration", action="store_true", help="ignore calibration files (kind/device defaults)")
    eff.add_argument("--datasheet", action="store_true", help="plain roofline: efficiency 1.0, no overheads")


def _eff(args) -> str:
    return "datasheet" if args.datasheet else ("default" if args.no_calibration else "auto")


def _f(x, fmt="{:,.1f}") -> str:
    return "-" if x is None or x != x else fmt.format(x)


def _dump(obj) -> str:
    return json.dumps(obj, indent=2, default=lambda o: o.item() if hasattr(o, "item") else str(o))


def _config_args(p) -> None:
    """Model, device, weight format and KV dtype of one serving configuration."""
    p.add_argument("--model", "-m", required=True)
    p.add_argument("--hardware", "-H", required=True)
    p.add_argument("--weights", "-w", default="fp16")
    p.add_argument("--kv-dtype", default="fp16")


def register(sub) -> None:
    p = sub.add_parser("plan", help="capacity plan: cheapest configuration per device that meets the SLOs")
    p.add_argument("--model", "-m", required=True, help="catalog id or path to a HF config.json")
    p.add_argument("--scenario", "-s", default="chat", help="chat, batch, long-doc or on-device")
    p.add_argument("--qps", type=_positive_float, default=None, help="request rate (requests per second)")
    p.add_argument("--ttft-p95-ms", type=_positive_float, default=None, help="time-to-first-token target, p95")
    p.add_argument("--tpot-p95-ms", type=_positive_float, default=None, help="time-per-output-token target, p95")
    p.add_argument("--hardware", "-H", nargs="+", default=None, help="candidate devices (default: the catalog)")
    p.add_argument("--trace", default=None, help="CSV trace: arrival_s,prompt_tokens,output_tokens")
    p.add_argument("--price", type=_price, action="append", default=[], metavar="HW=USD",
                   help="override a device's price per device-hour (repeatable)")
    p.add_argument("--requests", type=positive_int, default=1200, help="simulated requests per configuration")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv-dtype", default="fp16")
    p.add_argument("--all", action="store_true", help="also list every rejected device with its reason")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _efficiency_args(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("simulate", help="simulate continuous batching for one serving configuration")
    _config_args(p)
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree (inside a node)")
    p.add_argument("--pp", type=positive_int, default=1, help="pipeline stages (across nodes)")
    p.add_argument("--replicas", type=positive_int, default=1, help="data-parallel replicas")
    p.add_argument("--max-num-seqs", type=positive_int, default=256, help="batch limit (sequences)")
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=8192, help="token budget per step")
    p.add_argument("--chunked-prefill", action="store_true", help="Sarathi/vLLM-V1 chunked prefill")
    p.add_argument("--block-size", type=positive_int, default=16, help="KV block size (tokens)")
    p.add_argument("--no-flash-attention", action="store_true")
    p.add_argument("--scenario", "-s", default="chat", help="workload preset: chat, batch, long-doc, on-device")
    p.add_argument("--qps", type=_positive_float, default=None)
    p.add_argument("--trace", default=None, help="CSV trace instead of the preset's lengths")
    p.add_argument("--requests", type=positive_int, default=5000, help="requests simulated (one engine's share)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    _efficiency_args(p)
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("batching", help="latency per step and throughput across batch sizes, with the knee")
    _config_args(p)
    p.add_argument("--batch", "-b", type=int_list, default=[1, 8, 32, 64, 128, 256], help="comma-separated sizes")
    p.add_argument("--prompt", "-p", type=positive_int, default=512)
    p.add_argument("--output", "-o", type=positive_int, default=128)
    p.add_argument("--json", action="store_true")
    _efficiency_args(p)
    p.set_defaults(func=cmd_batching)

    p = sub.add_parser("speculative", help="speculative decoding: expected tokens, speed-up, break-even acceptance")
    p.add_argument("--model", "-m", required=True, help="target model")
    p.add_argument("--draft", default=None, help="draft model (same vocabulary; --method draft)")
    p.add_argument("--hardware", "-H", required=True)
    p.add_argument("--weights", "-w", default="fp16")
    p.add_argument("--gamma", type=int_list, default=[1, 2, 3, 4, 5, 6, 8], help="drafted tokens per step")
    p.add_argument("--acceptance", type=_fraction, default=0.7, help="per-token acceptance rate alpha")
    p.add_argument("--context", type=positive_int, default=1024)
    p.add_argument("--batch", type=positive_int, default=1)
    p.add_argument("--json", action="store_true")
    _efficiency_args(p)
    p.set_defaults(func=cmd_speculative)


# ---------------------------------------------------------------- handlers


def cmd_plan(args) -> int:
    from .report import table
    from .serving import plan

    res = plan(args.model, args.scenario, qps=args.qps, ttft_p95_ms=args.ttft_p95_ms, tpot_p95_ms=args.tpot_p95_ms,
               hardware=args.hardware, trace=args.trace, prices=dict(args.price), n_requests=args.requests,
               seed=args.seed, efficiency=_eff(args), kv_dtype=args.kv_dtype)
    if args.json:
        print(_dump(res.to_dict()))
        return 0
    sc = res.scenario
    print(f"{res.model}, scenario {sc.name} ({sc.description}): {sc.workload.describe()}")
    print(f"targets: TTFT p95 <= {sc.ttft_p95_ms:g} ms, TPOT p95 <= {sc.tpot_p95_ms:g} ms; "
          f"ranked by {'cost per hour' if sc.objective == 'cost' else 'TPOT p95 (one device)'}")
    print()
    rows = []
    for r in res.to_dict()["ranking"]:
        if r["status"] != "ok":
            continue
        rows.append({"rank": r["rank"], "hardware": r["hardware"], "weights": r["weights"],
                     "tp x pp": f"{r['tp']}x{r['pp']}", "replicas": r["replicas"], "devices": r["gpus"],
                     "max_seqs": r["max_num_seqs"], "TTFT p95 ms": _f(r["ttft_p95_ms"], "{:,.0f}"),
                     "TPOT p95 ms": _f(r["tpot_p95_ms"]), "$/h": _f(r["usd_per_hour"], "{:,.2f}") if
                     r["usd_per_hour"] is not None else "no price",
                     "$/M out tok": _f(r["usd_per_m_output_tokens"], "{:,.3f}"),
                     "J/out tok": _f(r["energy_j_per_output_token"], "{:,.2f}")})
    if rows:
        print(table(rows, list(rows[0])))
    else:
        print("no device meets the targets")
    rej = [r for r in res.to_dict()["ranking"] if r["status"] != "ok"]
    if rej:
        print()
        shown = rej if args.all else rej[:8]
        print(f"rejected ({len(rej)}):")
        for r in shown:
            print(f"  {r['hardware']}: {r['reason']}")
        if len(shown) < len(rej):
            print(f"  ... {len(rej) - len(shown)} more (--all)")
    if res.recommendations:
        print()
        print(f"recommendations (for {res.best['hardware']}, computed with the model):")
        for rec in res.recommendations:
            print(f"  - {rec['topic']}: {rec['recommendation']}")
    for n in res.notes:
        print(f"note: {n}")
    print(f"({len(res.configs)} configurations simulated or screened in {res.elapsed_s:.1f} s)", file=sys.stderr)
    return 0


def cmd_simulate(args) -> int:
    from .serving import get_scenario, make_config, simulate

    sc = get_scenario(args.scenario).with_overrides(qps=args.qps, trace=args.trace)
    cfg = make_config(hardware=args.hardware, weights=args.weights, kv_dtype=args.kv_dtype, tp=args.tp, pp=args.pp,
                      replicas=args.replicas, max_num_seqs=args.max_num_seqs,
                      max_num_batched_tokens=args.max_num_batched_tokens, chunked_prefill=args.chunked_prefill,
                      block_size=args.block_size, flash_attention=not args.no_flash_attention)
    res = simulate(args.model, cfg, sc.workload, args.requests, args.seed, _eff(args))
    if args.json:
        print(_dump(res.to_dict()))
        return 0
    s, t = res.summary, res.totals
    print(f"{res.model} on {cfg.replicas} x (tp {cfg.tp} x pp {cfg.pp}) {cfg.hardware}, {cfg.weights}, "
          f"KV {cfg.kv_dtype}; max_num_seqs {cfg.max_num_seqs}, {cfg.max_num_batched_tokens} tokens/step"
          + (", chunked prefill" if cfg.chunked_prefill else ""))
    print(f"workload: {res.workload}; one engine simulated with {s['requests']:,} requests "
          f"({cfg.engines} engines share the traffic)")
    print(f"memory: {res.memory_verdict}")
    print()
    print(f"  {'':12s} {'p50':>10s} {'p90':>10s} {'p95':>10s} {'p99':>10s} {'mean':>10s}")
    for key, label, fmt in (("ttft_ms", "TTFT ms", "{:,.1f}"), ("tpot_ms", "TPOT ms", "{:,.2f}"),
                            ("e2e_s", "e2e s", "{:,.2f}"), ("queue_ms", "queue ms", "{:,.1f}")):
        d = s[key]
        print(f"  {label:12s} " + " ".join(f"{_f(d[q], fmt):>10s}" for q in ("p50", "p90", "p95", "p99", "mean")))
    print()
    print(f"  throughput: {t['requests_per_s']:,.2f} req/s, {t['output_tokens_per_s']:,.0f} output tok/s "
          f"(offered {t['offered_requests_per_s']:g} req/s)")
    print(f"  batch: {s['mean_running']:.1f} sequences running on average, {s['max_running']} at most; "
          f"busy {s['busy_fraction']:.0%}; {s['steps']:,} steps; rejected {s['rejected']}")
    return 0


def cmd_batching(args) -> int:
    from .report import table
    from .serving import batching_table

    df = batching_table(args.model, args.hardware, args.batch, args.prompt, args.output, args.weights, args.kv_dtype,
                        _eff(args))
    if args.json:
        print(df.to_json(orient="records", indent=2))
        return 0
    print(f"{args.model} on {args.hardware}, {args.weights}: static batches of prompt {args.prompt}, output "
          f"{args.output}; knee = max throughput/latency (Kleinrock's power)")
    rows = [{"batch": int(r.batch), "fits": "yes" if r.fits else "no", "TTFT ms": _f(r.ttft_ms),
             "step ms": _f(r.step_ms, "{:,.2f}"), "e2e s": _f(r.e2e_s, "{:,.2f}"),
             "req/s": _f(r.requests_per_s, "{:,.2f}"), "out tok/s": _f(r.output_tokens_per_s, "{:,.0f}"),
             "": "<- knee" if r.knee else ""} for r in df.itertuples()]
    print(table(rows, list(rows[0])))
    return 0


def cmd_speculative(args) -> int:
    from .report import table
    from .serving import speculative

    rows = [speculative(args.model, args.draft, args.hardware, g, args.acceptance, args.weights, context=args.context,
                        batch=args.batch, efficiency=_eff(args)) for g in args.gamma]
    if args.json:
        print(_dump(rows))
        return 0
    r0 = rows[0]
    print(f"{r0['target']} with draft {r0['draft']} on {r0['hardware']} ({r0['weights']}), context {args.context}, "
          f"batch {args.batch}, acceptance {args.acceptance:g}")
    if not r0["fits"]:
        print(f"{r0['verdict'].upper()[:12]}{r0['verdict'][12:]} (try a smaller format, e.g. --weights fp8 or "
              f"int4-g128, or a larger device)")
        return 0
    print(r0["verdict"])
    print(f"target step {r0['target_step_ms']:.2f} ms, draft step {r0['draft_step_ms']:.2f} ms "
          f"(cost ratio {r0['cost_ratio']:.3f})")
    out = [{"gamma": r["gamma"], "E[tokens]/step": f"{r['expected_tokens_per_step']:.3f}",
            "verify ms": f"{r['verify_step_ms']:.2f}", "speed-up": f"{r['speedup']:.2f}x",
            "Leviathan": f"{r['leviathan_speedup']:.2f}x",
            "break-even alpha": "never" if r["breakeven_alpha"] is None else f"{r['breakeven_alpha']:.3f}"}
           for r in rows]
    print(table(out, list(out[0])))
    return 0
