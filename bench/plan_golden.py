"""Dump plan(...).to_dict() (elapsed_s dropped) for a broad set of cases, or compare against an earlier dump.

    python bench/plan_golden.py dump DIR [--only SUBSTR]     # one JSON per case in DIR
    python bench/plan_golden.py compare DIR_A DIR_B           # identical, case by case

A regression check for speed work on `plan`: every answer (ranking, chosen configs, replicas, percentiles, ranges,
recommendations) must stay identical. The note's count of engine runs is reported apart (it may change).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

SUB = ["h100-sxm", "a100-80gb-sxm", "mi300x", "l4", "rtx-4090", "gaudi-3", "tpu-v5e", "apple-m2-ultra", "h20",
       "l40s", "b200", "a10"]
CASES = {
    "8b-chat-all": ("llama-3.1-8b", "chat", {}),
    "8b-ondevice-all": ("llama-3.1-8b", "on-device", {}),
    "8b-batch-all": ("llama-3.1-8b", "batch", {}),
    "8b-longdoc-sub": ("llama-3.1-8b", "long-doc", {"hardware": SUB}),
    "8b-chat-trtllm-vllm-sub": ("llama-3.1-8b", "chat", {"hardware": SUB, "runtime": "trtllm", "engine": "vllm"}),
    "8b-chat-qps50-sub": ("llama-3.1-8b", "chat", {"hardware": SUB, "qps": 50}),
    "8b-chat-tight-sub": ("llama-3.1-8b", "chat", {"hardware": SUB, "ttft_p95_ms": 150, "tpot_p95_ms": 20}),
    "8b-ondevice-llamacpp": ("llama-3.1-8b", "on-device", {"engine": "llamacpp"}),
    "70b-chat-sub": ("llama-3.1-70b", "chat", {"hardware": SUB}),
    "70b-batch-sub": ("llama-3.1-70b", "batch", {"hardware": SUB}),
    "70b-longdoc-sub": ("llama-3.1-70b", "long-doc", {"hardware": SUB}),
    "70b-chat-vllm-sub": ("llama-3.1-70b", "chat", {"hardware": SUB, "runtime": "vllm"}),
    "mixtral-chat-sub": ("mixtral-8x7b", "chat", {"hardware": SUB}),
    "mixtral-batch-sglang-sub": ("mixtral-8x7b", "batch", {"hardware": SUB, "engine": "sglang"}),
    "mixtral-ondevice": ("mixtral-8x7b", "on-device", {}),
    "qwen3-chat-sub": ("qwen3-30b-a3b", "chat", {"hardware": SUB}),
    "qwen3-longdoc-sub": ("qwen3-30b-a3b", "long-doc", {"hardware": SUB}),
    "qwen3-batch-trtllm-sub": ("qwen3-30b-a3b", "batch", {"hardware": SUB, "runtime": "trtllm"}),
    "qwen3-chat-all": ("qwen3-30b-a3b", "chat", {}),
    "70b-chat-all": ("llama-3.1-70b", "chat", {}),
}
RUNS = re.compile(r"\(\d+ engine runs\)")


def dump(out: Path, only: str | None) -> None:
    from planner.serving import plan

    out.mkdir(parents=True, exist_ok=True)
    for name, (model, scenario, kw) in CASES.items():
        if only and only not in name:
            continue
        t = time.perf_counter()
        res = plan(model, scenario, **kw)
        d = res.to_dict()
        d.pop("elapsed_s")
        # every simulated configuration (the UI's Pareto chart reads the rows that met the targets)
        d["configs"] = json.loads(res.configs.to_json(orient="records"))
        (out / f"{name}.json").write_text(json.dumps(d, indent=1, sort_keys=True, default=str))
        print(f"{name}: {time.perf_counter() - t:.2f} s  {[n for n in d['notes'] if 'engine runs' in n]}",
              flush=True)


def compare(a: Path, b: Path) -> int:
    bad = 0
    for fa in sorted(a.glob("*.json")):
        fb = b / fa.name
        if not fb.exists():
            print(f"{fa.stem}: missing in {b}")
            continue
        ta, tb = fa.read_text(), fb.read_text()
        if RUNS.sub("", ta) == RUNS.sub("", tb):
            print(f"{fa.stem}: identical  {RUNS.findall(ta)} -> {RUNS.findall(tb)}")
        else:
            bad += 1
            da, db = json.loads(ta), json.loads(tb)
            print(f"{fa.stem}: DIFFERENT")
            for i, (ra, rb) in enumerate(zip(da["ranking"], db["ranking"])):
                if ra != rb:
                    ks = [k for k in ra if ra.get(k) != rb.get(k)]
                    print(f"   row {i} {ra['hardware']}/{rb['hardware']}: " +
                          ", ".join(f"{k}: {ra.get(k)!r} -> {rb.get(k)!r}" for k in ks[:6]))
            if da["recommendations"] != db["recommendations"]:
                print("   recommendations differ")
            if da.get("configs") != db.get("configs"):
                print(f"   configs differ ({len(da.get('configs') or [])} vs {len(db.get('configs') or [])} rows)")
    return bad


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(Path(sys.argv[2]), sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--only" else None)
    else:
        sys.exit(1 if compare(Path(sys.argv[2]), Path(sys.argv[3])) else 0)
