"""A fuzz of the `planner` CLI and the public API: generated command lines and hostile generated files, each run
classified by the project's promise.

- ok:          exit 0; `--json` output is JSON; every number finite and non-negative; no NaN/inf printed;
               no verdict contradicting its own figures.
- clean error: exit 2, stdout empty, exactly one `error: ...` line on stderr.
- defect:      anything else (a traceback, another exit code, NaN, a negative figure, a contradiction).

`tests/test_fuzz.py` runs it under hypothesis in CI (fixed seed); `python scripts/fuzz.py --cli 10000 --api 2000
--seed N` runs the large campaign and prints a table per command.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

MODELS = ["llama-2-7b", "llama-3.1-8b", "mixtral-8x7b", "deepseek-v2-lite", "gemma-2-9b", "qwen3-30b-a3b",
          "llama-3.1-70b", "phi-3-mini", "mistral-7b"]
DEVICES = ["a100-40gb-sxm", "h100-sxm", "rtx-3060-12gb", "rtx-4090", "l40s", "apple-m2-max", "mi300x",
           "snapdragon-8-gen3", "cpu-amd-epyc-2c", "h200-sxm"]
FORMATS = ["fp16", "bf16", "fp8", "int8", "int4-g128", "q4_0", "q4_k_m", "awq-int4", "nf4", "mxfp4", "mxfp4_moe", "w8a8"]
KV = ["fp16", "bf16", "fp8", "int8", "int4"]
ENGINES = ["none", "vllm", "trtllm", "sglang", "llamacpp", "lmdeploy"]
RUNTIMES = ["llamacpp", "trtllm", "gpt-fast", "lmdeploy"]
SCENARIOS = ["chat", "batch", "long-doc", "on-device"]

# hostile scalars for any field of a file or a flag
HOSTILE_NUMBERS = ["0", "-1", "-0", "1e400", "-1e400", "nan", "NaN", "inf", "-inf", ".inf", "1e-310", "4k", "",
                   "9223372036854775808", "18446744073709551616", "4096.7", "0x10", "1_000", "12:30", "true",
                   "[]", "{}", "null", "1e308", "2.5", "007"]
HOSTILE_JSON_VALUES = [0, -1, 4096.7, 1e308, float("nan"), float("inf"), "4k", "no", None, [], {"a": [1]}, True,
                       10 ** 30, 10 ** 8, -(10 ** 8), 1, 3]
SIGNED_KEYS = re.compile(r"(delta|error|bias|residual|diff|change|log|gain|saving|vs_|improv|margin)", re.I)

LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
                "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
                "tie_word_embeddings": False}


@dataclass
class Outcome:
    command: str
    kind: str           # ok | clean | defect
    why: str = ""
    argv: list = field(default_factory=list)


def spec_yaml(capacity="24", bandwidth="1000", fp16="200", frac="1.0", eff_bw="0.8", extra="") -> str:
    return f"""id: fuzz-gpu
name: Fuzz GPU
kind: gpu
vendor: ACME
memory:
  capacity_gb: {capacity}
  bandwidth_gbs: {bandwidth}
  usable_fraction: {frac}
  usable_fraction_source: fuzz
  source: fuzz
units:
  - name: gpu
    kind: gpu
    peak_tflops: {{fp32: 50, fp16: {fp16}, bf16: 200, fp8: 400, int8: 400}}
    source: fuzz
efficiency: {{bandwidth_fraction: {eff_bw}, compute_fraction: 0.7, kernel_overhead_us: 3, step_overhead_ms: 0.3, source: fuzz}}
{extra}"""


def hostile_spec(rng: random.Random) -> str:
    """A device spec YAML with one or two fields replaced by hostile text (or a structurally broken file)."""
    r = rng.random()
    if r < 0.08:
        return rng.choice(["", "- a\n- b\n", "id: [\n", "a: " + "[" * 50_000, "!!python/object/apply:os.system ['true']",
                           "\x00\xff", "id: x\n" * 3])
    keys = ["capacity", "bandwidth", "fp16", "frac", "eff_bw"]
    kw = {k: rng.choice(HOSTILE_NUMBERS) for k in rng.sample(keys, rng.randint(1, 2))}
    return spec_yaml(**kw)


def hostile_config(rng: random.Random) -> str:
    """A HF config.json with one to three fields replaced by hostile values (or a broken file)."""
    r = rng.random()
    if r < 0.08:
        return rng.choice(["", "[]", "{", "[" * 100_000 + "]" * 100_000, '{"model_type": "not-a-model"}',
                           '{"text_config": {"model_type": "llama"}}', "\ufeff{}"])
    cfg = dict(LLAMA_CONFIG)
    for k in rng.sample(sorted(cfg), rng.randint(1, 3)):
        if k in ("architectures", "model_type"):
            cfg[k] = rng.choice(["mystery", 7, None, ["X"]])
        else:
            cfg[k] = rng.choice(HOSTILE_JSON_VALUES)
    if rng.random() < 0.2:
        cfg["num_local_experts"] = rng.choice([0, 8, 10 ** 8, -2, 2.5])
        cfg["num_experts_per_tok"] = rng.choice([0, 2, 99, "two"])
    if rng.random() < 0.1:
        cfg["sliding_window"] = rng.choice([0, -1, 4096, 1e400, "4k"])
    return json.dumps(cfg, allow_nan=True).replace("1e+400", "1e400")


MEASUREMENT_HEADER = ["source_id", "hardware", "hardware_detail", "framework", "model", "params_b", "weight_format",
                      "kv_dtype", "batch", "input_len", "output_len", "metric", "value", "unit", "notes"]
MEASUREMENT_ROWS = [  # rows in data/measured_public.csv's schema that map, one per engine family and metric kind
    ["s", "NVIDIA GeForce RTX 4090", "", "llama.cpp", "Meta-Llama-3.1-8B-Instruct", "", "Q4_K_M", "f16", 1, 0, 128,
     "decode_tok_s_per_seq", 140, "tok/s", ""],
    ["s", "NVIDIA H100 SXM5 80GB", "TP 2", "vLLM", "Meta-Llama-3.1-8B-Instruct", "", "bf16", "auto", 16, 1024, 128,
     "tpot_ms", 9.1, "ms", ""],
    ["s", "AMD Instinct MI300X", "8x", "SGLang", "Llama-3.1-405B", "", "bf16", "", 64, 1000, 1000,
     "throughput_tok_s", 5000, "output tok/s total", ""],
    ["s", "Apple M2 Max (38-core GPU)", "", "Ollama", "Qwen/Qwen3-30B-A3B", "", "q4_k_m", "f16", 1, 512, 0,
     "prefill_tok_s", 900, "tok/s", ""],
    ["s", "NVIDIA H100 SXM5 80GB", "", "TensorRT-LLM", "mixtral-8x7b", "", "fp8", "fp8", 64, 128, 128,
     "e2e_latency_ms", 3000, "ms", ""]]
MEASUREMENT_JUNK = ["", "0", "-1", "1e400", "nan", "inf", "abc", "\u221e", "1e-300", "3.5", "999999999", "|\n|",
                    "<script>", "Q9_K", "auto", "TP 999", "8x", "ttft_s", "itl_ms", "tpot_s", "decode_tok_s_per_seq"]


def hostile_measurements(rng: random.Random) -> str:
    """A measurements CSV for `planner accuracy --data`: mapping rows with one to three cells replaced by junk, or
    a broken file (no header, ragged rows, binary)."""
    import csv
    import io

    r = rng.random()
    if r < 0.1:
        return rng.choice(["", "\x00\x01", "a,b\n1,2\n", ",".join(MEASUREMENT_HEADER) + "\n1,2,3\n",
                           ",".join(MEASUREMENT_HEADER[:11]) + "\n" + ",".join(["x"] * 15) + "\n"])
    rows = []
    for _ in range(rng.randint(1, 4)):
        row = list(rng.choice(MEASUREMENT_ROWS))
        for _ in range(rng.randint(1, 3)):
            row[rng.randrange(len(row))] = rng.choice(MEASUREMENT_JUNK)
        rows.append(row)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(MEASUREMENT_HEADER)
    w.writerows(rows)
    return buf.getvalue()


def _num(rng, lo=1, hi=4096):
    r = rng.random()
    if r < 0.75:
        return str(rng.choice([1, 2, 7, 8, 16, 32, 64, 128, 256, 512, 1000, 2048, 4096, 8192, 32768, 131072])
                   if rng.random() < 0.7 else rng.randint(lo, hi))
    return rng.choice(HOSTILE_NUMBERS + ["1" * 30, "2**53", "9007199254740993"])


def _pick(rng, good, bad=("nope", "", "../../etc/passwd", "H100", "fp17", "int3")):
    return rng.choice(good) if rng.random() < 0.9 else rng.choice(bad)


def gen_argv(rng: random.Random, tmp: Path, command: str | None = None) -> list[str]:
    """One generated command line (the files it names are written under tmp)."""
    cmd = command or rng.choice(["estimate", "estimate", "estimate", "estimate", "hardware", "models", "sweep", "sweep",
                                 "simulate", "batching", "speculative", "plan", "validate", "accuracy", "bogus"])

    def model():
        if rng.random() < 0.15:
            p = tmp / f"cfg{rng.randrange(10**9)}.json"
            p.write_text(hostile_config(rng), encoding="utf-8", errors="surrogateescape")
            return str(p)
        return _pick(rng, MODELS)

    def hw():
        if rng.random() < 0.15:
            p = tmp / f"hw{rng.randrange(10**9)}.yaml"
            p.write_text(hostile_spec(rng), encoding="utf-8", errors="surrogateescape")
            return str(p)
        if rng.random() < 0.03:
            return "/dev/zero"
        return _pick(rng, DEVICES)

    a: list[str] = [cmd]
    if cmd == "estimate":
        a += ["-m", model(), "-H", ",".join(hw() for _ in range(rng.choice([1, 1, 1, 2])))]
        for flag, gen in (("-w", lambda: _pick(rng, FORMATS)), ("--kv-dtype", lambda: _pick(rng, KV)),
                          ("-b", lambda: _num(rng, 1, 512)), ("-p", lambda: _num(rng, 1, 200000)),
                          ("-o", lambda: _num(rng, 1, 8192)), ("--engine", lambda: _pick(rng, ENGINES)),
                          ("--tp", lambda: rng.choice(["1", "2", "4", "8", "3", "0", "16"])),
                          ("--runtime", lambda: _pick(rng, RUNTIMES)), ("--unit", lambda: _pick(rng, ["cpu", "gpu", "npu"]))):
            if rng.random() < 0.4:
                a += [flag, gen()]
        for flag in ("--no-flash-attention", "--datasheet", "--json", "--ops"):
            if rng.random() < 0.25:
                a.append(flag)
    elif cmd in ("hardware", "models"):
        a += [rng.choice(["list", "show", "show", "frob"])]
        if a[-1] == "show" and rng.random() < 0.9:
            a.append(_pick(rng, DEVICES if cmd == "hardware" else MODELS))
        if rng.random() < 0.5:
            a.append("--json")
    elif cmd == "sweep":
        a += ["--models", ",".join(_pick(rng, MODELS) for _ in range(rng.randint(1, 2))),
              "--hardware", ",".join(_pick(rng, DEVICES) for _ in range(rng.randint(1, 3)))]
        if rng.random() < 0.5:
            a += ["--weights", ",".join(_pick(rng, FORMATS) for _ in range(rng.randint(1, 3)))]
        for flag in ("--batch", "--prompt", "--output"):
            if rng.random() < 0.5:
                a += [flag, ",".join(_num(rng) for _ in range(rng.randint(1, 3)))]
        if rng.random() < 0.3:
            a += ["--out", str(tmp / rng.choice(["g.csv", "g.json", "g.md", "g.txt", "no/such/dir/g.csv"]))]
        if rng.random() < 0.2:
            a += ["--runtime", _pick(rng, RUNTIMES)]
    elif cmd == "simulate":
        a += ["-m", model(), "-H", hw(), "--requests", rng.choice(["50", "120", "0", "-3", "1e9", "x"]),
              "--scenario", _pick(rng, SCENARIOS)]
        for flag, gen in (("-w", lambda: _pick(rng, FORMATS)), ("--qps", lambda: rng.choice(["1", "5", "0.5", "1e-310", "0", "nan", "inf", "-2", "1e6"])),
                          ("--tp", lambda: rng.choice(["1", "2", "3"])), ("--max-num-seqs", lambda: _num(rng, 1, 512)),
                          ("--seed", lambda: rng.choice(["0", "7", "-1", "x", "99999999999999999999"]))):
            if rng.random() < 0.35:
                a += [flag, gen()]
        for flag in ("--chunked-prefill", "--json"):
            if rng.random() < 0.4:
                a.append(flag)
        if rng.random() < 0.25:
            a.append("--burst")
        if rng.random() < 0.15:
            a += ["--runtime", _pick(rng, ["vllm", "sglang", "trtllm", "llamacpp", "tgi", "lmdeploy"])]
    elif cmd == "batching":
        a += ["-m", model(), "-H", hw()]
        if rng.random() < 0.6:
            a += ["--batch", ",".join(_num(rng, 1, 512) for _ in range(rng.randint(1, 4)))]
        if rng.random() < 0.4:
            a += ["-p", _num(rng)]
        if rng.random() < 0.5:
            a.append("--json")
    elif cmd == "speculative":
        a += ["-m", _pick(rng, ["llama-3.1-70b", "llama-2-13b", "llama-3.1-8b"]), "--draft",
              _pick(rng, ["llama-3.2-1b", "llama-2-7b", "llama-3.1-8b", "mixtral-8x7b"]), "-H", hw()]
        if rng.random() < 0.5:
            a += ["--acceptance", rng.choice(["0", "0.5", "0.9", "1", "1.5", "-0.1", "nan", "x"])]
        if rng.random() < 0.4:
            a += ["--gamma", ",".join(rng.choice(["1", "4", "0", "64", "x"]) for _ in range(2))]
        if rng.random() < 0.5:
            a.append("--json")
    elif cmd == "plan":
        a += ["-m", model(), "--scenario", _pick(rng, SCENARIOS), "--requests", rng.choice(["60", "100", "0", "x"]),
              "-H"] + [_pick(rng, DEVICES) for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.4:
            a += ["--qps", rng.choice(["1", "10", "0", "nan", "1e-310", "-1"])]
        if rng.random() < 0.3:
            a += ["--price", rng.choice(["h100-sxm=2.5", "h100-sxm=-1", "x", "=3", "h100-sxm=inf"])]
        if rng.random() < 0.5:
            a.append("--json")
    elif cmd == "validate":
        # fit and spec write files: always into tmp, never into the project's own calibration or spec folders
        a += [rng.choice(["check", "fit", "spec", "frob"])]
        if a[-1] in ("fit", "spec"):
            a += ["--records", str(tmp / rng.choice(["missing", "empty"])), "--out", str(tmp / "out.yaml")]
    elif cmd == "accuracy":
        if rng.random() < 0.6:  # the committed profiles against a hostile measurements file, written under tmp
            p = tmp / f"meas{rng.randrange(10**9)}.csv"
            p.write_text(hostile_measurements(rng), encoding="utf-8", errors="surrogateescape")
            a += ["--data", str(p), "--out-dir", str(tmp / "accuracy"), "--no-png"]
        else:
            a += [rng.choice(["--bogus", "--out-dir", "-x"])]
    return a


_NAN_RE = re.compile(r"(?<![A-Za-z_])(nan|inf|-inf)(?![A-Za-z_])", re.I)  # "Infinity Fabric" is a name


def _json_defects(obj, path="") -> str:
    if isinstance(obj, dict):
        for k, v in obj.items():
            w = _json_defects(v, f"{path}.{k}")
            if w:
                return w
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            w = _json_defects(v, f"{path}[{i}]")
            if w:
                return w
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            return f"non-finite number at {path}"
        if obj < 0 and not SIGNED_KEYS.search(path):
            return f"negative number {obj} at {path}"
    elif isinstance(obj, int) and not isinstance(obj, bool) and obj < 0 and not SIGNED_KEYS.search(path):
        return f"negative number {obj} at {path}"
    return ""


def _estimate_contradictions(d: dict) -> str:
    mem = d.get("memory")
    if not isinstance(mem, dict) or "verdict" not in mem:
        return ""
    fits, verdict = mem.get("fits"), str(mem.get("verdict", ""))
    if fits is True and verdict.startswith("does not fit"):
        return "fits=true but the verdict says it does not fit"
    if fits is False and verdict.startswith("fits"):
        return "fits=false but the verdict says it fits"
    if fits and d.get("prefill", {}).get("latency_ms") is None:
        return "fits but no TTFT"
    ctx = (d.get("prompt") or 0) + (d.get("output") or 0)
    if fits and ctx and mem.get("max_context_at_batch") is not None and mem["max_context_at_batch"] < ctx:
        return f"fits at context {ctx} but longest context {mem['max_context_at_batch']}"
    return ""


def classify(command: str, argv: list[str], code, out: str, err: str, exc: BaseException | None) -> Outcome:
    if exc is not None:
        return Outcome(command, "defect", f"{type(exc).__name__}: {str(exc)[:160]}", argv)
    if code == 2:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if out.strip():
            return Outcome(command, "defect", "error exit with stdout output", argv)
        if len(lines) != 1 or not lines[0].startswith("error:"):
            return Outcome(command, "defect", f"error exit with {len(lines)} stderr lines: {err[:160]!r}", argv)
        return Outcome(command, "clean", lines[0][:120], argv)
    if code != 0:
        return Outcome(command, "defect", f"exit {code}: {err[:160]!r} {out[-200:]!r}", argv)
    if "--json" in argv:
        try:
            data = json.loads(out, parse_constant=lambda c: float(c))
        except ValueError:
            return Outcome(command, "defect", f"--json printed non-JSON: {out[:120]!r}", argv)
        why = _json_defects(data)
        if not why and command == "estimate":
            for d in (data if isinstance(data, list) else [data]):
                if isinstance(d, dict) and (why := _estimate_contradictions(d)):
                    break
        if why:
            return Outcome(command, "defect", why, argv)
    else:
        m = _NAN_RE.search(out)
        if m:
            i = m.start()
            return Outcome(command, "defect", f"printed {m.group(0)!r}: {out[max(0, i - 60):i + 20]!r}", argv)
        if "Traceback" in err:
            return Outcome(command, "defect", "traceback on stderr", argv)
    return Outcome(command, "ok", "", argv)


def run_cli(argv: list[str]) -> tuple[object, str, str, BaseException | None]:
    """main(argv) in this process: (exit code, stdout, stderr, escaped exception)."""
    from planner.cli import main

    o, e = io.StringIO(), io.StringIO()
    code, exc = None, None
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            code = main(argv)
        except SystemExit as se:
            code = se.code
        except BaseException as x:  # noqa: BLE001 - anything escaping main is a defect
            exc = x
            e.write(traceback.format_exc())
    return code, o.getvalue(), e.getvalue(), exc


def fuzz_cli_once(rng: random.Random, tmp: Path, command: str | None = None) -> Outcome:
    argv = gen_argv(rng, tmp, command)
    code, out, err, exc = run_cli(argv)
    return classify(argv[0], argv, code, out, err, exc)


# ---------------------------------------------------------------- the Python API


def fuzz_api_once(rng: random.Random, tmp: Path) -> Outcome:
    """One call of planner.estimate.estimate with generated arguments: a PlannerError is clean, anything else
    escaping is a defect, a result must be finite, non-negative and consistent."""
    from planner.errors import PlannerError
    from planner.estimate import estimate

    def val(good):
        r = rng.random()
        if r < 0.8:
            return good()
        return rng.choice([0, -1, 2.5, float("nan"), float("inf"), 10 ** 20, "8", None, True])

    model = rng.choice(MODELS) if rng.random() < 0.85 else str(_file(tmp, "cfg", hostile_config(rng)))
    hw = rng.choice(DEVICES) if rng.random() < 0.85 else str(_file(tmp, "hw", hostile_spec(rng)))
    kw = dict(weights=rng.choice(FORMATS), kv_dtype=rng.choice(KV), batch=val(lambda: rng.choice([1, 4, 32, 256])),
              prompt=val(lambda: rng.choice([1, 128, 2048, 32768])), output=val(lambda: rng.choice([1, 16, 512])),
              engine=rng.choice(ENGINES), tp=val(lambda: rng.choice([1, 2, 4, 8])))
    try:
        e = estimate(model, hw, kw["weights"], kw["kv_dtype"], kw["batch"], kw["prompt"], kw["output"],
                     engine=kw["engine"], tp=kw["tp"])
    except PlannerError as x:
        msg = str(x)
        if "\n" in msg.strip() or not msg.strip():
            return Outcome("api", "defect", f"PlannerError not one line: {msg[:120]!r}", [model, hw, kw])
        return Outcome("api", "clean", msg[:100], [model, hw, kw])
    except Exception as x:  # noqa: BLE001
        return Outcome("api", "defect", f"{type(x).__name__}: {str(x)[:160]}", [model, hw, kw])
    d = json.loads(e.model_dump_json())
    why = _json_defects(d) or _estimate_contradictions(d)
    return Outcome("api", "defect" if why else "ok", why, [model, hw, kw])


def _file(tmp: Path, stem: str, text: str) -> Path:
    p = tmp / f"{stem}{random.randrange(10 ** 9)}.{'json' if stem == 'cfg' else 'yaml'}"
    p.write_text(text, encoding="utf-8", errors="surrogateescape")
    return p


def campaign(n_cli: int, n_api: int, seed: int) -> list[Outcome]:
    rng = random.Random(seed)
    out = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "empty").mkdir()
        out += [fuzz_cli_once(rng, tmp) for _ in range(n_cli)]
        out += [fuzz_api_once(rng, tmp) for _ in range(n_api)]
    return out
