"""Static batching with padding, and the latency/throughput trade-off across batch sizes.

Static batching (HF generate, FasterTransformer before in-flight batching): a batch of B requests is padded to the
longest prompt P = max p_i and runs until the longest output O = max o_i; every request waits for the whole batch.
  batch time     = prefill(B, P) + sum of the O - 1 decode steps at batch B      (planner.latency)
  prompt waste   = 1 - sum p_i / (B P)           (padded prompt positions computed for nothing)
  decode waste   = 1 - sum o_i / (B O)           (token slots generated after a request finished)
  KV waste       = 1 - sum (p_i + o_i) / (B (P + O))
  FLOP waste     = 1 - sum_i flops(request i alone) / flops(padded batch)   (the core's operator counts)

The knee of the batch-size curve is where Kleinrock's power, throughput / latency, is largest (Kleinrock 1979,
"Power and deterministic rules of thumb for probabilistic problems in computer communications"): past it, more
batch buys less throughput than it costs in latency. With throughput = B / latency, power = B / latency^2; for a
latency a + b B (fixed cost a, per-sequence cost b) it peaks at B = a / b, the batch where the per-sequence part of
the time equals the fixed part (decode: KV reads equal the weight reads). `knee_batch` is the one definition; the CLI
(`planner batching`) and the web UI (Batching and Serving sections) both call it.
"""

from __future__ import annotations

import numpy as np

from ..errors import PlannerError


def _setup(model, hardware, weights, kv_dtype, efficiency):
    from ..architecture import load_model
    from ..efficiency import resolve_efficiency
    from ..hardware import load_hardware
    from ..quantization import kv_dtype as norm_kv, weight_format
    from ..roofline import device_model, select_unit

    m = model if not isinstance(model, str) else load_model(model)
    spec = hardware if not isinstance(hardware, str) else load_hardware(hardware)
    fmt = weight_format(weights)
    u = select_unit(spec, fmt)
    return m, spec, fmt, norm_kv(kv_dtype), device_model(spec, u, fmt, resolve_efficiency(spec, u, efficiency))


def knee_batch(batches, latency_s, fits=None) -> int | None:
    """The batch of largest Kleinrock power B / latency(B)^2 among the batches that fit (module docstring); None when
    none fits or no latency is finite and positive."""
    b = np.asarray(batches, dtype=np.float64)
    t = np.asarray(latency_s, dtype=np.float64)
    ok = np.isfinite(t) & (t > 0) & (b >= 1)
    if fits is not None:
        ok &= np.asarray(fits, dtype=bool)
    if not ok.any():
        return None
    power = np.where(ok, b / np.where(ok, t, 1.0) ** 2, -np.inf)
    return int(b[int(np.argmax(power))])


def padding_waste(prompts, outputs) -> dict:
    """Token-level waste of padding a batch to its longest prompt and output (formulas in the module docstring)."""
    p = np.asarray(prompts, dtype=np.int64)
    o = np.asarray(outputs, dtype=np.int64)
    if p.shape != o.shape or p.ndim != 1 or len(p) == 0 or np.any(p < 1) or np.any(o < 1):
        raise PlannerError("static batch: prompts and outputs must be equal-length lists of integers >= 1")
    B, P, O = len(p), int(p.max()), int(o.max())
    return {"batch": B, "padded_prompt": P, "padded_output": O,
            "prompt_waste_fraction": 1 - p.sum() / (B * P),
            "decode_waste_fraction": 1 - o.sum() / (B * O),
            "kv_waste_fraction": 1 - (p + o).sum() / (B * (P + O))}


def static_batch(model, hardware, prompts, outputs, weights: str = "fp16", kv_dtype: str = "fp16",
                 efficiency="auto", flash_attention: bool = True) -> dict:
    """Latency of a padded static batch, its waste, and what each request would take alone."""
    from ..latency import decode_sum_s, prefill_time_s
    from ..memory import plan_memory
    from ..ops import prefill_ops, totals
    from ..units import GB

    w = padding_waste(prompts, outputs)
    m, spec, fmt, kvd, dev = _setup(model, hardware, weights, kv_dtype, efficiency)
    B, P, O = w["batch"], w["padded_prompt"], w["padded_output"]
    p = np.asarray(prompts, dtype=np.float64)
    o = np.asarray(outputs, dtype=np.float64)
    t_prefill = float(prefill_time_s(m, fmt, kvd, dev, B, P, 0, flash_attention))
    t_decode = float(decode_sum_s(m, fmt, kvd, dev, B, P, O, flash_attention))
    padded_flops = float(totals(prefill_ops(m, fmt, kvd, B, P, 0, flash_attention))["flops"])
    useful_flops = float(np.sum(totals(prefill_ops(m, fmt, kvd, 1, p, 0, flash_attention))["flops"]))
    alone = prefill_time_s(m, fmt, kvd, dev, 1, p, 0, flash_attention) + decode_sum_s(m, fmt, kvd, dev, 1, p, o,
                                                                                      flash_attention)
    mb = plan_memory(m, fmt, kvd, B, P, O, spec, flash_attention=flash_attention)
    w.update({
        "model": m.name, "hardware": spec.id, "weights": fmt.name,
        "batch_latency_s": t_prefill + t_decode, "prefill_ms": t_prefill * 1e3,
        "prefill_flop_waste_fraction": 1 - useful_flops / padded_flops,
        "kv_reserved_gb": mb.kv_cache_bytes / GB, "fits": mb.fits,
        "mean_latency_alone_s": float(np.mean(alone)),
        "requests_per_s": B / (t_prefill + t_decode),
    })
    return w


def batching_table(model, hardware, batches=(1, 8, 32, 64), prompt: int = 512, output: int = 128,
                   weights: str = "fp16", kv_dtype: str = "fp16", efficiency="auto", runtime=None):
    """Latency per step and throughput for each batch size (static batches of equal requests); marks the knee.

    model / hardware: catalog ids, paths, or the ModelArch / HardwareSpec objects themselves (an upload is used as
    given, never looked up again by name). runtime: a runtime profile id, as `planner.sweep.sweep` takes it.
    Columns: batch, fits, ttft_ms, step_ms (mean decode step = TPOT), e2e_s, requests_per_s = batch / e2e,
    output_tokens_per_s = batch x output / e2e, power = requests_per_s / e2e_s, knee (`knee_batch` over these rows).
    """
    from ..sweep import sweep

    if not batches:
        raise PlannerError("--batch: give at least one batch size")
    df = sweep([model], [hardware], [weights], sorted(set(int(b) for b in batches)), [prompt], [output], kv_dtype,
               efficiency, runtime=runtime)
    df = df.rename(columns={"tpot_ms": "step_ms"})
    df["requests_per_s"] = df["batch"] / df["e2e_s"]
    df["output_tokens_per_s"] = df["batch"] * df["output"] / df["e2e_s"]
    df["power"] = df["requests_per_s"] / df["e2e_s"]
    k = knee_batch(df["batch"], df["e2e_s"], df["fits"])
    df["knee"] = df["batch"] == k
    return df[["batch", "fits", "ttft_ms", "step_ms", "e2e_s", "requests_per_s", "output_tokens_per_s", "power",
               "knee", "total_gb"]]
