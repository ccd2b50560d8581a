"""llm-planner web UI: `streamlit run app.py`.

Thin wiring over the library: the sidebar parses inputs, `planner.estimate` and `planner.ui_data` compute (cached with
st.cache_data, keyed by the inputs), and one `render_*` function per section draws the result with Altair. Nothing is
computed here that the CLI cannot also compute. Bad input (an unknown id in a shared link, a broken upload, a format a
device cannot run) is one `st.error` line and the rest of the page keeps working.

Sections are the TABS list: a later page (Serving, Accuracy) is one more `(title, render_fn)` entry taking the Context.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlencode

import altair as alt
import pandas as pd
import streamlit as st

from planner import ui_data as ud
from planner.architecture import list_model_ids
from planner.errors import PlannerError
from planner.estimate import Estimate
from planner.hardware import HardwareSpec, list_hardware_ids
from planner.quantization import KV_DTYPE_BYTES, WEIGHT_FORMATS, weight_format

log = logging.getLogger("llm-planner.app")
DEVICE_SCHEME = "tableau10"

BATCH_MAX = 512
LENGTH_MAX = 2_097_152  # tokens; the model's own maximum is checked by the core (a warning)
DEFAULTS = {"model": "llama-3.1-8b", "hardware": ["h100-sxm", "rtx-4090"], "weights": "fp16", "kv_dtype": "fp16",
            "batch": 1, "prompt": 512, "output": 128, "efficiency": "auto"}
# query-string name -> widget key (the shared link carries these)
QUERY_KEYS = {"model": "model", "hardware": "hardware", "weights": "weights", "kv": "kv_dtype", "batch": "batch",
              "prompt": "prompt", "output": "output", "eff": "efficiency"}
EFFICIENCY_LABELS = {"auto": "calibrated (if a calibration file exists, else defaults)",
                     "default": "defaults (device spec / unit kind)", "datasheet": "datasheet peaks (efficiency 1.0)",
                     "runtime:llamacpp": "llama.cpp (fitted runtime profile)",
                     "runtime:trtllm": "TensorRT-LLM (fitted runtime profile)",
                     "runtime:gpt-fast": "gpt-fast / torch.compile (fitted runtime profile)"}


# ---------------------------------------------------------------- cached computations (keyed by hashable inputs)


@st.cache_data(max_entries=1024, show_spinner=False)
def cached_estimate(model_ref, hw_ref, weights, kv, batch, prompt, output, eff) -> Estimate:
    return ud.ui_estimate(ud.resolve_model(model_ref), ud.resolve_hardware(hw_ref), weights, kv, batch, prompt, output,
                          eff)


@st.cache_data(max_entries=256, show_spinner=False)
def cached_batch_sweep(model_ref, hw_ref, weights, kv, prompt, output, eff) -> pd.DataFrame:
    return ud.batch_sweep(ud.resolve_model(model_ref), ud.resolve_hardware(hw_ref), weights, kv, prompt, output, eff)


@st.cache_data(max_entries=256, show_spinner=False)
def cached_context_sweep(model_ref, hw_ref, weights, kv, batch, prompt, output, eff) -> pd.DataFrame:
    return ud.context_sweep(ud.resolve_model(model_ref), ud.resolve_hardware(hw_ref), weights, kv, batch, prompt,
                            output, eff)


@st.cache_data(max_entries=256, show_spinner=False)
def cached_quant(model_ref, hw_ref, kv, batch, prompt, output, eff) -> pd.DataFrame:
    return ud.quant_comparison(ud.resolve_model(model_ref), ud.resolve_hardware(hw_ref), kv, batch, prompt, output, eff)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_model(model_ref):
    return ud.resolve_model(model_ref)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_hardware(hw_ref) -> HardwareSpec:
    return ud.resolve_hardware(hw_ref)


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


@st.cache_data(show_spinner=False)
def catalog_ids() -> tuple[list[str], list[str]]:
    return list_model_ids(), list_hardware_ids()


# ---------------------------------------------------------------- inputs


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

    def workload(self) -> tuple:
        return (self.weights, self.kv, self.batch, self.prompt, self.output, self.eff)

    def as_dict(self) -> dict:
        return {"model": self.model_name, "hardware": [r[1] for r in self.hw_refs], "weights": self.weights,
                "kv_dtype": self.kv, "batch": self.batch, "prompt": self.prompt, "output": self.output,
                "efficiency": self.eff}


@dataclass
class Context:
    """What every section gets: the inputs and, per device that worked, its spec and estimate."""

    inputs: Inputs
    specs: list[HardwareSpec] = field(default_factory=list)
    refs: list[tuple] = field(default_factory=list)
    estimates: list[Estimate] = field(default_factory=list)


@contextmanager
def guarded(section: str):
    """Bad input -> one st.error line; an unexpected bug -> one line too (traceback to the server log, never the
    page), so one failing section never takes the rest of the page down."""
    try:
        yield
    except PlannerError as exc:
        st.error(f"{section}: {exc}")
    except Exception as exc:  # noqa: BLE001 -- the issue asks that the page never shows a traceback
        log.exception("section %s failed", section)
        st.error(f"{section}: internal error ({type(exc).__name__}: {exc}); the rest of the page still works")


def _int_param(raw: str, name: str, lo: int, hi: int) -> int:
    try:
        v = int(raw)
    except ValueError:
        raise PlannerError(f"link parameter {name}: must be an integer {lo}..{hi}, got {raw!r}") from None
    if not lo <= v <= hi:
        raise PlannerError(f"link parameter {name}: must be an integer {lo}..{hi}, got {v}")
    return v


def state_from_query(qp: dict, model_ids: list[str], hw_ids: list[str]) -> tuple[dict, list[str]]:
    """Widget values from a shared link's query string (over the defaults); each bad parameter is one error line
    and keeps its default."""
    values = dict(DEFAULTS)
    values["hardware"] = [h for h in DEFAULTS["hardware"] if h in hw_ids] or hw_ids[:1]
    errors: list[str] = []

    def take(name: str, parse: Callable[[str], object]):
        if name not in qp:
            return
        try:
            values[QUERY_KEYS[name]] = parse(qp[name])
        except PlannerError as exc:
            errors.append(f"{exc} (kept {values[QUERY_KEYS[name]]!r})")

    def model(raw):
        if raw not in model_ids:
            raise PlannerError(f"link parameter model: unknown model '{raw}'")
        return raw

    def hardware(raw):
        ids = [h.strip() for h in raw.split(",") if h.strip()]
        bad = [h for h in ids if h not in hw_ids]
        if bad:
            errors.append(f"link parameter hardware: unknown device(s) {', '.join(bad)} left out")
        good = [h for h in ids if h in hw_ids]
        if not good:
            raise PlannerError("link parameter hardware: no known device")
        return good

    def weights(raw):
        return weight_format(raw).name

    def kv(raw):
        if raw not in KV_DTYPE_BYTES:
            raise PlannerError(f"link parameter kv: unknown dtype '{raw}'; allowed: {', '.join(KV_DTYPE_BYTES)}")
        return raw

    def eff(raw):
        if raw not in EFFICIENCY_LABELS:
            raise PlannerError(f"link parameter eff: unknown mode '{raw}'; allowed: {', '.join(EFFICIENCY_LABELS)}")
        return raw

    take("model", model)
    take("hardware", hardware)
    take("weights", weights)
    take("kv", kv)
    take("batch", lambda r: _int_param(r, "batch", 1, BATCH_MAX))
    take("prompt", lambda r: _int_param(r, "prompt", 1, LENGTH_MAX))
    take("output", lambda r: _int_param(r, "output", 1, LENGTH_MAX))
    take("eff", eff)
    return values, errors


def init_state(model_ids: list[str], hw_ids: list[str]) -> None:
    """On a session's first run, seed every widget from the query string (a shared link) or the defaults."""
    if st.session_state.get("_seeded"):
        return
    values, errors = state_from_query(st.query_params.to_dict(), model_ids, hw_ids)
    for key, v in values.items():
        st.session_state[key] = v
    st.session_state["_link_errors"] = errors
    st.session_state["_seeded"] = True


def write_query(inp: Inputs, catalog_model: str) -> None:
    """Keep the URL's query string equal to the inputs, so the address bar is the shareable link."""
    want = {"model": catalog_model, "hardware": ",".join(r[1] for r in inp.hw_refs if r[0] == "catalog"),
            "weights": inp.weights, "kv": inp.kv, "batch": str(inp.batch), "prompt": str(inp.prompt),
            "output": str(inp.output), "eff": inp.eff}
    if st.query_params.to_dict() != want:
        st.query_params.from_dict(want)


def render_sidebar(model_ids: list[str], hw_ids: list[str]) -> Inputs | None:
    with st.sidebar:
        st.header("Inputs")
        st.selectbox("Model", model_ids, key="model")
        up = st.file_uploader("... or a Hugging Face config.json", type=["json"], key="model_upload",
                              help="Replaces the catalog model while uploaded.")
        st.multiselect("Hardware to compare", hw_ids, key="hardware")
        hw_ups = st.file_uploader("... plus hardware spec YAMLs", type=["yaml", "yml"], accept_multiple_files=True,
                                  key="hardware_upload", help="Same schema as hardware_specs/*.yaml.")
        st.selectbox("Weight format", list(WEIGHT_FORMATS), key="weights",
                     format_func=lambda f: f"{f}  ({WEIGHT_FORMATS[f].bits_per_weight:.3g} bits/weight)")
        st.selectbox("KV-cache dtype", list(KV_DTYPE_BYTES), key="kv_dtype")
        st.slider("Batch size (concurrent sequences)", 1, BATCH_MAX, key="batch")
        st.number_input("Prompt length (tokens)", min_value=1, max_value=LENGTH_MAX, step=128, key="prompt")
        st.number_input("Output length (tokens)", min_value=1, max_value=LENGTH_MAX, step=32, key="output")
        st.radio("Efficiencies (or the serving runtime)", list(EFFICIENCY_LABELS), key="efficiency",
                 format_func=EFFICIENCY_LABELS.get,
                 help="A runtime profile is fitted to published measurements of that runtime and gives its own "
                      "p10-p90 range; devices of a class it was not fitted on say so.")
        st.caption("The address bar carries these inputs: copy it to share this sizing (uploads are not in the link).")

    catalog_model = st.session_state["model"]
    model_ref: tuple = ("catalog", catalog_model)
    model_name = catalog_model
    if up is not None:
        ref = ("upload", up.name, up.getvalue().decode("utf-8", errors="replace"))
        try:
            m = cached_model(ref)
            model_ref, model_name = ref, m.name
        except PlannerError as exc:
            st.error(f"model upload: {exc} -- showing catalog model {catalog_model} instead")
    hw_refs = [("catalog", h) for h in st.session_state["hardware"]]
    for f in hw_ups or []:
        ref = ("upload", f.name, f.getvalue().decode("utf-8", errors="replace"))
        try:
            cached_hardware(ref)
            hw_refs.append(ref)
        except PlannerError as exc:
            st.error(f"hardware upload: {exc}")
    inp = Inputs(model_ref, model_name, hw_refs, st.session_state["weights"], st.session_state["kv_dtype"],
                 int(st.session_state["batch"]), int(st.session_state["prompt"]), int(st.session_state["output"]),
                 st.session_state["efficiency"])
    write_query(inp, catalog_model)
    return inp


# ---------------------------------------------------------------- sections


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:,.2f} ms"


def _rate(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def render_headline(ctx: Context) -> None:
    inp = ctx.inputs
    st.markdown(f"**{inp.model_name}** · weights {inp.weights} · KV {inp.kv} · batch {inp.batch} · "
                f"prompt {inp.prompt:,} · output {inp.output:,} tokens")
    for e in ctx.estimates:
        h = ud.headline(e)
        with st.container(border=True):
            st.markdown(f"#### {h['name']}  \n`{h['hardware']}` · {h['unit']} · efficiency: {h['efficiency']}")
            if h["fits"]:
                st.success(f"Fits: {h['total_gb']:,.2f} GB of {h['capacity_gb']:,.2f} GB usable "
                           f"({h['spare_gb']:,.2f} GB to spare)")
            else:
                st.error(f"Does not fit: needs {h['total_gb']:,.2f} GB of {h['capacity_gb']:,.2f} GB usable "
                         f"({-h['spare_gb']:,.2f} GB short); the memory breakdown is below")
            c = st.columns(5)
            c[0].metric(f"VRAM (of {h['capacity_gb']:,.0f} GB)", f"{h['total_gb']:,.1f} GB")
            c[1].metric("TTFT", _ms(h["ttft_ms"]), help="time to first token: the prefill of the prompt")
            c[2].metric("Time per output token", _ms(h["tpot_ms"]), help="TPOT: mean decode step after the first")
            c[3].metric("Tokens/s per sequence", _rate(h["tok_s_per_seq"]))
            c[4].metric("Tokens/s total", _rate(h["tok_s_total"]), help="decode tokens/s over the whole batch")
            if h["range_source"] is not None and h["fits"]:
                (t0, t1), (p0, p1), (r0, r1) = h["ttft_ms_range"], h["tpot_ms_range"], h["tok_s_total_range"]
                st.caption(f"p10–p90 range: TTFT {t0:,.1f}–{t1:,.1f} ms · TPOT {p0:,.2f}–{p1:,.2f} ms · "
                           f"tokens/s total {r0:,.0f}–{r1:,.0f} (measured / predicted spread of "
                           f"{h['range_source']} against published benchmarks)")
            st.caption(f"prefill {h['prefill_bound']} bound · decode {h['decode_bound']} bound · largest batch "
                       f"at this context: {h['max_batch']:,} · longest context at this batch: "
                       f"{h['max_context']:,} tokens")
            for w in e.warnings:
                st.warning(w)


def render_memory(ctx: Context) -> None:
    mf = ud.memory_frame(ctx.estimates)
    n = mf["hardware"].nunique()
    bars = alt.Chart(mf).mark_bar().encode(
        y=alt.Y("hardware:N", title="device"),
        x=alt.X("sum(gb):Q", title="memory (GB, 1e9 bytes)"),
        color=alt.Color("component:N", sort=["weights", "KV cache", "activations", "overhead"], title="component"),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("hardware:N"), alt.Tooltip("component:N"), alt.Tooltip("gb:Q", title="GB", format=",.2f")],
    )
    cap = alt.Chart(mf.drop_duplicates("hardware")).mark_tick(color="crimson", thickness=3).encode(
        y="hardware:N", x=alt.X("capacity_gb:Q"),
        tooltip=[alt.Tooltip("hardware:N"), alt.Tooltip("capacity_gb:Q", title="usable capacity (GB)", format=",.2f"),
                 alt.Tooltip("total_gb:Q", title="needed (GB)", format=",.2f")])
    st.altair_chart((bars + cap).properties(title="Memory by component against usable capacity (red tick)",
                                            height=60 * n + 40))
    rows = [{"device": e.hardware, "weights (GB)": e.memory.weights_gb, "KV cache (GB)": e.memory.kv_cache_gb,
             "activations (GB)": e.memory.activations_gb, "overhead (GB)": e.memory.overhead_gb,
             "total (GB)": e.memory.total_gb, "usable (GB)": e.memory.capacity_gb, "fits": e.memory.fits,
             "largest batch at this context": e.memory.max_batch_at_context,
             "longest context at this batch (tokens)": e.memory.max_context_at_batch,
             "KV per token (bytes)": e.kv_cache.bytes_per_token} for e in ctx.estimates]
    st.dataframe(pd.DataFrame(rows).round(4), hide_index=True)


def device_colors(ctx: Context) -> alt.Scale:
    """One colour per device, the same in every chart (domain in input order)."""
    return alt.Scale(domain=[e.hardware for e in ctx.estimates], scheme=DEVICE_SCHEME)


def _dual_axis(df: pd.DataFrame, x: str, x_title: str, title: str, colors: alt.Scale,
               knees: pd.DataFrame | None = None):
    """TPOT (left axis, solid) and total decode tok/s (right axis, dashed) against x, one colour per device."""
    base = alt.Chart(df).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=alt.Scale(type="log", base=2)),
        color=alt.Color("hardware:N", title="device", scale=colors),
        tooltip=[alt.Tooltip("hardware:N"), alt.Tooltip(f"{x}:Q", title=x_title),
                 alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=",.3f"),
                 alt.Tooltip("decode_tok_s_total:Q", title="tok/s total", format=",.1f"),
                 alt.Tooltip("ttft_ms:Q", title="TTFT (ms)", format=",.2f"),
                 alt.Tooltip("total_gb:Q", title="memory (GB)", format=",.2f")])
    lat = base.mark_line(point=False).encode(y=alt.Y("tpot_ms:Q", title="time per output token (ms), solid"))
    thr = base.mark_line(strokeDash=[6, 4]).encode(
        y=alt.Y("decode_tok_s_total:Q", title="total decode throughput (tok/s), dashed"))
    right = thr
    if knees is not None and not knees.empty:
        pts = alt.Chart(knees).mark_point(size=160, filled=True, shape="diamond").encode(
            x=f"{x}:Q", y="decode_tok_s_total:Q", color=alt.Color("hardware:N", scale=colors),
            tooltip=[alt.Tooltip("hardware:N"), alt.Tooltip(f"{x}:Q", title="knee batch"),
                     alt.Tooltip("rule:N", title="knee rule"),
                     alt.Tooltip("decode_tok_s_total:Q", title="tok/s total", format=",.1f")])
        txt = pts.mark_text(dy=-12, dx=-8, align="right", fontWeight="bold").encode(text="label:N")
        right = alt.layer(thr, pts, txt)
    return alt.layer(lat, right).resolve_scale(y="independent").properties(title=title, height=360)


def render_batching(ctx: Context) -> None:
    inp = ctx.inputs
    frames, knees = [], []
    for ref, e in zip(ctx.refs, ctx.estimates):
        with guarded(f"batch sweep on {e.hardware}"):
            df = cached_batch_sweep(inp.model_ref, ref, inp.weights, inp.kv, inp.prompt, inp.output,
                                    inp.eff)
            frames.append(df)
            k = ud.find_knee(df)
            if k:
                knees.append({**k, "label": f"knee {k['batch']}"})
                st.caption(f"{e.hardware}: knee at batch {k['batch']} ({k['rule']}): "
                           f"{k['tpot_ms']:.2f} ms per token, {k['decode_tok_s_total']:,.0f} tok/s total")
            else:
                fit = df[df["fits"]]
                st.caption(f"{e.hardware}: no knee among the batches that fit (1..{int(fit['batch'].max())})"
                           if not fit.empty else f"{e.hardware}: no batch fits")
    if not frames:
        return
    df = pd.concat(frames, ignore_index=True)
    kdf = pd.DataFrame(knees)
    st.altair_chart(_dual_axis(df, "batch", "batch size (sequences, log scale)",
                               f"Decode latency and throughput vs batch (prompt {inp.prompt}, output {inp.output})",
                               device_colors(ctx), kdf))
    tab = ud.batch_table(df)
    st.dataframe(tab, hide_index=True)


def render_context(ctx: Context) -> None:
    inp = ctx.inputs
    frames = []
    for ref, e in zip(ctx.refs, ctx.estimates):
        with guarded(f"context sweep on {e.hardware}"):
            frames.append(cached_context_sweep(inp.model_ref, ref, inp.weights, inp.kv, inp.batch,
                                               inp.prompt, inp.output, inp.eff))
    if not frames:
        return
    df = pd.concat(frames, ignore_index=True)
    chart = _dual_axis(df, "context", "context (prompt + output tokens, log scale)",
                       f"Decode latency and throughput vs context length (batch {inp.batch}, output {inp.output})",
                       device_colors(ctx))
    st.altair_chart(chart)
    cols = ["hardware", "context", "prompt", "fits", "total_gb", "ttft_ms", "tpot_ms", "tok_s_per_seq",
            "decode_tok_s_total"]
    st.dataframe(df[cols].round(3).rename(columns={
        "context": "context (tokens)", "prompt": "prompt (tokens)", "total_gb": "memory (GB)", "ttft_ms": "TTFT (ms)",
        "tpot_ms": "TPOT (ms)", "tok_s_per_seq": "tok/s per sequence", "decode_tok_s_total": "tok/s total"}),
        hide_index=True)


def render_roofline(ctx: Context) -> None:
    for spec, e in zip(ctx.specs, ctx.estimates):
        with guarded(f"roofline of {e.hardware}"):
            roofs, points, ridge = ud.roofline_frames(e, spec)
            x = alt.X("intensity:Q", title="arithmetic intensity (FLOP/byte, log)", scale=alt.Scale(type="log"))
            y = alt.Y("tflops:Q", title="performance (TFLOP/s, log)", scale=alt.Scale(type="log"))
            lines = alt.Chart(roofs).mark_line(clip=True).encode(
                x=x, y=y, color=alt.Color("roof:N", title="roof (dtype peak)", sort=list(roofs["roof"].unique()),
                                          scale=alt.Scale(scheme="dark2"), legend=alt.Legend(labelLimit=320)),
                strokeDash=alt.StrokeDash("kind:N", title="roof kind"),
                tooltip=[alt.Tooltip("roof:N"), alt.Tooltip("kind:N")])
            rp = alt.Chart(ridge).mark_point(shape="triangle-up", size=140, filled=True, color="black").encode(
                x="intensity:Q", y="tflops:Q", tooltip=[alt.Tooltip("label:N", title="ridge point")])
            rt = rp.mark_text(dy=-14, align="left", dx=6).encode(text="label:N")
            ops = alt.Chart(points).mark_point(size=90, filled=True).encode(
                x="intensity:Q", y=alt.Y("achieved_tflops:Q"),
                shape=alt.Shape("stage:N", legend=None),
                color=alt.Color("stage:N", title="operator stage", scale=alt.Scale(range=["#1f77b4", "#ff7f0e"])),
                tooltip=[alt.Tooltip("stage:N"), alt.Tooltip("op:N"), alt.Tooltip("layers:Q"),
                         alt.Tooltip("gflop:Q", title="GFLOP (all layers)", format=",.3f"),
                         alt.Tooltip("mb:Q", title="MB moved (all layers)", format=",.2f"),
                         alt.Tooltip("intensity:Q", title="FLOP/byte", format=",.2f"),
                         alt.Tooltip("achieved_tflops:Q", title="achieved TFLOP/s", format=",.2f"),
                         alt.Tooltip("time_ms:Q", title="time (ms)", format=",.4f"), alt.Tooltip("bound:N")])
            chart = alt.layer(lines, rp, rt, ops).resolve_scale(color="independent").properties(
                title=f"Roofline: {e.hardware_name} ({e.roofline.bandwidth_gbs:g} GB/s), prefill and decode operators",
                height=420)
            st.altair_chart(chart)
            st.caption(f"Ops sit at (FLOP/byte, FLOP per second achieved with the efficiency in use); prefill of "
                       f"{e.batch} x {e.prompt} tokens, first decode step at context {e.prompt}. Embedding lookups "
                       f"(no FLOPs) are not drawn.")


def render_quantization(ctx: Context) -> None:
    inp = ctx.inputs
    frames = []
    for ref, e in zip(ctx.refs, ctx.estimates):
        with guarded(f"quantization comparison on {e.hardware}"):
            frames.append(cached_quant(inp.model_ref, ref, inp.kv, inp.batch, inp.prompt, inp.output,
                                       inp.eff))
    if not frames:
        return
    df = pd.concat(frames, ignore_index=True)
    order, colors = list(ud.QUANT_FORMATS), device_colors(ctx)
    tip = [alt.Tooltip("hardware:N"), alt.Tooltip("format:N"), alt.Tooltip("bits_per_weight:Q", title="bits/weight"),
           alt.Tooltip("total_gb:Q", title="memory (GB)", format=",.2f"),
           alt.Tooltip("tpot_ms:Q", title="TPOT (ms)", format=",.3f"),
           alt.Tooltip("tok_s_per_seq:Q", title="tok/s per sequence", format=",.1f"), alt.Tooltip("fits:N")]
    mem = alt.Chart(df).mark_bar().encode(
        x=alt.X("format:N", sort=order, title="weight format"), xOffset="hardware:N",
        y=alt.Y("total_gb:Q", title="total memory (GB)"),
        color=alt.Color("hardware:N", title="device", scale=colors),
        opacity=alt.condition("datum.fits", alt.value(1.0), alt.value(0.35)), tooltip=tip,
    ).properties(title="Memory per format (faded: does not fit)", height=300)
    fast = df.dropna(subset=["tok_s_per_seq"]) if "tok_s_per_seq" in df else df.iloc[0:0]
    spd = alt.Chart(fast).mark_bar().encode(
        x=alt.X("format:N", sort=order, title="weight format"), xOffset="hardware:N",
        y=alt.Y("tok_s_per_seq:Q", title="decode tok/s per sequence"),
        color=alt.Color("hardware:N", title="device", scale=colors),
        tooltip=tip,
    ).properties(title="Decode speed per format (formats that fit)", height=300)
    c1, c2 = st.columns(2)
    c1.altair_chart(mem)
    c2.altair_chart(spd)
    st.dataframe(df.round(3).rename(columns={
        "bits_per_weight": "bits/weight", "weights_gb": "weights (GB)", "total_gb": "total (GB)",
        "ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)", "tok_s_per_seq": "tok/s per sequence",
        "tok_s_total": "tok/s total", "matmul_dtype": "matmul dtype"}), hide_index=True)


def render_validation(ctx: Context) -> None:
    recs, notes = cached_records()
    st.markdown("**Predicted against measured** (harness records in `validate/records/<device>/*.jsonl`)")
    for n in notes:
        st.caption(n)
    if recs.empty:
        st.info("no records yet: the validation harness writes them to validate/records/<device>/*.jsonl")
    else:
        ref = ud.validation_reference(recs, band=0.2)
        x = alt.X("measured_ms:Q", title="measured median (ms, log)", scale=alt.Scale(type="log"))
        band = alt.Chart(ref).mark_area(opacity=0.15, color="gray").encode(x=x, y="lo:Q", y2="hi:Q")
        diag = alt.Chart(ref).mark_line(color="gray").encode(x=x, y="predicted_ms:Q")
        pts = alt.Chart(recs).mark_circle(size=60).encode(
            x=x, y=alt.Y("predicted_ms:Q", title="predicted (ms, log)", scale=alt.Scale(type="log")),
            color=alt.Color("device:N"),
            tooltip=["device:N", "kernel:N", alt.Tooltip("measured_ms:Q", format=",.4f"),
                     alt.Tooltip("predicted_ms:Q", format=",.4f"), alt.Tooltip("error_pct:Q", format="+.1f")])
        st.altair_chart(alt.layer(band, diag, pts).properties(
            title="Predicted vs measured kernel time (line: y = x, band: ±20%)", height=400))
        st.dataframe(ud.validation_summary(recs).round(1))
    st.markdown("**Calibration in use**")
    st.dataframe(pd.DataFrame([{"device": e.hardware, "unit": e.roofline.unit,
                                "efficiency source": e.efficiency.source,
                                "bandwidth fraction": e.efficiency.bandwidth_fraction,
                                "compute fraction": e.efficiency.compute_fraction,
                                "kernel overhead (us)": e.efficiency.kernel_overhead_us,
                                "step overhead (ms)": e.efficiency.step_overhead_ms} for e in ctx.estimates]),
                 hide_index=True)
    cal = cached_calibrations()
    if cal.empty:
        st.caption("no calibration files yet (hardware_specs/calibration/<device>.yaml)")
    else:
        st.dataframe(cal, hide_index=True)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_serving_plan(model_ref, hw_ids: tuple, scenario, qps, ttft, tpot):
    return ud.serving_plan(ud.resolve_model(model_ref), list(hw_ids), scenario, qps, ttft, tpot)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_batching(model_ref, hw_ref, weights, kv, prompt, output, eff):
    return ud.batching_tradeoff(ud.resolve_model(model_ref), ud.resolve_hardware(hw_ref), weights, kv, prompt, output,
                                eff)


def render_serving(ctx: Context) -> None:
    from planner.serving import SCENARIOS

    inp = ctx.inputs
    names = list(SCENARIOS)
    c = st.columns(4)
    scenario = c[0].selectbox("Scenario", names, key="serving_scenario",
                              format_func=lambda n: f"{n}: {SCENARIOS[n].description}")
    sc = SCENARIOS[scenario]
    qps = c[1].number_input("Requests/s", min_value=0.001, max_value=10_000.0, value=float(sc.workload.qps),
                            key=f"serving_qps_{scenario}")
    ttft = c[2].number_input("TTFT p95 target (ms)", min_value=1.0, value=float(sc.ttft_p95_ms),
                             key=f"serving_ttft_{scenario}")
    tpot = c[3].number_input("TPOT p95 target (ms)", min_value=0.1, value=float(sc.tpot_p95_ms),
                             key=f"serving_tpot_{scenario}")
    hw_ids = tuple(r[1] for r in ctx.refs if r[0] == "catalog")
    if not hw_ids:
        st.info("The capacity plan runs on catalog devices: pick one in the sidebar.")
        return
    table, rejected, recs, workload = cached_serving_plan(inp.model_ref, hw_ids, scenario, qps, ttft, tpot)
    st.markdown(f"**Capacity plan** for {inp.model_name}: {workload}; targets TTFT p95 ≤ {ttft:g} ms, "
                f"TPOT p95 ≤ {tpot:g} ms. Each configuration below met them in its own continuous-batching "
                f"simulation (`planner plan`).")
    if table.empty:
        st.warning("No selected device meets the targets at this rate.")
    else:
        st.dataframe(table.round(3), hide_index=True)
    if not rejected.empty:
        st.markdown("**Rejected**")
        st.dataframe(rejected, hide_index=True)
    if recs:
        st.markdown("**Recommendations** (each computed by comparing alternatives with the model)")
        st.markdown("\n".join(f"- {r}" for r in recs))
    st.markdown("**Latency / throughput trade-off** (static batches of the sidebar's prompt and output)")
    for ref in ctx.refs:
        with guarded(f"batching {ref[1]}"):
            df = cached_batching(inp.model_ref, ref, inp.weights, inp.kv, inp.prompt, inp.output, inp.eff)
            st.caption(ref[1])
            st.dataframe(df.round(3), hide_index=True)


@st.cache_data(show_spinner=False)
def cached_accuracy():
    return ud.accuracy_results()


def render_accuracy(ctx: Context) -> None:
    from planner.accuracy.report import chart

    res, checks, default_cov = cached_accuracy()
    st.markdown("**Predicted against published measurements** (`data/measured_public.csv`: llama.cpp, TensorRT-LLM, "
                "gpt-fast on 40+ devices; runtime profiles fitted on part of the devices, checked on the rest). "
                "Regenerate with `planner accuracy`.")
    st.altair_chart(chart(res))
    st.dataframe(pd.DataFrame(checks).rename(columns={"value": "held-out %"}).round(1), hide_index=True)
    st.caption(f"Estimates that name no runtime use the kind-default efficiencies; their p10–p90 range covers "
               f"{default_cov:.0f}% of the held-out rows.")


def render_export(ctx: Context) -> None:
    inp = ctx.inputs
    st.download_button("Estimate (JSON)", ud.export_json(ctx.estimates, inp.as_dict()), file_name="estimate.json",
                       mime="application/json", key="dl_json")
    sweeps = (("batch", "Batch sweep (CSV)", "batch_sweep.csv", lambda r: cached_batch_sweep(
                  inp.model_ref, r, inp.weights, inp.kv, inp.prompt, inp.output, inp.eff)),
              ("context", "Context sweep (CSV)", "context_sweep.csv", lambda r: cached_context_sweep(
                  inp.model_ref, r, *inp.workload())),
              ("quant", "Quantization comparison (CSV)", "quantization.csv", lambda r: cached_quant(
                  inp.model_ref, r, inp.kv, inp.batch, inp.prompt, inp.output, inp.eff)))
    for key, label, name, compute in sweeps:
        with guarded(label):
            df = pd.concat([compute(r) for r in ctx.refs], ignore_index=True)
            st.download_button(label, df.to_csv(index=False), file_name=name, mime="text/csv", key=f"dl_{key}")
    qs = urlencode(st.query_params.to_dict(), safe=",")
    st.markdown("**Share this sizing**: the page address carries the inputs:")
    st.code(f"?{qs}", language=None)


# Sections after the headline; later pages (Serving, Accuracy) append (title, render_fn(ctx)).
TABS: list[tuple[str, Callable[[Context], None]]] = [
    ("Memory", render_memory), ("Batching", render_batching), ("Context length", render_context),
    ("Roofline", render_roofline), ("Quantization", render_quantization), ("Validation", render_validation),
    ("Serving", render_serving), ("Accuracy", render_accuracy), ("Export", render_export),
]


def build_context(inp: Inputs) -> Context:
    ctx = Context(inp)
    if not inp.hw_refs:
        st.info("Pick at least one device in the sidebar.")
    for ref in inp.hw_refs:
        with guarded(ref[1]):
            spec = cached_hardware(ref)
            e = cached_estimate(inp.model_ref, ref, *inp.workload())
            ctx.specs.append(spec)
            ctx.refs.append(ref)
            ctx.estimates.append(e)
    return ctx


def main() -> None:
    st.set_page_config(page_title="llm-planner", layout="wide")
    st.subheader("llm-planner · LLM inference sizing")
    model_ids, hw_ids = catalog_ids()
    init_state(model_ids, hw_ids)
    for msg in st.session_state.get("_link_errors", []):
        st.error(msg)
    st.session_state["_link_errors"] = []
    inp = render_sidebar(model_ids, hw_ids)
    ctx = build_context(inp)
    if not ctx.estimates:
        return
    with guarded("headline"):
        render_headline(ctx)
    # lazy tabs: only the open section runs (key "section"; tests select one with session_state["section"])
    for tab, (title, fn) in zip(st.tabs([t for t, _ in TABS], key="section", on_change="rerun"), TABS):
        if tab.open:
            with tab, guarded(title):
                fn(ctx)


main()
