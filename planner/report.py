"""Render an Estimate (or lists of specs/models) as readable text. No arithmetic beyond unit display."""

from __future__ import annotations

from .estimate import Estimate
from .efficiency import dequant_cost_text
from .hardware import DEQUANT_MATVEC_TOKENS
from .quantization import dequant_overhead_for, kernel_format_name
from .units import fmt_bytes, fmt_ms


def _ms(x: float | None) -> str:
    return "-" if x is None else fmt_ms(x)


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _range(lo: float | None, hi: float | None, fmt=_rate) -> str:
    """' (p10-p90 a-b)' when the estimate carries an interval, else ''."""
    return "" if lo is None or hi is None else f" (p10-p90 {fmt(lo)}-{fmt(hi)})"


def estimate_text(e: Estimate) -> str:
    m, kv, p, d, ee = e.memory, e.kv_cache, e.prefill, e.decode, e.end_to_end
    lines = [
        f"{e.model} ({e.params_b:.2f}B params"
        + (f", {e.active_params_b:.2f}B active" if abs(e.active_params_b - e.params_b) > 1e-3 else "")
        + f") on {e.hardware_name if e.tp == 1 else f'{e.tp} x {e.hardware_name}, tensor parallel'} [{e.roofline.unit}]",
        f"weights {e.weights}, KV cache {e.kv_dtype}, batch {e.batch}, prompt {e.prompt}, output {e.output}"
        + ("" if e.flash_attention else ", no FlashAttention"),
        "",
        f"Memory: {m.verdict if m.fits else 'DOES NOT FIT -- ' + m.verdict.removeprefix('does not fit: ')}",
        f"  weights      {m.weights_gb:10.2f} GB   ({e.weights_source})",
        f"  KV cache     {m.kv_cache_gb:10.2f} GB   ({kv.bytes_per_token:,.0f} B/token, {kv.gb_per_sequence:.3f} GB/sequence)",
        f"  activations  {m.activations_gb:10.2f} GB",
        f"  overhead     {m.overhead_gb:10.2f} GB",
        f"  total        {m.total_gb:10.2f} GB of {m.budget_gb if m.budget_gb is not None else m.capacity_gb:.2f} GB "
        f"{m.budget_label} ({m.device_memory_gb:g} GB on device)",
        f"  largest batch at this context: {m.max_batch_at_context}; longest context at this batch: "
        f"{m.max_context_at_batch:,} tokens, prompt + {e.output} output (model maximum {m.model_max_context:,})",
    ]
    if e.host_pool is not None:
        hp = e.host_pool
        lines.append(f"  host pool    {hp.capacity_gb:10.2f} GB {hp.type or ''} at {hp.bandwidth_gbs:g} GB/s, "
                     f"{hp.link_gbs:g} GB/s link (reported; fit uses device memory)")
    if e.engine.engine != "none":
        lines.append(f"  {e.engine.engine}: KV pool {e.engine.kv_pool_gb:.2f} GB, holds {e.engine.max_concurrency:.1f} "
                     f"sequences of {e.prompt + e.output} tokens ({e.engine.rule})")
    lines += ["", "Latency" + ("" if m.fits else " (not shown: the configuration does not fit)")]
    if m.fits:
        lines += [
            f"  TTFT (prefill)          {_ms(p.latency_ms):>10}   {_rate(p.tokens_per_s)} prompt tok/s, {p.bound} bound"
            + _range(p.latency_ms_low, p.latency_ms_high, _ms),
            *([f"  TTFT via its server     {_ms(p.server_ttft_ms):>10}   + {p.request_path_ms:g} ms request path of "
               f"{e.runtime}'s OpenAI server (HTTP, chat template, tokenizer, scheduler; measured)"]
              if p.server_ttft_ms is not None else []),
            *([f"  TTFT holds a decode step {_ms(p.first_token_step_ms):>9}   {e.runtime} samples the first token in a "
               + (f"decode step after the prefill of {e.prompt - 1:,} prompt tokens" if e.prompt > 1 else
                  "decode step (a 1-token prompt has nothing to prefill)")]
              if p.first_token_step_ms is not None else []),
            f"  TPOT (mean)             {_ms(d.latency_ms_per_token):>10}   "
            + (f"first {_ms(d.latency_ms_first)}, last {_ms(d.latency_ms_last)}, " if e.output > 1 else
               "one decode step (none runs after the 1 output token), ")
            + f"{d.bound} bound"
            + _range(d.latency_ms_per_token_low, d.latency_ms_per_token_high, _ms),
            f"  decode tok/s            {_rate(d.tokens_per_s_per_sequence):>10} per sequence, "
            f"{_rate(d.tokens_per_s_total)} total"
            + _range(d.tokens_per_s_per_sequence_low, d.tokens_per_s_per_sequence_high),
            f"  end-to-end              {ee.latency_s:>9.3f}s   for {e.output} output tokens"
            + _range(ee.latency_s_low, ee.latency_s_high, lambda x: f"{x:.3f}s"),
            f"  decode reads {fmt_bytes(d.bytes_per_step)} per step "
            f"(weights {fmt_bytes(d.weight_bytes_per_step)}, KV {fmt_bytes(d.kv_bytes_per_step)})",
        ]
    r = e.roofline
    lines += [
        "",
        f"Roofline: {r.peak_tflops['matmul']:g} TFLOP/s ({r.dtypes['matmul']}"
        + (f"; {r.peak_note}" if r.peak_note else "") + f") / {r.bandwidth_gbs:g} GB/s -> ridge "
        f"{r.ridge_flop_per_byte:.0f} FLOP/byte",
        f"Efficiency: bandwidth {e.efficiency.bandwidth_fraction:.2f}, compute {e.efficiency.compute_fraction:.2f}"
        + (f" ({e.efficiency.format_compute_fraction[e.weights]:.2f} for {e.weights} GEMMs)"
           if e.weights in e.efficiency.format_compute_fraction else "")
        + (f" ({e.efficiency.format_compute_fraction[e.expert_weights]:.2f} for the {e.expert_weights} expert GEMMs)"
           if e.expert_weights in e.efficiency.format_compute_fraction else "")
        + (f", {dq_text}" if (dq_text := dequant_cost_text(e.efficiency, e.weights)) else "")
        + (f", decode attention's extra K/V passes at {e.efficiency.kv_reread_share:.2f} of a DRAM pass"
           if e.efficiency.kv_reread_share != 1.0 and (not e.flash_attention or e.efficiency.kv_read_per_query_head)
           else "")
        + (f", GEMM regime from {e.efficiency.kernel_library}'s measured kernels"
           if e.efficiency.kernel_library and r.gemm_regime else "") + ", "
        f"{e.efficiency.kernel_overhead_us:g} us/op, {e.efficiency.step_overhead_ms:g} ms/step  [{e.efficiency.source}]",
    ]
    if _sm_capped(e):
        scale = r.effective_bandwidth_gbs / (r.sm_count * e.efficiency.sm_bandwidth_gbs)
        lines.append(f"Bandwidth capped at {r.effective_bandwidth_gbs:.0f} GB/s = {r.sm_count} SMs x "
                     f"{e.efficiency.sm_bandwidth_gbs:g} GB/s per SM (the runtime's kernels)"
                     + (f" x {scale:.2f} (this GPU's SMs stream {scale:.2f}x the bytes of those the cap was fitted "
                        "on: regimes.sm_streaming_scale)" if scale > 1 + 1e-6 else "")
                     + f", {r.effective_bandwidth_gbs / r.bandwidth_gbs * 100:.0f}% of the datasheet")
    if e.intervals is not None:
        if e.runtime is None:
            lines.append("Ranges: p10-p90 of measured / predicted speed of the kind defaults against published "
                         "measurements (hardware_specs/defaults/intervals.yaml); name --runtime for a runtime's "
                         "own, tighter range")
        else:
            lines.append(f"Ranges: p10-p90 of measured / predicted speed for {e.intervals.runtime} on "
                         f"{e.intervals.hardware_class} ({e.intervals.source})")
    return "\n".join(lines)  # warnings go to stderr (planner/cli.py), once, in every output mode


def _sm_capped(e: Estimate) -> bool:
    """The SM cap (Efficiency.sm_bandwidth_gbs) is what limits the effective bandwidth of this estimate."""
    r = e.roofline
    return (e.efficiency.sm_bandwidth_gbs > 0 and r.sm_count > 0 and r.effective_bandwidth_gbs
            < r.bandwidth_gbs * e.efficiency.bandwidth_fraction * (1 - 1e-9))


# weight ops explain leaves out of "the other weight GEMMs": the routed experts themselves, the embedding gather and
# the last position's LM head
NOT_OTHER_GEMMS = ("moe_experts", "embedding", "lm_head")


def _compute_share(ops, peak_tflops: float) -> float:
    """flops / (compute time x peak) over the ops' OpReports (flops and compute_ms are already x count)."""
    return sum(o.flops for o in ops) / (sum(o.compute_ms for o in ops) / 1e3) / (peak_tflops * 1e12)


def explain(e: Estimate) -> dict:
    """Share of the datasheet peaks each predicted phase implies (planner.roofline.implied_shares): prefill over
    its flops and bytes, one mean decode step over its ops' flops and bytes; per device under tensor parallelism."""
    from .roofline import implied_shares

    r, p, d = e.roofline, e.prefill, e.decode
    out = {"peak_tflops": r.peak_tflops["matmul"], "bandwidth_gbs": r.bandwidth_gbs}
    if p.latency_ms:
        c, b = implied_shares(p.flops, p.bytes, p.latency_ms / 1e3, r.peak_tflops["matmul"], r.bandwidth_gbs)
        out["prefill"] = {"compute_share": c, "bandwidth_share": b}
        experts = [o for o in p.ops if o.name == "moe_experts" and o.compute_ms > 0]
        if experts:  # a MoE model: its routed-expert GEMMs' own share beside the other weight GEMMs'
            others = [o for o in p.ops if o.weight_bytes > 0 and o.name not in NOT_OTHER_GEMMS and o.compute_ms > 0]
            out["prefill"]["expert_gemm_compute_share"] = _compute_share(experts, r.peak_tflops["matmul"])
            out["prefill"]["other_gemm_compute_share"] = (_compute_share(others, r.peak_tflops["matmul"])
                                                          if others else None)
    if d.latency_ms_per_token:
        flops = sum(o.flops for o in d.ops)  # OpReport.flops is already x count
        c, b = implied_shares(flops, d.bytes_per_step, d.latency_ms_per_token / 1e3, r.peak_tflops["matmul"],
                              r.bandwidth_gbs)
        out["decode"] = {"compute_share": c, "bandwidth_share": b}
    return out


def mixed_input_note(e: Estimate) -> str:
    """One sentence naming the weights that run mixed-input weight-only kernels and the bandwidth they stream at
    (RooflineReport.weight_bandwidth_share < 1), '' where none do; the text report and the web UI print it."""
    share = e.roofline.weight_bandwidth_share
    if not share < 1.0:
        return ""
    return (f"Mixed-input (Marlin-style) kernels run the {e.roofline.mixed_input_weights}: the 16-bit GEMM curve, "
            f"their bytes streamed at {share:.2f} x the engine's bandwidth "
            f"({e.roofline.effective_bandwidth_gbs * share:,.0f} GB/s; weight_only_bandwidth_share).")


def explain_text(e: Estimate) -> str:
    x = explain(e)
    which = "the peaks the runtime's kernels reach" if e.roofline.peak_note else "the datasheet peaks"
    lines = [f"Implied share of {which} ({x['peak_tflops']:g} TFLOP/s, {x['bandwidth_gbs']:g} GB/s):"]
    for phase in ("prefill", "decode"):
        if phase in x:
            lines.append(f"  {phase:8s} compute {x[phase]['compute_share'] * 100:5.1f}%   bandwidth "
                         f"{x[phase]['bandwidth_share'] * 100:5.1f}%")
    if (xs := x.get("prefill", {}).get("expert_gemm_compute_share")) is not None:
        other = x["prefill"].get("other_gemm_compute_share")
        lines.append(f"  prefill's routed-expert GEMMs compute at {xs * 100:.1f}% of the peak"
                     + (f", its other weight GEMMs at {other * 100:.1f}%" if other is not None else "")
                     + (f" (tensor parallelism splits each expert {e.tp} ways: narrower grouped GEMMs, "
                        "planner/regimes.py grouped_width_efficiency)" if e.tp > 1 else "") + ".")
    lines.append("  A measurement slower than predicted reaches proportionally less: measured/predicted x these.")
    if note := mixed_input_note(e):
        lines.append("  " + note)
    kname = kernel_format_name(e.weights)  # the format whose kernels the weights run (MXFP4_MOE: q8_0's)
    dq, src = dequant_overhead_for(e.efficiency.dequant_overhead, kname)
    if dq and e.decode is not None and e.decode.bound == "compute":
        lines.append(f"  Decode is compute bound on dequantization (not in the compute share, 2 FLOP per weight): "
                     + (f"{kname}'s fitted cost" if src == kname else f"{src}'s fitted cost (a lower bound "
                        f"for {kname})") + f" adds {dq:.2f}x the GEMM time"
                     + (f" per token up to {DEQUANT_MATVEC_TOKENS} tokens" if e.efficiency.dequant_tile_tokens
                        else "") + ".")
    return "\n".join(lines)


def ops_text(e: Estimate, stage: str) -> str:
    rep = e.prefill if stage == "prefill" else e.decode
    out = [f"{stage} operators:", f"  {'op':22s} {'x':>3s} {'GFLOP':>10s} {'MB':>10s} {'FLOP/B':>8s} {'time':>10s}  bound"]
    for o in rep.ops:
        ai = "-" if o.intensity_flop_per_byte is None else f"{o.intensity_flop_per_byte:.1f}"
        out.append(f"  {o.name:22s} {o.count:3d} {o.flops / 1e9:10.2f} {o.bytes / 1e6:10.1f} {ai:>8s} "
                   f"{fmt_ms(o.time_ms):>10s}  {o.bound}")
    return "\n".join(out)


def table(rows: list[dict], columns: list[str]) -> str:
    """A plain aligned text table."""
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) if rows else len(c) for c in columns}
    head = "  ".join(c.ljust(widths[c]) for c in columns)
    body = ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join([head, "  ".join("-" * widths[c] for c in columns), *body])


def comparison_text(estimates: list[Estimate]) -> str:
    """One row per device: the same model and workload side by side (latencies '-' where it does not fit)."""
    e0 = estimates[0]
    head = (f"{e0.model} ({e0.params_b:.2f}B params), weights {e0.weights}, KV {e0.kv_dtype}, batch {e0.batch}, "
            f"prompt {e0.prompt}, output {e0.output}" + ("" if e0.tp == 1 else f", tensor parallel x{e0.tp}"))
    rows = []
    for e in estimates:
        m, d = e.memory, e.decode
        rows.append({
            "hardware": e.hardware, "unit": e.roofline.unit, "fits": "yes" if m.fits else "NO",
            "memory GB": f"{m.total_gb:.1f} / {m.capacity_gb:.0f}", "TTFT": _ms(e.prefill.latency_ms),
            "TPOT": _ms(d.latency_ms_per_token), "tok/s/seq": _rate(d.tokens_per_s_per_sequence),
            "tok/s total": _rate(d.tokens_per_s_total),
            "tok/s p10-p90": "-" if d.tokens_per_s_total_low is None
            else f"{d.tokens_per_s_total_low:,.0f}-{d.tokens_per_s_total_high:,.0f}",
            "bound (prefill/decode)": f"{e.prefill.bound}/{d.bound}", "max batch": m.max_batch_at_context})
    return head + "\n\n" + table(rows, list(rows[0]))
