"""What limits each operator: one overlay roofline for every device (labelled operator points), the per-device
roofline with its dtype roofs, and the per-operator table (FLOPs, bytes, intensity, time, bound) like LLM-Viewer's."""

from __future__ import annotations

import altair as alt
import streamlit as st

from planner import ui_data as ud
from planner.report import mixed_input_note

from ..common import show_chart, BOUND_HELP, Context, device_colors, guarded, legend_below, show_table

LOG = alt.Scale(type="log")


def CORNER(title: str) -> alt.Legend:  # noqa: N802 -- a small legend inside the empty top-left of a roofline
    return alt.Legend(title=title, orient="top-left", fillColor="white", padding=4)


def _point_tip():
    return [alt.Tooltip("hardware:N", title="device"), alt.Tooltip("stage:N"), alt.Tooltip("op:N", title="operator"),
            alt.Tooltip("intensity:Q", title="FLOP/byte", format=",.2f"),
            alt.Tooltip("achieved_tflops:Q", title="achieved TFLOP/s", format=",.2f"), alt.Tooltip("bound:N")]


def render(ctx: Context) -> None:
    colors = device_colors(ctx)
    roofs, points = ud.roofline_overlay(ctx.estimates)
    x = alt.X("intensity:Q", title="arithmetic intensity (FLOP/byte, log)", scale=LOG)
    y = alt.Y("tflops:Q", title="performance (TFLOP/s, log)", scale=LOG)
    lines = alt.Chart(roofs).mark_line(clip=True).encode(
        x=x, y=y, color=alt.Color("hardware:N", title="device", scale=colors, legend=legend_below("device")),
        tooltip=[alt.Tooltip("label:N", title="roof")])
    pts = alt.Chart(points).mark_point(size=70, filled=True).encode(
        x="intensity:Q", y=alt.Y("achieved_tflops:Q"), color=alt.Color("hardware:N", scale=colors, legend=None),
        shape=alt.Shape("stage:N", legend=CORNER("stage")), tooltip=_point_tip())
    dec = ud.cluster_labels(points[points["stage"] == "decode"].drop_duplicates("op"))  # one label per cluster
    labels = alt.Chart(dec).mark_text(align="left", dx=6, dy=-6, fontSize=10, color="#444").encode(
        x="intensity:Q", y="achieved_tflops:Q", text="op:N")
    show_chart(alt.layer(lines, pts, labels).properties(
        title="Roofline overlay: each device's matmul roof and its operators (labels: decode operators)",
        height=400))
    st.caption("Points below the sloped part of a roof are memory bound, under the flat part compute bound. "
               + BOUND_HELP)
    names = [e.hardware for e in ctx.estimates]
    pick = st.selectbox("Operators of", names, key="roofline_device") if len(names) > 1 else names[0]
    spec, e = next((s, e) for s, e in zip(ctx.specs, ctx.estimates) if e.hardware == pick)
    with guarded(f"roofline of {e.hardware}"):
        _device_roofline(spec, e)
        if note := mixed_input_note(e):
            st.caption(note)
        show_table(ud.operator_table(e), help_for={"bound": BOUND_HELP})
        st.caption(f"Prefill of {e.batch} x {e.prompt:,} tokens and the first decode step at context {e.prompt:,}; "
                   f"GFLOP, MB and time are over all layers of the model.")


def _device_roofline(spec, e) -> None:
    roofs, points, ridge = ud.roofline_frames(e, spec)
    x = alt.X("intensity:Q", title="arithmetic intensity (FLOP/byte, log)", scale=LOG)
    y = alt.Y("tflops:Q", title="performance (TFLOP/s, log)", scale=LOG)
    lines = alt.Chart(roofs).mark_line(clip=True).encode(
        x=x, y=y, color=alt.Color("roof:N", title="roof (dtype peak)", sort=list(roofs["roof"].unique()),
                                  scale=alt.Scale(scheme="dark2"),
                                  legend=alt.Legend(title="roof (dtype peak)", orient="bottom", columns=1,
                                                    labelLimit=300)),
        strokeDash=alt.StrokeDash("kind:N", title="roof kind", legend=CORNER("roof kind")),
        tooltip=[alt.Tooltip("roof:N"), alt.Tooltip("kind:N")])
    rp = alt.Chart(ridge).mark_point(shape="triangle-up", size=140, filled=True, color="black").encode(
        x="intensity:Q", y="tflops:Q", tooltip=[alt.Tooltip("label:N", title="ridge point")])
    rt = rp.mark_text(dy=-14, align="left", dx=6).encode(text="label:N")
    ops = alt.Chart(points).mark_point(size=90, filled=True).encode(
        x="intensity:Q", y=alt.Y("achieved_tflops:Q"), shape=alt.Shape("stage:N", legend=None),
        color=alt.Color("stage:N", title="operator stage", scale=alt.Scale(range=["#1f77b4", "#ff7f0e"]),
                        legend=CORNER("operator stage")),
        tooltip=[alt.Tooltip("stage:N"), alt.Tooltip("op:N", title="operator"), alt.Tooltip("layers:Q"),
                 alt.Tooltip("gflop:Q", title="GFLOP (all layers)", format=",.3f"),
                 alt.Tooltip("mb:Q", title="MB moved (all layers)", format=",.2f"),
                 alt.Tooltip("intensity:Q", title="FLOP/byte", format=",.2f"),
                 alt.Tooltip("achieved_tflops:Q", title="achieved TFLOP/s", format=",.2f"),
                 alt.Tooltip("time_ms:Q", title="time (ms)", format=",.4f"), alt.Tooltip("bound:N")])
    labels = alt.Chart(ud.cluster_labels(points)).mark_text(align="left", dx=7, dy=4, fontSize=10, color="#333").encode(
        x="intensity:Q", y="achieved_tflops:Q", text="op:N")  # operators that coincide share one label
    chart = alt.layer(lines, rp, rt, ops, labels).resolve_scale(color="independent").properties(
        title=f"Roofline: {e.hardware_name} ({e.roofline.bandwidth_gbs:g} GB/s), prefill and decode operators",
        height=420)
    show_chart(chart)
