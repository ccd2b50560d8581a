"""Recommendations for the plan's best configuration, each the outcome of comparing alternatives with the model:

  quantization        the same device searched with each weight format: GPUs and cost (or TPOT on-device)
  batch size          decode step time vs batch at the workload's mean context: the knee (max throughput/latency)
                      and the largest batch the TPOT target allows, against the simulated occupancy
  chunked prefill     the chosen configuration simulated again with chunked prefill: p95 TTFT and TPOT
  FlashAttention      the p99 prompt's prefill with and without it: score-matrix memory and time
  paged KV            contiguous vs paged reservation for the workload's lengths in the chosen KV pool
  speculative         a catalog draft sharing the vocabulary: modelled speed-up and break-even acceptance rate
No text here is fixed advice: every sentence carries the numbers it was computed from.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import PlannerError


def _quantization(P, spec, best) -> dict:
    sc0 = P.sc
    rows = []
    try:
        for name in sc0.formats:
            P.sc = replace(sc0, formats=(name,))
            r = P.device(spec, ranges=False)   # compared on the simulated figures; ranges unused here
            if r["status"] == "ok" and not any(x["weights"] == r["weights"] for x in rows):
                rows.append(r)
    finally:
        P.sc = sc0
    if len(rows) < 2:
        return {"topic": "quantization", "recommendation": f"only {best['weights']} meets the targets on {spec.id}",
                "alternatives": rows and [{k: rows[0][k] for k in ("weights", "gpus", "tpot_p95_ms")}]}
    alts = [{k: r[k] for k in ("weights", "gpus", "usd_per_hour", "ttft_p95_ms", "tpot_p95_ms")} for r in rows]
    hi = rows[0]  # highest precision that meets the targets (formats are listed high to low)
    if sc0.objective == "latency":
        fastest = min(rows, key=lambda r: r["tpot_p95_ms"])
        if fastest is hi:
            text = (f"{hi['weights']} is both the highest precision that meets the targets and the fastest "
                    f"(TPOT p95 {hi['tpot_p95_ms']:.1f} ms)")
            return {"topic": "quantization", "recommendation": text, "alternatives": alts}
        text = (f"{fastest['weights']} gives TPOT p95 {fastest['tpot_p95_ms']:.1f} ms vs {hi['tpot_p95_ms']:.1f} ms "
                f"with {hi['weights']} ({hi['tpot_p95_ms'] / fastest['tpot_p95_ms']:.2f}x faster); "
                f"{best['weights']} is the highest precision that meets the targets")
    else:
        cheapest = min(rows, key=lambda r: (r["gpus"], rows.index(r)))
        if cheapest["gpus"] < hi["gpus"]:
            text = (f"{cheapest['weights']} weights need {cheapest['gpus']} x {spec.id} vs {hi['gpus']} with "
                    f"{hi['weights']} ({1 - cheapest['gpus'] / hi['gpus']:.0%} fewer devices)")
        else:
            text = (f"{hi['weights']} already meets the targets with {hi['gpus']} x {spec.id}; lower precision saves "
                    "no device at this rate")
    return {"topic": "quantization", "recommendation": text, "alternatives": alts}


def _batch(P, spec, c, best) -> dict:
    sm = P._engine(spec, c)
    st = P.st
    ctx = st.prompt_mean + st.output_mean / 2
    b_max = max(1, min(1024, int(c.pool_tokens // (st.prompt_mean + st.output_mean))))
    bs = np.unique(np.concatenate([2 ** np.arange(0, 11), [b_max]]).astype(int))
    bs = bs[bs <= b_max]
    step = np.array([sm.decode_time(int(b), b * ctx) for b in bs])
    tput = bs / step
    from .static_batching import knee_batch  # the one knee definition (Kleinrock's power B / step^2)

    knee = knee_batch(bs, step)
    allowed = bs[step * 1e3 <= P.sc.tpot_p95_ms]
    b_slo = int(allowed.max()) if len(allowed) else 0
    table = [{"batch": int(b), "step_ms": float(s * 1e3), "output_tokens_per_s": float(t)}
             for b, s, t in zip(bs, step, tput)]
    k = list(bs).index(knee)
    text = (f"decode knee at batch {knee} ({tput[k]:,.0f} tok/s at {step[k] * 1e3:.1f} ms/step vs "
            f"{tput[0]:,.0f} tok/s at batch 1); the TPOT target allows batch <= {b_slo} at the mean context; "
            f"max_num_seqs {best['max_num_seqs']}; simulated: {best['mean_running']:.1f} sequences running on "
            f"average (Little's law, over the whole time), {best['mean_batch_busy']:.1f} while the engine is busy")
    return {"topic": "batch size", "recommendation": text, "knee_batch": knee, "tpot_limited_batch": b_slo,
            "table": table}


def _chunked(P, spec, c, best) -> dict:
    budget, on = P._sched(spec)
    if on:  # the engine chunks already (vLLM V1, SGLang)
        return {"topic": "chunked prefill",
                "recommendation": f"chunked prefill is the engine's default here ({budget} tokens/step): the plan "
                                  "simulated it", "ttft_p95_ms": [best["ttft_p95_ms"]] * 2,
                "tpot_p95_ms": [best["tpot_p95_ms"]] * 2}
    ok, why, s = P.run(spec, c, best["replicas"], best["max_num_seqs"], chunked=True)
    P.rows[-1]["status"] = "alternative"
    t0, p0 = best["ttft_p95_ms"], best["tpot_p95_ms"]
    t1, p1 = s["ttft_ms"]["p95"], s["tpot_ms"]["p95"]
    verdict = "meets" if ok else f"misses ({why})"
    return {"topic": "chunked prefill",
            "recommendation": (f"chunked prefill (budget {budget} tokens/step): TTFT p95 {t0:,.0f} -> {t1:,.0f} ms, "
                               f"TPOT p95 {p0:.1f} -> {p1:.1f} ms; it {verdict} the targets"),
            "ttft_p95_ms": [t0, t1], "tpot_p95_ms": [p0, p1]}


def _flash(P, spec, best) -> dict:
    from .kv_memory import attention_memory_table

    p = P.st.prompt_p99
    df = attention_memory_table(P.m, spec, [p], weights=best["weights"], efficiency=P.eff)
    r = df.iloc[0]
    from ..ops import weight_bytes
    from .plan import _format_name

    tp = best["tp"] or 1
    need = (weight_bytes(P.m, _format_name(spec, best["weights"])[0]) / 1e9 + r["peak_activations_gb_no_flash"]) / tp
    fits = "does not fit" if need > spec.usable_capacity_gb else "fits"
    return {"topic": "FlashAttention",
            "recommendation": (f"without FlashAttention the p99 prompt ({p:,} tokens) materializes "
                               f"{r['score_matrix_gb']:.2f} GB of attention scores ({fits} next to the weights) "
                               f"and its prefill takes {r['slowdown_without_flash']:.2f}x as long"),
            "score_matrix_gb": float(r["score_matrix_gb"]), "slowdown": float(r["slowdown_without_flash"])}


def _paged(P, c) -> dict:
    from .kv_memory import contiguous_vs_paged

    r = contiguous_vs_paged(P.st.lengths, P.st.length_max, 16, c.pool_tokens)
    gain = r["paged_sequences_fit"] / max(r["contiguous_sequences_fit"], 1)
    return {"topic": "paged KV",
            "recommendation": (f"paged KV (16-token blocks) uses {r['paged_utilization']:.1%} of what it reserves vs "
                               f"{r['contiguous_utilization']:.1%} contiguous at the longest request "
                               f"({r['max_len']:,} tokens): {r['paged_sequences_fit']:,} vs "
                               f"{r['contiguous_sequences_fit']:,} sequences in the pool ({gain:.1f}x)"),
            **{k: r[k] for k in ("paged_utilization", "contiguous_utilization", "paged_sequences_fit",
                                 "contiguous_sequences_fit")}}


def _speculative(P, spec, best) -> dict:
    from .speculative import best_gamma, draft_candidates

    drafts = draft_candidates(P.m)
    if not drafts:
        return {"topic": "speculative decoding",
                "recommendation": (f"no catalog model shares {P.m.name}'s vocabulary ({P.m.vocab_size}) at <= 1/4 of "
                                   "its active parameters; no draft to evaluate (add one to the catalog)")}
    ctx = int(P.st.prompt_mean + P.st.output_mean / 2)
    out = []
    # the decode batch a draft would run at: the simulated mean running sequences while the engine is busy
    for batch in sorted({1, max(1, int(round(best["mean_batch_busy"] or 1)))}):
        r = best_gamma(P.m, drafts[0], spec, 0.7, weights=best["weights"], context=ctx, batch=batch, efficiency=P.eff)
        out.append(r)
    r1 = out[0]
    if r1["speedup"] is None:  # target and draft do not fit one device: no speed-up to quote
        return {"topic": "speculative decoding",
                "recommendation": f"draft {r1['draft']}: {r1['verdict']} on one {spec.id}; not evaluated "
                                  "(a draft model is timed on one device)",
                "results": [{k: r[k] for k in ("draft", "gamma", "batch", "speedup", "breakeven_alpha",
                                               "expected_tokens_per_step")} for r in out]}
    be = "never pays off" if r1["breakeven_alpha"] is None else f"breaks even at acceptance {r1['breakeven_alpha']:.2f}"
    text = (f"draft {r1['draft']}: at acceptance 0.7, gamma {r1['gamma']}: {r1['speedup']:.2f}x decode speed-up at "
            f"batch 1 ({be})")
    if len(out) > 1 and out[1]["speedup"] is not None:
        r2 = out[1]
        text += f"; {r2['speedup']:.2f}x at the simulated mean batch {r2['batch']} (while busy)"
    return {"topic": "speculative decoding", "recommendation": text,
            "results": [{k: r[k] for k in ("draft", "gamma", "batch", "speedup", "breakeven_alpha",
                                           "expected_tokens_per_step")} for r in out]}


def recommendations(P, specs, best: dict) -> list[dict]:
    from ..hardware import load_hardware
    from .plan import _format_name

    spec = next((s for s in specs if s.id == best["hardware"]), None) or load_hardware(best["hardware"])
    fmt, unit = _format_name(spec, best["weights"])
    c = P.candidate(spec, fmt, unit, best["tp"], best["pp"])
    recs = []
    for fn in (lambda: _quantization(P, spec, best), lambda: _batch(P, spec, c, best),
               lambda: _chunked(P, spec, c, best), lambda: _flash(P, spec, best), lambda: _paged(P, c),
               lambda: _speculative(P, spec, best)):
        try:
            recs.append(fn())
        except PlannerError as exc:
            recs.append({"topic": "error", "recommendation": str(exc)})
    return recs
