"""planner/accuracy/external.py: `planner accuracy --data FILE`, the committed profiles against measurements in the
project's schema that they were not fitted to."""

import csv
import re

import numpy as np
import pandas as pd
import pytest

from planner.accuracy import external
from planner.accuracy.benchmark import REPORT_ROWS
from planner.cli import main
from planner.errors import PlannerError
from planner.hardware import load_hardware
from planner.runtimes import load_runtime

HEADER = ["source_id", "hardware", "hardware_detail", "framework", "model", "params_b", "weight_format", "kv_dtype",
          "batch", "input_len", "output_len", "metric", "value", "unit", "notes"]
MINE = [  # a user's own runs, in labels the project's tables do not list
    ["my_runs", "NVIDIA GeForce RTX 4090", "", "llama.cpp (CUDA, llama-bench)", "Meta-Llama-3.1-8B-Instruct", 8.03,
     "Q5_K_M", "f16", 1, 0, 128, "decode_tok_s_per_seq", 120.5, "tok/s", "tg128"],
    ["my_runs", "NVIDIA H100 SXM5 80GB", "", "vLLM 0.11", "Meta-Llama-3.1-8B-Instruct", 8.03, "bf16", "auto", 16,
     1024, 128, "tpot_ms", 9.1, "ms", ""],
    ["my_runs", "H100", "", "vLLM 0.11", "Meta-Llama-3.1-8B-Instruct", 8.03, "bf16", "auto", 16, 1024, 128,
     "tpot_ms", 9.1, "ms", ""],
    ["my_runs", "NVIDIA H100 SXM5 80GB", "", "vLLM 0.11", "Meta-Llama-3.1-8B-Instruct", 8.03, "bf16", "auto", 16,
     1024, 128, "tpot_ms", "fast", "ms", ""],
    ["my_runs", "NVIDIA H100 SXM5 80GB", "", "MLC-LLM", "Meta-Llama-3.1-8B-Instruct", 8.03, "bf16", "auto", 16,
     1024, 128, "tpot_ms", 9.1, "ms", ""],
]


def _file(tmp_path, rows, header=HEADER):
    p = tmp_path / "mine.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return p


def _project_rows(n):
    with open(external.Path(REPORT_ROWS).parents[1] / "data" / "measured_public.csv", newline="") as f:
        return list(csv.reader(f))[1:n + 1]


def test_a_row_of_the_project_is_predicted_as_planner_accuracy_predicts_it(tmp_path):
    """The first four Apple-silicon rows: the committed profiles' prediction is reports/accuracy_rows.csv's
    pred_fitted, the range the committed class's p10/p90 (the prefill row: p10 x pred .. p90 x pred)."""
    out = external.check([_file(tmp_path, _project_rows(4))])
    res = out["results"]
    committed = pd.read_csv(REPORT_ROWS)
    committed = committed[(committed["file"] == "measured_public.csv") & (committed["row"] < 4)]
    assert list(res["pred"]) == pytest.approx(list(committed["pred_fitted"]), rel=1e-4)
    assert res["in_fit"].all()
    spec = load_hardware(res["hardware"][0])
    iv = load_runtime("llamacpp").for_unit(spec, spec.unit(res["unit"][0])).intervals["prefill"]
    assert res["metric"][0] == "prefill_tok_s"
    assert res["low"][0] == pytest.approx(res["pred"][0] * iv.p10) and res["high"][0] == pytest.approx(
        res["pred"][0] * iv.p90)


def test_a_users_rows_map_through_the_catalog_names_and_bad_rows_say_why(tmp_path):
    out = external.check([_file(tmp_path, MINE)])
    res, unmapped = out["results"], out["unmapped"]
    assert list(zip(res["hardware"], res["model"], res["weights"], res["runtime"])) == [
        ("rtx-4090", "llama-3.1-8b", "q5_k_m", "llamacpp"), ("h100-sxm", "llama-3.1-8b", "bf16", "vllm")]
    assert not res["in_fit"].any() and (res["err_pct"] >= 0).all() and (res["pred"] > 0).all()
    reasons = dict(zip(unmapped["row"], unmapped["reason"]))
    assert "does not say which of h100-nvl, h100-pcie, h100-sxm" in reasons[2]
    assert reasons[3] == "value fast is not a positive number"
    assert reasons[4] == "framework 'MLC-LLM' has no runtime profile"


def test_files_outside_the_schema_are_one_line_errors(tmp_path):
    with pytest.raises(PlannerError, match=r"^.*mine.csv: missing column\(s\) metric, value; the schema is "):
        external.check([_file(tmp_path, [r[:11] for r in MINE], HEADER[:11])])
    with pytest.raises(PlannerError, match="absent.csv: file not found$"):
        external.check([tmp_path / "absent.csv"])
    with pytest.raises(PlannerError, match=": not a file$"):
        external.check([tmp_path])


def test_cli_writes_the_report_and_refuses_a_refit_with_it(tmp_path, capsys):
    p = _file(tmp_path, MINE)
    assert main(["accuracy", "--data", str(p), "--out-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "decode_b1" in out and "(not fitted to)" in out
    md = (tmp_path / "out" / "accuracy_data.md").read_text()
    assert "2 rows mapped (0 flagged anomalous by the data's caveats and left out of the figures), 3 unmapped" in md and "| mine.csv | 4 | framework 'MLC-LLM' has no runtime profile |" in md
    assert len(pd.read_csv(tmp_path / "out" / "accuracy_data_rows.csv")) == 2
    assert main(["accuracy", "--data", str(p), "--fit"]) == 2
    err = capsys.readouterr().err
    assert "--data checks the committed profiles" in err and err.strip().count("\n") == 0


@pytest.mark.parametrize("col,value,reason", [
    ("batch", 0, "batch 0 is not an integer in 1..1,000,000"),
    ("batch", 2.5, "batch 2.5 is not an integer in 1..1,000,000"),
    ("input_len", -5, "input_len -5 is not an integer in 0..10,000,000"),
    ("value", "inf", "value inf is not a positive number"),
    ("value", -3, "value -3 is not a positive number"),
])
def test_numbers_that_cannot_be_a_measurement_are_listed_not_predicted(tmp_path, col, value, reason):
    row = list(MINE[0])
    row[HEADER.index(col)] = value
    out = external.check([_file(tmp_path, [row, MINE[0]])])
    assert len(out["results"]) == 1 and list(out["unmapped"]["reason"]) == [reason]


def test_a_per_sequence_decode_rate_at_batch_b_decodes_b_sequences():
    """decode_tok_s_per_seq of B sequences decoded together: every step of the row runs at batch B."""
    from planner.accuracy.predict import steps_of_row

    r = {"kind": "decode_rate", "batch": 16, "prompt": 512, "output": 128, "model": "llama-3.1-8b"}
    steps, work = steps_of_row(r)
    assert work == 128 and {s[1] for s in steps} == {16} and sum(s[4] for s in steps) == pytest.approx(128)


def test_cli_names_the_option_and_refuses_ragged_rows(tmp_path, capsys):
    p = tmp_path / "ragged.csv"
    p.write_text(",".join(HEADER[:13]) + "\n" + ",".join(str(x) for x in MINE[0]) + "\n")  # 15 fields, 13 names
    assert main(["accuracy", "--data", str(p), "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --data {p}: not a readable CSV (ParserWarning") and "\n" not in err
    assert main(["accuracy", "--data", str(tmp_path / "absent.csv")]) == 2
    assert capsys.readouterr().err.strip() == f"error: --data {tmp_path / 'absent.csv'}: file not found"


def test_the_chart_is_written_beside_the_report_unless_no_png(tmp_path):
    """vl-convert is a test dependency (pyproject.toml [test]), as for reports/accuracy.png."""
    p = _file(tmp_path, MINE)
    assert main(["accuracy", "--data", str(p), "--out-dir", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "accuracy_data.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["accuracy", "--data", str(p), "--out-dir", str(tmp_path / "b"), "--no-png"]) == 0
    assert not (tmp_path / "b" / "accuracy_data.png").exists() and (tmp_path / "b" / "accuracy_data.md").exists()


def test_labels_cannot_break_the_report_tables(tmp_path):
    """A source id or hardware label with a column bar or a newline stays one cell (whitespace folded, | -> /); an
    error orders of magnitude off prints in three significant digits."""
    evil = list(MINE[0])
    evil[0], evil[1] = "evil|src\nline", "NVIDIA GeForce RTX 4090\n| x |"
    tiny = list(MINE[0])
    tiny[HEADER.index("value")] = 1e-300
    p = _file(tmp_path, [evil, tiny])
    out = external.check([p])
    md = external.render(out, [p])
    table_rows = [ln for ln in md.splitlines() if ln.startswith("| evil/src line |")]
    assert len(table_rows) == 1 and table_rows[0].count("|") == 8
    assert list(out["results"]["hardware"]) == ["rtx-4090", "rtx-4090"]  # the label's tokens still name the card
    # 1e-300 tok/s measured, ~1e2 predicted: an error of ~1e304 %, shown as d.dde+30d
    assert re.search(r"\| \d(\.\d+)?e\+30\d \|", md)


@pytest.mark.parametrize("col,value,reason", [
    ("hardware", "", "hardware is blank"), ("model", "", "model is blank"), ("metric", "", "metric is blank"),
    ("value", "", "value is blank"),
    ("output_len", 0, "a decode_tok_s_per_seq row needs output_len >= 1 (got 0)"),
])
def test_blank_names_and_lengths_that_give_no_work_are_listed(tmp_path, col, value, reason):
    """A blank cell where a row needs a name, or a decode rate over no output token (steps_of_row would time
    nothing): listed with the reason, never a traceback."""
    row = list(MINE[0])
    row[HEADER.index(col)] = value
    out = external.check([_file(tmp_path, [row, MINE[0]])])
    assert len(out["results"]) == 1 and list(out["unmapped"]["reason"]) == [reason]


def test_a_whole_request_rate_without_a_prompt_times_its_decode_steps_only():
    """throughput_tok_s of B sequences with no prompt: O decode steps, no 0-token prefill (whose 0/0 time was NaN)."""
    from planner.accuracy.predict import steps_of_row

    r = {"kind": "throughput", "batch": 4, "prompt": 0, "output": 64, "model": "llama-3.1-8b", "work_div": 1}
    steps, work = steps_of_row(r)
    assert work == 4 * 64 and all(s[0] == "decode" for s in steps) and sum(s[4] for s in steps) == pytest.approx(63)


# each pending set's rows that stay unmapped, by the column data/pending/README.md names (the rest must map)
PENDING = {
    "dstack_deepseek_r1_mi300x_vs_h200_2025-03.csv": ("hardware_detail", "dp-attention", "data-parallel attention"),
    "kyuz0_r9700_toolboxes_rocm_b7423.csv": ("model", "\0", None),  # every row maps (R9700 spec)
    "llamacpp_cuda_prs_2024-2025.csv": ("model", "CodeLlama", "CodeLlama-7B"),  # P40 rows map (its spec)
    "scicom_benchmaq_vllm_2026_01.csv": ("weight_format", "unstated", "weight format 'unstated"),
}


@pytest.mark.parametrize("name", sorted(PENDING))
def test_the_pending_sets_stay_ready_for_planner_accuracy_data(name):
    """data/pending/README.md says each waiting set is `planner accuracy --data`-ready: every row is in the schema,
    the rows its reasons name are listed unmapped with that reason (data-parallel attention, CodeLlama-7B, an
    unstated weight format), and every other row maps (the R9700 and P40 rows through their catalog specs) to a
    finite positive prediction."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "data" / "pending" / name
    col, marker, reason = PENDING[name]
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    expect_unmapped = int(raw[col].str.contains(marker, regex=False).sum())
    out = external.check([path])
    res, un = out["results"], out["unmapped"]
    assert len(raw) > 0 and (len(res), len(un)) == (len(raw) - expect_unmapped, expect_unmapped)
    assert not res["in_fit"].any()  # none of their sources is in the fitted data
    assert np.isfinite(res["pred"]).all() and (res["pred"] > 0).all()
    if reason:
        assert expect_unmapped > 0 and un["reason"].str.contains(reason, regex=False).all()


def test_an_engine_on_an_unmeasured_unit_gets_the_estimate_and_range_estimate_prints(tmp_path):
    """llama.cpp on a CPU-only spec and on an Intel Arc GPU: no published row covers either class, so each row is
    predicted on the kind defaults (no traceback for a device without a GPU unit) with the range `planner estimate
    --runtime llamacpp` prints for it, the kind defaults' range widened x1.3 (runtimes.unmeasured_class)."""
    from planner import estimate
    rows = [["mine", "x86-server-cpu", "", "llama.cpp", "llama-2-7b", 6.74, "q4_0", "f16", 1, 0, 128,
             "decode_tok_s_per_seq", 20.0, "tok/s", ""],
            ["mine", "Intel Arc B580", "", "llama.cpp (SYCL)", "llama-2-7b", 6.74, "q4_0", "f16", 1, 0, 128,
             "decode_tok_s_per_seq", 60.0, "tok/s", ""]]
    res = external.check([_file(tmp_path, rows)])["results"]
    assert list(res["hardware"]) == ["x86-server-cpu", "arc-b580"] and list(res["unit"]) == ["cpu", "gpu"]
    for r in res.to_dict("records"):
        e = estimate("llama-2-7b", r["hardware"], "q4_0", prompt=1, output=128, runtime="llamacpp")
        d = e.decode
        assert r["pred"] == pytest.approx(d.tokens_per_s_per_sequence, rel=0.02)
        assert r["low"] / r["pred"] == pytest.approx(d.tokens_per_s_per_sequence_low / d.tokens_per_s_per_sequence,
                                                     rel=1e-6)
        assert r["high"] / r["pred"] == pytest.approx(d.tokens_per_s_per_sequence_high / d.tokens_per_s_per_sequence,
                                                      rel=1e-6)


def test_an_engines_serving_metrics_map_and_refused_configurations_say_why(tmp_path):
    """A TensorRT-LLM row's TPOT (a metric the public rows' mapper does not read) maps through the serving rows'
    mapper to the trtllm profile; rows `planner estimate` refuses are listed with its own one-line error: TensorRT-LLM
    on an MI300X (CUDA-only), tensor parallelism 8 on a device whose node holds one."""
    rows = [["mine", "NVIDIA H100 SXM5 80GB", "", "TensorRT-LLM v0.9", "Meta-Llama-3.1-8B-Instruct", 8.03, "fp8", "fp8",
             1, 128, 128, "tpot_ms", 6.0, "ms", ""],
            ["mine", "AMD Instinct MI300X", "", "TensorRT-LLM v0.9", "Meta-Llama-3.1-8B-Instruct", 8.03, "fp8", "fp8",
             1, 128, 128, "tpot_ms", 6.0, "ms", ""],
            ["mine", "x86-server-cpu", "8 x x86-server-cpu, TP8", "vLLM 0.11", "Meta-Llama-3.1-8B-Instruct", 8.03,
             "bf16", "bf16", 4, 512, 128, "tpot_ms", 100.0, "ms", ""]]
    out = external.check([_file(tmp_path, rows)])
    res, unmapped = out["results"], out["unmapped"]
    assert list(zip(res["hardware"], res["runtime"], res["metric"])) == [("h100-sxm", "trtllm", "tpot_ms")]
    assert (res["pred"] > 0).all() and np.isfinite(res["pred"]).all()
    reasons = dict(zip(unmapped["row"], unmapped["reason"]))
    assert reasons[1].startswith("--runtime: trtllm (TensorRT-LLM) runs on NVIDIA GPUs only")
    assert reasons[2].startswith("--tp: 8 exceeds the 1 device(s)")
