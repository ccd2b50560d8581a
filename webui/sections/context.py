"""TTFT, decode speed and memory against context length, with each device's longest context marked."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from ..common import show_chart, Context, cached_context_sweep, device_colors, guarded, legend_below, show_table


def render(ctx: Context) -> None:
    inp = ctx.inputs
    frames, limits = [], []
    for ref, e in zip(ctx.refs, ctx.estimates):
        with guarded(f"context sweep on {e.hardware}"):
            frames.append(cached_context_sweep(inp.model_ref, ref, inp.weights, inp.kv, inp.batch, inp.prompt,
                                               inp.output, inp.eff, inp.tp))
            if e.memory.max_context_at_batch > 0:  # the rule stops at the model's maximum (it refuses longer)
                limits.append({"hardware": e.hardware, "capacity_gb": e.memory.capacity_gb,
                               "context": min(e.memory.max_context_at_batch,
                                              e.memory.model_max_context or e.memory.max_context_at_batch)})
    if not frames:
        return
    df = pd.concat(frames, ignore_index=True)
    colors = device_colors(ctx)
    x = alt.X("context:Q", title="context (prompt + output tokens, log scale)", scale=alt.Scale(type="log", base=2))
    color = alt.Color("hardware:N", title="device", scale=colors, legend=legend_below("device"))
    tip = [alt.Tooltip("hardware:N", title="device"), alt.Tooltip("context:Q", title="context (tokens)"),
           alt.Tooltip("ttft_ms:Q", title="TTFT (ms)", format=",.2f"),
           alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=",.3f"),
           alt.Tooltip("total_gb:Q", title="memory (GB)", format=",.2f"), alt.Tooltip("fits:N")]
    ok = df[df["fits"]]
    rule = None
    if limits:
        rule = alt.Chart(pd.DataFrame(limits)).mark_rule(strokeDash=[4, 3]).encode(
            x="context:Q", color=alt.Color("hardware:N", scale=colors, legend=None),
            tooltip=[alt.Tooltip("hardware:N", title="device"),
                     alt.Tooltip("context:Q", title="longest context that fits (tokens)", format=",")])

    def chart(data, y, title):
        line = alt.Chart(data).mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tip)
        return alt.layer(line, rule) if rule is not None else line

    sub = f"batch {inp.batch}, output {inp.output:,}; dashed rule: each device's longest context that fits"
    if ok.empty:
        st.info(f"No context fits on any selected device at batch {inp.batch}: no time to chart; the memory chart "
                "shows how far each device is from fitting.")
    else:
        show_chart(chart(ok, alt.Y("ttft_ms:Q", title="time to first token (ms, log)", scale=alt.Scale(type="log")),
                         None).properties(title=f"TTFT vs context ({sub})", height=260))
    mem = alt.Chart(df).mark_line(point=True).encode(
        x=x, y=alt.Y("total_gb:Q", title="memory needed per device (GB)"), color=color, tooltip=tip)
    cap = alt.Chart(pd.DataFrame(limits or [{"hardware": e.hardware, "capacity_gb": e.memory.capacity_gb}
                                            for e in ctx.estimates])).mark_rule(color="crimson").encode(
        y="capacity_gb:Q", tooltip=[alt.Tooltip("hardware:N", title="device"),
                                    alt.Tooltip("capacity_gb:Q", title="usable (GB)", format=",.2f")])
    layers = [mem, cap] + ([rule] if rule is not None else [])
    show_chart(alt.layer(*layers).properties(title="Memory vs context (red: usable capacity)", height=260))
    if not ok.empty:
        show_chart(chart(ok, alt.Y("tpot_ms:Q", title="time per output token (ms)"), None).properties(
            title="Time per output token vs context", height=240))
    cols = {"hardware": "device", "context": "context (tokens)", "prompt": "prompt (tokens)", "fits": "fits",
            "total_gb": "memory (GB)", "ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)",
            "tok_s_per_seq": "tok/s per sequence", "decode_tok_s_total": "tok/s total"}
    show_table(df[list(cols)].rename(columns=cols))
