"""`planner plan`, `planner simulate`, `planner batching`, `planner speculative`: parse, call planner.serving, render.

Heavy imports (planner.serving, pandas) happen inside the handlers so that `planner estimate` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys

import math

# hard limits on flags (issue 15): every count and rate is bounded so that no input allocates without limit or
# loops for ever (e.g. --qps 1e-310); the numbers match planner.serving.workload / engine.
MAX_REQUESTS = 1_000_000
MAX_REPLICAS = 100_000
MAX_TOKENS = 1 << 24
MAX_SEED = 2**32 - 1


def _bounded_float(lo: float, hi: float, what: str = "a number", lo_open: bool = False):
    def parse(text: str) -> float:
        allowed = f"allowed: {'(' if lo_open else '['}{lo:g}, {hi:g}]"
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}; {allowed}") from None
        if not math.isfinite(v) or v > hi or v < lo or (lo_open and v == lo):
            raise argparse.ArgumentTypeError(f"must be {what} in {allowed[9:]}, got {text}")
        return v
    return parse


def _bounded_int(lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer in [{lo:,}, {hi:,}], got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be an integer in [{lo:,}, {hi:,}], got {v}")
        return v
    return parse


def _bounded_int_list(lo: int, hi: int):
    one = _bounded_int(lo, hi)

    def parse(text: str) -> list[int]:
        out = [one(t.strip()) for t in text.split(",") if t.strip()]
        if not out or len(out) > 64:
            raise argparse.ArgumentTypeError(f"expected 1 to 64 comma-separated integers, got {text!r}")
        return out
    return parse


_positive_float = _bounded_float(0.0, 1e9, "a number", lo_open=True)
_qps = _bounded_float(1e-6, 1e6, "a finite request rate (requests/s)")
_ms = _bounded_float(0.0, 1e9, "a finite time in milliseconds", lo_open=True)
_requests = _bounded_int(1, MAX_REQUESTS)
_replicas = _bounded_int(1, MAX_REPLICAS)
_seed = _bounded_int(0, MAX_SEED)
_tokens = _bounded_int(1, MAX_TOKENS)


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
    return hid, _bounded_float(0.0, 1e4, "a price in USD per device-hour", lo_open=True)(usd)


def _efficiency_args(p) -> None:
    eff = p.add_mutually_exclusive_group()
    eff.add_argument("--no-calibration", action="store_true", help="ignore calibration files (kind/device defaults)")
    eff.add_argument("--datasheet", action="store_true", help="plain roofline: efficiency 1.0, no overheads")


def _eff(args) -> str:
    return "datasheet" if args.datasheet else ("default" if args.no_calibration else "auto")


def _f(x, fmt="{:,.1f}") -> str:
    return "-" if x is None or x != x else fmt.format(x)


def _clean(obj):
    """JSON-safe: numpy scalars to Python, non-finite floats to null (strict JSON never holds NaN or Infinity)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (TypeError, ValueError):
            return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _dump(obj) -> str:
    return json.dumps(_clean(obj), indent=2, allow_nan=False, default=str)


def _config_args(p) -> None:
    """Model, device, weight format and KV dtype of one serving configuration."""
    p.add_argument("--model", "-m", required=True)
    p.add_argument("--hardware", "-H", required=True)
    p.add_argument("--weights", "-w", default="fp16")
    p.add_argument("--kv-dtype", default="fp16")


def _runtime_args(p) -> None:
    """--runtime and --engine, with the meaning they have in `planner estimate`."""
    p.add_argument("--runtime", default=None, help="serving runtime profile (hardware_specs/runtimes/): its fitted "
                   "efficiency drives the step model and its p10-p90 interval the ranges, as in `planner estimate`")
    p.add_argument("--engine", default="none", help="KV sizing rules: none, vllm, trtllm, sglang, llamacpp, lmdeploy")


def _profile_arg(p) -> None:
    """--runtime alone (commands without KV sizing rules): the profile's unit and fitted efficiency time the steps."""
    from .cli import RUNTIME_IDS

    p.add_argument("--runtime", default=None, help=f"engine profile ({RUNTIME_IDS}): its fitted efficiency and unit "
                   "time the steps, as in `planner estimate --runtime`")


def _runtime(args) -> str | None:
    """--runtime, else the profile `--engine` names where one exists, as `planner estimate` resolves it
    (planner.runtimes.runtime_for_engine)."""
    if args.runtime:
        return args.runtime
    hw = getattr(args, "hardware", None)
    if not isinstance(hw, str):  # plan: each device takes the engine's profile where it covers it (plan._dev)
        return None
    from .runtimes import runtime_for_engine
    return runtime_for_engine(args.engine, hw)


def _json_verdict(args, exc) -> int:
    """A 'does not fit' verdict: JSON under --json, one plain line otherwise; exit 0 (a verdict, not an error)."""
    if getattr(args, "json", False):
        print(_dump({"fits": False, "verdict": str(exc)}))
    else:
        print(str(exc))
    return 0


def _check_engine(name: str) -> str:
    from .memory import ENGINES
    from .errors import PlannerError

    if name not in ENGINES:
        raise PlannerError(f"--engine: unknown engine '{name}'; allowed: {', '.join(ENGINES)}")
    return name


def register(sub) -> None:
    from .scheduler_defaults import PLANNER_DEFAULTS, SEQS_HELP, TOKENS_HELP  # light: dataclasses and units

    p = sub.add_parser("plan", help="capacity plan: cheapest configuration per device that meets the SLOs")
    p.add_argument("--model", "-m", required=True, help="catalog id or path to a HF config.json")
    p.add_argument("--scenario", "-s", default="chat", help="chat, batch, long-doc or on-device")
    p.add_argument("--qps", type=_qps, default=None, help="request rate (requests per second)")
    p.add_argument("--ttft-p95-ms", type=_ms, default=None, help="time-to-first-token target, p95")
    p.add_argument("--tpot-p95-ms", type=_ms, default=None, help="time-per-output-token target, p95")
    p.add_argument("--hardware", "-H", nargs="+", action="extend", default=None,
                   help="candidate devices, space- or comma-separated, the flag repeatable (default: the catalog)")
    p.add_argument("--trace", default=None, help="CSV trace: arrival_s,prompt_tokens,output_tokens")
    p.add_argument("--price", type=_price, action="append", default=[], metavar="HW=USD",
                   help="override a device's price per device-hour (repeatable)")
    p.add_argument("--requests", type=_bounded_int(50, 100_000), default=1200,
                   help="simulated requests per configuration")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--kv-dtype", default="fp16")
    p.add_argument("--all", action="store_true", help="also list every rejected device with its reason")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _runtime_args(p)
    _efficiency_args(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("simulate", help="simulate continuous batching for one serving configuration")
    _config_args(p)
    p.add_argument("--tp", type=_bounded_int(1, 64), default=1, help="tensor-parallel degree (inside a node)")
    p.add_argument("--pp", type=_bounded_int(1, 64), default=1, help="pipeline stages (across nodes)")
    p.add_argument("--replicas", type=_replicas, default=1, help="data-parallel replicas")
    p.add_argument("--max-num-seqs", type=_bounded_int(1, 65536), default=None,
                   help=f"batch limit (sequences); default: the engine's own ({SEQS_HELP})")
    p.add_argument("--max-num-batched-tokens", type=_bounded_int(1, 1 << 20), default=None,
                   help=f"token budget per step; default: the engine's own ({TOKENS_HELP}), else "
                   f"{PLANNER_DEFAULTS.max_num_batched_tokens}")
    p.add_argument("--chunked-prefill", action=argparse.BooleanOptionalAction, default=None,
                   help="Sarathi/vLLM-V1 chunked prefill; default: on for vLLM (V1) and SGLang, off otherwise")
    p.add_argument("--block-size", type=_bounded_int(1, 4096), default=16, help="KV block size (tokens)")
    p.add_argument("--preemption", choices=("recompute", "swap"), default="recompute",
                   help="when the KV pool runs out: recompute (vLLM default) or swap to host memory")
    p.add_argument("--no-flash-attention", action="store_true")
    p.add_argument("--scenario", "-s", default="chat", help="workload preset: chat, batch, long-doc, on-device")
    p.add_argument("--qps", type=_qps, default=None)
    p.add_argument("--trace", default=None, help="CSV trace instead of the preset's lengths")
    p.add_argument("--requests", type=_requests, default=None,
                   help="requests simulated (one engine's share; default 5000, 1000 per probe with --max-rate)")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--max-rate", action="store_true", help="search the highest request rate that meets "
                   "--ttft-ms and --tpot-ms at --percentile (Server), beside the Offline throughput")
    p.add_argument("--burst", action="store_true", help="every request arrives at once (vllm bench serve's default: "
                   "--request-rate inf, no --max-concurrency): --requests of them (default 1000), none left out "
                   "as warm-up; throughput = output tokens / the run's span")
    p.add_argument("--ttft-ms", type=_ms, default=None, help="TTFT limit for --max-rate (default: the scenario's)")
    p.add_argument("--tpot-ms", type=_ms, default=None, help="TPOT limit for --max-rate (default: the scenario's)")
    p.add_argument("--percentile", type=int, choices=(50, 90, 95, 99), default=95, help="for --max-rate")
    p.add_argument("--json", action="store_true")
    _runtime_args(p)
    _efficiency_args(p)
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("batching", help="latency per step and throughput across batch sizes, with the knee")
    _config_args(p)
    p.add_argument("--batch", "-b", type=_bounded_int_list(1, 65536), default=[1, 8, 32, 64, 128, 256],
                   help="comma-separated sizes")
    p.add_argument("--prompt", "-p", type=_tokens, default=512)
    p.add_argument("--output", "-o", type=_tokens, default=128)
    p.add_argument("--json", action="store_true")
    _profile_arg(p)
    _efficiency_args(p)
    p.set_defaults(func=cmd_batching)

    p = sub.add_parser("speculative", help="speculative decoding: expected tokens, speed-up, break-even acceptance")
    p.add_argument("--model", "-m", required=True, help="target model")
    p.add_argument("--draft", default=None, help="draft model (same vocabulary; --method draft)")
    p.add_argument("--hardware", "-H", required=True)
    p.add_argument("--weights", "-w", default="fp16")
    p.add_argument("--gamma", type=_bounded_int_list(1, 64), default=[1, 2, 3, 4, 5, 6, 8],
                   help="drafted tokens per step")
    p.add_argument("--acceptance", type=_fraction, default=0.7, help="per-token acceptance rate alpha")
    p.add_argument("--context", type=_tokens, default=1024)
    p.add_argument("--batch", type=_bounded_int(1, 65536), default=1)
    p.add_argument("--json", action="store_true")
    _profile_arg(p)
    _efficiency_args(p)
    p.set_defaults(func=cmd_speculative)


# ---------------------------------------------------------------- handlers


def cmd_plan(args) -> int:
    from .errors import DoesNotFit

    try:
        return _cmd_plan(args)
    except DoesNotFit as exc:
        return _json_verdict(args, exc)


def _cmd_plan(args) -> int:
    from .cli import str_list
    from .errors import PlannerError
    from .report import table
    from .serving import plan

    # `-H a b`, `-H a,b` and `-H a -H b` name the same candidates (estimate's comma list, cli.str_list)
    hardware = [h for arg in args.hardware for h in str_list(arg)] if args.hardware is not None else None
    if hardware == []:
        raise PlannerError("--hardware: names no device; give catalog ids or spec files, space- or comma-separated")
    res = plan(args.model, args.scenario, qps=args.qps, ttft_p95_ms=args.ttft_p95_ms, tpot_p95_ms=args.tpot_p95_ms,
               hardware=hardware, trace=args.trace, prices=dict(args.price), n_requests=args.requests,
               seed=args.seed, efficiency=_eff(args), kv_dtype=args.kv_dtype, runtime=_runtime(args),
               engine=_check_engine(args.engine))
    if args.json:
        print(_dump(res.to_dict()))
        return 0
    sc = res.scenario
    print(f"{res.model}, scenario {sc.name} ({sc.description}): {sc.workload.describe()}")
    print(f"targets: TTFT p95 <= {sc.ttft_p95_ms:g} ms, TPOT p95 <= {sc.tpot_p95_ms:g} ms; "
          f"ranked by {'cost per hour' if sc.objective == 'cost' else 'quality tier of the format, then TPOT p95 (one device)'}")
    print()
    rows = []
    for r in res.to_dict()["ranking"]:
        if r["status"] != "ok":
            continue
        tr = r.get("tpot_p95_ms_range")
        rows.append({"rank": r["rank"], "hardware": r["hardware"], "format": r["weights"], "tier": r["quality_tier"],
                     "tp x pp": f"{r['tp']}x{r['pp']}", "replicas": r["replicas"], "devices": r["gpus"],
                     "max_seqs": r["max_num_seqs"], "TTFT p95 ms": _f(r["ttft_p95_ms"], "{:,.0f}"),
                     "TPOT p95 ms": _f(r["tpot_p95_ms"]) + (f" ({tr[0]:,.1f}-{tr[1]:,.1f})" if tr else ""),
                     "$/h": _f(r["usd_per_hour"], "{:,.2f}") if r["usd_per_hour"] is not None else "no price",
                     "$/M in": _f(r["usd_per_m_input_tokens"], "{:,.3f}"),
                     "$/M out": _f(r["usd_per_m_output_tokens"], "{:,.3f}"),
                     "$/M blend": _f(r["usd_per_m_tokens_blended"], "{:,.3f}"),
                     "W/dev": _f(r["watts_per_device"], "{:,.0f}"),
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
    if rows:
        print("($/M in and $/M out split the hour by the prefill/decode time of the mean request; blended is at the "
              "workload's input:output ratio; W/dev is the power drawn at the modeled utilization; TPOT ranges are "
              "p10-p90)")
    for n in res.notes:
        print(f"note: {n}")
    print(f"({len(res.configs)} configurations simulated or screened in {res.elapsed_s:.1f} s)", file=sys.stderr)
    return 0


def cmd_simulate(args) -> int:
    from .errors import DoesNotFit

    try:
        return _cmd_simulate(args)
    except DoesNotFit as exc:
        return _json_verdict(args, exc)


def _warn_unpublished(hardware) -> None:
    """The warning `planner estimate` gives when a device's figures rest on numbers its vendor does not publish
    (catalog ids and spec files; unknown ones are left to the command's own one-line error)."""
    from .errors import PlannerError
    from .hardware import load_hardware

    for h in hardware or []:
        try:
            w = load_hardware(h).unpublished_warning()
        except PlannerError:
            continue
        if w:
            print(f"warning: {w}", file=sys.stderr)


def print_latency_table(s: dict, rg: dict | None = None) -> None:
    """TTFT, TPOT, end-to-end and queueing percentiles of a simulation summary, with the p95's p10-p90 range when the
    summary carries one."""
    print(f"  {'':12s} {'p50':>10s} {'p90':>10s} {'p95':>10s} {'p99':>10s} {'mean':>10s}"
          + ("   p95 p10-p90 range" if rg else ""))
    for key, label, fmt in (("ttft_ms", "TTFT ms", "{:,.1f}"), ("tpot_ms", "TPOT ms", "{:,.2f}"),
                            ("itl_ms", "ITL ms", "{:,.2f}"), ("e2e_s", "e2e s", "{:,.2f}"),
                            ("queue_ms", "queue ms", "{:,.1f}")):
        d = s.get(key)
        if d is None:  # a summary without the figure (a queueing model's)
            continue
        rr = _rng(rg, f"{key}_p95", fmt).strip(" ()").replace("p10-p90 ", "") if rg else ""
        print(f"  {label:12s} " + " ".join(f"{_f(d[q], fmt):>10s}" for q in ("p50", "p90", "p95", "p99", "mean"))
              + (f"   {rr}" if rr else ""))


def _rng(r, key, fmt) -> str:
    if not r or r.get(key) is None:
        return ""
    lo, hi = r[key]
    return f" (p10-p90 {_f(lo, fmt)}-{_f(hi, fmt)})"


def _cmd_simulate(args) -> int:
    from .serving import get_scenario, make_config, simulate
    from .serving.engine import config_step_policy, max_rate

    from .errors import PlannerError

    if args.burst and (args.max_rate or args.qps is not None):
        raise PlannerError("--burst: every request arrives at once, so it takes no --qps and no --max-rate; drop "
                           + ("--max-rate" if args.max_rate else "--qps"))
    sc = get_scenario(args.scenario).with_overrides(qps=args.qps, trace=args.trace)
    # scheduler flags left out (None) take the engine's own defaults on this device (ServingConfig)
    cfg = make_config(hardware=args.hardware, weights=args.weights, kv_dtype=args.kv_dtype, tp=args.tp, pp=args.pp,
                      replicas=args.replicas, max_num_seqs=args.max_num_seqs,
                      max_num_batched_tokens=args.max_num_batched_tokens, chunked_prefill=args.chunked_prefill,
                      block_size=args.block_size, flash_attention=not args.no_flash_attention,
                      preemption=args.preemption, runtime=_runtime(args), engine=_check_engine(args.engine))
    _warn_unpublished([args.hardware])
    if args.max_rate:
        ttft = args.ttft_ms or sc.ttft_p95_ms
        tpot = args.tpot_ms or sc.tpot_p95_ms
        r = max_rate(args.model, cfg, sc.workload, ttft, tpot, args.percentile, args.requests or 1000, args.seed,
                     _eff(args))
        if args.json:
            print(_dump(r))
            return 0
        q = f"p{args.percentile}"
        print(f"{r['model']} on {cfg.replicas} x (tp {cfg.tp} x pp {cfg.pp}) {cfg.hardware}, {cfg.weights}; "
              f"workload {r['workload']}")
        print(f"memory: {r['memory']}")
        rg = r["range"]
        print(f"Offline (no latency limit): {r['offline_requests_per_s']:,.3g} req/s"
              + _rng(rg, "offline_requests_per_s", "{:,.3g}"))
        if r["max_requests_per_s"] is None:
            print(f"Server (TTFT {q} <= {ttft:g} ms, TPOT {q} <= {tpot:g} ms): none: {r['reason']}")
        else:
            print(f"Server (TTFT {q} <= {ttft:g} ms, TPOT {q} <= {tpot:g} ms): {r['max_requests_per_s']:,.3g} req/s"
                  + _rng(rg, "max_requests_per_s", "{:,.3g}")
                  + f", {r['max_output_tokens_per_s']:,.0f} output tok/s; at it TTFT {q} "
                  f"{_f(r[f'ttft_ms_{q}'], '{:,.0f}')} ms, TPOT {q} {_f(r[f'tpot_ms_{q}'], '{:,.1f}')} ms")
        print(f"(bisection over the rate to {r['precision']:.0%}, {r['requests_per_probe']:,} requests per engine "
              f"and probe; Offline bounds the search)")
        return 0
    res = simulate(args.model, cfg, sc.workload, args.requests or (1000 if args.burst else 5000), args.seed, _eff(args),
                   burst=args.burst)
    if args.json:
        print(_dump(res.to_dict() | {"fits": True}))
        return 0
    s, t = res.summary, res.totals
    rg = s.get("range")
    print(f"{res.model} on {cfg.replicas} x (tp {cfg.tp} x pp {cfg.pp}) {cfg.hardware}, {cfg.weights}, "
          f"KV {cfg.kv_dtype}; max_num_seqs {cfg.max_num_seqs}, {cfg.max_num_batched_tokens} tokens/step"
          + (", chunked prefill" if cfg.chunked_prefill else "") + f" ({cfg.scheduler_source}; "
          f"{config_step_policy(cfg).source})"
          + (f"; runtime {cfg.runtime}" if cfg.runtime else "") + (f"; engine {cfg.engine}" if cfg.engine != "none" else ""))
    print(f"workload: {res.workload}; one engine simulated with {s['requests']:,} requests "
          + (f"({cfg.engines} engines share the traffic)" if cfg.engines > 1 else "(a single engine)"))
    print(f"memory: {res.memory_verdict}")
    print()
    print_latency_table(s, rg)
    print()
    tr = t.get("requests_per_s_range")
    print(f"  throughput: {t['requests_per_s']:,.2f} req/s"
          + (f" (p10-p90 {tr[0]:,.2f}-{tr[1]:,.2f})" if tr else "")
          + f", {t['output_tokens_per_s']:,.0f} output tok/s"
          + (f" (offered {t['offered_requests_per_s']:g} req/s)" if t["offered_requests_per_s"] is not None else
             " (all at once: over the run's span)"))
    print(f"  batch: {s['mean_running']:.1f} sequences running on average (Little's law), "
          f"{s['mean_batch_busy']:.1f} while busy, {s['max_running']} at most; busy {s['busy_fraction']:.0%}; "
          f"{s['steps']:,} steps; rejected {s['rejected']}")
    print(f"  preemptions ({s['preemption_mode']}): {s['preemptions']:,} of {s['preempted_requests']:,} requests"
          + (f", {s['recomputed_tokens']:,} tokens recomputed" if s['recomputed_tokens'] else "")
          + (f", {s['swapped_gb']:,.2f} GB swapped out" if s['swapped_gb'] else ""))
    if rg:
        iv = rg["interval"]
        print(f"  ranges: the simulation re-run at the p10 and p90 of measured/predicted speed: decode work / "
              f"{iv['p10']:g}, {iv['p90']:g} ({iv['regime']} regime), prompt work / {iv['prefill_p10']:g}, "
              f"{iv['prefill_p90']:g} ({iv['prefill_regime']}); {iv['source']}")
    return 0


def cmd_batching(args) -> int:
    from .errors import DoesNotFit

    try:
        return _cmd_batching(args)
    except DoesNotFit as exc:
        return _json_verdict(args, exc)


def _warn_past_maximum(model: str, context: int) -> None:
    """The warning `planner estimate` gives: the model refuses a context longer than its maximum."""
    from .architecture import load_model

    if (too_long := load_model(model).context_warning(context)) is not None:
        print(f"warning: {too_long}", file=sys.stderr)


def _cmd_batching(args) -> int:
    from .report import table
    from .serving import batching_table

    df = batching_table(args.model, args.hardware, args.batch, args.prompt, args.output, args.weights, args.kv_dtype,
                        _eff(args), runtime=args.runtime)
    _warn_past_maximum(args.model, args.prompt + args.output)  # after the work: an error stays one line
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
    from .errors import DoesNotFit

    try:
        return _cmd_speculative(args)
    except DoesNotFit as exc:
        return _json_verdict(args, exc)


def _x(v, fmt: str) -> str:
    """A figure, or 'does not fit' where the row's configuration does not (its times are None)."""
    return "does not fit" if v is None else fmt.format(v)


def _cmd_speculative(args) -> int:
    from .report import table
    from .serving import speculative

    rows = [speculative(args.model, args.draft, args.hardware, g, args.acceptance, args.weights,
                        kv_dtype=getattr(args, "kv_dtype", "fp16"), context=args.context, batch=args.batch,
                        efficiency=_eff(args), runtime=args.runtime) for g in args.gamma]
    _warn_past_maximum(args.model, args.context)  # after the work: an error stays one line
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
            "verify ms": _x(r["verify_step_ms"], "{:.2f}"), "speed-up": _x(r["speedup"], "{:.2f}x"),
            "Leviathan": _x(r["leviathan_speedup"], "{:.2f}x"),
            "break-even alpha": "never" if r["breakeven_alpha"] is None else f"{r['breakeven_alpha']:.3f}"}
           for r in rows]
    print(table(out, list(out[0])))
    return 0
