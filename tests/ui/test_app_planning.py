"""The web UI's fixes and planning questions (issue 14) and hostile uploads (issue 15), through AppTest.

Hand-derived numbers used below (datasheets and published configs):
  Llama-3.1-8B fp16 weights 8,030,261,248 x 2 B = 16.06 GB (tests/ui/test_app.py docstring). Decode at batch 1
  reads every weight once per token, so TPOT >= 16.06 GB / bandwidth: on a spec with 1,000 GB/s that is >= 16.06 ms,
  on the catalog H100 (3,350 GB/s) >= 4.79 ms -- an uploaded H100 copy with 1,000 GB/s must show the former.
  Llama-3.1-70B: 70,553,706,496 params -> fp16 141.11 GB. Over TP 2 each H100 holds 70.55 GB of weights + runtime
  overhead 1.31 GB (CUDA context 0.8 + NCCL 0.45 + CUDA-graph pool 512 x (2 x 8,192 + 3 x 28,672 / 2) x 2 B =
  0.06) + KV 327,680 B/token x 640 tokens / 2 = 0.10 GB + activations 0.06 GB -> 72.03 GB of the 85.0 GB CUDA
  exposes: fits, and TP 1 (141 GB) does not, so the smallest H100 setup is 2 devices.
  In int4-g128 (4.125 bits) its weights take > 70.55e9 x 4.125 / 8 B = 36.4 GB > 24 GB (RTX 4090): one replica
  needs at least 2 RTX 4090s.
  H200 vs H100: same Hopper compute, 4,800 vs 3,350 GB/s, 141 vs 80 GB: at batch 64 decode of an 8B model is
  memory bound (weights + KV reads), so the H200's TPOT is lower.
  Prices (hardware_specs/*.yaml): H100 SXM $2.99, H200 $3.99 per device-hour.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner import estimate, ui_data as ud
from planner.serving.static_batching import knee_batch
from tests.ui.test_app import MISTRAL_7B, metric_values, no_failure, num, run_app, table

REPO = Path(__file__).resolve().parents[2]
H100_YAML = (REPO / "hardware_specs" / "h100-sxm.yaml").read_text()


def _h100_copy(bandwidth: str = "1000", name: str | None = None) -> bytes:
    text = re.sub(r"bandwidth_gbs: [0-9.]+", f"bandwidth_gbs: {bandwidth}", H100_YAML, count=1)
    if name is not None:
        text = re.sub(r"^name: .*$", f"name: {json.dumps(name)}", text, count=1, flags=re.M)
    return text.encode()


def _all_text(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [e.value for e in at.error]
    parts += [w.value for w in at.warning] + [i.value for i in at.info] + [s.value for s in at.success]
    parts += [f"{m.label} {m.value}" for m in at.metric]
    for df in at.dataframe:
        parts.append(df.value.to_string())
    return "\n".join(parts)


def test_knee_batch_is_where_the_per_sequence_time_equals_the_fixed_time():
    # latency a + b B has Kleinrock power B / (a + b B)^2, largest at B = a / b: 2.0 s / 0.1 s = 20
    b = list(range(1, 101))
    assert knee_batch(b, [2.0 + 0.1 * x for x in b]) == 20
    assert knee_batch(b, [2.0 + 0.1 * x for x in b], [x <= 12 for x in b]) == 12  # only batches that fit
    assert knee_batch([1, 2], [float("nan"), 0.0]) is None


def test_one_knee_for_one_set_of_inputs_in_batching_and_capacity_plan():
    q = {"hardware": "h100-sxm", "plan_hw": "h100-sxm", "load": "rate", "qps": "2"}
    batching, plan = run_app(q, "Batching"), run_app(q, "Capacity plan")
    no_failure(batching)
    no_failure(plan)
    k1 = int(re.search(r"knee at batch (\d+)", " ".join(c.value for c in batching.caption)).group(1))
    k2 = int(re.search(r"knee at batch (\d+)", " ".join(c.value for c in plan.caption)).group(1))
    assert k1 == k2
    # independently: the largest B / e2e(B)^2 over planner.estimate at every batch that fits (prompt 512, output 128)
    best, arg = 0.0, None
    for b in range(1, 460):
        e = estimate("llama-3.1-8b", "h100-sxm", batch=b)
        if not e.memory.fits:
            break
        p = b / e.end_to_end.latency_s ** 2
        if p > best:
            best, arg = p, b
    assert abs(k1 - arg) <= max(2, 0.05 * arg)  # the sweep samples every batch to 64, then ~5% steps
    tab = table(plan, "knee")
    assert tab.loc[tab["knee"] == "yes", "batch"].tolist() == [k1]
    assert not any("decode knee" in m.value for m in plan.markdown)  # no second knee from the recommendations


def test_an_uploaded_spec_reusing_a_catalog_id_shows_its_own_numbers_in_every_section():
    at = run_app({"hardware": "h100-sxm", "plan_hw": "h100-sxm", "load": "rate", "qps": "1"}, "Capacity plan")
    at.file_uploader(key="hardware_upload").set_value(("my-h100.yaml", _h100_copy("1000"), "application/x-yaml"))
    at.run()
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    cat, up = (num(v) for v in metric_values(at, "Time per output token"))
    assert cat >= 16.06e9 / 3350e9 * 1e3 and up >= 16.06  # bandwidth floors (module docstring)
    assert up > 2.5 * cat
    assert any("h100-sxm-uploaded" in i.value for i in at.info)  # renamed, and the page says why
    # the batching table of the uploaded device: batch 1's step equals its own headline TPOT, not the catalog's
    caps = [c.value for c in at.caption]
    i_up = next(i for i, c in enumerate(caps) if c.startswith("h100\\-sxm\\-uploaded") or
                c.startswith("h100-sxm-uploaded"))
    assert i_up is not None
    steps = [df.value for df in at.dataframe if "step = TPOT (ms)" in df.value.columns]
    assert len(steps) == 2
    assert steps[1].iloc[0]["step = TPOT (ms)"] == pytest.approx(up, rel=2e-3)
    assert steps[0].iloc[0]["step = TPOT (ms)"] == pytest.approx(cat, rel=2e-3)
    # the capacity plan ran on the upload too, and shows it (planned or rejected, never left out silently)
    text = _all_text(at)
    assert "1 uploaded / typed\\-in device" in text or "1 uploaded / typed-in device" in text
    plan = table(at, "TPOT p95 (ms)")
    rejected = [df.value for df in at.dataframe if list(df.value.columns) == ["device", "reason"]]
    shown = set(plan["device"]) | (set(rejected[0]["device"]) if rejected else set())
    assert "h100-sxm-uploaded" in shown


def test_an_uploaded_model_plans_and_batches_in_the_capacity_plan():
    at = run_app({"hardware": "h100-sxm", "plan_hw": "h100-sxm", "load": "rate", "qps": "1"}, "Capacity plan")
    at.file_uploader(key="model_upload").set_value(("mistral-7b.json", json.dumps(MISTRAL_7B).encode(),
                                                    "application/json"))
    at.run()
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    assert not any("unknown model" in t for t in _all_text(at).splitlines())
    assert len(table(at, "step = TPOT (ms)")) >= 4
    assert len(table(at, "TPOT p95 (ms)")) == 1
    # the link says it cannot carry the upload, and the sidebar warns
    assert at.query_params["uploads"] in ("model", ["model"])
    assert any("uploaded model (the link names the catalog model llama-3.1-8b)" in w.value for w in at.warning)


def test_memory_chart_with_one_device_keeps_its_height_capacity_marker_and_legend():
    at = run_app({"model": "llama-3.1-70b", "hardware": "rtx-4090"})
    no_failure(at)
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert spec["height"] >= 140
    text = json.dumps(spec)
    assert '"type": "tick"' in text and '"field": "capacity_gb"' in text
    assert '"orient": "bottom"' in text  # legend below the bars, not cut off beside them


def test_times_of_a_second_and_more_are_shown_in_seconds():
    at = run_app({"hardware": "rtx-4090", "prompt": "16384"})
    no_failure(at)
    ttft = metric_values(at, "TTFT")[0]
    want = estimate("llama-3.1-8b", "rtx-4090", prompt=16384).end_to_end.ttft_ms / 1e3
    assert ttft == f"{want:,.2f} s" and want > 1


def test_format_by_magnitude():
    from webui.common import fmt_time_ms

    assert fmt_time_ms(0.05) == "50.0 µs" and fmt_time_ms(12.345) == "12.35 ms" and fmt_time_ms(2811.48) == "2.81 s"
    assert fmt_time_ms(150_000) == "2.5 min" and fmt_time_ms(float("inf")) == "—" and fmt_time_ms(None) == "—"


def test_the_link_carries_serving_inputs_tp_and_section_and_warns_about_uploads():
    q = {"model": "llama-3.1-70b", "hardware": "rtx-4090", "weights": "int4-g128", "tp": "2",
         "section": "Capacity plan", "sc": "chat", "load": "users", "users": "20", "ttft": "2000", "tpot": "50",
         "plan_hw": "rtx-4090"}
    at = run_app(q)
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["section"] == "Capacity plan" and at.session_state["tp"] == 2
    assert at.number_input(key="serving_users").value == 20 and at.number_input(key="serving_tpot").value == 50
    for k, v in q.items():
        assert at.query_params[k] in (v, [v]), k
    assert table(at, "TPOT p95 (ms)") is not None  # the Capacity plan section opened from the link
    bad = run_app({"uploads": "model", "tp": "3", "section": "Nope", "qps": "inf"})
    no_failure(bad)
    errs = [e.value for e in bad.error]
    assert any("a link cannot carry" in e for e in errs)
    assert any(e.startswith("link parameter tp: unknown value '3'") for e in errs)
    assert any(e.startswith("link parameter section") for e in errs)
    assert any(e.startswith("link parameter qps: must be a number") for e in errs)


def test_a_model_that_does_not_fit_offers_the_smallest_setup_and_one_click_applies_it():
    at = run_app({"model": "llama-3.1-70b", "hardware": "h100-sxm"})
    no_failure(at)
    assert any(i.value.startswith("Smallest setup that fits: 2 x NVIDIA H100") for i in at.info)
    assert not any("planner " in i.value for i in at.info)  # no CLI advice on the page
    at.button(key="apply_h100-sxm").click().run()
    no_failure(at)
    assert at.session_state["tp"] == 2
    assert at.success and at.success[0].value.startswith("Fits: 72.0")  # 72.03 GB of 85.0 GB, module docstring
    assert at.query_params["tp"] in ("2", ["2"])


def test_devices_side_by_side_h100_h200_mi300x_at_batch_64_prompt_2048():
    at = run_app({"hardware": "h100-sxm,h200-sxm,mi300x", "batch": "64", "prompt": "2048"})
    no_failure(at)
    cmp = table(at, "$ per million tokens")
    assert list(cmp["device"]) == ["h100-sxm", "h200-sxm", "mi300x"]
    for dev in cmp["device"]:
        e = estimate("llama-3.1-8b", dev, batch=64, prompt=2048)
        row = cmp[cmp["device"] == dev].iloc[0]
        assert row["tok/s total"] == pytest.approx(e.decode.tokens_per_s_total, rel=1e-3)
        assert row["$ per million tokens"] == pytest.approx(row["$/hour"] / (row["tok/s total"] * 3600) * 1e6,
                                                            rel=1e-2)
    h100, h200 = cmp.iloc[0], cmp.iloc[1]
    assert h100["$/hour"] == pytest.approx(2.99) and h200["$/hour"] == pytest.approx(3.99)
    assert h200["TPOT (ms)"] < h100["TPOT (ms)"]
    best = " ".join(c.value for c in at.caption if c.value.startswith("Best per column"))
    fastest = cmp.loc[cmp["TPOT (ms)"].astype(float).idxmin(), "device"]
    assert f"TPOT (ms): {fastest}" in best.replace("\\", "")


def test_markdown_in_uploaded_names_is_escaped():
    at = run_app({"hardware": "h100-sxm"})
    evil = "**B** [x](http://e.vil) :red[r] <img src=x>"
    at.file_uploader(key="hardware_upload").set_value(("evil.yaml", _h100_copy("3350", evil).replace(
        b"id: h100-sxm", b"id: evil"), "application/x-yaml"))
    at.file_uploader(key="model_upload").set_value(("[link](javascript:x).json", json.dumps(MISTRAL_7B).encode(),
                                                    "application/json"))
    at.run()
    no_failure(at)
    md = "\n".join(m.value for m in at.markdown)
    assert "\\[link\\]\\(javascript\\:x\\)" in md and "[link](" not in md
    assert "\\*\\*B\\*\\* \\[x\\]\\(http\\://e.vil\\) \\:red\\[r\\] \\<img src=x\\>" in md
    assert "**B**" not in md and ":red[" not in md


@pytest.mark.parametrize("text", [
    b"bandwidth_gbs: .inf", b"bandwidth_gbs: .nan", b"capacity_gb: 1e400"])
def test_non_finite_spec_numbers_never_reach_the_page(text):
    key, val = text.split(b": ")
    body = re.sub(rf"{key.decode()}: [0-9.]+".encode(), text, H100_YAML.encode(), count=1).replace(
        b"id: h100-sxm", b"id: odd")
    at = run_app({"hardware": "rtx-4090"})
    at.file_uploader(key="hardware_upload").set_value(("odd.yaml", body, "application/x-yaml"))
    at.run()
    no_failure(at)
    shown = _all_text(at)
    assert not re.search(r"\binf\b|\bnan\b|Infinity|Traceback|internal error", shown, re.I), shown[:2000]


def test_a_custom_gpu_typed_into_the_form_is_compared():
    at = run_app({"hardware": "h100-sxm"})
    at.text_input(key="cg_name").set_value("My GPU")
    at.number_input(key="cg_mem").set_value(48.0)
    at.number_input(key="cg_bw").set_value(960.0)
    at.number_input(key="cg_fp16").set_value(180.0)
    at.button[[b.label for b in at.button].index("Add this GPU")].click().run()
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    labels = [m.label for m in at.metric if m.label.startswith("VRAM")]
    assert labels == ["VRAM (of 85 GB)", "VRAM (of 48 GB)"]  # the H100: the 85.0e9 B CUDA exposes (visible_gb)
    spec = ud.custom_gpu_spec("My GPU", 48.0, 960.0, 180.0)
    want = estimate("llama-3.1-8b", spec).end_to_end.tpot_ms
    assert num(metric_values(at, "Time per output token")[1]) == pytest.approx(want, abs=0.006)
    assert want >= 16.06e9 / 960e9 * 1e3  # the bandwidth floor
    assert at.query_params["uploads"] in ("custom-gpu", ["custom-gpu"])


def test_cheapest_setup_for_20_chat_users_of_llama_70b_int4_on_rtx_4090():
    q = {"model": "llama-3.1-70b", "hardware": "rtx-4090", "weights": "int4-g128", "plan_hw": "rtx-4090",
         "load": "users", "users": "20", "ttft": "2000", "tpot": "50"}
    at = run_app(q, "Capacity plan")
    no_failure(at)
    # one RTX 4090 cannot hold it: the headline says so, the plan answers
    assert [e.value[:13] for e in at.error] == ["Does not fit:"], [e.value for e in at.error]
    plan = table(at, "TPOT p95 (ms)")
    best = plan.iloc[0]
    assert best["device"] == "rtx-4090" and best["weights"] == "int4-g128"
    assert best["TPOT p95 (ms)"] <= 50 and best["TTFT p95 (ms)"] <= 2000
    assert best["TP"] * best["PP"] >= 2  # 36.4 GB of int4 weights > 24 GB (module docstring)
    # 20 users -> 20 / (250 tokens x 0.050 s) = 1.6 requests/s (Little's law, the chat scenario's mean output)
    assert any("20 concurrent users → 1.60 requests/s" in m.value for m in at.markdown)
    vllm = next(c.value for c in at.code if c.value.startswith("vllm serve"))
    assert "vllm serve meta-llama/Llama-3.1-70B" in vllm and f"--tensor-parallel-size {int(best['TP'])}" in vllm
    assert "--max-num-seqs" in vllm and "--gpu-memory-utilization 0.90" in vllm and "--quantization awq" in vllm
    engines = [c.value.split()[0] for c in at.code]
    assert {"vllm", "python", "trtllm-serve", "llama-server"} <= set(engines)
    pareto = [json.dumps(json.loads(c.proto.spec)) for c in at.get("vega_lite_chart")]
    assert any("Pareto" in p and "chosen" in p for p in pareto)


@pytest.mark.parametrize("section", ["Memory", "Capacity plan", "Batching", "Context length", "Roofline",
                                     "Quantization", "Validation", "Accuracy", "Export"])
def test_every_section_with_an_uploaded_model_and_device(section):
    at = run_app({"hardware": "rtx-4090", "plan_hw": "rtx-4090", "load": "rate", "qps": "1"}, section)
    at.file_uploader(key="model_upload").set_value(("mistral-7b.json", json.dumps(MISTRAL_7B).encode(),
                                                    "application/json"))
    at.file_uploader(key="hardware_upload").set_value(("mine.yaml", _h100_copy("2000").replace(
        b"id: h100-sxm", b"id: mine"), "application/x-yaml"))
    at.run()
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    assert "mine" in _all_text(at)


def test_accuracy_axes_carry_one_unit_each_and_deploy_button_is_hidden():
    at = run_app({"hardware": "h100-sxm"}, "Accuracy")
    no_failure(at)
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    titles = re.findall(r'"title": "((?:measured|predicted)[^"]*)"', json.dumps(spec))
    assert titles and all("row's unit" not in t for t in titles)
    assert any(t.startswith("measured decode tokens/s per sequence") for t in titles)
    # the estimate ranges' held-out coverage per regime: the committed report's column, every regime
    caption = next(c.value for c in at.caption if "range an estimate shows" in c.value)
    report = (REPO / "reports" / "accuracy.md").read_text()
    rows = re.findall(r"^\| (decode_b1|decode_batched|prefill|e2e) \| \d+ \| [^|]+\| \d+ \| (\d+) \|", report, re.M)
    assert len(rows) == 4, rows
    for regime, pct in rows:
        assert re.search(rf"\b{pct}% of {regime}\b", caption), (regime, pct, caption)
    cfg = (REPO / ".streamlit" / "config.toml").read_text()
    assert re.search(r'^toolbarMode = "viewer"', cfg, re.M)


MEASUREMENTS = (b"source_id,hardware,framework,model,weight_format,kv_dtype,batch,input_len,output_len,metric,value\n"
                b"mine,NVIDIA GeForce RTX 4090,llama.cpp (CUDA),Meta-Llama-3.1-8B-Instruct,Q4_K_M,f16,1,0,128,"
                b"decode_tok_s_per_seq,140\n"
                b"mine,H100,vLLM 0.11,Meta-Llama-3.1-8B-Instruct,bf16,auto,16,1024,128,tpot_ms,9.1\n")


def test_own_measurements_are_checked_in_the_accuracy_section():
    """The upload runs planner accuracy --data: the mapped row in the summary, a chart in its own unit, the row
    that says no variant (H100) listed with its reason; a file outside the schema is one error line."""
    at = run_app({"hardware": "h100-sxm"}, "Accuracy")
    at.file_uploader(key="measurements_upload").set_value(("mine.csv", MEASUREMENTS, "text/csv"))
    at.run()
    no_failure(at)
    assert not at.error, [e.value for e in at.error]
    direct = ud.check_measurements("mine.csv", MEASUREMENTS)
    assert list(direct["rows"]["hardware"]) == ["rtx-4090"] and list(direct["unmapped"]["row"]) == [1]
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    titles = [" ".join(s["title"]["text"]) for s in specs if isinstance(s.get("title"), dict)]  # show_chart wraps
    assert any(t.startswith("your decode tokens/s per sequence vs llm-") for t in titles), titles
    assert any("does not say which of h100-nvl, h100-pcie, h100-sxm" in json.dumps(t.value.to_dict()) for t in
               at.dataframe)
    at.file_uploader(key="measurements_upload").set_value(("bad.csv", b"a,b\n1,2\n", "text/csv"))
    at.run()
    no_failure(at)
    assert len(at.error) == 1 and "bad.csv: missing column(s) source_id" in at.error[0].value.replace("\\", "")


HOSTILE_CONFIGS = [("hidden_size", "4k"), ("hidden_size", "NaN"), ("hidden_size", "1e400"),
                   ("num_attention_heads", 0), ("num_hidden_layers", {"a": [1]}), ("vocab_size", -5)]


def test_hostile_config_json_uploads_are_one_line_each():
    at = run_app({"hardware": "h100-sxm"})
    for key, value in HOSTILE_CONFIGS:
        cfg = dict(MISTRAL_7B)
        cfg[key] = value
        text = json.dumps(cfg)
        if value in ("NaN", "1e400"):  # bare JSON tokens, as a hostile file would carry them
            text = text.replace(f'"{value}"', value)
        at.file_uploader(key="model_upload").set_value(("config.json", text.encode(), "application/json"))
        at.run()
        no_failure(at)
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and errors[0].startswith("model upload: ") and "\n" not in errors[0], (key, errors)
        assert "showing catalog model llama-3.1-8b instead" in errors[0]
        assert metric_values(at, "Time per output token")[0] != "—"  # the page still answers
