"""planner.ui_data: the tables behind the UI's charts (no streamlit needed).

Hand-derived numbers:
  H100 SXM datasheet: 989.4 dense fp16 TFLOP/s, 3350 GB/s -> ridge 989.4e12 / 3350e9 = 295.34 FLOP/byte.
  Llama-3.1-8B in int4-g128 (4 + 16/128 = 4.125 bits per weight; embeddings, LM head and norms stay fp16):
    fp16 part  (2 x 128256 x 4096 + 32 x 2 x 4096 + 4096) params x 2 B = 2,101,878,784 B
    int4 part  (8,030,261,248 - 1,050,939,392) params x 4.125 / 8 B   = 3,598,712,832 B
    total 5.7006 GB; fp16 16.0605 GB (8,030,261,248 x 2 B).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from planner import estimate, ui_data as ud
from planner.errors import PlannerError


@pytest.fixture(scope="module")
def llama8b():
    return ud.resolve_model(("catalog", "llama-3.1-8b"))


@pytest.fixture(scope="module")
def h100():
    return ud.resolve_hardware(("catalog", "h100-sxm"))


def test_batch_sweep_matches_estimate_row_by_row(llama8b, h100):
    df = ud.batch_sweep(llama8b, h100, "fp16", "fp16", 512, 128)
    # the sweep runs to the largest batch that fits at 640 tokens (estimate's max_batch_at_context) and a little past
    top = estimate(llama8b, h100, "fp16", "fp16", 1, 512, 128).memory.max_batch_at_context
    fit = df[df["fits"]]
    assert int(fit["batch"].max()) == top and not df[df["batch"] > top]["fits"].any()
    assert list(df["batch"])[:64] == list(range(1, 65))
    for b in (1, 7, 64, top):
        e = estimate(llama8b, h100, "fp16", "fp16", b, 512, 128)
        row = df[df["batch"] == b].iloc[0]
        assert row["tpot_ms"] == pytest.approx(e.end_to_end.tpot_ms, rel=1e-9)
        assert row["ttft_ms"] == pytest.approx(e.end_to_end.ttft_ms, rel=1e-9)
        assert row["total_gb"] == pytest.approx(e.memory.total_gb, rel=1e-9)
        assert row["decode_bound"] == e.decode.bound
    tab = ud.batch_table(df)
    assert list(tab["batch"]) == [b for b in ud.BATCH_TABLE_ROWS if b in set(df["batch"])]


def _frame(e2e_s, fits=None):
    b = np.arange(1, len(e2e_s) + 1)
    e2e = np.asarray(e2e_s, dtype=float)
    return pd.DataFrame({"hardware": "x", "batch": b, "e2e_s": e2e, "tpot_ms": e2e, "decode_tok_s_total": b / e2e,
                         "fits": fits if fits is not None else [True] * len(b)})


def test_knee_is_the_largest_kleinrock_power():
    # e2e = 3 + 0.05 B s: power B / e2e^2 peaks at B = 3 / 0.05 = 60 (the per-sequence time equals the fixed time)
    b = np.arange(1, 201)
    k = ud.find_knee(_frame(3 + 0.05 * b))
    assert k["batch"] == 60 and "end-to-end" in k["rule"]
    # only batches that fit count: with batches above 40 out of memory, the knee is the largest that fits
    assert ud.find_knee(_frame(3 + 0.05 * b, fits=list(b <= 40)))["batch"] == 40
    assert ud.find_knee(_frame(np.ones(5), fits=[False] * 5)) is None  # nothing fits


def test_context_sweep_and_points(llama8b, h100):
    pts = ud.context_points(131072, 128, 3000)
    assert pts[0] == 128 and 3000 in pts and max(pts) <= 131072 - 128
    df = ud.context_sweep(llama8b, h100, "fp16", "fp16", 1, 3000, 128)
    assert list(df["context"]) == [p + 128 for p in pts]
    assert df["total_gb"].is_monotonic_increasing
    fit = df[df["fits"]]
    assert fit["tpot_ms"].is_monotonic_increasing  # longer context, more KV to read per token


def test_quant_comparison_weights_by_hand(llama8b, h100):
    q = ud.quant_comparison(llama8b, h100, "fp16", 1, 512, 128).set_index("format")
    assert list(q.index) == list(ud.QUANT_FORMATS)
    assert q.loc["fp16", "weights_gb"] == pytest.approx(8_030_261_248 * 2 / 1e9, rel=1e-9)
    assert q.loc["int4-g128", "weights_gb"] == pytest.approx((2_101_878_784 + 3_598_712_832) / 1e9, rel=1e-9)
    assert q.loc["int4-g128", "tpot_ms"] < q.loc["int8", "tpot_ms"] < q.loc["fp16", "tpot_ms"]


def test_roofline_frames_by_hand(llama8b, h100):
    e = estimate(llama8b, h100, batch=4)
    roofs, points, ridge = ud.roofline_frames(e, h100)
    assert ridge.iloc[0]["intensity"] == pytest.approx(989.4e12 / 3350e9, rel=1e-9)
    fp16 = roofs[(roofs["kind"] == "datasheet") & roofs["roof"].str.startswith("fp16/bf16")]
    assert fp16["tflops"].max() == pytest.approx(989.4)
    # every roof is min(bandwidth x intensity, peak)
    for _, r in roofs[roofs["kind"] == "datasheet"].iterrows():
        peak = float(r["roof"].split("(")[1].split(" ")[0])
        assert r["tflops"] == pytest.approx(min(3350e9 * r["intensity"] / 1e12, peak), rel=1e-9)
    # no operator beats the datasheet roof at its own intensity; both stages are drawn
    top = max(h100.units[0].peak_tflops.values())
    assert (points["achieved_tflops"] <= np.minimum(3.35 * points["intensity"], top) * (1 + 1e-9)).all()
    assert set(points["stage"]) == {"prefill", "decode"}


def test_uploads_parse_or_fail_in_one_line():
    with pytest.raises(PlannerError, match=r"^malformed JSON in config.json"):
        ud.parse_model_upload(b"{oops", "config.json")
    with pytest.raises(PlannerError, match="expected a JSON object"):
        ud.parse_model_upload(b"[1, 2]", "config.json")
    with pytest.raises(PlannerError, match="not UTF-8"):
        ud.parse_model_upload(b"\xff\xfe{", "config.json")
    with pytest.raises(PlannerError, match=r"^malformed YAML in x.yaml line \d+"):
        ud.parse_hardware_upload(b"id: [", "x.yaml")
    with pytest.raises(PlannerError, match="expected a mapping"):
        ud.parse_hardware_upload(b"- a\n- b\n", "x.yaml")
    with pytest.raises(PlannerError) as exc:
        ud.parse_hardware_upload(b"id: x\nname: X\nkind: gpu\nvendor: v\n", "x.yaml")
    assert "\n" not in str(exc.value) and "memory" in str(exc.value)


def test_validation_records_missing_folder_is_empty(tmp_path):
    recs, notes = ud.load_validation_records(tmp_path / "absent")
    assert recs.empty and notes == []
    assert ud.calibration_files(tmp_path / "absent").empty


def test_export_json_round_trips(llama8b, h100):
    e = estimate(llama8b, h100)
    data = json.loads(ud.export_json([e], {"batch": 1}))
    assert data["inputs"] == {"batch": 1}
    assert data["estimates"][0]["memory"]["total_gb"] == pytest.approx(e.memory.total_gb)


def test_launch_commands_take_every_weight_format_and_kv_dtype():
    # every pair gives five copy-ready lines (fp16 weights with an fp8 cache once raised a TypeError in the
    # TensorRT-LLM note); a cache an engine does not have says so instead of a wrong flag
    from planner.architecture import load_model
    from planner.quantization import KV_FORMATS, WEIGHT_FORMATS

    m = load_model("llama-3.1-8b")
    for w in WEIGHT_FORMATS:
        for kv in KV_FORMATS:
            cmds = ud.launch_commands(m, w, kv, 2, 1, 64, 8192)
            assert set(cmds) == {"vLLM", "SGLang", "TensorRT-LLM", "llama.cpp", "LMDeploy"}
            assert all(isinstance(c, str) and c for c in cmds.values())
    c = ud.launch_commands(m, "fp16", "fp8", 1, 1, 8, 4096)
    assert c["TensorRT-LLM"].endswith("# KV cache fp8") and "--kv-cache-dtype fp8" in c["vLLM"]
    c = ud.launch_commands(m, "q4_k_m", "q8_0", 1, 1, 8, 4096)
    assert "-ctk q8_0 -ctv q8_0" in c["llama.cpp"] and "no q8_0 KV cache in this engine" in c["vLLM"]
    # TurboMind: int8 / int4 caches are --quant-policy 8 / 4, AWQ / GPTQ checkpoints --model-format; no fp8 cache
    c = ud.launch_commands(m, "int4-g128", "int8", 1, 1, 8, 4096)
    assert "--quant-policy 8" in c["LMDeploy"] and "--model-format awq" in c["LMDeploy"]
    c = ud.launch_commands(m, "fp16", "fp8", 1, 1, 8, 4096)
    assert "--quant-policy 8" not in c["LMDeploy"] and "--quant-policy 4" not in c["LMDeploy"]
    assert "no fp8 KV cache in TurboMind" in c["LMDeploy"]


def test_cluster_labels_join_points_that_would_overprint():
    # decode weight GEMMs all sit at ~1 FLOP/byte: one label "qkv_proj / mlp / o_proj", not three on top of each
    # other; points a decade apart keep their own labels; a zero coordinate (no work) has no label
    df = pd.DataFrame({"intensity": [1.0, 1.05, 1.02, 3.9, 4.0, 600.0, 0.0],
                       "achieved_tflops": [0.5, 0.52, 0.49, 2.0, 2.1, 300.0, 1.0],
                       "op": ["qkv_proj", "o_proj", "mlp", "attn_scores", "attn_values", "mlp", "embedding"]})
    out = ud.cluster_labels(df)
    assert list(out["op"]) == ["qkv_proj / mlp / o_proj", "attn_scores / attn_values", "mlp"]
    assert list(out["intensity"]) == [1.0, 3.9, 600.0]
