"""Dump (or compare against) `estimate(...).model_dump()` and the `planner estimate --json` output for a fixed,
broad set of configurations: the regression net for work that must not change any answer (speed work).

    python scripts/estimate_goldens.py dump    OUT.json [--cli N]   # N CLI runs (default 30) besides the API ones
    python scripts/estimate_goldens.py compare OUT.json [--cli N] [--passes P]   # exit 1 on any difference

--passes P runs the API configurations P times in one process (default 4), each pass compared: the later calls of
a configuration take the paths a loop of estimates takes (caches; the replay is recorded at the third call and
replayed from the fourth).

Every number is compared exactly first; a float that differs is reported with its relative difference, and the
comparison fails beyond 1e-12 relative. Errors (PlannerError messages) are part of the answer too.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REL = 1e-12

MODELS = ["llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "qwen3-8b", "phi-4-mini", "gpt-j-6b",
          "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v2-lite", "deepseek-v3.2", "gemma-2-9b",
          "gemma-3-27b", "gpt-oss-20b", "gpt-oss-120b", "jamba-v0.1", "nemotron-h-8b", "mamba-codestral-7b",
          "qwen3-next-80b-a3b", "llama-4-scout", "falcon-h1-7b", "glm-4.5-air", "llama-3.2-1b"]
DEVICES = ["a100-40gb-sxm", "h100-sxm", "h200-sxm", "rtx-4090", "apple-m2-max", "apple-m4-pro", "mi300x",
           "x86-server-cpu", "cpu-amd-epyc-2c", "l40s", "b200", "rtx-3090", "snapdragon-x-elite", "gh200"]
FORMATS = [None, "fp16", "bf16", "int8", "int4-g128", "q4_0", "fp8", "mxfp4", "w8a8-int8", "q4_k_m"]
KV = ["fp16", "fp8", "int8"]
BATCH = [1, 1, 2, 4, 8, 16, 32, 64, 128, 256]
PROMPT = [1, 7, 128, 512, 512, 2048, 4096, 8192, 32768]
OUTPUT = [1, 2, 16, 128, 128, 512, 1024, 4096]
TP = [1, 1, 1, 2, 8]
RUNTIME = [None, None, "vllm", "llamacpp", "trtllm", "hf-eager", "sglang", "gpt-fast"]
ENGINE = ["none", "none", "vllm", "sglang", "trtllm", "llamacpp"]
EFF = ["auto", "auto", "auto", "default", "datasheet"]


def configs(n: int = 300, seed: int = 13) -> list[dict]:
    rng = random.Random(seed)
    out = [dict(model="llama-2-7b", hardware="a100-40gb-sxm", weights="fp16", batch=1, prompt=512, output=128)]
    for _ in range(n - 1):
        c = dict(model=rng.choice(MODELS), hardware=rng.choice(DEVICES), weights=rng.choice(FORMATS),
                 kv_dtype=rng.choice(KV), batch=rng.choice(BATCH), prompt=rng.choice(PROMPT),
                 output=rng.choice(OUTPUT), tp=rng.choice(TP), runtime=rng.choice(RUNTIME),
                 engine=rng.choice(ENGINE), efficiency=rng.choice(EFF), flash_attention=rng.random() > 0.15)
        out.append(c)
    return out


def cli_configs(n: int, seed: int = 7) -> list[list[str]]:
    rng = random.Random(seed)
    out = [["-m", "llama-2-7b", "-H", "a100-40gb-sxm"]]
    for c in configs(n * 3, seed)[1:]:
        if len(out) >= n:
            break
        a = ["-m", c["model"], "-H", c["hardware"], "--kv-dtype", c["kv_dtype"], "-b", str(c["batch"]),
             "-p", str(c["prompt"]), "-o", str(c["output"]), "--tp", str(c["tp"]), "--engine", c["engine"]]
        if c["weights"]:
            a += ["-w", c["weights"]]
        if c["runtime"]:
            a += ["--runtime", c["runtime"]]
        if not c["flash_attention"]:
            a += ["--no-flash-attention"]
        if c["efficiency"] == "datasheet":
            a += ["--datasheet"]
        elif c["efficiency"] == "default":
            a += ["--no-calibration"]
        if rng.random() < 0.2:
            a += ["-H", c["hardware"] + ",h100-sxm"]  # a comparison (JSON list)
        out.append(a)
    return out


def run_api(cfgs: list[dict]) -> list:
    from planner import PlannerError, estimate

    res = []
    for c in cfgs:
        try:
            res.append(json.loads(estimate(**c).model_dump_json()))
        except PlannerError as e:
            res.append({"error": str(e)})
        except Exception as e:  # a bug is an answer too: it must stay the same (and be reported)
            res.append({"exception": f"{type(e).__name__}: {e}"})
    return res


def run_cli(args_list: list[list[str]]) -> list:
    res = []
    for a in args_list:
        r = subprocess.run([sys.executable, "-m", "planner", "estimate", "--json", *a], capture_output=True,
                           text=True, cwd=ROOT)
        res.append({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr})
    return res


def _diff(a, b, path, out):
    if isinstance(a, float) and isinstance(b, float):
        if a != b and not (math.isnan(a) and math.isnan(b)):
            rel = abs(a - b) / max(abs(a), abs(b))
            out.append((rel, path, a, b))
        return
    if type(a) is not type(b):
        out.append((math.inf, path, a, b))
        return
    if isinstance(a, dict):
        if list(a) != list(b):
            out.append((math.inf, path + ".<keys>", list(a), list(b)))
        for k in a:
            if k in b:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append((math.inf, path + ".<len>", len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append((math.inf, path, a, b))


def _cli_parsed(r):
    try:
        return {"rc": r["rc"], "json": json.loads(r["stdout"]), "stderr": r["stderr"]}
    except ValueError:
        return r


def main() -> int:
    mode, path = sys.argv[1], Path(sys.argv[2])
    n_cli = int(sys.argv[sys.argv.index("--cli") + 1]) if "--cli" in sys.argv else 30
    cfgs, clis = configs(), cli_configs(n_cli)
    now = {"api": run_api(cfgs), "cli": run_cli(clis)}
    if mode == "dump":
        path.write_text(json.dumps(now))
        n_err = sum("error" in r for r in now["api"])
        bugs = [(c, r["exception"]) for c, r in zip(cfgs, now["api"]) if "exception" in r]
        print(f"{len(cfgs)} API configurations ({n_err} errors, {len(bugs)} exceptions), {len(clis)} CLI runs -> "
              f"{path}")
        for c, e in bugs:
            print("  exception:", c, e)
        return 0
    ref = json.loads(path.read_text())
    diffs, exact_bytes = [], 0
    passes = int(sys.argv[sys.argv.index("--passes") + 1]) if "--passes" in sys.argv else 4
    for k in range(passes):
        again = now["api"] if k == 0 else run_api(cfgs)
        for i, (a, b) in enumerate(zip(ref["api"], again)):
            _diff(a, b, f"pass{k}.api[{i}]", diffs)
    for i, (a, b) in enumerate(zip(ref["cli"], now["cli"])):
        exact_bytes += a == b
        _diff(_cli_parsed(a), _cli_parsed(b), f"cli[{i}]", diffs)
    worst = max((d[0] for d in diffs), default=0.0)
    print(f"{len(cfgs)} API configurations x {passes} passes, {len(clis)} CLI runs ({exact_bytes} byte-identical): "
          f"{len(diffs)} differing values, worst relative {worst:.3g}")
    for d in sorted(diffs, key=lambda d: -d[0])[:15]:
        print("  ", d)
    return 0 if worst <= REL else 1


if __name__ == "__main__":
    sys.exit(main())
