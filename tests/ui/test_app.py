"""The Streamlit app through streamlit.testing.v1.AppTest: default page, directions of change, does-not-fit, bad
uploads, the shared-link query string, and every section.

Hand-derived numbers used below (published configs, bytes = params x 2 for fp16):
  Llama-3.1-8B (config.json: h 4096, I 14336, 32 layers, 32 heads / 8 KV heads x 128, vocab 128256, untied):
    embeddings + LM head 2 x 128256 x 4096            =   1,050,673,152
    per layer: q,o 2 x 4096^2 + k,v 2 x 4096 x 1024   =      41,943,040
               MLP 3 x 4096 x 14336                   =     176,160,768
               2 RMSNorms 2 x 4096                    =           8,192
    32 layers + final norm 4096                       ->  8,030,261,248 params (model card: 8.03B)
    fp16 weights = 16.0605 GB;  KV per token = 2 (K,V) x 32 layers x 8 x 128 x 2 B = 131,072 B
  Llama-3.1-70B: 70.55B params (model card "70.6B") -> fp16 weights ~141.1 GB > 80 GB (H100) and 24 GB (RTX 4090)
  Mistral-7B-v0.1 (h 4096, I 14336, 32 layers, 8 KV heads, vocab 32000, untied):
    2 x 32000 x 4096 + 32 x 218,111,488 + 4096 = 7,241,732,096 params -> fp16 weights 14.4835 GB
  Decode of an 8B fp16 model at batch 1 is memory bound, so TPOT(RTX 4090) / TPOT(H100) is at most the bandwidth
  ratio 3350 / 1008 = 3.32 (datasheets); the same fixed per-step/launch overheads on both pull it below that.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")
SECTIONS = ["Memory", "Capacity plan", "Batching", "Context length", "Roofline", "Quantization", "Validation",
            "Accuracy", "Export"]

MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096, "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
}


def run_app(query: dict | None = None, section: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    if query:
        at.query_params.update(query)
    if section:
        at.session_state["section"] = section
    return at.run()


def no_failure(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def num(text: str) -> float:
    """'1,172.3' / '6.82 ms' / '17.2 GB' -> float."""
    m = re.search(r"-?[\d,]*\.?\d+", text)
    assert m, f"no number in {text!r}"
    return float(m.group(0).replace(",", ""))


def metric_values(at: AppTest, label: str) -> list[str]:
    """The values of every metric with this label (one per device, in page order)."""
    return [m.value for m in at.metric if m.label == label or m.label.startswith(label + " (")]


def first(at: AppTest, label: str) -> float:
    return num(metric_values(at, label)[0])


def table(at: AppTest, column: str):
    """The first table on the page that has this column."""
    for df in at.dataframe:
        if column in df.value.columns:
            return df.value
    raise AssertionError(f"no table with column {column!r}: {[list(d.value.columns) for d in at.dataframe]}")


def test_default_page_answers_with_hand_derived_memory():
    at = run_app()
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    # two default devices, each with all headline numbers and a verdict
    for label in ("VRAM", "TTFT", "Time per output token", "Tokens/s per sequence", "Tokens/s total"):
        vals = metric_values(at, label)
        assert len(vals) == 2 and all(v != "—" for v in vals), (label, vals)
    assert len(at.success) == 2 and all("Fits" in s.value for s in at.success)
    # the Memory section's table against the hand derivation in the module docstring
    mem = table(at, "weights (GB)")
    row = mem[mem["device"] == "h100-sxm"].iloc[0]
    assert row["weights (GB)"] == pytest.approx(8_030_261_248 * 2 / 1e9, rel=1e-3)
    assert row["KV per token (bytes)"] == pytest.approx(131_072, rel=1e-9)
    # batch 1, 640 tokens; the page shows GB at two decimals
    assert row["KV cache (GB)"] == pytest.approx(131_072 * (512 + 128) / 1e9, abs=0.005)
    assert row["usable (GB)"] == pytest.approx(85.0)  # H100 SXM: the 85.0e9 B CUDA exposes (visible_gb)
    # the memory chart is there, with a title and unit-bearing axis
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert "Memory" in json.dumps(spec["title"])
    assert "GB" in json.dumps(spec)


def test_changes_move_the_numbers_in_the_expected_direction():
    at = run_app({"hardware": "h100-sxm", "batch": "1"})
    no_failure(at)
    base = {k: first(at, k) for k in ("VRAM", "TTFT", "Time per output token", "Tokens/s total")}

    at.slider(key="batch").set_value(8).run()
    no_failure(at)
    b8 = {k: first(at, k) for k in base}
    assert b8["Tokens/s total"] > 5 * base["Tokens/s total"]  # memory-bound decode: batching is nearly free
    assert b8["Time per output token"] >= base["Time per output token"]
    assert b8["TTFT"] > base["TTFT"] and b8["VRAM"] > base["VRAM"]
    at.slider(key="batch").set_value(1).run()

    at.selectbox(key="weights").set_value("int4-g128").run()
    no_failure(at)
    assert first(at, "VRAM") < 0.5 * base["VRAM"]  # 4.125 vs 16 bits per weight
    assert first(at, "Time per output token") < base["Time per output token"]  # fewer bytes per decode step
    at.selectbox(key="weights").set_value("fp16").run()

    at.selectbox(key="model").set_value("llama-3.1-70b").run()
    no_failure(at)
    assert first(at, "VRAM") > 5 * base["VRAM"]
    at.selectbox(key="model").set_value("llama-3.1-8b").run()

    at.number_input(key="prompt").set_value(4096).run()
    assert first(at, "TTFT") > 4 * base["TTFT"]
    at.number_input(key="prompt").set_value(512).run()

    at.radio(key="efficiency").set_value("datasheet").run()
    assert first(at, "Time per output token") < base["Time per output token"]  # efficiency 1.0, no overheads
    at.radio(key="efficiency").set_value("auto").run()

    at.multiselect(key="hardware").set_value(["h100-sxm", "rtx-4090"]).run()
    no_failure(at)
    h100, rtx = (num(v) for v in metric_values(at, "Time per output token"))
    assert h100 == pytest.approx(base["Time per output token"], rel=1e-6)
    assert 2.5 < rtx / h100 < 3350 / 1008  # bandwidth-bound ratio, see module docstring


def test_a_configuration_that_does_not_fit_says_so_and_still_shows_the_breakdown():
    at = run_app({"model": "llama-3.1-70b", "hardware": "rtx-4090,h100-sxm"})
    no_failure(at)
    errors = [e.value for e in at.error]
    assert len(errors) == 2 and all(e.startswith("Does not fit: needs") and "GB short" in e for e in errors), errors
    assert metric_values(at, "Time per output token") == ["—", "—"]
    mem = table(at, "weights (GB)")
    assert (mem["weights (GB)"] > 140).all() and (mem["fits"] == "no").all()
    # the roofline still renders for a configuration that does not fit
    at.session_state["section"] = "Roofline"
    at.run()
    no_failure(at)
    assert len(at.get("vega_lite_chart")) == 2


def test_a_context_beyond_the_model_maximum_is_a_warning_and_impossible_link_values_an_error():
    at = run_app({"hardware": "h100-sxm", "prompt": "200000", "output": "0"})
    no_failure(at)
    assert any(e.value.startswith("link parameter output: must be an integer 1..") for e in at.error)
    assert any("exceeds llama-3.1-8b's maximum of 131072 tokens" in w.value for w in at.warning)


def test_uploads_good_and_malformed():
    at = run_app({"hardware": "h100-sxm"})
    at.file_uploader(key="model_upload").set_value(("config.json", b'{"hidden_size": 4096,', "application/json"))
    at.run()
    no_failure(at)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "malformed JSON in config.json" in errors[0] and "\n" not in errors[0]
    assert metric_values(at, "Time per output token")[0] != "—"  # the page still answers (catalog model)

    at.file_uploader(key="model_upload").set_value(("config.json", b'{"model_type": "gpt2"}', "application/json"))
    at.run()
    assert "unsupported architecture" in at.error[0].value

    at.file_uploader(key="model_upload").set_value(
        ("mistral-7b.json", json.dumps(MISTRAL_7B).encode(), "application/json"))
    at.run()
    no_failure(at)
    assert not at.error
    assert "mistral-7b" in at.markdown[0].value
    assert table(at, "weights (GB)").iloc[0]["weights (GB)"] == pytest.approx(7_241_732_096 * 2 / 1e9, rel=1e-3)
    # the parse summary confirms the upload: 7.24 B parameters, KV 2 x 32 x 8 x 128 x 2 B = 131,072 bytes per token
    summary = " ".join(c.value for c in at.caption if c.value.startswith("Uploaded model"))
    assert "7.24 B parameters" in summary and "131,072 bytes per token" in summary and "32 layers" in summary

    at.file_uploader(key="hardware_upload").set_value([("bad.yaml", b"id: [unclosed", "application/x-yaml"),
                                                        ("nomem.yaml", b"id: x\nname: X\n", "application/x-yaml")])
    at.run()
    no_failure(at)
    errors = [e.value for e in at.error]
    assert any("malformed YAML in bad.yaml" in e for e in errors), errors
    assert any("nomem.yaml" in e and "memory" in e for e in errors), errors
    assert len(metric_values(at, "TTFT")) == 1  # the catalog device still answers
    assert all("Traceback" not in e for e in errors)

    good = Path(__file__).resolve().parents[2] / "hardware_specs" / "h100-sxm.yaml"
    text = good.read_text().replace("id: h100-sxm", "id: my-h100").replace("capacity_gb: 80", "capacity_gb: 40")\
        .replace("visible_gb: 85.0", "visible_gb: 42.5")
    at.file_uploader(key="hardware_upload").set_value(("my-h100.yaml", text.encode(), "application/x-yaml"))
    at.run()
    no_failure(at)
    assert not at.error
    assert [m.label for m in at.metric if m.label.startswith("VRAM")] == ["VRAM (of 85 GB)", "VRAM (of 42 GB)"]  # usable GB: visible_gb 85.0 and 42.5


def test_the_shared_link_restores_the_inputs_and_bad_parameters_are_one_line_each():
    q = {"model": "qwen2.5-7b", "hardware": "l40s,a100-80gb-sxm", "weights": "int8", "kv": "fp8", "batch": "16",
         "prompt": "2048", "output": "256", "eff": "datasheet"}
    at = run_app(q)
    no_failure(at)
    assert not at.error
    assert at.selectbox(key="model").value == "qwen2.5-7b"
    assert at.multiselect(key="hardware").value == ["l40s", "a100-80gb-sxm"]
    assert at.selectbox(key="weights").value == "int8" and at.selectbox(key="kv_dtype").value == "fp8"
    assert at.slider(key="batch").value == 16
    assert at.number_input(key="prompt").value == 2048 and at.number_input(key="output").value == 256
    assert at.radio(key="efficiency").value == "datasheet"
    assert "batch 16 · prompt 2,048 · output 256" in at.markdown[0].value
    assert at.query_params["batch"] == ["16"] or at.query_params["batch"] == "16"
    # a change is written back to the query string
    at.slider(key="batch").set_value(32).run()
    assert at.query_params["batch"] in ("32", ["32"])

    bad = run_app({"model": "no-such-model", "batch": "abc", "hardware": "h100-sxm,nope", "kv": "fp7"})
    no_failure(bad)
    errors = [e.value for e in bad.error]
    assert any(e.startswith("link parameter model: unknown model 'no-such-model'") for e in errors), errors
    assert any(e.startswith("link parameter batch: must be an integer") for e in errors), errors
    assert any("unknown device(s) nope" in e for e in errors), errors
    assert any(e.startswith("link parameter kv: unknown dtype 'fp7'") for e in errors), errors
    assert bad.slider(key="batch").value == 1 and bad.multiselect(key="hardware").value == ["h100-sxm"]
    assert metric_values(bad, "TTFT")  # the page still answers with the defaults


def test_an_exl2_bitrate_from_a_link_is_offered_and_estimated():
    """EXL2 at any 2-8 bits per weight parses (planner.quantization.weight_format): a link's bitrate outside the
    sidebar's presets joins the choices (labelled with its bits), and the page estimates it (Llama-2-70B at 2.5 bpw,
    22.11 GB of weights, fits a 24 GB RTX 4090: tests/planner/test_memory.py derives the bytes by hand)."""
    at = run_app({"model": "llama-2-70b", "hardware": "rtx-4090", "weights": "exl2_2.5bpw"})
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    sb = at.selectbox(key="weights")
    assert sb.value == "exl2-2.5"
    assert "exl2-4  (4 bits/weight)" in sb.options and "exl2-2.5  (2.5 bits/weight)" in sb.options
    assert metric_values(at, "TTFT")


@pytest.mark.parametrize("section", SECTIONS)
def test_every_section_renders_with_titled_charts(section):
    at = run_app({"hardware": "h100-sxm,rtx-4090"}, section)
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    for chart in at.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        assert spec.get("title"), section
        text = json.dumps(spec)
        assert '"title": "' in text and ("(" in text)  # axis titles carry units in parentheses
        assert '"tooltip"' in text
    if section == "Roofline":
        text = json.dumps([json.loads(c.proto.spec) for c in at.get("vega_lite_chart")])
        assert '"type": "log"' in text and "ridge" in text
    if section == "Export":
        assert len(at.get("download_button")) == 4
    if section == "Validation":
        # the committed CPU records, predicted with the committed calibration (what `planner validate check` scores)
        summary = table(at, "records")
        assert "cpu-amd-epyc-2c" in summary.index and int(summary.loc["cpu-amd-epyc-2c", "records"]) >= 100
        # neither selected device has kernel records: the page says so
        assert any("None of them covers the selected devices (h100-sxm, rtx-4090)" in i.value for i in at.info)


def test_validation_section_reads_records(tmp_path, monkeypatch):
    import streamlit as st

    from planner import ui_data

    dev = tmp_path / "h100-sxm"
    dev.mkdir()
    (dev / "gemm.jsonl").write_text("\n".join([
        json.dumps({"kernel": "gemm", "predicted_ms": 1.0, "measured": {"median_ms": 1.25}}),
        json.dumps({"kernel": "attn", "predicted_ms": 2.0, "measured": {"median_ms": 1.6}}),
        json.dumps({"kernel": "no-measure", "predicted_ms": 2.0}),
        "{not json",
    ]))
    monkeypatch.setattr(ui_data, "RECORDS_DIR", tmp_path)
    st.cache_data.clear()
    try:
        at = run_app({"hardware": "h100-sxm"}, "Validation")
        no_failure(at)
        assert not at.info or not any("no records yet" in i.value for i in at.info)
        summary = table(at, "records")
        assert int(summary.loc["h100-sxm", "records"]) == 2
        assert summary.loc["h100-sxm", "median |error| (%)"] == pytest.approx(22.5, abs=0.05)  # |-20%|, |+25%|
        captions = " ".join(c.value for c in at.caption)
        assert "Selected and measured: h100-sxm" in captions
        assert "1 unreadable" in captions and "1 record(s) without" in captions
    finally:
        st.cache_data.clear()


def test_headline_shows_the_p10_p90_range():
    # no runtime named: the kind-default range (hardware_specs/defaults/intervals.yaml) is shown under the numbers
    at = run_app({"hardware": "h100-sxm"})
    no_failure(at)
    assert any("p10–p90 range" in c.value for c in at.caption)


def test_capacity_plan_plans_and_recomputes_on_a_tighter_target():
    # every plan row met its SLOs in its own simulation; tightening TPOT p95 to 8 ms changes the plan: Llama-3.1-8B
    # in 16-bit on one RTX 4090 cannot decode faster than 8.03e9 x 2 B / 1008 GB/s = 15.9 ms per token, so that
    # device now needs tensor parallelism (or is rejected)
    at = run_app({"hardware": "h100-sxm,rtx-4090", "plan_hw": "h100-sxm,rtx-4090", "load": "rate", "qps": "10"},
                 "Capacity plan")
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    plan = table(at, "TPOT p95 (ms)")
    assert set(plan["device"]) <= {"h100-sxm", "rtx-4090"} and len(plan) >= 1
    assert (plan["TPOT p95 (ms)"] <= 50).all() and (plan["TTFT p95 (ms)"] <= 500).all()
    assert (plan["weights"] == "fp16").all()  # the sidebar's format, unless "also search other formats"
    at.number_input(key="serving_tpot").set_value(8.0).run()
    no_failure(at)
    before = plan
    plan = table(at, "TPOT p95 (ms)")
    assert (plan["TPOT p95 (ms)"] <= 8).all()
    for _, r in plan[plan["device"] == "rtx-4090"].iterrows():
        assert r["TP"] > 1
    assert not plan.equals(before)


def test_runtime_profile_choice_changes_the_numbers_and_the_range():
    # llama.cpp's fitted NVIDIA profile (hardware_specs/runtimes/llamacpp.yaml) replaces the kind defaults: the
    # headline changes and its range comes from that profile; the shared link carries the choice
    base = run_app({"hardware": "rtx-4090", "weights": "q4_k_m"})
    at = run_app({"hardware": "rtx-4090", "weights": "q4_k_m", "eff": "runtime:llamacpp"})
    no_failure(at)
    assert at.radio(key="efficiency").value == "runtime:llamacpp"
    assert metric_values(at, "Time per output token") != metric_values(base, "Time per output token")
    assert any("llamacpp profile" in c.value for c in at.caption)
    assert at.query_params["eff"] == ["runtime:llamacpp"] or at.query_params["eff"] == "runtime:llamacpp"


@pytest.mark.parametrize("runtime", ["vllm", "sglang", "deepspeed-mii", "lmdeploy"])
def test_every_serving_engine_profile_is_offered(runtime):
    # the serving engines' profiles (vLLM, SGLang, and DeepSpeed-MII with no measurement) are choices too: the
    # headline takes the engine's profile and says so, and the link carries the choice
    at = run_app({"hardware": "h100-sxm", "eff": f"runtime:{runtime}"})
    no_failure(at)
    assert at.radio(key="efficiency").value == f"runtime:{runtime}"
    assert any(f"{runtime} profile" in c.value for c in at.caption), [c.value for c in at.caption]
    # an engine with an OpenAI server adds its request path to the TTFT a client sees (runtimes.REQUEST_PATH_MS)
    server = [c.value for c in at.caption if "OpenAI server" in c.value]
    assert bool(server) == (runtime in ("vllm", "sglang")), server
    # TurboMind samples the first token in a decode step, which its TTFT holds (runtimes.FIRST_TOKEN_FROM_DECODE)
    step = [c.value for c in at.caption if "TTFT holds one decode step" in c.value]
    assert bool(step) == (runtime == "lmdeploy"), step


@pytest.mark.parametrize("section", ["Batching", "Context length", "Quantization"])
def test_sections_follow_the_runtime_profile(section):
    at = run_app({"hardware": "rtx-4090", "weights": "q4_k_m", "eff": "runtime:llamacpp"}, section)
    no_failure(at)
    assert not at.error, [e.value for e in at.error]


def test_roofline_names_the_mixed_input_kernels_of_gpt_oss_under_vllm():
    """gpt-oss-120b as published (bf16 tensors, MXFP4 experts) under the vLLM profile on an H100: the Roofline
    section prints the report's sentence on the experts' mixed-input kernels (planner.report.mixed_input_note), the
    same as `estimate --explain`; a dense bf16 model under the same profile prints none."""
    from planner.estimate import estimate
    from planner.report import mixed_input_note

    q = {"model": "gpt-oss-120b", "hardware": "h100-sxm", "weights": "bf16", "eff": "runtime:vllm"}
    at = run_app(q, "Roofline")
    no_failure(at)
    want = mixed_input_note(estimate("gpt-oss-120b", "h100-sxm", "bf16", runtime="vllm"))
    assert want.startswith("Mixed-input (Marlin-style) kernels run the routed experts (mxfp4)")
    assert any(c.value == want for c in at.caption), [c.value for c in at.caption]
    at = run_app({"model": "llama-3.1-8b", "hardware": "h100-sxm", "eff": "runtime:vllm"}, "Roofline")
    no_failure(at)
    assert not any(c.value.startswith("Mixed-input") for c in at.caption)
