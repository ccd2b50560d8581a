"""Decode latency and throughput against batch size, up to the largest batch that fits, with the knee (the one
definition: `planner.ui_data.find_knee`) and each device's memory limit marked."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from planner import ui_data as ud

from ..common import show_chart, Context, cached_batch_sweep, device_colors, guarded, legend_below, show_table


def render(ctx: Context) -> None:
    inp = ctx.inputs
    frames, knees, limits = [], [], []
    for ref, e in zip(ctx.refs, ctx.estimates):
        with guarded(f"batch sweep on {e.hardware}"):
            df = cached_batch_sweep(inp.model_ref, ref, inp.weights, inp.kv, inp.prompt, inp.output, inp.eff, inp.tp)
            frames.append(df)
            fit = df[df["fits"]]
            k = ud.find_knee(df)
            if not fit.empty:
                limits.append({"hardware": e.hardware, "batch": int(fit["batch"].max()),
                               "label": f"max {int(fit['batch'].max())}"})
            if k:
                knees.append({**k, "label": f"knee {k['batch']}"})
                st.caption(f"{e.hardware}: knee at batch {k['batch']} (largest requests/s per second of latency): "
                           f"{k['tpot_ms']:,.2f} ms per token, {k['decode_tok_s_total']:,.0f} tok/s total; "
                           f"largest batch that fits: {int(fit['batch'].max()):,}")
            else:
                st.caption(f"{e.hardware}: no batch fits at prompt {inp.prompt:,} + output {inp.output:,}")
    if not frames:
        return
    df = pd.concat(frames, ignore_index=True)
    colors = device_colors(ctx)
    x = alt.X("batch:Q", title="batch size (sequences, log scale)", scale=alt.Scale(type="log", base=2))
    tip = [alt.Tooltip("hardware:N", title="device"), alt.Tooltip("batch:Q"),
           alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=",.3f"),
           alt.Tooltip("decode_tok_s_total:Q", title="tok/s total", format=",.1f"),
           alt.Tooltip("total_gb:Q", title="memory (GB)", format=",.2f")]
    ok = df[df["fits"]]
    color = alt.Color("hardware:N", title="device", scale=colors, legend=legend_below("device"))
    lat = alt.Chart(ok).mark_line().encode(x=x, y=alt.Y("tpot_ms:Q", title="time per output token (ms)"),
                                          color=color, tooltip=tip)
    thr = alt.Chart(ok).mark_line().encode(x=x, y=alt.Y("decode_tok_s_total:Q", title="total decode throughput "
                                                                                    "(tok/s)"),
                                          color=color, tooltip=tip)
    layers_l, layers_t = [lat], [thr]
    if knees:
        kdf = pd.DataFrame(knees)
        pts = alt.Chart(kdf).mark_point(size=160, filled=True, shape="diamond").encode(
            x="batch:Q", y="decode_tok_s_total:Q", color=alt.Color("hardware:N", scale=colors, legend=None),
            tooltip=[alt.Tooltip("hardware:N", title="device"), alt.Tooltip("batch:Q", title="knee batch"),
                     alt.Tooltip("decode_tok_s_total:Q", title="tok/s total", format=",.1f")])
        layers_t += [pts, pts.mark_text(dy=-12, fontWeight="bold").encode(text="label:N")]
    if limits:
        ldf = pd.DataFrame(limits)
        rule = alt.Chart(ldf).mark_rule(strokeDash=[4, 3]).encode(
            x="batch:Q", color=alt.Color("hardware:N", scale=colors, legend=None),
            tooltip=[alt.Tooltip("hardware:N", title="device"),
                     alt.Tooltip("batch:Q", title="largest batch that fits")])
        layers_l.append(rule)
        layers_t.append(rule)
    title = f"prompt {inp.prompt:,}, output {inp.output:,}; dashed rule: the largest batch that fits"
    if ok.empty:  # two blank charts say nothing: say why instead
        st.info(f"No batch fits on any selected device at prompt {inp.prompt:,} + output {inp.output:,}: nothing "
                "to chart (see the Memory section for what does not fit).")
    else:
        show_chart(alt.layer(*layers_l).properties(title=f"Time per output token vs batch ({title})", height=280))
        show_chart(alt.layer(*layers_t).properties(title="Total decode throughput vs batch (diamond: the knee)",
                                                        height=280))
    rows = sorted(set(ud.BATCH_TABLE_ROWS) | {k["batch"] for k in knees} | {l["batch"] for l in limits})
    tab = ud.batch_table(df, rows)
    show_table(tab.rename(columns={"hardware": "device"}))
