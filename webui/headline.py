"""The first screen: per device the verdict and the five numbers, the smallest setup that fits (one click to apply),
a summary of an uploaded model, and, for two or more devices, the comparison table with a winner per column."""

from __future__ import annotations

import streamlit as st

from planner import ui_data as ud

from .common import (BOUND_HELP, COLUMN_HELP, Context, cached_smallest_setup, esc, fmt_rate, fmt_time_ms,
                     show_table)


def _apply_setup(tp: int, weights: str) -> None:
    st.session_state["tp"] = tp
    st.session_state["weights"] = weights


def render_model_summary(ctx: Context, model) -> None:
    """An uploaded config.json's parse, so the user can confirm it before trusting the numbers."""
    s = ud.model_summary(model)
    st.caption(f"Uploaded model {esc(s['name'])} read as: {s['parameters (B)']:,.2f} B parameters"
               + (f" ({s['active parameters (B)']:,.2f} B active)" if s["MLP"].startswith("MoE") else "")
               + f" · {s['layers']} layers · hidden {s['hidden size']:,} · {esc(s['attention'])} · "
               f"{esc(s['MLP'])} MLP · KV {s['KV per token (fp16, bytes)']:,.0f} bytes per token at fp16 · "
               f"max context {s['max context (tokens)']:,} tokens")


def render_headline(ctx: Context) -> None:
    inp = ctx.inputs
    tp = f" · {inp.tp} GPUs per replica (TP {inp.tp})" if inp.tp > 1 else ""
    st.markdown(f"**{esc(inp.model_name)}** · weights {inp.weights} · KV {inp.kv} · batch {inp.batch} · "
                f"prompt {inp.prompt:,} · output {inp.output:,} tokens{tp}")
    if len(ctx.estimates) >= 2:
        render_comparison(ctx)
    cards = st.container(key="cards")  # on a phone its captions hide (webui/main.py PHONE_CSS)
    for ref, spec, e in zip(ctx.refs, ctx.specs, ctx.estimates):
        h = ud.headline(e)
        with cards, st.container(border=True):
            st.markdown(f"**{esc(h['name'])}** · {esc(h['hardware'])} · {esc(h['unit'])}"
                        + (f" · x{inp.tp}" if inp.tp > 1 else ""))
            if h["fits"]:
                st.success(f"Fits: {h['total_gb']:,.2f} GB of {h['capacity_gb']:,.2f} GB usable "
                           f"({h['spare_gb']:,.2f} GB to spare)")
            else:
                st.error(f"Does not fit: needs {h['total_gb']:,.2f} GB of {h['capacity_gb']:,.2f} GB usable "
                         f"({-h['spare_gb']:,.2f} GB short)")
                _suggest(ctx, ref, spec, e)
            c = st.columns(5)
            c[0].metric(f"VRAM (of {h['capacity_gb']:,.0f} GB)", f"{h['total_gb']:,.1f} GB",
                        help=COLUMN_HELP["memory (GB)"])
            c[1].metric("TTFT", fmt_time_ms(h["ttft_ms"]), help=COLUMN_HELP["TTFT (ms)"])
            c[2].metric("Time per output token", fmt_time_ms(h["tpot_ms"]), help=COLUMN_HELP["TPOT (ms)"])
            c[3].metric("Tokens/s per sequence", fmt_rate(h["tok_s_per_seq"]),
                        help=COLUMN_HELP["tok/s per sequence"])
            c[4].metric("Tokens/s total", fmt_rate(h["tok_s_total"]), help=COLUMN_HELP["tok/s total"])
            notes = [f"prefill {h['prefill_bound']} bound · decode {h['decode_bound']} bound · largest batch at "
                     f"this context: {h['max_batch']:,} · longest context at this batch: {h['max_context']:,} tokens "
                     f"(prompt + output"
                     + (f"; model maximum {h['model_max_context']:,}" if h.get("model_max_context") else "") + ")"]
            if h["server_ttft_ms"] is not None:
                notes.append(f"TTFT through {esc(h['runtime'])}'s OpenAI server: {fmt_time_ms(h['server_ttft_ms'])} "
                             f"(+ {h['request_path_ms']:g} ms request path: HTTP, chat template, tokenizer, "
                             f"scheduler; measured)")
            if h.get("first_token_step_ms") is not None:
                notes.append(f"TTFT holds one decode step ({fmt_time_ms(h['first_token_step_ms'])}): "
                             f"{esc(h['runtime'])} samples the first token in a decode step after the prefill of "
                             f"all prompt tokens but the last")
            if h["range_source"] is not None and h["fits"]:
                (t0, t1), (p0, p1), (r0, r1) = h["ttft_ms_range"], h["tpot_ms_range"], h["tok_s_total_range"]
                if all(v is not None for v in (t0, t1, p0, p1, r0, r1)):
                    notes.append(f"p10–p90 range: TTFT {fmt_time_ms(t0)}–{fmt_time_ms(t1)} · TPOT "
                                 f"{fmt_time_ms(p0)}–{fmt_time_ms(p1)} · tokens/s total {fmt_rate(r0)}–"
                                 f"{fmt_rate(r1)} (measured / predicted spread of {esc(h['range_source'])} against "
                                 f"published benchmarks)")
            st.caption("  \n".join(notes), help=BOUND_HELP)
            for w in e.warnings:
                if not h["fits"] and ("`--" in w or "planner plan" in w):
                    continue  # CLI advice: the page offers the smallest setup (and the capacity plan) instead
                st.warning(esc(w))


def _suggest(ctx: Context, ref: tuple, spec, e) -> None:
    """The smallest setup that fits one node of this device, with a button that applies it to the whole page."""
    inp = ctx.inputs
    s = cached_smallest_setup(inp.model_ref, ref, inp.weights, inp.kv, inp.batch, inp.prompt, inp.output, inp.eff)
    if s is None:
        gpus = ud.node_size(spec)
        where = (f"one {esc(spec.name)}" if gpus == 1 else
                 f"up to {gpus} x {esc(spec.name)} in one node (tensor parallel)")
        st.info(f"Nothing fits {where} for this model at batch {inp.batch} and {inp.prompt + inp.output:,} tokens "
                f"in fp16, fp8, int8 or int4: pick a larger device, a smaller batch or context"
                + (", or see the Capacity plan for pipeline-parallel setups." if gpus > 1 else "."))
        return
    same = s["tp"] == inp.tp and s["weights"] == inp.weights
    if same:
        return
    label = (f"Use {s['tp']} x {spec.id} (TP {s['tp']})" + (f" in {s['weights']}" if s["weights"] != inp.weights
                                                              else ""))
    st.info(f"Smallest setup that fits: {s['tp']} x {esc(spec.name)} (tensor parallel {s['tp']}) with "
            f"{s['weights']} weights: {s['total_gb']:,.2f} GB of {s['capacity_gb']:,.2f} GB per device.")
    st.button(label, key=f"apply_{spec.id}", on_click=_apply_setup, args=(s["tp"], s["weights"]),
              help="Sets the sidebar's GPUs per replica (and format) for every device on the page.")


def render_comparison(ctx: Context) -> None:
    """One row per device, a winner per column (highlighted, and named in the caption)."""
    df, winners = ud.compare_frame(ctx.estimates, ctx.specs, ctx.inputs.tp)
    st.markdown("**Devices side by side**" + (f" (each x{ctx.inputs.tp})" if ctx.inputs.tp > 1 else ""))
    show_table(df)
    if winners:
        st.caption("Best per column: " + " · ".join(f"{col}: {esc(dev)}" for col, dev in winners.items())
                   + ". Cost and energy use the spec's price per device-hour and board power.")
