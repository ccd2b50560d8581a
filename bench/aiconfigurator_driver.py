"""aiconfigurator side of bench/aiconfigurator_side_by_side.py: run in aiconfigurator's own venv, never imported by
the planner.

Reads a JSON list of cases on stdin, each {model_hf, system, backend, dtype ('bf16' | 'fp8'), tp, batch, isl, osl},
and writes one JSON object on stdout: {"version": ..., "results": [...]}, each result the case plus ttft_ms,
tpot_ms, memory_gib {total, weights, activations, kvcache, nccl, others}, oom, backend_version, or error.

aiconfigurator-core (NVIDIA, Apache-2.0, https://github.com/ai-dynamo/aiconfigurator): static mode
(BaseBackend.run_static: TTFT = context latency of the batch, TPOT = generation latency / (osl - 1), from kernel
timings measured on the system, systems/data/<system>/<op>/<backend>/<version>/). Quant modes: bf16 = bfloat16
GEMM/MoE/KV/FMHA; fp8 = fp8 GEMM/MoE (per-tensor W8A8) + fp8 KV cache, bfloat16 FMHA (vLLM's tables have no fp8
FMHA; the same on every backend keeps the columns comparable) where the tables have it, else the next of _quants
(SGLang on Hopper: fp8 FMHA; SGLang Qwen3 MoE: block fp8); each result names the modes it used.
"""

from __future__ import annotations

import json
import logging
import sys
from importlib.metadata import version


def _quants(dtype: str) -> list[dict]:
    """The quant modes to try, in order: the first whose tables exist is used (and reported)."""
    if dtype == "bf16":
        return [dict(gemm_quant_mode="bfloat16", moe_quant_mode="bfloat16", kvcache_quant_mode="bfloat16",
                     fmha_quant_mode="bfloat16")]
    if dtype == "fp8":
        fp8 = dict(gemm_quant_mode="fp8", moe_quant_mode="fp8", kvcache_quant_mode="fp8", fmha_quant_mode="bfloat16")
        return [fp8, {**fp8, "fmha_quant_mode": "fp8"},  # SGLang on Hopper: fp8-KV context attention only as fp8 FMHA
                {**fp8, "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block"},  # SGLang B200 MoE: block fp8
                {**fp8, "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block", "fmha_quant_mode": "fp8"}]
    raise ValueError(f"dtype: {dtype!r}, allowed: bf16, fp8")


def main() -> int:
    logging.disable(logging.WARNING)
    from aiconfigurator_core.sdk import perf_database
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import RuntimeConfig
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model

    cases = json.load(sys.stdin)
    dbs, models, out = {}, {}, []
    for c in cases:
        r = dict(c)
        try:
            key = (c["system"], c["backend"])
            if key not in dbs:
                v = perf_database.get_latest_database_version(*key)
                dbs[key] = perf_database.get_database(*key, v) if v else None
            db = dbs[key]
            if db is None:
                raise RuntimeError(f"no {c['backend']} database for {c['system']}")
            rc = RuntimeConfig(batch_size=c["batch"], isl=c["isl"], osl=c["osl"])
            for i, q in enumerate(quants := _quants(c["dtype"])):
                mkey = (c["model_hf"], c["backend"], c["tp"], tuple(q.values()))
                if mkey not in models:
                    models[mkey] = get_model(c["model_hf"], build_model_config(c["tp"], 1, 1, c["tp"], 1, **q),
                                             c["backend"])
                try:
                    s = get_backend(c["backend"]).run_static(models[mkey], db, rc, "static")
                    break
                except Exception:
                    if i == len(quants) - 1:
                        raise
            r["quant"] = q
            row = s.get_summary_df().iloc[0]
            r.update(ttft_ms=float(row["ttft"]), tpot_ms=float(row["tpot"]), memory_gib=s.get_memory(),
                     oom=bool(s.check_oom()), backend_version=db.version)
        except Exception as e:  # one failed case (no table, unsupported combination) does not stop the grid
            r["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        out.append(r)
    json.dump({"version": version("aiconfigurator-core"), "results": out}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
