"""Latency of prefill and of a whole generation, vectorized over any grid of (batch, prompt, output).

Serving-benchmark definitions (vLLM benchmark_serving, GenAI-Perf):
  TTFT                time to first token = the prefill of the prompt (plus its step overhead); the first output
                      token comes out of the prefill step
  TPOT                time per output token excluding the first: (e2e - TTFT) / (output - 1)
  ITL                 inter-token latency: the gap between consecutive tokens of one sequence = one decode step
  end-to-end latency  TTFT + the sum of the (output - 1) decode steps

Decode step i (i = 1 .. output-1) attends to past = prompt + i - 1 cached tokens, so its cost grows with the
context. The sum over steps is integrated, not taken at one point: every op's time is a convex piecewise-linear
function of the context, so the midpoint rule over `samples` equal bins is exact on each linear piece (and exact
outright when output - 1 <= samples).
"""

from __future__ import annotations

import numpy as np

from .ops import decode_ops, prefill_ops
from .roofline import DeviceModel, step_time_s, time_ops


def prefill_time_s(m, fmt, kv_dtype, dev: DeviceModel, batch, prompt, past=0, flash_attention=True):
    return step_time_s(time_ops(prefill_ops(m, fmt, kv_dtype, batch, prompt, past, flash_attention), dev), dev)


def decode_step_time_s(m, fmt, kv_dtype, dev: DeviceModel, batch, past, flash_attention=True):
    return step_time_s(time_ops(decode_ops(m, fmt, kv_dtype, batch, past, flash_attention), dev), dev)


def decode_sum_s(m, fmt, kv_dtype, dev: DeviceModel, batch, prompt, output, flash_attention=True, samples=32,
                 step_s=None, with_last: bool = False):
    """Sum of the output-1 decode step times; arrays broadcast (a trailing axis of samples is added).
    step_s(batch, past) replaces the single-device step (tensor parallelism). with_last: also the last step's time
    (past = prompt + output - 2), timed in the same evaluation as the samples: (sum, last)."""
    B = np.asarray(batch, dtype=np.float64)[..., None]
    P = np.asarray(prompt, dtype=np.float64)[..., None]
    n = np.maximum(np.asarray(output, dtype=np.float64) - 1, 0)[..., None]
    k = np.minimum(n, samples)
    j = np.arange(samples, dtype=np.float64)
    valid = j < k
    kk = np.where(k > 0, k, 1)
    past = P + np.floor((j + 0.5) * n / kk)  # bin midpoints; integer steps when n <= samples
    if with_last:
        past, last = np.broadcast_arrays(past, P + np.maximum(n - 1, 0))
        past = np.concatenate([past, last[..., :1]], axis=-1)
    t = (step_s(B, past) if step_s is not None
         else decode_step_time_s(m, fmt, kv_dtype, dev, B, past, flash_attention))
    total = np.sum(np.where(valid, t[..., :samples], 0.0), axis=-1) * (n[..., 0] / kk[..., 0])
    return (total, t[..., samples]) if with_last else total
