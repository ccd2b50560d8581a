"""Side by side with NVIDIA's aiconfigurator: TTFT, TPOT and memory per GPU on a grid, and the ratio planner / aic.

  python bench/aiconfigurator_side_by_side.py [--aic-python /work/venvs/aic/bin/python] [--isl 1024 --osl 256]
                                              [--batches 1,8,32,128] [--report reports/aiconfigurator_side_by_side.md]
                                              [--rows]

aiconfigurator-core (https://pypi.org/project/aiconfigurator-core/, Apache-2.0) estimates from kernel timings NVIDIA
measured on each system (its systems/data/<system>/{gemm,attention,moe,comm}/<backend>/<version>/ tables). It runs
in its own virtual environment (never a dependency of the planner): bench/aiconfigurator_driver.py is started with
that venv's python and answers JSON on stdout. Without the venv this script says so in one line and exits 0:
  python -m venv /work/venvs/aic && /work/venvs/aic/bin/pip install aiconfigurator-core

Grid: Llama-3.1-8B (TP1), Llama-3.1-70B (TP4), Qwen3-30B-A3B (TP1) on H100 SXM / H200 SXM / B200; bf16 and fp8
(weights and activations fp8, fp8 KV cache); static batches of b prompts of isl tokens, osl output tokens.
Comparisons (planner side in process, planner.estimate):
  default  `planner estimate` with no runtime (kind-default efficiency, engine none)  vs aic trtllm
  trtllm   `--engine trtllm` (the trtllm runtime profile, TensorRT-LLM memory rule)   vs aic trtllm
  vllm     `--engine vllm`                                                            vs aic vllm
  sglang   `--engine sglang`                                                          vs aic sglang
Memory: the planner's per-device total (weights + KV of the batch + activations + overhead, GB) against aic's
run_static total (weights + KV + activations + NCCL + 'other_mem', GiB converted to GB). For the engines with a KV
pool (vLLM, SGLang) the planner total counts the batch's KV, not the whole pool, as aic does.
Timings are never asserted; this prints ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from planner.units import GB, GIB

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "aiconfigurator_driver.py"
DEFAULT_AIC_PYTHON = os.environ.get("AIC_PYTHON", "/work/venvs/aic/bin/python")

# (planner model id, aiconfigurator model id (its model_configs/), tensor-parallel degree)
MODELS = (("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", 1),
          ("llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", 4),
          ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 1))
DEVICES = (("h100-sxm", "h100_sxm"), ("h200-sxm", "h200_sxm"), ("b200", "b200_sxm"))
DTYPES = ("bf16", "fp8")  # planner (weights, kv_dtype): bf16 -> (bf16, bf16); fp8 -> (fp8, fp8)
COMPARISONS = (("default", None, "trtllm"), ("trtllm", "trtllm", "trtllm"), ("vllm", "vllm", "vllm"),
               ("sglang", "sglang", "sglang"))  # (label, planner --engine/--runtime, aic backend)
METRICS = ("ttft_ms", "tpot_ms", "mem_gb")


def aic_results(aic_python: str, cases: list[dict]) -> tuple[str, dict]:
    """Run the driver in aiconfigurator's venv; {(model_hf, system, backend, dtype, batch): result}."""
    p = subprocess.run([aic_python, str(DRIVER)], input=json.dumps(cases), capture_output=True, text=True,
                       check=False)
    if p.returncode != 0:
        raise SystemExit(f"aiconfigurator driver failed (rc {p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
    out = json.loads(p.stdout)
    return out["version"], {(r["model_hf"], r["system"], r["backend"], r["dtype"], r["batch"]): r
                            for r in out["results"]}


def planner_result(model: str, hw: str, dtype: str, batch: int, isl: int, osl: int, tp: int,
                   engine: str | None) -> dict:
    from planner.estimate import estimate
    e = estimate(model, hw, weights=dtype, kv_dtype=dtype, batch=batch, prompt=isl, output=osl, tp=tp,
                 engine=engine or "none", runtime=engine)
    m = e.memory
    return dict(ttft_ms=e.end_to_end.ttft_ms, tpot_ms=e.end_to_end.tpot_ms, mem_gb=m.total_gb, fits=m.fits,
                parts_gb=dict(weights=m.weights_gb, kv=m.kv_cache_gb, activations=m.activations_gb,
                              overhead=m.overhead_gb))


def _ratio(p, a):
    return p / a if p is not None and a else None


def rows_for(grid, aic: dict, isl: int, osl: int) -> dict[str, list[dict]]:
    out = {label: [] for label, _, _ in COMPARISONS}
    for model, model_hf, tp, hw, system, dtype, batch in grid:
        for label, engine, backend in COMPARISONS:
            a = aic.get((model_hf, system, backend, dtype, batch))
            if a is None or "error" in a:
                continue
            p = planner_result(model, hw, dtype, batch, isl, osl, tp, engine)
            g = {k: v * GIB / GB for k, v in a["memory_gib"].items()}  # aic prints GiB
            a_m = dict(ttft_ms=a["ttft_ms"], tpot_ms=a["tpot_ms"], mem_gb=g["total"],
                       parts_gb=dict(weights=g["weights"], kv=g["kvcache"], activations=g["activations"],
                                     overhead=g["nccl"] + g["others"]))
            out[label].append(dict(model=model, hw=hw, tp=tp, dtype=dtype, batch=batch, planner=p, aic=a_m,
                                   aic_memory_gib=a["memory_gib"], aic_oom=a["oom"],
                                   ratio={k: _ratio(p[k], a_m[k]) for k in METRICS}))
    return out


def medians(rows: list[dict], where=lambda r: True) -> dict:
    sel = [r for r in rows if where(r)]
    return {k: (statistics.median(v) if (v := [r["ratio"][k] for r in sel if r["ratio"][k] is not None]) else None)
            for k in METRICS} | {"n": len(sel)}


PARTS = ("weights", "kv", "activations", "overhead")


def memory_parts(rows_by: dict[str, list[dict]]) -> list[str]:
    """Where the memory gap is: median of aic - planner per component, GB (overhead: aic NCCL + 'other_mem'; planner
    CUDA context + NCCL + CUDA-graph pool, planner.memory.runtime_overhead_bytes)."""
    lines = ["| comparison | rows | " + " | ".join(f"{p} aic - planner GB" for p in PARTS) + " | total |",
             "|---|---|" + "---|" * (len(PARTS) + 1)]
    for label, rows in rows_by.items():
        d = {p: statistics.median(r["aic"]["parts_gb"][p] - r["planner"]["parts_gb"][p] for r in rows) for p in PARTS}
        tot = statistics.median(r["aic"]["mem_gb"] - r["planner"]["mem_gb"] for r in rows)
        lines.append(f"| {label} | {len(rows)} | " + " | ".join(f"{d[p]:+.2f}" for p in PARTS) + f" | {tot:+.2f} |")
    return lines


def _f(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def table(label: str, rows: list[dict]) -> list[str]:
    head = (f"| model | device | dtype | batch | TTFT ms planner | aic | ratio | TPOT ms planner | aic | ratio "
            f"| mem GB planner | aic | ratio |")
    lines = [f"### {label}", "", head, "|" + "---|" * 13]
    for r in rows:
        p, a, q = r["planner"], r["aic"], r["ratio"]
        lines.append(f"| {r['model']} (tp{r['tp']}) | {r['hw']} | {r['dtype']} | {r['batch']} | "
                     f"{_f(p['ttft_ms'], '.1f')} | {_f(a['ttft_ms'], '.1f')} | {_f(q['ttft_ms'])} | "
                     f"{_f(p['tpot_ms'], '.2f')} | {_f(a['tpot_ms'], '.2f')} | {_f(q['tpot_ms'])} | "
                     f"{_f(p['mem_gb'], '.1f')} | {_f(a['mem_gb'], '.1f')} | {_f(q['mem_gb'])} |")
    return lines


def summary(rows_by: dict[str, list[dict]]) -> list[str]:
    """Median planner / aic per comparison, overall and by dtype, device, model, batch."""
    cuts = [("all", lambda r: True)]
    cuts += [(f"dtype {d}", lambda r, d=d: r["dtype"] == d) for d in DTYPES]
    cuts += [(f"device {h}", lambda r, h=h: r["hw"] == h) for h, _ in DEVICES]
    cuts += [(f"model {m}", lambda r, m=m: r["model"] == m) for m, _, _ in MODELS]
    cuts += [(f"batch {b}", lambda r, b=b: r["batch"] == b) for b in sorted({r["batch"] for v in rows_by.values()
                                                                             for r in v})]
    lines = ["| comparison | cut | rows | TTFT | TPOT | memory |", "|---|---|---|---|---|---|"]
    for label, rows in rows_by.items():
        for name, where in cuts:
            m = medians(rows, where)
            if m["n"]:
                lines.append(f"| {label} | {name} | {m['n']} | {_f(m['ttft_ms'])} | {_f(m['tpot_ms'])} | "
                             f"{_f(m['mem_gb'])} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic-python", default=DEFAULT_AIC_PYTHON, help="python of aiconfigurator's venv")
    ap.add_argument("--isl", type=int, default=1024)
    ap.add_argument("--osl", type=int, default=256)
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--rows", action="store_true", help="print every row, not only the medians")
    ap.add_argument("--report", default=None, help="also write this markdown report (e.g. "
                                                   "reports/aiconfigurator_side_by_side.md)")
    args = ap.parse_args(argv)
    if not Path(args.aic_python).exists():
        print(f"aiconfigurator venv not found ({args.aic_python}; set AIC_PYTHON or --aic-python): skipped")
        return 0
    batches = [int(b) for b in args.batches.split(",")]
    grid = [(m, mh, tp, hw, sy, d, b) for m, mh, tp in MODELS for hw, sy in DEVICES for d in DTYPES for b in batches]
    cases = [dict(model_hf=mh, system=sy, backend=be, dtype=d, tp=tp, batch=b, isl=args.isl, osl=args.osl)
             for _, mh, tp, _, sy, d, b in grid for be in sorted({c[2] for c in COMPARISONS})]
    version, aic = aic_results(args.aic_python, cases)
    failed = [k for k, r in aic.items() if "error" in r]
    rows_by = rows_for(grid, aic, args.isl, args.osl)

    tables = sorted({(r["system"], r["backend"], r["backend_version"]) for r in aic.values() if "error" not in r})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                            check=False).stdout.strip() or "unknown"
    cmd = "python bench/aiconfigurator_side_by_side.py " + " ".join(argv if argv is not None else sys.argv[1:])
    head = [f"aiconfigurator-core {version} (static mode, silicon tables) vs planner; ISL {args.isl}, OSL "
            f"{args.osl}; ratio = planner / aiconfigurator (< 1: the planner predicts less time / memory)",
            f"planner commit {commit}; aiconfigurator tables (system backend version): "
            + ", ".join(" ".join(t) for t in tables),
            "aic fp8 quant modes used (gemm/moe/kv/fmha; the first with tables, bench/aiconfigurator_driver.py): "
            + "; ".join(sorted({f"{r['backend']} {r['system']}: " + "/".join(r["quant"].values())
                                for r in aic.values() if r["dtype"] == "fp8" and "quant" in r})),
            f"aic cases without a result: {len(failed)}" + (f" (e.g. {aic[failed[0]]['error'][:120]})"
                                                            if failed else "")]
    body = summary(rows_by) + ["", "Memory per GPU, by component (median over rows):", ""] + memory_parts(rows_by)
    print("\n".join(head + [""] + body))
    detail = [ln for label, rows in rows_by.items() for ln in table(label, rows) + [""]]
    if args.rows:
        print("\n" + "\n".join(detail))
    if args.report:
        from planner.io import atomic_write_text
        today = datetime.date.today().isoformat()
        text = "\n".join([f"# Side by side with aiconfigurator ({today})", "", f"Command: `{cmd.strip()}`", "",
                          *[f"- {h}" for h in head], "", "## Medians of planner / aiconfigurator", "", *body, "",
                          "## Rows", "", *detail])
        atomic_write_text(Path(args.report), text + "\n")
        print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
