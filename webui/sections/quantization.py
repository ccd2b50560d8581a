"""The same model and workload in each weight format: memory and decode speed per device."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from planner import ui_data as ud

from ..common import show_chart, FORMAT_HELP, Context, cached_quant, device_colors, guarded, legend_below, show_table


def render(ctx: Context) -> None:
    inp = ctx.inputs
    frames = []
    for ref, e in zip(ctx.refs, ctx.estimates):
        with guarded(f"quantization comparison on {e.hardware}"):
            frames.append(cached_quant(inp.model_ref, ref, inp.kv, inp.batch, inp.prompt, inp.output, inp.eff,
                                       inp.tp))
    if not frames:
        return
    df = pd.concat(frames, ignore_index=True)
    order, colors = list(ud.QUANT_FORMATS), device_colors(ctx)
    tip = [alt.Tooltip("hardware:N", title="device"), alt.Tooltip("format:N"),
           alt.Tooltip("bits_per_weight:Q", title="bits/weight"),
           alt.Tooltip("total_gb:Q", title="memory (GB)", format=",.2f"),
           alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=",.3f"),
           alt.Tooltip("tok_s_per_seq:Q", title="tok/s per sequence", format=",.1f"), alt.Tooltip("fits:N")]
    color = alt.Color("hardware:N", title="device", scale=colors, legend=legend_below("device"))
    mem = alt.Chart(df).mark_bar().encode(
        x=alt.X("format:N", sort=order, title="weight format"), xOffset="hardware:N",
        y=alt.Y("total_gb:Q", title="total memory (GB)"), color=color,
        opacity=alt.condition("datum.fits", alt.value(1.0), alt.value(0.35)), tooltip=tip,
    ).properties(title="Memory per format (faded: does not fit)", height=280)
    fast = df.dropna(subset=["tok_s_per_seq"]) if "tok_s_per_seq" in df else df.iloc[0:0]
    spd = alt.Chart(fast).mark_bar().encode(
        x=alt.X("format:N", sort=order, title="weight format"), xOffset="hardware:N",
        y=alt.Y("tok_s_per_seq:Q", title="decode tok/s per sequence"), color=color, tooltip=tip,
    ).properties(title="Decode speed per format (formats that fit)", height=280)
    c1, c2 = st.columns(2)
    show_chart(mem, c1)
    show_chart(spd, c2)
    show_table(df.rename(columns={
        "hardware": "device", "bits_per_weight": "bits/weight", "weights_gb": "weights (GB)", "total_gb": "total (GB)",
        "ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)", "tok_s_per_seq": "tok/s per sequence",
        "tok_s_total": "tok/s total", "matmul_dtype": "matmul dtype"}),
        help_for={"format": "; ".join(f"{k}: {v}" for k, v in FORMAT_HELP.items() if k in order)})
    st.caption(" · ".join(f"**{k}**: {v}" for k, v in FORMAT_HELP.items() if k in order))
