"""Latency of prefill and of a whole generation, vectorized over any grid of (batch, prompt, output).

Serving-benchmark definitions (vLLM benchmark_serving, GenAI-Perf):
  TTFT                time to first token = the prefill of the prompt (plus its step overhead); the first output
                      token comes out of the prefill step
  TPOT                time per output token excluding the first: (e2e - TTFT) / (output - 1)
  ITL                 inter-token latency: the gap between consecutive tokens of one sequence = one decode step
  end-to-end latency  TTFT + the sum of the (output - 1) decode steps

Decode step i (i = 1 .. output-1) attends to past = prompt + i - 1 cached tokens, so its cost grows with the
context. The sum over steps is taken in closed form (decode_sum_s): every op's time is the maximum of two affine
functions of the context (constant beyond a local layer's window), and such a sum has a closed form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .lazy import np
from .ops import _f, decode_ops, prefill_ops, totals
from .replay import Replayed
from .roofline import DeviceModel, _flt, step_bound, step_time_s, time_ops


def prefill_time_s(m, fmt, kv_dtype, dev: DeviceModel, batch, prompt, past=0, flash_attention=True):
    return step_time_s(time_ops(prefill_ops(m, fmt, kv_dtype, batch, prompt, past, flash_attention), dev), dev)


def decode_step_time_s(m, fmt, kv_dtype, dev: DeviceModel, batch, past, flash_attention=True):
    return step_time_s(time_ops(decode_ops(m, fmt, kv_dtype, batch, past, flash_attention), dev), dev)


def first_token_from_decode_s(prefill_s, decode_s, prompt):
    """(time to first token, the decode step it holds) on an engine that samples the first token in a decode step
    (runtimes.first_token_from_decode: TurboMind): the prefill of prompt - 1 tokens (none for a 1-token prompt) and
    one decode step at context prompt - 1. prefill_s(tokens) and decode_s(past) time one step each (one device or a
    tensor-parallel group, all-reduces included); prompt is a number or an array. Every command takes this one rule
    (estimate, sweep, plan's screen; the simulator and predict.first_token_steps state it step by step)."""
    step = decode_s(prompt - 1)
    if np.ndim(prompt) == 0:
        return (prefill_s(prompt - 1) if prompt > 1 else 0.0) + step, step
    return np.where(prompt > 1, prefill_s(np.maximum(prompt - 1, 1)), 0.0) + step, step


def sum_max_affine(x0, dx, y0, dy, k):
    """sum_{j=0}^{k-1} max(x0 + j dx, y0 + j dy), elementwise over arrays, k >= 0 integer-valued.

    max(x, y) = y + max(x - y, 0); with d_j = d0 + s j (d0 = x0 - y0, s = dx - dy) the positive terms form one run of
    consecutive j (d is affine): j > -d0/s when s > 0, j < -d0/s when s < 0, every j or none when s = 0."""
    if all(v.__class__ is float for v in (x0, dx, y0, dy, k)):  # one configuration: the same steps on floats
        d0, s = x0 - y0, dx - dy
        total_y = k * y0 + dy * k * (k - 1) / 2
        lo, hi = 0.0, k - 1
        if s > 0:  # (an int n + 1.0 is float(n) + 1: the same float, and a replay records it)
            lo = max(0.0, math.floor(-d0 / s) + 1.0)
        elif s < 0:
            hi = min(k - 1, math.ceil(-d0 / s) - 1.0)
        elif not d0 > 0:
            lo = k
        cnt = max(hi - lo + 1, 0.0)
        return total_y + cnt * d0 + s * (lo + hi) * cnt / 2
    # arrays: the same operations in the same order (so the same roundings), written in place into two arrays of
    # the full shape; the run [lo, hi] (integer-valued, exact) is worked out on the pieces' own shape and only
    # clipped to k on the full one. lo is also clipped to k where the run starts beyond the last term (s > 0): its
    # count is 0 either way.
    x0, dx, y0, dy, k = (np.asarray(v, dtype=np.float64) for v in (x0, dx, y0, dy, k))
    d0, s = x0 - y0, dx - dy
    km1 = k - 1
    shape = np.broadcast_shapes(d0.shape, k.shape)
    total = np.multiply(k, y0, out=np.empty(shape))  # total_y = k y0 + dy k (k - 1) / 2
    t = np.multiply(dy, k, out=np.empty(shape))
    t *= km1
    t /= 2
    total += t
    root = -d0 / np.where(s != 0, s, 1.0)
    lo = np.where(s > 0, np.maximum(0.0, np.floor(root) + 1), np.where((s == 0) & ~(d0 > 0), np.inf, 0.0))
    hi = np.minimum(km1, np.where(s < 0, np.ceil(root) - 1, np.inf))
    lo = np.minimum(lo, k)
    cnt = np.subtract(hi, lo, out=np.empty(shape))  # cnt = max(hi - lo + 1, 0)
    cnt += 1
    np.maximum(cnt, 0.0, out=cnt)
    np.multiply(cnt, d0, out=t)  # + cnt d0 + s (lo + hi) cnt / 2
    total += t
    np.add(lo, hi, out=t)
    t *= s
    t *= cnt
    t /= 2
    total += t
    return total if total.ndim else total[()]


def decode_sum_s(m, fmt, kv_dtype, dev: DeviceModel, batch, prompt, output, flash_attention=True, samples=32,
                 step_s=None, with_last: bool = False, first=None):
    """Sum of the output-1 decode step times; arrays broadcast. with_last: also the last step's time
    (past = prompt + output - 2): (sum, last).

    Exact, in closed form: every operator's compute time C and memory time M are affine in the cached context x
    (weight GEMMs constant; attention reads x cached keys and scores x + 1 of them), so a step's operator costs
    max(C(x), M(x)) + overhead and sum_x max(C(x), M(x)) over x = prompt .. prompt + output - 2 is sum_max_affine
    of the affine pieces read off the operators at x = prompt and prompt + 1. Local layers (sliding window or
    chunked attention, sparse top-k: the model's attention_window W) are affine up to x = W - 1 and constant from
    x = W on, where they read their value at W. step_s(batch, past) replaces the single-device step (tensor
    parallelism); that path integrates by the midpoint rule over `samples` bins (exact on each linear piece, and
    outright when output - 1 <= samples). first: the operator times at past = prompt
    (time_ops(decode_ops(batch, prompt))) when the caller has them already (one configuration: reused)."""
    if step_s is not None:
        return _decode_sum_sampled(batch, prompt, output, samples, step_s, with_last)
    if _plain(batch, prompt, output) and dev.eff_bandwidth_bytes_s.__class__ is float:
        return _decode_sum_scalar(m, fmt, kv_dtype, dev, batch, prompt, output, flash_attention, with_last, first)
    form = decode_closed_form(m, fmt, kv_dtype, dev, batch, prompt, output, flash_attention)
    total = form.total()
    if not with_last:
        return total
    x_last = np.asarray(form.P + np.maximum(form.n - 1, 0))
    ops_last = decode_ops(m, fmt, kv_dtype, form.B, x_last, flash_attention)
    C, M = _stacked(time_ops([ops_last[i] for i in form.varying], dev), x_last.shape)
    last = np.sum(np.maximum(C, M), axis=0) + form.const + form.ovh + form.step_ovh
    return total, np.asarray(last)[..., 0]


@dataclass(frozen=True)
class DecodeClosedForm:
    """decode_sum_s's closed form on a grid, before the sum is taken. Along axis 0, per operator whose times vary
    with the context: its compute and memory seconds C and M at the context columns x = prompt, prompt + 1 (the
    affine pieces: C0 = C(prompt), dC = C(prompt + 1) - C0, ...) and, for local layers, x = W (every later step
    costs max(C, M) there); the steps k over which they are affine; n = output - 1 steps; what every step costs besides: const (max(C, M) of the operators that do not
    vary), ovh (per-op overheads) and step_ovh (per-step overhead). Arrays end in a trailing axis of length 1 (the
    context axis, reduced)."""

    B: np.ndarray
    P: np.ndarray
    n: np.ndarray
    C: np.ndarray
    M: np.ndarray
    k: np.ndarray
    windowed: bool  # C and M have the column x = W
    const: np.ndarray
    ovh: np.ndarray
    step_ovh: float
    varying: list  # indices of the varying operators in decode_ops' list

    def total(self, at=None):
        """Seconds of the n decode steps: sum over operators of sum_max_affine(C0, dC, M0, dM, k) + (n - k) wide,
        plus n x (const + ovh + step_ovh). On the whole broadcast grid, or only at the grid elements `at` (a tuple of index arrays,
        one per axis of the result, as np.nonzero gives): a 1-D array, the same operations on every element."""
        per_step = self.const + self.ovh + self.step_ovh
        C, M = self.C, self.M
        if at is None:
            C0, M0 = C[..., 0:1], M[..., 0:1]
            dC, dM = C[..., 1:2] - C0, M[..., 1:2] - M0
            # (n - k) x max(C, M) at x = W is 0 on the other layers (k = n)
            flat = (self.n - self.k) * np.maximum(C[..., 2:3], M[..., 2:3]) if self.windowed else 0.0
            total = _sum_over_ops(C0, dC, M0, dM, self.k, flat) + self.n * per_step
            return np.asarray(total)[..., 0]
        # C and M: (operators, grid..., context columns), C-ordered (_stacked)
        i = _flat_index(C.shape[1:-1], at) * C.shape[-1]
        C, M = C.reshape(len(C), C[0].size if len(C) else 0), M.reshape(len(M), M[0].size if len(M) else 0)
        C0, M0 = np.take(C, i, axis=1), np.take(M, i, axis=1)
        dC, dM = np.take(C, i + 1, axis=1) - C0, np.take(M, i + 1, axis=1) - M0
        k, n = _at(self.k, at), _at(self.n[None], at)
        t = sum_max_affine(C0, dC, M0, dM, k)
        t += (n - k) * np.maximum(np.take(C, i + 2, axis=1), np.take(M, i + 2, axis=1)) if self.windowed else 0.0
        return np.sum(t, axis=0) + n[0] * _at(np.asarray(per_step)[None], at)[0]


def decode_closed_form(m, fmt, kv_dtype, dev: DeviceModel, batch, prompt, output, flash_attention=True):
    """The pieces of decode_sum_s's closed form over arrays of batch, prompt and output (DecodeClosedForm)."""
    # every term keeps a trailing axis of length 1 (the past axis, reduced), so that device arrays shaped for a
    # trailing axis (the sweep stacks devices as (D, 1, ..., 1)) broadcast the same way as in the step functions
    B = np.asarray(batch, dtype=np.float64)[..., None]
    P = np.asarray(prompt, dtype=np.float64)[..., None]
    n = np.maximum(np.asarray(output, dtype=np.float64) - 1, 0)[..., None]
    W = m.attention_window
    # the contexts the closed form reads off the operators: x = prompt and prompt + 1 (the affine pieces) and
    # max(prompt, W) (a local layer's constant value); none depends on the output length, so they are evaluated on
    # the (batch, prompt) grid alone and broadcast against it only in the sum. The last step (past = prompt +
    # output - 2) is timed only when asked for (decode_sum_s with_last).
    cols = [P, P + 1] + ([np.maximum(P, W)] if W else [])
    past = np.concatenate(np.broadcast_arrays(*cols), axis=-1)
    ots = time_ops(decode_ops(m, fmt, kv_dtype, B, past, flash_attention), dev)
    step_ovh = dev.efficiency.step_overhead_ms * 1e-3
    ovh = sum(ot.overhead_s for ot in ots)  # count x per-op overhead: independent of the context
    # an operator whose times do not vary along the context columns (weight GEMMs, norms, the LM head, a scan) costs
    # the same max(C, M) on every step: n x that, on its own (small) shape; the rest are summed in closed form
    const, varying = _split_constant(ots)
    ots = [ots[i] for i in varying]
    C, M = _stacked(ots, past.shape)
    if W:
        local = np.array([ot.op.name.endswith("_local") for ot in ots]).reshape((-1,) + (1,) * (C.ndim - 1))
        k = np.where(local, np.clip(W - P, 0, n), n)
    else:
        k = n[None]
    return DecodeClosedForm(B, P, n, C, M, k, bool(W), const, ovh, step_ovh, varying)


def _flat_index(grid, at):
    """Flat C-order index into an array of shape `grid` (aligned on the right with the index arrays `at`) of the
    elements `at`, axes of length 1 read where they are."""
    grid = (1,) * (len(at) - len(grid)) + tuple(grid)
    flat, stride = np.zeros(len(at[0]), dtype=np.intp), 1
    for i in reversed(range(len(at))):
        if grid[i] > 1:
            flat += at[i] * stride
        stride *= grid[i]
    return flat


def _at(x, at):
    """x[:, at] for an array laid out as (axis 0, grid axes aligned on the right with the index arrays `at`, a
    trailing axis of length 1): (len(x), len(at[0]))."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    flat = _flat_index(x.shape[1:-1], at)
    return np.take(x.reshape(x.shape[0], -1), flat, axis=1) if x.shape[0] else np.zeros((0, len(flat)))


def _sum_over_ops(C0, dC, M0, dM, k, flat):
    """np.sum(sum_max_affine(C0, dC, M0, dM, k) + flat, axis=0), the operators along axis 0.

    numpy runs an elementwise operation as inner loops over the trailing axes its operands share: the pieces (C0,
    ..., over operator x device x batch x prompt in the sweep) and the step counts k (over prompt x output) share
    only the last few, so the loops would run a few output lengths at a time. The axes the pieces do not span go
    first, then those k varies along, and the result is transposed back: the same operations on every element."""
    xs = [np.asarray(x, dtype=np.float64) for x in (C0, dC, M0, dM, k, flat)]
    nd = max(x.ndim for x in xs)
    xs = [x.reshape((1,) * (nd - x.ndim) + x.shape) for x in xs]
    full = np.broadcast_shapes(*(x.shape for x in xs))
    piece = np.broadcast_shapes(*(x.shape for x in xs[:4]))
    steps = np.broadcast_shapes(xs[4].shape, xs[5].shape)
    first = [i for i in range(1, nd) if piece[i] == 1 and full[i] > 1]
    then = [i for i in range(1, nd) if i not in first and steps[i] > 1]
    order = [0] + first + then + [i for i in range(1, nd) if i not in first and i not in then]
    x0, dx, y0, dy, kk, fl = (x.transpose(order) for x in xs)
    if then:  # k varies along axes the pieces span too: laid out once in full, so that the loops stay long
        kk = np.ascontiguousarray(np.broadcast_to(kk, tuple(full[i] for i in order)))
    t = sum_max_affine(x0, dx, y0, dy, kk)
    t += fl
    return np.sum(t, axis=0).transpose(np.argsort(order[1:]))


def _stacked(ots, shape):
    """(compute times, memory times) of the operators stacked along a new leading axis, broadcast to one shape."""
    shape = np.broadcast_shapes(shape, *(np.shape(ot.compute_s) for ot in ots), *(np.shape(ot.memory_s) for ot in ots))
    if not ots:
        return np.zeros((0,) + shape), np.zeros((0,) + shape)
    return (np.stack([np.broadcast_to(np.asarray(ot.compute_s, dtype=np.float64), shape) for ot in ots]),
            np.stack([np.broadcast_to(np.asarray(ot.memory_s, dtype=np.float64), shape) for ot in ots]))


def _split_constant(ots):
    """(sum of max(C, M) over the operators whose times have no context axis, the indices of the other operators)."""
    const, rest = 0.0, []
    for i, ot in enumerate(ots):
        if np.shape(ot.compute_s)[-1:] in ((), (1,)) and np.shape(ot.memory_s)[-1:] in ((), (1,)):
            const = const + np.maximum(ot.compute_s, ot.memory_s)
        else:
            rest.append(i)
    return const, rest


def _plain(*xs) -> bool:
    return all(x.__class__ is int or x.__class__ is float for x in xs)


def _decode_sum_scalar(m, fmt, kv_dtype, dev: DeviceModel, batch, prompt, output, flash_attention, with_last,
                       first=None):
    """decode_sum_s for one configuration on one device: the same closed form, the operators timed at each
    context column on plain floats (planner.ops and planner.roofline take the scalar path)."""
    B, P = _f(batch), _f(prompt)
    n = max(_f(output) - 1, 0.0)
    W = m.attention_window
    cols = [P, P + 1, P + max(n - 1, 0.0)] + ([max(P, float(W))] if W else [])
    ots = [first if (first is not None and j == 0) else time_ops(decode_ops(m, fmt, kv_dtype, B, x, flash_attention), dev)
           for j, x in enumerate(cols)]
    step_ovh = dev.efficiency.step_overhead_ms * 1e-3
    ovh = sum(ot.overhead_s for ot in ots[0])
    total = last = 0.0
    for i, a in enumerate(ots[0]):
        C0, M0 = _flt(a.compute_s), _flt(a.memory_s)
        b = ots[1][i]
        dC, dM = _flt(b.compute_s) - C0, _flt(b.memory_s) - M0
        if W and a.op.name.endswith("_local"):
            k = min(max(W - P, 0.0), n)
            w = ots[3][i]
            flat = (n - k) * max(_flt(w.compute_s), _flt(w.memory_s))
        else:
            k, flat = n, 0.0
        total += sum_max_affine(C0, dC, M0, dM, k) + flat
        z = ots[2][i]
        last += max(_flt(z.compute_s), _flt(z.memory_s))
    total += n * (ovh + step_ovh)
    last += ovh + step_ovh
    return (total, last) if with_last else total


def _decode_sum_sampled(batch, prompt, output, samples, step_s, with_last):
    """The midpoint rule over `samples` equal bins of the output - 1 decode steps (a trailing axis is added)."""
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
    # a model whose step does not depend on the context (attention-free SSMs) may return one time for every sample
    t = np.broadcast_to(step_s(B, past), np.broadcast_shapes(np.shape(B), past.shape))
    total = np.sum(np.where(valid, t[..., :samples], 0.0), axis=-1) * (n[..., 0] / kk[..., 0])
    return (total, t[..., samples]) if with_last else total


# ---------------------------------------------------------------- one configuration (what estimate() reads)


def point_latency(m, fmt, kv_dtype, dev: DeviceModel, flash_attention, batch, prompt, output):
    """The latency figures of one configuration on one device (no tensor parallelism), on plain floats:

    (prefill step s, prefill bound, prefill flops, prefill bytes, first decode step s, decode bound,
     decode bytes per step, weight bytes per step, KV bytes per step, sum of the output - 1 decode steps s,
     last decode step s)

    the prefill and the first decode step from their operators (time_ops of prefill_ops / decode_ops), the
    decode sum in closed form (decode_sum_s, reusing the first step's operator times)."""
    p_times = time_ops(prefill_ops(m, fmt, kv_dtype, batch, prompt, 0, flash_attention), dev)
    p_tot = totals([ot.op for ot in p_times])
    d_times = time_ops(decode_ops(m, fmt, kv_dtype, batch, prompt, flash_attention), dev)
    d_tot = totals([ot.op for ot in d_times])
    d_sum, d_last = decode_sum_s(m, fmt, kv_dtype, dev, batch, prompt, output, flash_attention, with_last=True,
                                 first=d_times)
    return (step_time_s(p_times, dev), step_bound(p_times), p_tot["flops"], p_tot["bytes"],
            step_time_s(d_times, dev), step_bound(d_times), d_tot["bytes"], d_tot["weight_bytes"],
            d_tot["kv_read_bytes"] + d_tot["kv_write_bytes"], d_sum, d_last)


def stage_op_times(m, fmt, kv_dtype, dev: DeviceModel, stage: str, batch, prompt, flash_attention=True):
    """The operator times of the prefill of `prompt` tokens, or of the first decode step after it (the per-op
    tables of an estimate, built when read)."""
    if stage == "prefill":
        return time_ops(prefill_ops(m, fmt, kv_dtype, batch, prompt, 0, flash_attention), dev)
    return time_ops(decode_ops(m, fmt, kv_dtype, batch, prompt, flash_attention), dev)


_POINT = Replayed(point_latency)


def point_latency_fast(m, fmt, kv_dtype, dev: DeviceModel, flash_attention, batch, prompt, output):
    """point_latency, the same floats (planner.replay): from the third call for a (model, format, KV dtype,
    FlashAttention, device model) on, its float operations are replayed as straight-line code instead of running
    the operator records (the workload numbers change freely; a branch the recording did not take runs the
    reference, and may be recorded in turn: planner.replay.Replayed). A one-off CLI run pays no recording."""
    return _POINT((id(m), id(fmt), kv_dtype, flash_attention, id(dev)), (m, fmt, kv_dtype, dev, flash_attention),
                  (_f(batch), _f(prompt), _f(output)))
