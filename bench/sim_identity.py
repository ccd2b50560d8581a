"""Bit-for-bit check and timing of the engine simulation over a fixed set of configurations.

    python bench/sim_identity.py save FILE      # per-request times of every case, to an .npz
    python bench/sim_identity.py check FILE     # the same cases again: identical to FILE? and how long

Used while speeding up planner/serving/simulator.py and step_model.py: a faster loop must give the same floats.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from planner.architecture import load_model
from planner.hardware import load_hardware
from planner.serving import make_config, run_engine
from planner.serving.engine import build_engine, engine_requests, slow_fast
from planner.serving.scenarios import get_scenario

CASES = [  # model, hardware, weights, tp, scenario, qps, engines, n, chunked, max_num_seqs, preemption
    ("llama-3.1-8b", "h100-sxm", "bf16", 1, "chat", 10, 1, 1200, False, 256, "recompute"),
    ("llama-3.1-8b", "l4", "fp8", 1, "chat", 10, 3, 1200, False, 256, "recompute"),
    ("llama-3.1-8b", "a10", "int4-g128", 1, "chat", 10, 4, 1200, False, 64, "recompute"),
    ("llama-3.1-8b", "h100-sxm", "bf16", 1, "batch", 50, 1, 1200, False, 512, "recompute"),
    ("llama-3.1-8b", "rtx-4090", "int4-g128", 1, "batch", 50, 2, 1200, False, 512, "swap"),
    ("llama-3.1-8b", "h100-sxm", "bf16", 1, "chat", 30, 1, 1200, True, 256, "recompute"),
    ("llama-3.1-70b", "h100-sxm", "fp8", 2, "chat", 10, 2, 1200, False, 256, "recompute"),
    ("llama-3.1-70b", "mi300x", "bf16", 2, "long-doc", 0.5, 1, 400, False, 256, "recompute"),
    ("gemma-2-9b", "l40s", "bf16", 1, "chat", 10, 2, 1200, False, 256, "recompute"),
    ("gemma-2-9b", "l40s", "bf16", 1, "chat", 10, 2, 800, True, 256, "recompute"),
    ("mixtral-8x7b", "h100-sxm", "fp8", 2, "batch", 50, 1, 1200, False, 512, "recompute"),
    ("qwen3-30b-a3b", "apple-m2-ultra", "int4-g128", 1, "on-device", 0.005, 1, 1200, True, 1, "recompute"),
]


def runs():
    for model, hw, wt, tp, scen, qps, engines, n, chunked, seqs, pre in CASES:
        m, spec = load_model(model), load_hardware(hw)
        w = get_scenario(scen).workload.model_copy(update={"qps": qps})
        reqs = engine_requests(w, engines, n, 0)
        cfg = make_config(hardware=hw, weights=wt, tp=tp, chunked_prefill=chunked, max_num_seqs=seqs,
                          preemption=pre)
        eng = build_engine(m, spec, cfg, "auto", int(reqs.prompt.max()), int((reqs.prompt + reqs.output).max()))
        iv = {"p10": 0.7, "p90": 1.2, "prefill_p10": 0.8, "prefill_p90": 1.1}
        for tag, sm in zip(("nominal", "slow", "fast"), (eng.step_model, *slow_fast(eng.step_model, iv))):
            yield f"{model}/{hw}/{wt}/tp{tp}/{scen}/{qps}/{engines}/{n}/{chunked}/{seqs}/{pre}/{tag}", sm, reqs, \
                eng.limits


def main():
    mode, path = sys.argv[1], sys.argv[2]
    out, tot = {}, 0.0
    ref = np.load(path) if mode == "check" else None
    bad = 0
    for name, sm, reqs, lim in runs():
        t = time.process_time()
        tr = run_engine(sm, reqs, lim)
        tot += time.process_time() - t
        arr = np.concatenate([tr.admit_s, tr.first_s, tr.finish_s, tr.running_s,
                              np.array([tr.steps, tr.busy_s, tr.batch_time_sum, tr.max_running, tr.preemptions,
                                        tr.recomputed_tokens, tr.swapped_bytes])])
        out[name] = arr
        if ref is not None and not np.array_equal(ref[name], arr, equal_nan=True):
            bad += 1
            print("DIFFERENT", name)
    print(f"{len(out)} runs, {tot:.3f} s simulating, {bad} different")
    if mode == "save":
        np.savez(path, **out)


if __name__ == "__main__":
    main()
