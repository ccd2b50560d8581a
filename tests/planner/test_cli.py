"""The CLI: JSON keys, the table, and one-line errors with exit code 2 for bad input."""

import json
import subprocess
import sys

import pytest

from planner import estimate
from planner.cli import main

REQUIRED_KEYS = [
    "memory.weights_gb", "memory.kv_cache_gb", "memory.activations_gb", "memory.overhead_gb", "memory.total_gb",
    "memory.capacity_gb", "memory.fits", "kv_cache.bytes_per_token", "kv_cache.gb_per_sequence", "prefill.latency_ms",
    "prefill.tokens_per_s", "prefill.bound", "decode.latency_ms_per_token", "decode.tokens_per_s_per_sequence",
    "decode.tokens_per_s_total", "decode.bound", "end_to_end.latency_s", "efficiency",
]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_estimate_json_has_required_keys(capsys):
    code, out, _ = run(capsys, "estimate", "--model", "llama-2-7b", "--hardware", "a100-40gb-sxm", "--json")
    assert code == 0
    d = json.loads(out)
    for key in REQUIRED_KEYS:
        node = d
        for part in key.split("."):
            assert part in node, key
            node = node[part]
    assert d["kv_cache"]["bytes_per_token"] == 524288
    assert d["efficiency"]["source"]


def test_estimate_table(capsys):
    code, out, _ = run(capsys, "estimate", "-m", "mixtral-8x7b", "-H", "h100-sxm", "-w", "int4-g128", "-b", "8", "--ops")
    assert code == 0 and "TTFT" in out and "moe_experts" in out and "Efficiency" in out


def test_estimate_shows_the_ttft_a_client_of_the_engines_server_sees(capsys):
    """With a serving engine's profile the table adds the TTFT through its OpenAI server: the GPU's prefill + the
    server's request path (vLLM 50 ms, runtimes.REQUEST_PATH_MS), also in --json; an offline engine (llama-bench)
    and no engine add none."""
    code, out, _ = run(capsys, "estimate", "-m", "qwen3-8b", "-H", "h100-sxm", "-w", "bf16", "--runtime", "vllm")
    assert code == 0 and "TTFT via its server" in out and "+ 50 ms request path of vllm's OpenAI server" in out
    code, out, _ = run(capsys, "estimate", "-m", "qwen3-8b", "-H", "h100-sxm", "-w", "bf16", "--runtime", "vllm",
                       "--json")
    p = json.loads(out)["prefill"]
    assert p["request_path_ms"] == 50.0 and p["server_ttft_ms"] == pytest.approx(p["latency_ms"] + 50.0, rel=1e-12)
    for extra in (["--runtime", "llamacpp"], []):
        code, out, _ = run(capsys, "estimate", "-m", "qwen3-8b", "-H", "h100-sxm", "-w", "bf16", *extra)
        assert code == 0 and "TTFT via its server" not in out


def test_does_not_fit_is_a_verdict(capsys):
    code, out, _ = run(capsys, "estimate", "-m", "llama-3.1-70b", "-H", "rtx-4090")
    assert code == 0 and "DOES NOT FIT" in out and "needs" in out and "TTFT" not in out


def test_hardware_and_models_listing(capsys):
    assert run(capsys, "hardware", "list")[0] == 0
    code, out, _ = run(capsys, "hardware", "show", "h100-sxm", "--json")
    assert code == 0 and json.loads(out)["memory"]["bandwidth_gbs"] == 3350
    code, out, _ = run(capsys, "models", "list", "--json")
    assert code == 0 and any(r["id"] == "deepseek-v3" and r["attention"] == "MLA" for r in json.loads(out))
    code, out, _ = run(capsys, "models", "show", "llama-2-7b")
    assert code == 0 and "param_breakdown" in out


def test_sweep_writes_tables(tmp_path, capsys):
    for ext in ("csv", "json", "md"):
        out = tmp_path / f"s.{ext}"
        code, _, err = run(capsys, "sweep", "--models", "llama-2-7b,mistral-7b", "--hardware", "a100-80gb-sxm,l4",
                           "--weights", "fp16,int4-g128", "--batch", "1,8", "--prompt", "512", "--output", "128",
                           "--out", str(out))
        assert code == 0 and out.stat().st_size > 0 and "configurations" in err
    assert (tmp_path / "s.csv").read_text().count("\n") == 1 + 2 * 2 * 2 * 2


BAD = [
    (["estimate", "-m", "llama-2-7x", "-H", "a100-40gb-sxm"], "did you mean llama-2-7b"),
    (["estimate", "-m", "llama-2-7b", "-H", "h10"], "unknown hardware 'h10'"),
    # a product name without its memory variant: both variants (hardware_specs/rtx-3060-*.yaml) first
    (["estimate", "-m", "llama-2-7b", "-H", "rtx-3060"], "did you mean rtx-3060-12gb, rtx-3060-8gb,"),
    (["estimate", "-m", "llama-2-7b", "-H", "a100-40gb-sxm", "-w", "int5"], "--weights: unknown format"),
    (["estimate", "-m", "llama-2-7b", "-H", "a100-40gb-sxm", "--kv-dtype", "int3"], "--kv-dtype"),
    (["estimate", "-m", "llama-2-7b", "-H", "a100-40gb-sxm", "--batch", "0"], "--batch"),
    (["estimate", "-m", "llama-2-7b", "-H", "a100-40gb-sxm", "--prompt", "-5"], "--prompt"),
    (["estimate", "-m", "llama-2-7b", "-H", "a100-40gb-sxm", "--engine", "tgi"], "--engine"),
    (["estimate", "-m", "llama-2-7b", "-H", "snapdragon-8-gen3", "--unit", "dsp"], "--unit"),
    (["sweep", "--models", "llama-2-7b", "--hardware", "l4", "--out", "x.xlsx"], "--out"),
    (["sweep", "--models", "llama-2-7b", "--hardware", "l4", "--out", "/proc/no-such-dir/x.csv"], "/proc/no-such-dir"),
]


@pytest.mark.parametrize("argv, needle", BAD)
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) if needle in ("--batch", "--prompt") else _nullcontext() as ei:
        code = main(argv)
    if ei is not None and hasattr(ei, "value"):
        code = ei.value.code
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert needle in err and err.startswith("error:") and "\n" not in err and "Traceback" not in err


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def test_malformed_files(tmp_path, capsys):
    bad_yaml = tmp_path / "dev.yaml"
    bad_yaml.write_text("id: x\nmemory: [unclosed\n")
    code, _, err = run(capsys, "estimate", "-m", "llama-2-7b", "-H", str(bad_yaml))
    assert code == 2 and "malformed YAML" in err
    unknown_key = tmp_path / "dev2.yaml"
    unknown_key.write_text("id: x\nname: x\nkind: gpu\nvendor: x\nmemory: {capacity_gb: 8, bandwidth_gbs: -1, source: mine}\n"
                           "units: [{name: gpu, kind: gpu, peak_tflops: {fp16: 10}, source: mine}]\ncolour: red\n")
    code, _, err = run(capsys, "estimate", "-m", "llama-2-7b", "-H", str(unknown_key))
    assert code == 2 and "bandwidth_gbs" in err and "colour" in err and "\n" not in err.strip()
    bad_json = tmp_path / "config.json"
    bad_json.write_text("{not json")
    code, _, err = run(capsys, "estimate", "-m", str(bad_json), "-H", "l4")
    assert code == 2 and "malformed JSON" in err
    missing = tmp_path / "m" / "config.json"
    missing.parent.mkdir()
    missing.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    code, _, err = run(capsys, "estimate", "-m", str(missing), "-H", "l4")
    assert code == 2 and "missing required field" in err


def test_user_yaml_device(tmp_path, capsys):
    dev = tmp_path / "mygpu.yaml"
    dev.write_text("id: mygpu\nname: My GPU\nkind: gpu\nvendor: me\nmemory: {capacity_gb: 24, bandwidth_gbs: 1000, "
                   "source: my measurement}\nunits: [{name: gpu, kind: gpu, peak_tflops: {fp16: 100}, source: mine}]\n")
    code, out, _ = run(capsys, "estimate", "-m", "llama-2-7b", "-H", str(dev), "--datasheet", "--json")
    d = json.loads(out)
    # decode floor at batch 1: (13.48 - 0.26) GB / 1000 GB/s = 13.2 ms plus KV and activations
    assert code == 0 and d["decode"]["latency_ms_per_token"] == pytest.approx(13.3, rel=0.02)


def test_context_beyond_model_maximum_warns(capsys):
    code, _, err = run(capsys, "estimate", "-m", "llama-2-7b", "-H", "a100-80gb-sxm", "-p", "8000", "-o", "200")
    assert code == 0 and "exceeds" in err and "4096" in err


def test_console_script_entry_point():
    r = subprocess.run([sys.executable, "-m", "planner", "estimate", "-m", "llama-2-7b", "-H", "l4", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["hardware"] == "l4"
    r = subprocess.run([sys.executable, "-m", "planner", "estimate", "-m", "nope", "-H", "l4"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_yaml_never_executes_code(tmp_path, capsys):
    # a python tag is refused by the safe loader: one line, exit 2
    dev = tmp_path / "evil.yaml"
    dev.write_text("id: !!python/object/apply:os.system ['echo pwned']\n")
    code, out, err = run(capsys, "estimate", "-m", "llama-2-7b", "-H", str(dev))
    assert code == 2 and "malformed YAML" in err and "pwned" not in out


def test_missing_optional_dependency_is_one_line(monkeypatch, capsys):
    # a command whose optional dependency is absent says which extra installs it (no traceback)
    import planner.cli as cli

    def needs_torch(args):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(cli, "cmd_hardware", needs_torch)
    parser = cli.build_parser()
    args = parser.parse_args(["hardware", "list"])
    args.func = needs_torch
    monkeypatch.setattr(cli, "build_parser", lambda: type("P", (), {"parse_args": lambda self, a: args})())
    assert main(["hardware", "list"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: this command needs torch, which is not installed: pip install -e '.[harness]'"


def test_estimate_compares_several_devices(capsys):
    args = ["-w", "fp8", "-b", "16", "-p", "2048", "-o", "256"]
    code, out, _ = run(capsys, "estimate", "-m", "llama-3.1-70b", "-H", "h100-sxm,h200-sxm", *args, "--json")
    rows = json.loads(out)
    # fp8 linear weights (68.45e9 x 8.008 bits) + fp16 embedding and LM head (2 x 1.05e9 x 2 B) = 72.7 GB; KV 16 x 2304
    # tokens x 327,680 B = 12.1 GB; activations 32,768 x (2 x 8192 + 3 x 28672) x 2 B = 6.7 GB; overhead 1 GB:
    # 92.5 GB, over the 85.0 GB an H100 SXM exposes (visible_gb), under H200's 149.85 GB
    assert rows[0]["memory"]["total_gb"] == pytest.approx(92.5, abs=0.1)
    assert [r["hardware"] for r in rows] == ["h100-sxm", "h200-sxm"]
    assert [r["memory"]["fits"] for r in rows] == [False, True]
    code, out, _ = run(capsys, "estimate", "-m", "llama-3.1-70b", "-H", "h100-sxm,h200-sxm", *args)
    assert code == 0 and "h200-sxm" in out and "NO" in out and "TPOT" in out


def test_a_quantized_format_a_runtime_never_measured_warns_on_stderr_once(capsys):
    # llama.cpp's profile fits q4_0, q4_k_m and q8_0 dequantization costs, not q6_k's
    code, out, err = run(capsys, "estimate", "-m", "llama-3-8b", "-H", "rtx-4090", "-w", "q6_k", "--runtime",
                         "llamacpp", "--json")
    assert code == 0 and err.count("no measured dequantization cost for q6_k") == 1
    assert any("q6_k" in w for w in json.loads(out)["warnings"])
    code, _, err = run(capsys, "estimate", "-m", "llama-3-8b", "-H", "rtx-4090", "-w", "q4_k_m", "--runtime",
                       "llamacpp")
    assert code == 0 and "dequantization" not in err


def test_the_efficiency_line_names_the_fitted_dequantization_cost_of_the_format(capsys):
    from planner.hardware import load_hardware
    from planner.runtimes import load_runtime

    spec = load_hardware("rtx-4090")
    cost = load_runtime("llamacpp").for_unit(spec, spec.units[0]).efficiency.dequant_overhead["q4_k_m"]
    code, out, _ = run(capsys, "estimate", "-m", "llama-3-8b", "-H", "rtx-4090", "-w", "q4_k_m", "--runtime",
                       "llamacpp")
    # the profile's fraction as a GEMM-time percentage (0.2202 -> +22%)
    assert code == 0 and f"q4_k_m dequantization +{cost * 100:.0f}% GEMM time" in out


def test_explain_names_dequantization_where_it_bounds_decode(capsys):
    """On an M4 Max llama.cpp's fitted q4_k_m cost (its Metal mat-vec kernels dequantize every weight per token,
    Efficiency.dequant_tile_tokens) makes batch-1 decode compute bound at 5% of the 2-FLOP-per-weight peak share:
    --explain says why; on an RTX 4090 the same decode is memory bound and the line is absent."""
    from planner.hardware import load_hardware
    from planner.runtimes import load_runtime

    spec = load_hardware("apple-m4-max")
    gpu = next(u for u in spec.units if u.name == "gpu")
    cost = load_runtime("llamacpp").for_unit(spec, gpu).efficiency.dequant_overhead["q4_k_m"]
    code, out, _ = run(capsys, "estimate", "-m", "llama-3.1-8b", "-H", "apple-m4-max", "-w", "q4_k_m", "--runtime",
                       "llamacpp", "--explain")
    assert code == 0 and "compute bound" in out.split("TPOT")[1].splitlines()[0]
    assert f"q4_k_m's fitted cost adds {cost:.2f}x the GEMM time per token up to 8 tokens" in out
    code, out, _ = run(capsys, "estimate", "-m", "llama-3.1-8b", "-H", "rtx-4090", "-w", "q4_k_m", "--runtime",
                       "llamacpp", "--explain")
    assert code == 0 and "compute bound on dequantization" not in out


def test_the_runtime_help_lists_every_profile():
    """--runtime's help (estimate, sweep, batching, speculative) names the profiles that hardware_specs/runtimes/
    holds, no more and no fewer."""
    from planner.cli import RUNTIME_IDS
    from planner.runtimes import list_runtime_ids

    assert sorted(RUNTIME_IDS.split(", ")) == sorted(list_runtime_ids())


def test_batching_takes_a_runtime_profile(capsys):
    """`planner batching --runtime` sizes and times each batch through `planner estimate --runtime`'s code: the eager
    profile's step at batch 8 is estimate's TPOT there, the article's 65 ms of issue 11 within 10%
    (tests/accuracy/test_accuracy_targets.py derives the table)."""
    from planner.estimate import estimate

    assert main(["batching", "-m", "llama-2-7b", "-H", "a100-80gb-sxm", "--runtime", "hf-eager", "--batch", "1,8",
                 "--prompt", "2048", "--output", "128", "--json"]) == 0
    rows = {r["batch"]: r for r in json.loads(capsys.readouterr().out)}
    e = estimate("llama-2-7b", "a100-80gb-sxm", "fp16", batch=8, prompt=2048, output=128, runtime="hf-eager")
    assert rows[8]["step_ms"] == pytest.approx(e.decode.latency_ms_per_token, rel=1e-9)
    assert rows[8]["step_ms"] == pytest.approx(65.0, rel=0.10)
    assert main(["batching", "-m", "llama-2-7b", "-H", "a100-80gb-sxm", "--runtime", "nope"]) == 2
    assert "--runtime: unknown runtime 'nope'" in capsys.readouterr().err


def test_an_engine_that_samples_the_first_token_in_a_decode_step_adds_that_step_to_ttft(capsys):
    """TurboMind (runtimes.FIRST_TOKEN_FROM_DECODE) prefills all prompt tokens but the last and samples the first token
    in the decode step that takes the last: TTFT = prefill of P - 1 + one decode step at context P - 1, and the
    end-to-end time adds the usual O - 1 steps. Checked against the same efficiency without the engine's rule (the
    plain prefill of 127 tokens and its first decode step), and against LMDeploy v0.1.0's own A100 table for
    Llama-2-7B fp16: FTL 22 ms at P = 128 and 11 ms at P = 1 (data/measured_serving.csv), within 20%."""
    from planner.runtimes import load_runtime

    eff = load_runtime("lmdeploy").classes[0].efficiency
    e = estimate("llama-2-7b", "a100-80gb-sxm", "fp16", prompt=128, output=64, runtime="lmdeploy")
    plain127 = estimate("llama-2-7b", "a100-80gb-sxm", "fp16", prompt=127, output=2, efficiency=eff)
    plain128 = estimate("llama-2-7b", "a100-80gb-sxm", "fp16", prompt=128, output=64, efficiency=eff)
    p = e.prefill
    assert p.first_token_step_ms == pytest.approx(plain127.decode.latency_ms_first, rel=1e-9)
    assert p.latency_ms == pytest.approx(plain127.prefill.latency_ms + p.first_token_step_ms, rel=1e-9)
    assert e.end_to_end.latency_s == pytest.approx(
        p.latency_ms / 1e3 + plain128.end_to_end.latency_s - plain128.prefill.latency_ms / 1e3, rel=1e-9)
    assert p.latency_ms == pytest.approx(22.0, rel=0.20) and p.latency_ms_low <= 22.0 <= p.latency_ms_high
    one = estimate("llama-2-7b", "a100-80gb-sxm", "fp16", prompt=1, output=64, runtime="lmdeploy").prefill
    assert one.latency_ms == one.first_token_step_ms == pytest.approx(11.0, rel=0.20)
    assert estimate("llama-2-7b", "a100-80gb-sxm", "fp16", runtime="vllm").prefill.first_token_step_ms is None
    code, out, _ = run(capsys, "estimate", "-m", "llama-2-7b", "-H", "a100-80gb-sxm", "--runtime", "lmdeploy",
                       "--prompt", "128")
    assert code == 0 and "TTFT holds a decode step" in out and "prefill of 127 prompt tokens" in out
    code, out, _ = run(capsys, "estimate", "-m", "llama-2-7b", "-H", "a100-80gb-sxm", "--runtime", "lmdeploy",
                       "--json")
    assert json.loads(out)["prefill"]["first_token_step_ms"] > 0


def test_the_readme_quick_start_output_is_what_the_command_prints(capsys):
    """The README's quick start shows the output of its first command verbatim (the block after the two commands):
    a refit that moves a default range, or any change to the printout, must update it (it went stale once, session
    45: a prefill range's 87.76 ms had become 87.17 ms)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"```\n(llama-2-7b \(6\.74B params\) on NVIDIA A100 40GB SXM4.*?)```", readme, re.S).group(1)
    assert main(["estimate", "--model", "llama-2-7b", "--hardware", "a100-40gb-sxm"]) == 0
    assert capsys.readouterr().out.strip() == block.strip()
