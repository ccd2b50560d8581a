"""Page layout: title and phone-friendly styles, shared-link errors, the sidebar, the first screen, then one tab per
section (only the open tab runs; its name is in the link)."""

from __future__ import annotations

import streamlit as st

from planner import ui_data as ud
from planner.architecture import list_model_ids
from planner.hardware import list_hardware_ids

from .common import Context, cached_estimate, cached_hardware, cached_model, guarded
from .headline import render_headline, render_model_summary
from .sections import accuracy, batching, context, export, memory, plan, quantization, roofline, validation
from .state import SECTIONS, init_state, render_sidebar, write_query

RENDER = {"Memory": memory.render, "Capacity plan": plan.render, "Batching": batching.render,
          "Context length": context.render, "Roofline": roofline.render, "Quantization": quantization.render,
          "Validation": validation.render, "Accuracy": accuracy.render, "Export": export.render}
assert list(RENDER) == list(SECTIONS)

# phones (< 640 px): metrics two or three to a row instead of one per line, smaller figures, tables scroll in their
# box, titles wrap instead of being cut
PHONE_CSS = """<style>
@media (max-width: 640px) {
  [data-testid="stMetric"] [data-testid="stMetricValue"] { font-size: 1.15rem; }
  [data-testid="stMetricLabel"] p { font-size: 0.75rem; }
  [data-testid="stMetricLabel"], [data-testid="stMetricLabel"] * { white-space: normal !important;
       overflow: visible !important; text-overflow: clip !important; }
  div[data-testid="stHorizontalBlock"]:has([data-testid="stMetric"]) { flex-wrap: wrap !important;
       gap: 0.3rem 0.6rem !important; }
  div[data-testid="stHorizontalBlock"]:has([data-testid="stMetric"]) > div[data-testid="stColumn"] {
       flex: 1 1 28% !important; min-width: 28% !important; width: auto !important; }
  .block-container, [data-testid="stMainBlockContainer"] { padding: 4rem 0.6rem 1rem !important; }
  h1, h2, h3, h4 { white-space: normal !important; overflow-wrap: anywhere; }
  [data-testid="stHeadingWithActionElements"] h3 { font-size: 1.25rem; }
  [data-testid="stAlert"] { padding: 0.2rem 0.1rem; }
  .st-key-cards [data-testid="stCaptionContainer"] { display: none; }
  .st-key-cards [data-testid="stVerticalBlockBorderWrapper"] { padding: 0.5rem !important; }
}
[data-testid="stDataFrame"] { max-width: 100%; overflow-x: auto; }
[data-testid="stHeadingWithActionElements"] h3 { white-space: normal; }
</style>"""


@st.cache_data(show_spinner=False)
def catalog_ids() -> tuple[list[str], list[str]]:
    return list_model_ids(), list_hardware_ids()


def build_context(inp) -> Context:
    ctx = Context(inp)
    if not inp.hw_refs:
        st.info("Pick at least one device in the sidebar.")
    for ref in inp.hw_refs:
        label = ref[1] if ref[0] != "custom" else "custom GPU"
        with guarded(label):
            spec = cached_hardware(ref)
            e = cached_estimate(inp.model_ref, ref, *inp.workload(), inp.tp)
            gap = ud.runtime_gap(inp.eff, spec, inp.weights)  # the device stays, with its default efficiencies
            if gap:
                st.warning(f"{label}: {gap}")
            ctx.specs.append(spec)
            ctx.refs.append(ref)
            ctx.estimates.append(e)
    return ctx


def main() -> None:
    st.set_page_config(page_title="llm-planner", layout="wide", initial_sidebar_state="auto")
    st.html(PHONE_CSS)
    st.subheader("llm-planner · LLM inference sizing")
    model_ids, hw_ids = catalog_ids()
    init_state(model_ids, hw_ids)
    for msg in st.session_state.get("_link_errors", []):
        st.error(msg)
    st.session_state["_link_errors"] = []
    inp = render_sidebar(model_ids, hw_ids)
    if inp.uploaded_model:
        with guarded("model summary"):
            render_model_summary(None, cached_model(inp.model_ref))
    ctx = build_context(inp)
    if ctx.estimates:
        with guarded("headline"):
            render_headline(ctx)
        # lazy tabs: only the open section runs (key "section"; tests select one with session_state["section"])
        for tab, title in zip(st.tabs(list(SECTIONS), key="section", on_change="rerun"), SECTIONS):
            if tab.open:
                with tab, guarded(title):
                    RENDER[title](ctx)
    write_query(inp)
