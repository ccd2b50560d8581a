"""Disaggregated prefill and decode (xPyD): separate prefill and decode pools, the KV cache sent between them.

As deployed by NVIDIA Dynamo (https://gh.072103.xyz/ai-dynamo/dynamo), llm-d (https://gh.072103.xyz/llm-d/llm-d) and
SGLang PD (https://lmsys.org/blog/2025-05-05-large-scale-ep/), after DistServe (Zhong et al., OSDI 2024,
arXiv:2401.09670) and Splitwise (Patel et al., ISCA 2024, arXiv:2311.18854): x prefill instances of t_p devices
each run prompts only; y decode instances of t_d devices each run decode steps only; a prompt's KV cache moves
from the prefill instance to a decode instance over the network.

KV transfer: the prompt's cache (planner.ops.kv_bytes_per_sequence) leaves the prefill instance's t_p devices in
parallel, each its own shard (1 / min(t_p, KV heads); an MLA latent is whole on every device, sent by one), each
over its own network port (DGX: one 400 Gb/s NIC per GPU):

  t_kv = KV bytes / kv_split(t_p) / per-direction link bandwidth + link latency

Prefill pool (TTFT): each instance serves its share qps / x of the requests one prompt at a time, an M/D/1 queue
with service time S = prefill(mean prompt): mean wait W = rho S / (2 (1 - rho)), rho = qps S / x
(Pollaczek-Khinchine). The p95 wait is taken as 3 W (an exponential tail: ln 20 = 3.0). TTFT p95 = prefill(p95
prompt) + t_kv(p95 prompt) + 3 W (the first token is streamed once the decode side holds the cache). x is the
smallest count with rho < 1 and TTFT p95 <= the target.

Decode pool (TPOT): a decode instance running b sequences at the mean context (prompt + output / 2) takes
step(b) per token; b* is the largest b whose step meets the TPOT target and whose KV fits its pool. By Little's
law the pool holds qps x mean output x step(b*) sequences, so y = ceil(qps x mean output x step(b*) / b*).

The x : y search tries every (t_p, t_d) in 1, 2, 4, 8 that fits, sizes both pools, and keeps the cheapest
(fewest devices; price per device-hour x devices). Step times come from the core cost model
(planner.serving.parallelism.tp_step_time_s); memory from planner.serving.step_model.replica_memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import PlannerError

TP_DEGREES = (1, 2, 4, 8)
P95_WAIT_FACTOR = 3.0  # p95 / mean of an exponential waiting-time tail: ln(20)


def kv_transfer_time_s(m, kv_dtype: str, prompt_tokens, link, tp_prefill: int = 1):
    """Seconds to move one prompt's KV cache from a prefill instance of t_p devices to a decode instance:
    KV bytes / kv_split(t_p) / link bandwidth + latency (module docstring)."""
    from ..ops import kv_bytes_per_sequence
    from .parallelism import kv_split

    if link is None or link.per_direction_gbs <= 0:
        raise PlannerError("--parallel pd: the prefill and decode pools need a network between them")
    b = np.asarray(kv_bytes_per_sequence(m, kv_dtype, prompt_tokens), dtype=np.float64) / kv_split(m, tp_prefill)
    return b / (link.per_direction_gbs * 1e9) + link.latency_us * 1e-6


def md1_p95_wait_s(arrival_per_s: float, service_s: float) -> float:
    """3 x the M/D/1 mean wait rho S / (2 (1 - rho)); inf when rho >= 1."""
    rho = arrival_per_s * service_s
    if rho >= 1:
        return math.inf
    return P95_WAIT_FACTOR * rho * service_s / (2 * (1 - rho))


def size_prefill_pool(qps: float, prefill_mean_s: float, prefill_p95_s: float, transfer_p95_s: float,
                      ttft_target_s: float, max_instances: int = 1024) -> tuple[int | None, float]:
    """(x, TTFT p95 in s): the fewest prefill instances whose TTFT p95 meets the target (None if none can)."""
    floor = prefill_p95_s + transfer_p95_s
    if floor > ttft_target_s:
        return None, floor
    x = max(1, math.floor(qps * prefill_mean_s) + 1)
    while x <= max_instances:
        ttft = floor + md1_p95_wait_s(qps / x, prefill_mean_s)
        if ttft <= ttft_target_s:
            return x, ttft
        x += 1
    return None, math.inf


def size_decode_pool(qps: float, output_mean: float, step_s: np.ndarray, tpot_target_s: float,
                     b_max: int) -> tuple[int | None, int, float]:
    """(y, b*, step(b*) in s): step_s[b - 1] is the decode step of b sequences; b* the largest b <= b_max whose
    step meets the TPOT target; y = ceil(qps x output x step(b*) / b*) (Little's law)."""
    step_s = np.asarray(step_s, dtype=np.float64)[:max(1, b_max)]
    ok = np.nonzero(step_s <= tpot_target_s)[0]
    if ok.size == 0:
        return None, 0, float(step_s[0])
    b = int(ok[-1]) + 1
    y = max(1, math.ceil(qps * output_mean * step_s[b - 1] / b - 1e-9))
    return y, b, float(step_s[b - 1])


def decode_operating_point(qps: float, output_mean: float, step_s: np.ndarray, y: int) -> tuple[int, float]:
    """(b, step(b) in s): the batch each of y decode instances settles at, the smallest b whose Little's-law
    occupancy qps x output x step(b) / y is at most b; (0, inf) when even the largest batch cannot keep up."""
    step_s = np.asarray(step_s, dtype=np.float64)
    b = np.arange(1, len(step_s) + 1)
    ok = np.nonzero(qps * output_mean * step_s / y <= b)[0]
    if ok.size == 0:
        return 0, math.inf
    return int(ok[0]) + 1, float(step_s[ok[0]])


@dataclass
class PDOption:
    tp_prefill: int
    tp_decode: int
    x: int | None
    y: int | None
    ttft_p95_ms: float
    tpot_ms: float
    decode_batch: int
    kv_transfer_ms: float
    reason: str = ""

    @property
    def gpus(self) -> int | None:
        return None if self.x is None or self.y is None else self.x * self.tp_prefill + self.y * self.tp_decode

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("tp_prefill", "tp_decode", "x", "y", "ttft_p95_ms", "tpot_ms",
                                           "decode_batch", "kv_transfer_ms", "reason")}
        d["gpus"] = self.gpus
        d["layout"] = None if self.gpus is None else f"{self.x}P{self.y}D (tp {self.tp_prefill} / {self.tp_decode})"
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def workload_lengths(workload, n: int = 4000, seed: int = 0) -> dict:
    """Mean and p95 prompt, mean output, longest request of a sample of the workload."""
    from .workload import generate

    r = generate(workload, n, seed)
    return {"prompt_mean": float(r.prompt.mean()), "prompt_p95": int(np.percentile(r.prompt, 95)),
            "output_mean": float(r.output.mean()), "length_max": int((r.prompt + r.output).max())}


def pd_options(m, spec, fmt, kv_dtype: str, workload, ttft_p95_ms: float, tpot_p95_ms: float, efficiency="auto",
               max_num_seqs: int = 256, max_tokens: int = 8192, seed: int = 0,
               prefill_gpus: int | None = None, decode_gpus: int | None = None) -> tuple[list[PDOption], dict]:
    """Every (t_p, t_d) tried, each with its pool sizes (module docstring); with prefill_gpus / decode_gpus the
    pools are fixed at that many devices and each option says whether the targets are met."""
    from ..efficiency import resolve_efficiency
    from ..roofline import device_model, select_unit
    from .parallelism import node_for, tp_step_time_s
    from .step_model import replica_memory

    st = workload_lengths(workload, seed=seed)
    node = node_for(spec)
    link = node.inter_link() or node.intra_link()
    if link.per_direction_gbs <= 1e-6:
        raise PlannerError(f"--parallel pd: {spec.id} has no link to carry the KV cache between pools")
    u = select_unit(spec, fmt)
    dev = device_model(spec, u, fmt, resolve_efficiency(spec, u, efficiency))
    qps = workload.qps
    tps = [t for t in TP_DEGREES if t <= node.gpus_per_node and m.num_attention_heads % t == 0]
    pre, dec = {}, {}
    for t in tps:
        mem = replica_memory(m, fmt, kv_dtype, spec, t, 1, max_tokens, max_num_seqs=max_num_seqs)
        if not mem.fits:
            continue
        lk = node.intra_link() if t > 1 else None
        s_mean = float(tp_step_time_s(m, fmt, kv_dtype, dev, "prefill", 1, st["prompt_mean"], 0, t, lk))
        s_p95 = float(tp_step_time_s(m, fmt, kv_dtype, dev, "prefill", 1, st["prompt_p95"], 0, t, lk))
        xfer = float(kv_transfer_time_s(m, kv_dtype, st["prompt_p95"], link, t))
        pre[t] = (s_mean, s_p95, xfer, mem)
        b_max = max(1, min(max_num_seqs, int(mem.kv_pool_tokens // (st["prompt_mean"] + st["output_mean"]))))
        if mem.kv_pool_tokens < st["length_max"]:
            continue
        bs = np.arange(1, b_max + 1, dtype=np.float64)
        ctx = st["prompt_mean"] + st["output_mean"] / 2
        dec[t] = (np.asarray(tp_step_time_s(m, fmt, kv_dtype, dev, "decode", bs, 1, ctx, t, lk), dtype=np.float64),
                  b_max)
    if not pre:
        from ..errors import DoesNotFit
        raise DoesNotFit(f"does not fit: {m.name} {fmt.name} with a KV pool for the workload's longest request "
                         f"({st['length_max']:,} tokens) on {spec.id} at tensor parallelism "
                         f"{', '.join(map(str, tps))} (--parallel pd)")
    opts = []
    for tp_p, (s_mean, s_p95, xfer, _) in pre.items():
        for tp_d, (steps, b_max) in dec.items():
            if prefill_gpus is not None and (prefill_gpus % tp_p or decode_gpus % tp_d):
                continue
            if prefill_gpus is None:
                x, ttft = size_prefill_pool(qps, s_mean, s_p95, xfer, ttft_p95_ms / 1e3)
                y, b, step = size_decode_pool(qps, st["output_mean"], steps, tpot_p95_ms / 1e3, b_max)
                if y is not None:
                    b, step = decode_operating_point(qps, st["output_mean"], steps, y)
            else:
                x = prefill_gpus // tp_p
                ttft = s_p95 + xfer + md1_p95_wait_s(qps / x, s_mean)
                y = decode_gpus // tp_d
                b, step = decode_operating_point(qps, st["output_mean"], steps, y)
                if ttft > ttft_p95_ms / 1e3 or step > tpot_p95_ms / 1e3:
                    x = y = None
            why = []
            if ttft > ttft_p95_ms / 1e3:
                why.append(f"TTFT p95 {ttft * 1e3:,.0f} ms > {ttft_p95_ms:g}" if math.isfinite(ttft)
                           else "the prefill pool cannot keep up")
            if not math.isfinite(step) or step > tpot_p95_ms / 1e3:
                why.append(f"TPOT {step * 1e3:,.1f} ms > {tpot_p95_ms:g}" if math.isfinite(step)
                           else "the decode pool cannot keep up")
            opts.append(PDOption(tp_p, tp_d, x, y, ttft * 1e3, step * 1e3, b, xfer * 1e3, "; ".join(why)))
    if not opts:
        raise PlannerError(f"--prefill-gpus/--decode-gpus: {prefill_gpus} / {decode_gpus} devices are not a multiple "
                           f"of any tensor-parallel degree that fits ({', '.join(map(str, pre))})")
    return opts, st | {"link": link.kind, "link_gbs": link.per_direction_gbs}


def pd_plan(m, spec, fmt, kv_dtype: str, workload, ttft_p95_ms: float, tpot_p95_ms: float, price: float | None,
            efficiency="auto", max_num_seqs: int = 256, seed: int = 0, prefill_gpus: int | None = None,
            decode_gpus: int | None = None, aggregated: dict | None = None) -> dict:
    """The cheapest xPyD that meets both targets, every option tried, and the aggregated plan beside it."""
    opts, st = pd_options(m, spec, fmt, kv_dtype, workload, ttft_p95_ms, tpot_p95_ms, efficiency, max_num_seqs,
                          seed=seed, prefill_gpus=prefill_gpus, decode_gpus=decode_gpus)
    ok = [o for o in opts if o.gpus is not None]
    best = min(ok, key=lambda o: (o.gpus, o.tpot_ms)) if ok else None
    out = {"layout": "pd", "model": m.name, "hardware": spec.id, "weights": fmt.name, "kv_dtype": kv_dtype,
           "qps": workload.qps, "slo": {"ttft_p95_ms": ttft_p95_ms, "tpot_p95_ms": tpot_p95_ms}, "workload": st,
           "best": best.to_dict() if best else None, "options": [o.to_dict() for o in opts],
           "usd_per_hour": best.gpus * price if best and price else None, "aggregated": aggregated}
    out["explanation"] = explain_pd(out)
    return out


def explain_pd(r: dict) -> list[str]:
    st, b, agg = r["workload"], r["best"], r["aggregated"]
    lines = [f"disaggregated prefill/decode on {r['hardware']} ({r['weights']}): prompts mean "
             f"{st['prompt_mean']:,.0f} / p95 {st['prompt_p95']:,} tokens, output mean {st['output_mean']:,.0f}; "
             f"KV sent over {st['link']} at {st['link_gbs']:g} GB/s per device"]
    if b is None:
        reasons = sorted({o["reason"] for o in r["options"] if o["reason"]})
        lines.append("no xPyD split meets the targets: " + ("; ".join(reasons[:3]) or "no option"))
    else:
        lines.append(f"cheapest split: {b['layout']} = {b['gpus']} devices; TTFT p95 ~{b['ttft_p95_ms']:,.0f} ms "
                     f"(incl. KV transfer {b['kv_transfer_ms']:.2f} ms), TPOT {b['tpot_ms']:.1f} ms at "
                     f"{b['decode_batch']} sequences per decode instance")
    if agg is not None:
        if agg.get("gpus") and b is not None:
            d = b["gpus"] - agg["gpus"]
            verdict = ("disaggregation saves" if d < 0 else "aggregated serving saves" if d > 0 else "same count:")
            lines.append(f"aggregated plan: {agg['gpus']} devices (tp {agg['tp']} x {agg['replicas']} replicas, "
                         f"TTFT p95 {agg['ttft_p95_ms']:,.0f} ms, TPOT p95 {agg['tpot_p95_ms']:.1f} ms, simulated); "
                         f"{verdict} {abs(d)} device(s)")
        elif agg.get("reason"):
            lines.append(f"aggregated plan: {agg['reason']}")
    return lines
