"""The inputs: defaults, the shared link (query string <-> widget state), and the sidebar.

The link carries every input a link can carry: the sidebar (model, devices, format, KV dtype, batch, lengths,
efficiency, GPUs per replica), the open section and the capacity plan's inputs. Uploads and typed-in GPUs cannot
travel in a URL: the link then says so (`uploads=`), and a page opened from such a link warns that they are missing.
"""

from __future__ import annotations

import json
from typing import Callable

import streamlit as st

from planner.errors import PlannerError
from planner.quantization import KV_DTYPE_BYTES, WEIGHT_FORMATS, weight_format

from .common import EXL2_CHOICES, FORMAT_HELP, KV_HELP, TP_HELP, Inputs, cached_hardware, cached_model, esc

BATCH_MAX = 1024
LENGTH_MAX = 2_097_152  # tokens; the model's own maximum is checked by the core (a warning)
TP_CHOICES = (1, 2, 4, 8)
SECTIONS = ("Memory", "Capacity plan", "Batching", "Context length", "Roofline", "Quantization", "Validation",
            "Accuracy", "Export")
DEFAULTS = {"model": "llama-3.1-8b", "hardware": ["h100-sxm", "rtx-4090"], "weights": "fp16", "kv_dtype": "fp16",
            "batch": 1, "prompt": 512, "output": 128, "efficiency": "auto", "tp": 1}
# query-string name -> widget key (the shared link carries these)
QUERY_KEYS = {"model": "model", "hardware": "hardware", "weights": "weights", "kv": "kv_dtype", "batch": "batch",
              "prompt": "prompt", "output": "output", "eff": "efficiency", "tp": "tp", "section": "section",
              "sc": "serving_scenario", "load": "serving_load", "users": "serving_users", "qps": "serving_qps",
              "ttft": "serving_ttft", "tpot": "serving_tpot", "plan_hw": "serving_filter",
              "allfmt": "serving_all_formats"}
EFFICIENCY_LABELS = {"auto": "calibrated (if a calibration file exists, else defaults)",
                     "default": "defaults (device spec / unit kind)", "datasheet": "datasheet peaks (efficiency 1.0)",
                     "runtime:llamacpp": "llama.cpp (fitted runtime profile)",
                     "runtime:vllm": "vLLM (fitted runtime profile)",
                     "runtime:sglang": "SGLang (runtime profile: vLLM's pool and its own rows)",
                     "runtime:trtllm": "TensorRT-LLM (fitted runtime profile)",
                     "runtime:tgi": "TGI (fitted runtime profile)",
                     "runtime:lmdeploy": "LMDeploy TurboMind (fitted runtime profile)",
                     "runtime:exllamav2": "ExLlamaV2 (fitted runtime profile)",
                     "runtime:gpt-fast": "gpt-fast / torch.compile (fitted runtime profile)",
                     "runtime:hf-eager": "HF transformers eager (physical estimate, no measurement)",
                     "runtime:deepspeed-mii": "DeepSpeed-MII (no measurement: serving-family pool, wide range)"}


def _int_param(raw: str, name: str, lo: int, hi: int) -> int:
    try:
        v = int(raw)
    except ValueError:
        raise PlannerError(f"link parameter {name}: must be an integer {lo}..{hi}, got {raw!r}") from None
    if not lo <= v <= hi:
        raise PlannerError(f"link parameter {name}: must be an integer {lo}..{hi}, got {v}")
    return v


def _float_param(raw: str, name: str, lo: float, hi: float) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise PlannerError(f"link parameter {name}: must be a number {lo:g}..{hi:g}, got {raw!r}") from None
    if not (lo <= v <= hi):  # also refuses nan and inf
        raise PlannerError(f"link parameter {name}: must be a number {lo:g}..{hi:g}, got {raw!r}")
    return v


def state_from_query(qp: dict, model_ids: list[str], hw_ids: list[str]) -> tuple[dict, list[str]]:
    """Widget values from a shared link's query string (over the defaults); each bad parameter is one error line
    and keeps its default. Serving inputs and the section are only set when the link names them."""
    from planner.serving import SCENARIOS

    values = dict(DEFAULTS)
    values["hardware"] = [h for h in DEFAULTS["hardware"] if h in hw_ids] or hw_ids[:1]
    errors: list[str] = []

    def take(name: str, parse: Callable[[str], object]):
        if name not in qp:
            return
        try:
            values[QUERY_KEYS[name]] = parse(qp[name])
        except PlannerError as exc:
            kept = values.get(QUERY_KEYS[name])
            errors.append(f"{exc}" + (f" (kept {kept!r})" if kept is not None else ""))

    def one_of(name: str, allowed, noun: str = "value") -> Callable[[str], str]:
        def parse(raw):
            if raw not in allowed:
                shown = list(map(str, allowed))
                raise PlannerError(f"link parameter {name}: unknown {noun} '{raw[:60]}'; allowed: "
                                   + (", ".join(shown) if len(shown) <= 12 else ", ".join(shown[:12]) + ", ..."))
            return raw
        return parse

    def devices(name: str, required: bool):
        """A comma-separated device list: unknown ids are left out with a note; `required`: none left is an error."""
        def parse(raw):
            ids = [h.strip() for h in raw.split(",") if h.strip()]
            bad = [h[:60] for h in ids if h not in hw_ids]
            if bad:
                errors.append(f"link parameter {name}: unknown device(s) {', '.join(bad)} left out")
            good = [h for h in ids if h in hw_ids]
            if required and not good:
                raise PlannerError(f"link parameter {name}: no known device")
            return good
        return parse

    hardware, plan_hw = devices("hardware", True), devices("plan_hw", False)

    def weights(raw):
        try:
            return weight_format(raw).name
        except PlannerError as exc:
            raise PlannerError(f"link parameter weights: {exc}") from None

    take("model", one_of("model", model_ids, "model"))
    take("hardware", hardware)
    take("weights", weights)
    take("kv", one_of("kv", list(KV_DTYPE_BYTES), "dtype"))
    take("batch", lambda r: _int_param(r, "batch", 1, BATCH_MAX))
    take("prompt", lambda r: _int_param(r, "prompt", 1, LENGTH_MAX))
    take("output", lambda r: _int_param(r, "output", 1, LENGTH_MAX))
    take("eff", one_of("eff", list(EFFICIENCY_LABELS)))
    take("tp", lambda r: int(one_of("tp", [str(t) for t in TP_CHOICES])(r)))
    take("section", one_of("section", list(SECTIONS)))
    take("sc", one_of("sc", list(SCENARIOS)))
    take("load", one_of("load", ["users", "rate"]))
    take("users", lambda r: _int_param(r, "users", 1, 1_000_000))
    take("qps", lambda r: _float_param(r, "qps", 0.001, 10_000))
    take("ttft", lambda r: _float_param(r, "ttft", 1, 600_000))
    take("tpot", lambda r: _float_param(r, "tpot", 0.1, 60_000))
    take("plan_hw", plan_hw)
    take("allfmt", lambda r: one_of("allfmt", ["0", "1"])(r) == "1")
    if "uploads" in qp:
        what = ", ".join(w for w in str(qp["uploads"]).split(",") if w in ("model", "hardware", "custom-gpu"))
        errors.append(f"this link was shared from a page with uploaded or typed-in inputs ({what or 'some'}), "
                      f"which a link cannot carry: add them again in the sidebar; until then the page shows the "
                      f"catalog inputs named in the link")
    return values, errors


def init_state(model_ids: list[str], hw_ids: list[str]) -> None:
    """On a session's first run, seed every widget from the query string (a shared link) or the defaults."""
    if st.session_state.get("_seeded"):
        return
    values, errors = state_from_query(st.query_params.to_dict(), model_ids, hw_ids)
    for key, v in values.items():
        st.session_state[key] = v
    st.session_state["_link_errors"] = errors
    st.session_state.setdefault("custom_gpus", [])
    st.session_state["_seeded"] = True


def link_state(inp: Inputs) -> dict:
    """The query string for the current state (what the address bar carries)."""
    ss = st.session_state
    want = {"model": inp.catalog_model, "hardware": ",".join(r[1] for r in inp.hw_refs if r[0] == "catalog"),
            "weights": inp.weights, "kv": inp.kv, "batch": str(inp.batch), "prompt": str(inp.prompt),
            "output": str(inp.output), "eff": inp.eff, "tp": str(inp.tp)}
    if ss.get("section"):
        want["section"] = ss["section"]
    for q, key in (("sc", "serving_scenario"), ("load", "serving_load"), ("users", "serving_users"),
                   ("qps", "serving_qps"), ("ttft", "serving_ttft"), ("tpot", "serving_tpot")):
        if ss.get(key) is not None:
            v = ss[key]
            want[q] = f"{v:g}" if isinstance(v, float) else str(v)
    if ss.get("serving_filter"):
        want["plan_hw"] = ",".join(ss["serving_filter"])
    if ss.get("serving_all_formats"):
        want["allfmt"] = "1"
    missing = link_missing(inp)
    if missing:
        want["uploads"] = ",".join(missing)
    return want


def link_missing(inp: Inputs) -> list[str]:
    """What the page shows that a link cannot carry."""
    out = []
    if inp.uploaded_model:
        out.append("model")
    if any(r[0] == "upload" for r in inp.hw_refs):
        out.append("hardware")
    if any(r[0] == "custom" for r in inp.hw_refs):
        out.append("custom-gpu")
    return out


def write_query(inp: Inputs) -> None:
    """Keep the URL's query string equal to the state, so the address bar is the shareable link."""
    want = link_state(inp)
    if st.query_params.to_dict() != want:
        st.query_params.from_dict(want)


def _custom_gpu_form() -> None:
    """Type a GPU's numbers (no YAML): added to the compared devices for this session."""
    with st.expander("... or type a custom GPU's numbers"):
        with st.form("custom_gpu", clear_on_submit=False, border=False):
            name = st.text_input("Name", value="My GPU", max_chars=60, key="cg_name")
            c = st.columns(2)
            mem = c[0].number_input("Memory (GB)", 1.0, 4096.0, 48.0, key="cg_mem")
            bw = c[1].number_input("Bandwidth (GB/s)", 1.0, 100_000.0, 960.0, key="cg_bw")
            fp16 = c[0].number_input("fp16 TFLOP/s (dense)", 0.1, 100_000.0, 180.0, key="cg_fp16")
            int8 = c[1].number_input("int8 TOP/s (0 = none)", 0.0, 200_000.0, 0.0, key="cg_int8")
            fp8 = c[0].number_input("fp8 TFLOP/s (0 = none)", 0.0, 200_000.0, 0.0, key="cg_fp8")
            tdp = c[1].number_input("Board power (W, 0 = unknown)", 0.0, 5000.0, 0.0, key="cg_tdp")
            price = c[0].number_input("$ per hour (0 = unknown)", 0.0, 1000.0, 0.0, key="cg_price")
            if st.form_submit_button("Add this GPU"):
                args = {"name": name, "memory_gb": mem, "bandwidth_gbs": bw, "fp16_tflops": fp16,
                        "int8_tflops": int8 or None, "fp8_tflops": fp8 or None, "tdp_w": tdp or None,
                        "usd_per_hour": price or None}
                try:
                    spec = cached_hardware(("custom", json.dumps(args, sort_keys=True)))
                except PlannerError as exc:
                    st.error(f"custom GPU: {exc}")
                else:
                    keep = [g for g in st.session_state["custom_gpus"]
                            if cached_hardware(("custom", g)).id != spec.id]
                    st.session_state["custom_gpus"] = keep + [json.dumps(args, sort_keys=True)]
        if st.session_state.get("custom_gpus"):
            names = [cached_hardware(("custom", g)).name for g in st.session_state["custom_gpus"]]
            st.caption("Added: " + esc(", ".join(names)))
            if st.button("Remove the typed-in GPUs", key="cg_clear"):
                st.session_state["custom_gpus"] = []


def render_sidebar(model_ids: list[str], hw_ids: list[str]) -> Inputs:
    with st.sidebar:
        st.header("Inputs")
        st.selectbox("Model", model_ids, key="model")
        up = st.file_uploader("... or a Hugging Face config.json", type=["json"], key="model_upload",
                              help="Replaces the catalog model while uploaded; a summary of the parse shows above "
                                   "the results.")
        st.multiselect("Devices to compare", hw_ids, key="hardware")
        hw_ups = st.file_uploader("... plus hardware spec YAMLs", type=["yaml", "yml"], accept_multiple_files=True,
                                  key="hardware_upload", help="Same schema as hardware_specs/*.yaml.")
        _custom_gpu_form()
        formats = list(WEIGHT_FORMATS) + list(EXL2_CHOICES)
        if st.session_state.get("weights") not in formats:  # another EXL2 bitrate from a link (weight_format parsed it)
            formats.append(st.session_state["weights"])
        st.selectbox("Weight format", formats, key="weights",
                     format_func=lambda f: f"{f}  ({weight_format(f).bits_per_weight:.3g} bits/weight)",
                     help="; ".join(f"{k}: {v}" for k, v in FORMAT_HELP.items()))
        st.selectbox("KV-cache dtype", list(KV_DTYPE_BYTES), key="kv_dtype", help=KV_HELP)
        st.selectbox("GPUs per replica (tensor parallel)", TP_CHOICES, key="tp", help=TP_HELP)
        st.slider("Batch size (concurrent sequences)", 1, BATCH_MAX, key="batch")
        st.number_input("Prompt length (tokens)", min_value=1, max_value=LENGTH_MAX, step=128, key="prompt")
        st.number_input("Output length (tokens)", min_value=1, max_value=LENGTH_MAX, step=32, key="output")
        st.radio("Efficiencies (or the serving runtime)", list(EFFICIENCY_LABELS), key="efficiency",
                 format_func=EFFICIENCY_LABELS.get,
                 help="A runtime profile is fitted to published measurements of that runtime and gives its own "
                      "p10-p90 range; devices of a class it was not fitted on say so.")
        share_note = st.empty()

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
            spec = cached_hardware(ref)
            hw_refs.append(ref)
            if spec.id.endswith("-uploaded"):
                st.info(f"hardware upload {esc(f.name)}: its id is a catalog device's, so it is shown as "
                        f"{esc(spec.id)} (its own numbers, not the catalog's)")
        except PlannerError as exc:
            st.error(f"hardware upload: {exc}")
    hw_refs += [("custom", g) for g in st.session_state.get("custom_gpus", [])]
    inp = Inputs(model_ref, model_name, hw_refs, st.session_state["weights"], st.session_state["kv_dtype"],
                 int(st.session_state["batch"]), int(st.session_state["prompt"]), int(st.session_state["output"]),
                 st.session_state["efficiency"], int(st.session_state.get("tp") or 1), catalog_model)
    missing = link_missing(inp)
    if missing:
        share_note.warning("The address bar carries these inputs except the " + " and ".join(
            {"model": f"uploaded model (the link names the catalog model {catalog_model})",
             "hardware": "uploaded device specs", "custom-gpu": "typed-in GPUs"}[w] for w in missing)
            + ": whoever opens the link is told to add them again.")
    else:
        share_note.caption("The address bar carries every input and the open section: copy it to share this "
                           "sizing.")
    return inp

