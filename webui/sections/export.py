"""Downloads (JSON estimate, CSV sweeps) and the share link, with what the link cannot carry."""

from __future__ import annotations

from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from planner import ui_data as ud

from ..common import Context, cached_batch_sweep, cached_context_sweep, cached_quant, guarded
from ..state import link_missing, link_state


def render(ctx: Context) -> None:
    inp = ctx.inputs
    st.download_button("Estimate (JSON)", ud.export_json(ctx.estimates, inp.as_dict()), file_name="estimate.json",
                       mime="application/json", key="dl_json")
    sweeps = (("batch", "Batch sweep (CSV)", "batch_sweep.csv", lambda r: cached_batch_sweep(
                  inp.model_ref, r, inp.weights, inp.kv, inp.prompt, inp.output, inp.eff, inp.tp)),
              ("context", "Context sweep (CSV)", "context_sweep.csv", lambda r: cached_context_sweep(
                  inp.model_ref, r, *inp.workload(), inp.tp)),
              ("quant", "Quantization comparison (CSV)", "quantization.csv", lambda r: cached_quant(
                  inp.model_ref, r, inp.kv, inp.batch, inp.prompt, inp.output, inp.eff, inp.tp)))
    for key, label, name, compute in sweeps:
        with guarded(label):
            df = pd.concat([compute(r) for r in ctx.refs], ignore_index=True)
            st.download_button(label, df.to_csv(index=False), file_name=name, mime="text/csv", key=f"dl_{key}")
    qs = urlencode(link_state(inp), safe=",:")
    st.markdown("**Share this sizing**: the page address carries every input, the open section and the capacity "
                "plan's inputs:")
    st.code(f"?{qs}", language=None)
    missing = link_missing(inp)
    if missing:
        st.warning("This link cannot carry the " + ", ".join(
            {"model": "uploaded model", "hardware": "uploaded device specs", "custom-gpu": "typed-in GPUs"}[w]
            for w in missing) + f": it names the catalog model {inp.catalog_model}, and whoever opens it is told to "
            "add the missing inputs again.")
