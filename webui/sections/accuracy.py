"""Predicted against published measurements: one metric per chart (one unit per axis), which devices have
measurements, and the held-out checks."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from planner import ui_data as ud

from planner.errors import PlannerError

from ..common import show_chart, Context, esc, legend_below, show_table
from .validation import coverage_line

METRICS = {"decode_tok_s_per_seq": "decode tokens/s per sequence", "prefill_tok_s": "prefill tokens/s",
           "throughput_tok_s": "total output tokens/s", "ttft_ms": "time to first token (ms)"}


@st.cache_data(show_spinner=False)
def cached_accuracy():
    return ud.accuracy_results()


def render(ctx: Context) -> None:
    res, checks, default_cov = cached_accuracy()
    st.markdown(f"**Predicted against published measurements** (`data/measured_public.csv` and "
                f"`data/measured_serving.csv`: {res['source'].nunique()} sources, {res['runtime'].nunique()} engines "
                f"on {res['hardware'].nunique()} devices; each row predicted by engine profiles fitted without any "
                "row of its source). Regenerate with `planner accuracy`.")
    measured = sorted(res["hardware"].dropna().unique())
    line, ok = coverage_line(measured, [e.hardware for e in ctx.estimates])
    (st.caption if ok else st.info)(line)
    present = [m for m in METRICS if m in set(res["metric"])] + sorted(set(res["metric"]) - set(METRICS))
    metric = st.selectbox("Metric", present, key="accuracy_metric", format_func=lambda m: METRICS.get(m, m))
    unit = METRICS.get(metric, metric)
    data = res[res["metric"] == metric].assign(predicted=lambda d: d["pred_runtime"])
    data = data[(data["measured"] > 0) & (data["predicted"] > 0)]
    data = data.assign(selected=data["hardware"].isin([e.hardware for e in ctx.estimates]))
    if data.empty:
        st.info("no rows for this metric")
    else:
        lo = float(min(data["measured"].min(), data["predicted"].min())) / 1.5
        hi = float(max(data["measured"].max(), data["predicted"].max())) * 1.5
        diag = alt.Chart(pd.DataFrame({"measured": [lo, hi], "predicted": [lo, hi]})).mark_line(
            color="gray", strokeDash=[4, 4]).encode(x="measured:Q", y="predicted:Q")
        pts = alt.Chart(data).mark_point(filled=True, size=36, opacity=0.8).encode(
            x=alt.X("measured:Q", scale=alt.Scale(type="log"), title=f"measured {unit} (log)"),
            y=alt.Y("predicted:Q", scale=alt.Scale(type="log"), title=f"predicted {unit} (log)"),
            color=alt.Color("source:N", legend=legend_below("source")),
            shape=alt.Shape("split:N", legend=legend_below("split")),
            tooltip=["source", "hardware", "model", "weights", alt.Tooltip("measured:Q", format=",.2f"),
                     alt.Tooltip("predicted:Q", format=",.2f"), "split"])
        show_chart((diag + pts).properties(title=f"llm-planner vs published {unit} (log-log; dashed: y = x)",
                                                height=400))
    show_table(pd.DataFrame(checks).rename(columns={"check": "check", "value": "held-out %", "limit": "limit",
                                                    "ok": "met", "rows": "rows"}))
    cov = ud.estimate_range_coverage(res)
    if cov:
        st.caption("The p10–p90 range an estimate shows (its engine profile's, drawn without the row's source) "
                   "holds the measured value in " + ", ".join(f"{v:.0f}% of {k}" for k, v in cov.items())
                   + " rows.")
    st.caption(f"Estimates that name no runtime use the kind-default efficiencies; their p10–p90 range covers "
               f"{default_cov:.0f}% of the held-out rows.")
    own_measurements()


def own_measurements() -> None:
    """The committed profiles against an uploaded CSV of the user's own runs (`planner accuracy --data`)."""
    with st.expander("Check against your own measurements"):
        st.caption("A CSV in the schema of `data/measured_public.csv` (columns source_id, hardware, framework, "
                   "model, weight_format, kv_dtype, batch, input_len, output_len, metric, value; hardware_detail, "
                   "params_b, unit, notes optional). Each row is predicted as `planner estimate --runtime` predicts "
                   "it, with the range it prints; nothing is refitted. The CLI does the same: "
                   "`planner accuracy --data FILE`.")
        up = st.file_uploader("Measurements (CSV)", type=["csv"], key="measurements_upload")
        if up is None:
            return
        try:
            out = ud.check_measurements(up.name, up.getvalue())
        except PlannerError as exc:
            st.error(esc(exc))
            return
        if out["summary"].empty:
            st.warning(f"no row of {esc(up.name)} maps to a workload the planner times (reasons below)")
        else:
            show_table(out["summary"])
            every = out["rows"]
            present = [m for m in METRICS if m in set(every["metric"])] + sorted(set(every["metric"]) - set(METRICS))
            metric = st.selectbox("Metric", present, key="measurements_metric",
                                  format_func=lambda m: METRICS.get(m, m))
            unit = METRICS.get(metric, metric)
            rows = every[every["metric"] == metric]
            lo = float(min(rows["measured"].min(), rows["predicted"].min())) / 1.5
            hi = float(max(rows["measured"].max(), rows["predicted"].max())) * 1.5
            diag = alt.Chart(pd.DataFrame({"measured": [lo, hi], "predicted": [lo, hi]})).mark_line(
                color="gray", strokeDash=[4, 4]).encode(x="measured:Q", y="predicted:Q")
            pts = alt.Chart(rows).mark_point(filled=True, size=40).encode(
                x=alt.X("measured:Q", scale=alt.Scale(type="log"), title=f"measured {unit} (log)"),
                y=alt.Y("predicted:Q", scale=alt.Scale(type="log"), title=f"predicted {unit} (log)"),
                color=alt.Color("regime:N", legend=legend_below("regime")),
                tooltip=["row", "hardware", "model", "weights", "runtime", "regime",
                         alt.Tooltip("measured:Q", format=",.2f"), alt.Tooltip("predicted:Q", format=",.2f"),
                         alt.Tooltip("error %:Q", format=".1f")])
            show_chart((diag + pts).properties(title=f"your {unit} vs llm-planner (log-log; dashed: y = x)",
                                               height=320))
            show_table(every)
        if not out["unmapped"].empty:
            st.caption(f"{len(out['unmapped'])} row(s) not checked, with the reason:")
            show_table(out["unmapped"])
