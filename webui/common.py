"""What every section shares: the inputs and context, cached calls into `planner.ui_data`, the error guard, number
formatting, Markdown escaping, the device colour scale, help lines and the table helper.

Nothing here computes a figure the CLI cannot: every number comes from `planner.estimate` or `planner.ui_data`.
"""

from __future__ import annotations

import logging
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from planner import ui_data as ud
from planner.errors import PlannerError
from planner.estimate import Estimate
from planner.hardware import HardwareSpec

log = logging.getLogger("llm-planner.app")
DEVICE_SCHEME = "tableau10"

# ---------------------------------------------------------------- words people understand (help lines)

FORMAT_HELP = {
    "fp32": "32-bit float weights (4 bytes each)", "fp16": "16-bit float weights (2 bytes), the usual baseline",
    "bf16": "16-bit bfloat weights (2 bytes), like fp16 with fp32's range",
    "fp8": "8-bit float weights and matmuls (Hopper, Ada, MI300 and newer)",
    "int8": "8-bit integer weights, dequantized to 16-bit for the matmul (weight-only)",
    "w8a8-int8": "8-bit integer weights and activations (SmoothQuant-style int8 matmuls)",
    "int4-g128": "4-bit integer weights in groups of 128 with a 16-bit scale each (AWQ / GPTQ)",
    "q8_0": "llama.cpp GGUF 8-bit blocks of 32", "q6_k": "llama.cpp GGUF 6-bit k-quant",
    "q5_k_m": "llama.cpp GGUF 5-bit k-quant (medium)", "q4_k_m": "llama.cpp GGUF 4-bit k-quant (medium)",
    "q4_0": "llama.cpp GGUF 4-bit blocks of 32", "nvfp4": "4-bit float with fp8 block scales (Blackwell)",
    "mxfp4": "4-bit float with shared 8-bit exponents (OCP MX)",
    "exl2-4": "ExLlamaV2 EXL2 at 4 bits per weight on average (exl2-3 ... exl2-6: other bitrates)",
}
# EXL2 bitrates the sidebar offers beside the named formats (any 2-8 parses: planner.quantization.weight_format)
EXL2_CHOICES = ("exl2-3", "exl2-4", "exl2-4.65", "exl2-5", "exl2-6")
KV_HELP = "the number format of the stored keys and values; fp8 halves the cache against fp16"
BOUND_HELP = ("'memory bound': the time goes to reading weights and KV cache from memory (bandwidth limits it); "
              "'compute bound': the time goes to arithmetic (the TFLOP/s peak limits it). The ridge point, peak / "
              "bandwidth in FLOP per byte, separates them.")
TP_HELP = ("TP (tensor parallel): each layer's matrices split over N devices of one server, which exchange partial "
           "sums twice per layer; memory per device and time per token both shrink. PP (pipeline parallel): the "
           "layers split into stages on different devices.")
COLUMN_HELP = {
    "TTFT (ms)": "time to first token: the prefill of the whole prompt",
    "TPOT (ms)": "time per output token after the first (one decode step)",
    "tok/s total": "output tokens per second over the whole batch",
    "tok/s per sequence": "output tokens per second seen by one request",
    "$/hour": "devices x the spec's on-demand price per device-hour",
    "$ per million tokens": "$/hour / (tok/s total x 3600) x 1e6",
    "J per token": "devices x board power (W) / tok/s total, at full board power",
    "memory (GB)": "weights + KV cache + activations + runtime overhead, 1 GB = 1e9 bytes",
    "usable (GB)": "the memory the runtime can allocate on one device",
    "fits": "whether the memory needed fits the usable memory",
    "bound": BOUND_HELP, "FLOP/byte": "arithmetic intensity: floating-point operations per byte moved",
    "TP": TP_HELP, "PP": TP_HELP,
    "device": "catalog id, or the id of an uploaded / typed-in device",
    "devices": "devices in the whole deployment: TP x PP x replicas",
    "replicas": "independent copies of the model behind a load balancer",
    "max sequences": "the engine's limit on sequences decoded together (max_num_seqs)",
    "TTFT p95 (ms)": "95th percentile time to first token in the simulation",
    "TPOT p95 (ms)": "95th percentile time per output token in the simulation",
    "concurrent requests (mean)": "requests in flight per replica, averaged over the simulation",
    "$ per million output tokens": "$/hour / (output tokens/s x 3600) x 1e6 at the planned load",
    "J per output token": "devices x board power / output tokens/s at the planned load",
    "step = TPOT (ms)": "one decode step of the whole batch = the time per output token of each sequence",
    "end-to-end (s)": "TTFT + (output - 1) decode steps", "requests/s": "batch / end-to-end",
    "output tok/s": "batch x output / end-to-end",
    "power (req/s per s)": "Kleinrock's power: requests/s / end-to-end; the knee is its largest value",
    "knee": "the batch of largest power (the same definition in every section)",
    "GFLOP": "floating-point operations, all layers, in 1e9", "MB moved": "bytes read and written, all layers, in 1e6",
    "time (ms)": "the operator's roofline time over all layers, with the efficiency in use",
    "share of stage (%)": "the operator's share of its stage's time",
    "layers": "how many times the operator runs (once per layer)",
    "weights (GB)": "the weights on one device", "KV cache (GB)": "keys and values of every sequence at this context",
    "activations (GB)": "peak temporary tensors of the prefill",
    "overhead (GB)": "runtime memory outside weights, KV and activations (CUDA context, workspace)",
    "total (GB)": "weights + KV cache + activations + overhead",
    "largest batch at this context": "the most sequences of prompt + output tokens that fit",
    "longest context at this batch (tokens)": "the longest prompt + output that fits at this batch",
    "KV per token (bytes)": "2 (K and V) x layers x KV heads x head size x bytes per element",
    "bits/weight": "storage bits per weight, scales included", "format": "the weight format",
    "context (tokens)": "prompt + output", "prompt (tokens)": "the prompt length of the row",
    "batch": "sequences decoded together",
}

# ---------------------------------------------------------------- formatting


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>~:$&])")


def esc(text: object) -> str:
    """User-provided text made inert in st.markdown: every Markdown / directive character backslash-escaped and
    newlines folded, so an uploaded name cannot inject links, images, HTML, colours or headings."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def fmt_time_ms(ms) -> str:
    """A duration given in ms, in the unit its magnitude calls for: µs below 0.1 ms, ms below 1 s, s below 2 min,
    then min and h; '—' when there is no finite value."""
    if not finite(ms) or ms < 0:
        return "—"
    if ms < 0.1:
        return f"{ms * 1e3:,.1f} µs"
    if ms < 1000:
        return f"{ms:,.2f} ms" if ms < 100 else f"{ms:,.1f} ms"
    s = ms / 1e3
    if s < 120:
        return f"{s:,.2f} s"
    if s < 7200:
        return f"{s / 60:,.1f} min"
    return f"{s / 3600:,.1f} h"


def fmt_rate(x) -> str:
    return "—" if not finite(x) or x < 0 else f"{x:,.1f}"


def fmt_gb(x) -> str:
    return "—" if not finite(x) else f"{x:,.2f} GB"


def show_table(df: pd.DataFrame, help_for: dict | None = None, **kw) -> None:
    """st.dataframe with readable cells: numbers rounded (GB to two decimals), missing values as '—' (never 'None' or
    'nan'), booleans as yes/no, and a help line on every column the project defines."""
    out = df.copy()
    cfg = {}
    for c in out.columns:
        col = out[c]
        if col.dtype == object and _all_numbers(col):  # numbers with gaps (None) in an object column
            col = out[c] = pd.to_numeric(col, errors="coerce")
        if (pd.api.types.is_float_dtype(col) and len(col) and col.notna().all() and _integral(col)
                and not _money_or_gb(c)):
            col = out[c] = col.astype("int64")  # counts stored as floats: 256, not 256.0
        if col.dtype == bool:
            out[c] = col.map({True: "yes", False: "no"})
        elif pd.api.types.is_numeric_dtype(col):
            if col.isna().any() or not pd.Series(col).map(lambda v: v is None or finite(float(v))).all():
                out[c] = col.map(lambda v: "—" if v is None or not finite(float(v)) else _num(c, v))
            else:
                digits = 2 if _money_or_gb(c) else 3
                out[c] = col.round(digits)
        elif col.dtype == object:
            out[c] = col.map(lambda v: "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v)
        h = (help_for or {}).get(c) or COLUMN_HELP.get(str(c))
        if pd.api.types.is_float_dtype(out[c]):
            big = pd.to_numeric(out[c], errors="coerce").abs().max()
            fmt = "%.2f" if _money_or_gb(c) else ("%.1f" if big >= 100 else None)
            cfg[c] = st.column_config.NumberColumn(help=h, format=fmt)
        elif h:
            cfg[c] = st.column_config.Column(help=h)
    st.dataframe(out, hide_index=True, column_config=cfg or None, **kw)


def _money_or_gb(name) -> bool:
    """Columns shown with two decimals and never as integers: sizes in GB and prices."""
    return "GB" in str(name) or name == "$/hour"


def _all_numbers(col) -> bool:
    """True where every present value of an object column is a number (int or float, not a bool)."""
    vals = [v for v in col if not (v is None or (isinstance(v, float) and not math.isfinite(v)))]
    return bool(vals) and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
                              for v in vals)


def _integral(col) -> bool:
    a = col.to_numpy(dtype=float)
    return bool(np.isfinite(a).all() and (a == np.round(a)).all() and (np.abs(a) < 2**53).all())


def _num(col, v) -> str:
    v = float(v)
    if _money_or_gb(col):
        return f"{v:,.2f}"
    return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:,.0f}"


# ---------------------------------------------------------------- inputs and context


@dataclass
class Inputs:
    model_ref: tuple
    model_name: str
    hw_refs: list[tuple]
    weights: str
    kv: str
    batch: int
    prompt: int
    output: int
    eff: str
    tp: int = 1
    catalog_model: str = ""

    def workload(self) -> tuple:
        return (self.weights, self.kv, self.batch, self.prompt, self.output, self.eff)

    @property
    def uploaded_model(self) -> bool:
        return self.model_ref[0] != "catalog"

    def as_dict(self) -> dict:
        return {"model": self.model_name, "hardware": [r[1] if r[0] != "custom" else "custom" for r in self.hw_refs],
                "weights": self.weights, "kv_dtype": self.kv, "batch": self.batch, "prompt": self.prompt,
                "output": self.output, "efficiency": self.eff, "tp": self.tp}


@dataclass
class Context:
    """What every section gets: the inputs and, per device that worked, its spec and estimate."""

    inputs: Inputs
    specs: list[HardwareSpec] = field(default_factory=list)
    refs: list[tuple] = field(default_factory=list)
    estimates: list[Estimate] = field(default_factory=list)


def device_colors(ctx: Context) -> alt.Scale:
    """One colour per device, the same in every chart (domain in input order)."""
    return alt.Scale(domain=[e.hardware for e in ctx.estimates], scheme=DEVICE_SCHEME)


def show_chart(chart, where=None) -> None:
    """st.altair_chart at the container's width, its title wrapped into lines of at most 44 characters so that a
    phone-width chart never cuts it off."""
    import textwrap

    title = getattr(chart, "title", alt.Undefined)
    if isinstance(title, str) and len(title) > 44:
        chart = chart.properties(title=alt.TitleParams(textwrap.wrap(title, 44), anchor="start"))
    # fit the width only: the height set on the chart stays the plot's, whatever the legends below it need
    chart = chart.properties(autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
    (where or st).altair_chart(chart, width="stretch")


def legend_below(title: str | None = None) -> alt.Legend:
    """Legends under the chart, so a phone-width chart keeps its full width for the data."""
    return alt.Legend(title=title, orient="bottom", direction="horizontal", columns=2, labelLimit=240)


@contextmanager
def guarded(section: str):
    """Bad input -> one st.error line; an unexpected bug -> one neutral line (details to the server log, never the
    page), so one failing section never takes the rest of the page down."""
    try:
        yield
    except PlannerError as exc:
        st.error(f"{section}: {exc}")
    except Exception:  # noqa: BLE001 -- the page never shows a traceback
        log.exception("section %s failed", section)
        st.error(f"{section}: could not be computed for these inputs; the rest of the page still works")


# ---------------------------------------------------------------- cached computations (keyed by hashable inputs)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_model(model_ref):
    return ud.resolve_model(model_ref)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_hardware(hw_ref) -> HardwareSpec:
    return ud.resolve_hardware(hw_ref)


@st.cache_data(max_entries=1024, show_spinner=False)
def cached_estimate(model_ref, hw_ref, weights, kv, batch, prompt, output, eff, tp=1) -> Estimate:
    return ud.ui_estimate(cached_model(model_ref), cached_hardware(hw_ref), weights, kv, batch, prompt, output, eff,
                          tp)


@st.cache_data(max_entries=256, show_spinner=False)
def cached_batch_sweep(model_ref, hw_ref, weights, kv, prompt, output, eff, tp=1) -> pd.DataFrame:
    return ud.batch_sweep(cached_model(model_ref), cached_hardware(hw_ref), weights, kv, prompt, output, eff, tp=tp)


@st.cache_data(max_entries=256, show_spinner=False)
def cached_context_sweep(model_ref, hw_ref, weights, kv, batch, prompt, output, eff, tp=1) -> pd.DataFrame:
    return ud.context_sweep(cached_model(model_ref), cached_hardware(hw_ref), weights, kv, batch, prompt, output, eff,
                            tp=tp)


@st.cache_data(max_entries=256, show_spinner=False)
def cached_quant(model_ref, hw_ref, kv, batch, prompt, output, eff, tp=1) -> pd.DataFrame:
    return ud.quant_comparison(cached_model(model_ref), cached_hardware(hw_ref), kv, batch, prompt, output, eff,
                               tp=tp)


@st.cache_data(max_entries=256, show_spinner=False)
def cached_smallest_setup(model_ref, hw_ref, weights, kv, batch, prompt, output, eff):
    return ud.smallest_setup(cached_model(model_ref), cached_hardware(hw_ref), weights, kv, batch, prompt, output,
                             eff)


def knee_for(ctx: Context, ref: tuple) -> dict | None:
    """The batch knee of this device at the sidebar's workload (the one definition, ud.find_knee)."""
    inp = ctx.inputs
    return ud.find_knee(cached_batch_sweep(inp.model_ref, ref, inp.weights, inp.kv, inp.prompt, inp.output, inp.eff,
                                           inp.tp))
