"""Memory by component against each device's usable capacity (bars sized to stay readable with one device)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from planner import ui_data as ud

from ..common import show_chart, Context, legend_below, show_table

ORDER = ["weights", "KV cache", "activations", "overhead"]


def render(ctx: Context) -> None:
    mf = ud.memory_frame(ctx.estimates)
    n = mf["hardware"].nunique()
    top = float(max(mf["total_gb"].max(), mf["capacity_gb"].max())) * 1.08
    x = alt.X("sum(gb):Q", title="memory (GB, 1e9 bytes)", scale=alt.Scale(domain=[0, top]))
    bars = alt.Chart(mf).mark_bar(size=34).encode(
        y=alt.Y("hardware:N", title=None, sort=None), x=x,
        color=alt.Color("component:N", sort=ORDER, scale=alt.Scale(domain=ORDER), legend=legend_below("component")),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("hardware:N", title="device"), alt.Tooltip("component:N"),
                 alt.Tooltip("gb:Q", title="GB", format=",.2f")])
    caps = mf.drop_duplicates("hardware").assign(label=lambda d: d["capacity_gb"].map(lambda v: f"usable {v:,.2f} GB"))
    cap = alt.Chart(caps).mark_tick(color="crimson", thickness=3, size=48).encode(
        y=alt.Y("hardware:N", sort=None), x=alt.X("capacity_gb:Q"),
        tooltip=[alt.Tooltip("hardware:N", title="device"),
                 alt.Tooltip("capacity_gb:Q", title="usable capacity (GB)", format=",.2f"),
                 alt.Tooltip("total_gb:Q", title="needed (GB)", format=",.2f")])
    txt = alt.Chart(caps).mark_text(color="crimson", align="right", dx=-4, dy=-22, fontSize=11).encode(
        y=alt.Y("hardware:N", sort=None), x="capacity_gb:Q", text="label:N")
    show_chart(alt.layer(bars, cap, txt).properties(
        title="Memory by component against usable capacity (red tick)", height=max(140, 70 * n + 30)))
    rows = [{"device": e.hardware, "weights (GB)": e.memory.weights_gb, "KV cache (GB)": e.memory.kv_cache_gb,
             "activations (GB)": e.memory.activations_gb, "overhead (GB)": e.memory.overhead_gb,
             "total (GB)": e.memory.total_gb, "usable (GB)": e.memory.capacity_gb, "fits": e.memory.fits,
             "largest batch at this context": e.memory.max_batch_at_context,
             "longest context at this batch (tokens)": e.memory.max_context_at_batch,
             "KV per token (bytes)": e.kv_cache.bytes_per_token} for e in ctx.estimates]
    show_table(pd.DataFrame(rows))
