"""Speed of the four loops a capacity planner lives in, measured side by side with a peer in one run.

    python bench/speed.py [--repeats 7] [--peer-python PATH | --setup-peer] [--only estimate sweep cold plan]

1. one `estimate()` call in process, against llm-analysis 0.2.2 `infer()` in process (same model and GPU:
   Llama-2-7B, A100 SXM 40GB, fp16, batch 1, prompt 512, 128 output tokens), interleaved repeats;
2. the vectorized sweep on one core (configurations per second);
3. the cold start of `planner estimate` against the llm-analysis CLI (`python -m llm_analysis.analysis infer`);
4. `planner plan --scenario chat` over the whole catalog, in process.

llm-analysis runs in its own virtual environment, never in the project's dependencies: `--setup-peer` creates
`.bench-venv/` with `pip install llm-analysis==0.2.2`; `--peer-python` points at an existing one. Without a peer the
planner's own figures are printed alone. Each figure is the median over repeats with its p10-p90 spread: the
machine is shared and noisy. Figures only: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".bench-venv"
PEER_VERSION = "llm-analysis==0.2.2"
PARTS = ("estimate", "sweep", "cold", "plan")

# The peer's in-process timing loop, run by the peer's interpreter; prints one JSON line of per-call seconds.
PEER_INFER = r"""
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from llm_analysis import analysis
kw = dict(model_name="NousResearch_Llama-2-7b-hf", gpu_name="a100-sxm-40gb", dtype_name="w16a16e16",
          batch_size_per_gpu=1, seq_len=512, num_tokens_to_generate=128, log_level="CRITICAL")
analysis.infer(**kw)
n = int(sys.argv[1]); out = []
for _ in range(n):
    t = time.perf_counter(); analysis.infer(**kw); out.append(time.perf_counter() - t)
print(json.dumps(out))
"""
PEER_CLI = ["-m", "llm_analysis.analysis", "infer", "--model_name", "NousResearch_Llama-2-7b-hf", "--gpu_name",
            "a100-sxm-40gb", "--dtype_name", "w16a16e16", "--batch_size_per_gpu", "1", "--seq_len", "512",
            "--num_tokens_to_generate", "128", "--log_level", "CRITICAL"]


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _fmt(xs: list[float], scale: float, unit: str) -> str:
    return (f"{statistics.median(xs) * scale:8.3f} {unit} (p10-p90 {_q(xs, 0.1) * scale:.3f}-"
            f"{_q(xs, 0.9) * scale:.3f})")


def setup_peer() -> str:
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", PEER_VERSION], check=True)
    return str(py)


def peer_infer(py: str, n: int) -> list[float]:
    r = subprocess.run([py, "-c", PEER_INFER, str(n)], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def own_infer(n: int) -> list[float]:
    from planner import estimate

    kw = dict(model="llama-2-7b", hardware="a100-40gb-sxm", weights="fp16", batch=1, prompt=512, output=128)
    estimate(**kw)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        estimate(**kw)
        out.append(time.perf_counter() - t)
    return out


def cold(cmd: list[str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
        out.append(time.perf_counter() - t)
    return out


def sweep_rate(repeats: int) -> tuple[int, list[float]]:
    from planner.architecture import list_model_ids
    from planner.hardware import list_hardware_ids
    from planner.sweep import sweep

    models, hardware = list_model_ids(), list_hardware_ids()
    grid = (["fp16", "int8", "int4-g128", "q4_0"], [1, 2, 4, 8, 16, 32, 64, 128, 256], [128, 512, 2048, 8192],
            [128, 512, 2048])
    sweep(models[:1], hardware[:1])
    rates, n = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        n = len(sweep(models, hardware, *grid))
        rates.append(n / (time.perf_counter() - t))
    return n, rates


def plan_times(repeats: int) -> tuple[list[float], str]:
    """Seconds per plan() after a warm-up call, and the plan's note on what it screened out and simulated."""
    from planner.serving import plan

    plan("llama-3.1-8b", "chat")  # warm the catalog caches once, as the UI and a loop would
    out, note = [], ""
    for _ in range(repeats):
        t = time.perf_counter()
        res = plan("llama-3.1-8b", "chat")
        out.append(time.perf_counter() - t)
        note = next((n for n in res.notes if "screened out" in n), "")
    return out, note


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200, help="estimate()/infer() calls per repeat")
    ap.add_argument("--peer-python", default=None, help="python of a venv that has llm-analysis 0.2.2")
    ap.add_argument("--setup-peer", action="store_true", help=f"create .bench-venv/ with {PEER_VERSION}")
    ap.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="run only these parts")
    a = ap.parse_args()
    if "estimate" in a.only:
        _estimate_part(a, _peer(a))
    if "sweep" in a.only:
        _sweep_part(a)
    if "cold" in a.only:
        _cold_part(a, _peer(a))
    if "plan" in a.only:
        pt, note = plan_times(max(3, a.repeats // 2))
        print(f"\nplan --scenario chat, whole catalog (llama-3.1-8b): {_fmt(pt, 1, 's')} (target <= 0.3 s)\n  {note}")


def _peer(a) -> str | None:
    peer = setup_peer() if a.setup_peer else a.peer_python
    if peer is None and (VENV / "bin" / "python").exists():
        peer = str(VENV / "bin" / "python")
    return peer


def _estimate_part(a, peer) -> None:
    print(f"one estimate() call, {a.repeats} interleaved repeats of {a.calls} calls "
          f"(Llama-2-7B, A100 SXM 40GB, fp16, batch 1, 512 + 128 tokens)")
    own, theirs = [], []
    for _ in range(a.repeats):
        own.append(statistics.median(own_infer(a.calls)))
        if peer:
            theirs.append(statistics.median(peer_infer(peer, a.calls)))
    print(f"  planner estimate()       {_fmt(own, 1e3, 'ms')}")
    if peer:
        print(f"  llm-analysis infer()     {_fmt(theirs, 1e3, 'ms')}")
        ratio = [o / t for o, t in zip(own, theirs)]
        print(f"  ratio planner / llm-analysis: {statistics.median(ratio):.2f} (target <= 0.5)")


def _sweep_part(a) -> None:
    n, rates = sweep_rate(max(3, a.repeats // 2))
    print(f"\nvectorized sweep, {n:,} configurations: {statistics.median(rates):,.0f} configurations/s "
          f"(p10-p90 {_q(rates, 0.1):,.0f}-{_q(rates, 0.9):,.0f}; target >= 1,000,000)")


def _cold_part(a, peer) -> None:
    n_cold = max(5, a.repeats)
    # byte-compile the package first, as `pip install` does for the peer's site-packages: with
    # PYTHONDONTWRITEBYTECODE set (as on this machine) an editable checkout would otherwise be compiled from source
    # on every start, which no installed package pays
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "planner"), str(ROOT / "validate")],
                   check=True, capture_output=True)
    own_cold, peer_cold, base = [], [], []
    for _ in range(n_cold):  # interleaved, one of each per round
        base += cold([sys.executable, "-c", "pass"], 1)
        own_cold += cold([sys.executable, "-m", "planner", "estimate", "-m", "llama-2-7b", "-H", "a100-40gb-sxm"], 1)
        if peer:
            peer_cold += cold([peer] + PEER_CLI, 1)
    print(f"\ncold start, {n_cold} interleaved runs")
    print(f"  python -c pass           {_fmt(base, 1e3, 'ms')}")
    print(f"  planner estimate         {_fmt(own_cold, 1e3, 'ms')}")
    if peer:
        print(f"  llm-analysis CLI infer   {_fmt(peer_cold, 1e3, 'ms')}")
        print(f"  ratio planner / llm-analysis: {statistics.median(own_cold) / statistics.median(peer_cold):.2f} "
              f"(target <= 0.35)")


if __name__ == "__main__":
    main()
