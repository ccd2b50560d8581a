"""Predicted against measured kernel times (the harness records), which devices have measurements, and the
calibration in use."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from planner import ui_data as ud

from ..common import show_chart, Context, legend_below, show_table


@st.cache_data(ttl=30, show_spinner=False)
def cached_records():
    """The committed harness records with the predictions `planner validate check` scores (validate/ needs no torch
    for this); any other JSONL with predicted_ms / measured.median_ms is read as is."""
    from validate.check import prediction_table

    recs, notes = prediction_table(ud.RECORDS_DIR)
    if recs.empty:
        return ud.load_validation_records()
    return recs, notes


@st.cache_data(ttl=30, show_spinner=False)
def cached_calibrations() -> pd.DataFrame:
    return ud.calibration_files()


def coverage_line(measured: list[str], selected: list[str]) -> tuple[str, bool]:
    """'Devices with measurements: ...' and whether any selected device is among them."""
    covered = [d for d in selected if d in measured]
    head = f"Devices with measurements: {', '.join(measured) if measured else 'none yet'}."
    if covered:
        return head + f" Selected and measured: {', '.join(covered)}.", True
    return head + " None of them covers the selected devices (" + ", ".join(selected) + \
        "): their predictions are not checked against kernel runs here.", False


def render(ctx: Context) -> None:
    recs, notes = cached_records()
    st.markdown("**Predicted against measured** (harness records in `validate/records/<device>/*.jsonl`)")
    for n in notes:
        st.caption(n)
    measured = sorted(recs["device"].unique()) if not recs.empty else []
    line, ok = coverage_line(measured, [e.hardware for e in ctx.estimates])
    (st.caption if ok else st.info)(line)  # catalog ids and record folder names only
    if not recs.empty:
        ref = ud.validation_reference(recs, band=0.2)
        x = alt.X("measured_ms:Q", title="measured median (ms, log)", scale=alt.Scale(type="log"))
        band = alt.Chart(ref).mark_area(opacity=0.15, color="gray").encode(x=x, y="lo:Q", y2="hi:Q")
        diag = alt.Chart(ref).mark_line(color="gray").encode(x=x, y="predicted_ms:Q")
        pts = alt.Chart(recs).mark_circle(size=60).encode(
            x=x, y=alt.Y("predicted_ms:Q", title="predicted (ms, log)", scale=alt.Scale(type="log")),
            color=alt.Color("device:N", legend=legend_below("device")),
            tooltip=["device:N", "kernel:N", alt.Tooltip("measured_ms:Q", title="measured (ms)", format=",.4f"),
                     alt.Tooltip("predicted_ms:Q", title="predicted (ms)", format=",.4f"),
                     alt.Tooltip("error_pct:Q", title="error (%)", format="+.1f")])
        show_chart(alt.layer(band, diag, pts).properties(
            title="Predicted vs measured kernel time (line: y = x, band: ±20%)", height=380))
        summary = ud.validation_summary(recs)
        st.dataframe(summary.round(1).rename(columns={"median_abs_error_pct": "median |error| (%)",
                                                      "max_abs_error_pct": "max |error| (%)"}))
    st.markdown("**Calibration in use**")
    show_table(pd.DataFrame([{"device": e.hardware, "unit": e.roofline.unit,
                              "efficiency source": e.efficiency.source,
                              "bandwidth fraction": e.efficiency.bandwidth_fraction,
                              "compute fraction": e.efficiency.compute_fraction,
                              "kernel overhead (µs)": e.efficiency.kernel_overhead_us,
                              "step overhead (ms)": e.efficiency.step_overhead_ms} for e in ctx.estimates]))
    cal = cached_calibrations()
    if cal.empty:
        st.caption("no calibration files yet (hardware_specs/calibration/<device>.yaml)")
    else:
        show_table(cal)
