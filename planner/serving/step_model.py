"""Step times for the scheduler simulation, taken from the core cost model and tabulated for speed.

A serving step runs T new tokens (decode tokens of running sequences plus prompt tokens or chunks) through the
model. The core times every operator with the roofline; here its operators are split in three groups, each
evaluated exactly the way the core does:

  * token ops (embedding, norms, projections, MLP/MoE, plus the TP all-reduces): their flops and bytes depend only
    on T, the number of tokens in the step -> a table over integer T (one vectorized core call);
  * the LM head: depends on the number n of sequences producing logits -> a table over integer n;
  * attention ops: per sequence, flops and bytes are linear in three features of its (new tokens, cached tokens):
    new, cached = min(past, window), keys = sum over the new queries of the keys each attends
    (planner.ops.causal_key_sum). Their coefficients are read off the core's operators at build time (and the
    linearity is checked). A step's attention op is timed on the sums of these over its sequences:
    time = count x (max(sum flops / peak, sum bytes / bandwidth) + kernel overhead), as the core times one
    batched op.

So a prefill of one prompt and a decode step of b sequences at one context equal planner.latency exactly. Decode of
sequences with mixed contexts uses the sum of their contexts: exact for the attention terms (linear in the context),
except on sliding-window layers where min(context, W) is applied to the mean context (an approximation).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import PlannerError
from ..hardware import HardwareSpec
from ..memory import EngineSettings, plan_memory
from ..ops import ATTENTION, causal_key_sum, kv_bytes_per_token, step_ops
from ..roofline import DeviceModel, attention_peak_divisor, op_bytes_multipliers, time_ops
from ..units import GB, US
from .parallelism import Link, kv_split, split_ops, tp_comm_time_s


def _is_attention(op) -> bool:
    return op.compute == ATTENTION or op.name.startswith("attn_")


@dataclass
class _AttnGroup:
    window: int | None
    # per op: (count, flops coefficients / effective peak, bytes coefficients / effective bandwidth), i.e. seconds
    # per unit of (new, cached, keys): compute time = f0 n + f1 c + f2 k, memory time = b0 n + b1 c + b2 k
    ops: list[tuple[int, float, float, float, float, float, float]] = field(default_factory=list)


@dataclass
class StepModel:
    """Step-time tables for one (model, device, format, KV dtype, TP, PP) configuration. Times in seconds."""

    model: object
    fmt: object
    kv_dtype: str
    dev: DeviceModel
    tp: int
    pp: int
    tp_link: Link | None
    pp_link: Link | None
    flash_attention: bool
    max_tokens: int
    token_time: list[float]       # index T: token ops + TP all-reduces + PP hand-offs
    lm_time: list[float]          # index n: LM head for n sequences
    groups: list[_AttnGroup]          # decode-stage attention (one new token per sequence)
    prefill_groups: list[_AttnGroup]  # prefill-stage attention (prompt pieces)
    kernel_overhead_s: float
    step_overhead_s: float
    prefill_factor: float = 1.0   # extra multiplier on prompt tokens' share of a step (scaled(); 1 = the core)
    # derived once per instance (__post_init__): the global-attention decode ops with (f1 + f2, b1 + b2) appended,
    # the indices of the window groups, and the times of single whole prompts already asked for (prefill_time)
    _glob_ops: list = field(init=False, repr=False, compare=False)
    _window_idx: list = field(init=False, repr=False, compare=False)
    _prompt_memo: dict = field(init=False, repr=False, compare=False)
    _per_batch: dict = field(init=False, repr=False, compare=False)   # b -> _batch_terms(b)

    def __post_init__(self):
        # the global group comes first in self.groups (_attention_coefficients), so decode_run sums it first,
        # keeping decode_run_time's order of additions
        self._glob_ops = [(*op, op[2] + op[3], op[5] + op[6]) for g in self.groups if g.window is None
                          for op in g.ops]
        self._window_idx = [i for i, g in enumerate(self.groups) if g.window is not None]
        self._prompt_memo = {}
        self._per_batch = {}

    # ------------------------------------------------------------ building

    @classmethod
    def build(cls, m, fmt, kv_dtype: str, dev: DeviceModel, tp: int = 1, pp: int = 1, tp_link: Link | None = None,
              pp_link: Link | None = None, flash_attention: bool = True, max_tokens: int = 8192) -> "StepModel":
        T = np.arange(0, max_tokens + 1, dtype=np.float64)
        Tc = np.maximum(T, 1.0)
        ops = split_ops(step_ops(m, fmt, kv_dtype, "decode", Tc, 1, 0, flash_attention), m, tp)
        tok = [ot for ot in time_ops([o for o in ops if not _is_attention(o) and o.name != "lm_head"], dev)]
        lm = [ot for ot in time_ops([o for o in ops if o.name == "lm_head"], dev)]
        token_time = sum(ot.time_s for ot in tok) + tp_comm_time_s(m, fmt, Tc, tp, tp_link)
        if pp > 1:
            if pp_link is None:
                raise PlannerError(f"--pp: {pp} stages need a network between nodes")
            token_time = token_time + (pp - 1) * pp_link.send_time_s(Tc * m.hidden_size * 2.0)
        lm_time = sum(ot.time_s for ot in lm)
        token_time = np.where(T == 0, 0.0, token_time)
        lm_time = np.where(T == 0, 0.0, lm_time)
        groups = _attention_coefficients(m, fmt, kv_dtype, dev, tp, flash_attention, "decode")
        pgroups = _attention_coefficients(m, fmt, kv_dtype, dev, tp, flash_attention, "prefill")
        return cls(m, fmt, kv_dtype, dev, tp, pp, tp_link, pp_link, flash_attention, max_tokens,
                   token_time.tolist(), lm_time.tolist(), groups, pgroups, dev.efficiency.kernel_overhead_us * US,
                   dev.efficiency.step_overhead_ms * 1e-3)

    # ------------------------------------------------------------ evaluation

    def _tok(self, T: int) -> float:
        if T <= self.max_tokens:
            return self.token_time[T]
        # beyond the table: token ops are linear in T once compute bound; extrapolate from the last two entries
        a, b = self.token_time[self.max_tokens - 1], self.token_time[self.max_tokens]
        return b + (b - a) * (T - self.max_tokens)

    def _lm(self, n: int) -> float:
        if n <= self.max_tokens:
            return self.lm_time[n]
        a, b = self.lm_time[self.max_tokens - 1], self.lm_time[self.max_tokens]
        return b + (b - a) * (n - self.max_tokens)

    def _attn(self, feats: list[tuple[float, float, float]], groups: list[_AttnGroup]) -> float:
        """feats[g] = (sum new, sum cached, sum keys) for attention group g."""
        t = 0.0
        ovh = self.kernel_overhead_s
        for g, (n, c, k) in zip(groups, feats):
            if n <= 0:
                continue
            for count, f0, f1, f2, b0, b1, b2 in g.ops:
                x = f0 * n + f1 * c + f2 * k
                y = b0 * n + b1 * c + b2 * k
                t += count * ((x if x > y else y) + ovh)
        return t

    def decode_features(self, b: int, sum_ctx: float) -> list[tuple[float, float, float]]:
        """b sequences whose cached contexts sum to sum_ctx, one new token each."""
        out = []
        for g in self.groups:
            if g.window is None:
                out.append((b, sum_ctx, sum_ctx + b))
            else:
                mean = sum_ctx / b if b else 0.0
                out.append((b, b * min(mean, g.window), b * min(mean + 1, g.window)))
        return out

    def piece_features(self, new: int, past: int) -> list[tuple[float, float, float]]:
        out = []
        for g in self.groups:
            W = g.window
            if W is None:
                out.append((new, past, ((past + new) * (past + new + 1) - past * (past + 1)) / 2))
            else:  # planner.ops.causal_key_sum with a window, in plain floats
                out.append((new, min(past, W), _fwin(past + new, W) - _fwin(past, W)))
        return out

    def step_time(self, tokens: int, logits: int, decode_feats=None, prefill_feats=None) -> float:
        """One step of `tokens` new tokens, `logits` sequences sampling, attention features summed per group
        (decode sequences and prompt pieces run as separate attention kernels)."""
        t = self.step_overhead_s + self._tok(tokens) + self._lm(logits)
        if decode_feats is not None:
            t += self._attn(decode_feats, self.groups)
        if prefill_feats is not None:
            t += self._attn(prefill_feats, self.prefill_groups)
            if self.prefill_factor != 1.0:
                # a step of b decode tokens and n prompt tokens: the prompt tokens' share takes the prefill factor
                b = decode_feats[0][0] if decode_feats else 0
                t *= (b + (tokens - b) * self.prefill_factor) / max(tokens, 1)
        return t

    def decode_time(self, b: int, sum_ctx: float) -> float:
        return self.step_time(b, b, self.decode_features(b, sum_ctx))

    def prefill_features(self, prompts: list[int], pasts: list[int]) -> list[tuple[float, float, float]]:
        feats = [[0.0, 0.0, 0.0] for _ in self.groups]
        for n, p in zip(prompts, pasts):
            for acc, f in zip(feats, self.piece_features(n, p)):
                acc[0] += f[0]
                acc[1] += f[1]
                acc[2] += f[2]
        return [tuple(f) for f in feats]

    def fresh_prefill_features(self, prompts: list[int]) -> list[tuple[float, float, float]]:
        """prefill_features(prompts, [0, ...]): whole prompts, nothing cached. Per group: (sum n, 0, sum keys) with
        keys = n (n + 1) / 2, or _fwin(n, W) on a window; every term is a whole number, so the float sums are exact
        and equal prefill_features' in any order."""
        out = []
        for g in self.groups:
            W = g.window
            if W is None:
                keys = sum(n * (n + 1) for n in prompts) // 2
            else:
                keys = sum(_fwin(n, W) for n in prompts)
            out.append((float(sum(prompts)), 0.0, float(keys)))
        return out

    def prefill_time(self, prompts: list[int], pasts: list[int] | None = None, logits: int | None = None) -> float:
        """A step of prompt pieces (new tokens each, after `past` cached ones); all sample unless `logits`.

        A single whole prompt (no past, sampling) is remembered per step model, by its length: every simulation of
        one configuration draws the same prompt lengths (the seed fixes them), so they recur; at most one entry
        per distinct length."""
        if pasts or logits is not None or len(prompts) != 1:
            return self.step_time(sum(prompts), len(prompts) if logits is None else logits, None,
                                  self.prefill_features(prompts, pasts) if pasts
                                  else self.fresh_prefill_features(prompts))
        memo = self._prompt_memo
        p = prompts[0]
        t = memo.get(p)
        if t is None:
            t = memo[p] = self.step_time(p, 1, None, self.fresh_prefill_features(prompts))
        return t

    def decode_run_time(self, b: int, sum_ctx: float, k: int) -> float:
        """Total time of k consecutive decode steps of the same b sequences (each context grows by 1 per step).

        Step j's attention features grow linearly in j, so each op's time is max of two linear functions of j;
        the sum over j = 0..k-1 is taken in closed form (exact, no sampling).
        """
        return self.decode_run(b, sum_ctx)(k)

    def decode_run(self, b: int, sum_ctx: float):
        """k -> decode_run_time(b, sum_ctx, k): the per-op coefficients of the closed form (_sum_max_linear) worked
        out once for a fixed batch and context, so the simulator can try several run lengths k at the cost of the
        k-dependent terms alone (the same float operations in the same order: the same value, bit for bit).
        Its attribute step0_s is the first step's time on the global layers (windowed ones left out), a guess."""
        if b <= 0:
            def none(k: int) -> float:
                return 0.0
            none.step0_s = 0.0
            return none
        ovh = self.kernel_overhead_s
        per_b = self._per_batch.get(b)
        if per_b is None:
            per_b = self._per_batch[b] = self._batch_terms(b)
        per_step, ops = per_b
        windows = self._window_idx
        # per global-attention op: (count, y0, dy, d0, s, case, bound) with d_j = d0 + s j = x_j - y_j;
        # case 0: s == 0 (add max(d0, 0) per step); 1: d_j > 0 for j >= bound; 2: d_j > 0 for j <= bound
        terms = []
        c0, k0 = sum_ctx, sum_ctx + b
        step0 = per_step   # the first step's time, global layers only: a starting guess for the simulator
        for count, f0b, f1, f2, b0b, b1, b2, dy, s, case in ops:
            x0 = f0b + f1 * c0 + f2 * k0
            y0 = b0b + b1 * c0 + b2 * k0
            step0 += count * ((x0 if x0 > y0 else y0) + ovh)
            d0 = x0 - y0
            if case == 1:
                lo = math.floor(-d0 / s) + 1
                terms.append((count, y0, dy, d0, s, 1, lo if lo > 0 else 0))
            elif case == 2:
                terms.append((count, y0, dy, d0, s, 2, math.ceil(-d0 / s) - 1))
            else:
                terms.append((count, y0, dy, d0, s, 0, 0))

        def run_time(k: int) -> float:
            if k <= 0:
                return 0.0
            t = k * per_step
            for count, y0, dy, d0, s, case, bound in terms:
                v = k * y0 + dy * k * (k - 1) / 2  # _sum_max_linear, inlined, its float operations in its order
                if case == 1:   # d_j > 0 for j in [bound, k - 1]
                    if k - 1 >= bound:
                        n = k - bound
                        v = v + n * d0 + s * (bound + k - 1) * n / 2
                elif case == 2:   # d_j > 0 for j in [0, min(k - 1, bound)]
                    hi = k - 1 if k - 1 < bound else bound
                    if hi >= 0:
                        n = hi + 1
                        v = v + n * d0 + s * hi * n / 2
                else:
                    v += k * (d0 if d0 > 0.0 else 0.0)
                t += count * (v + k * ovh)
            for idx in windows:
                t += self._window_run(idx, b, sum_ctx, k)
            return t

        run_time.step0_s = step0
        return run_time

    def _batch_terms(self, b: int):
        """What decode_run needs of a batch of b alone: the step's fixed time (overhead, token ops, LM head) and per
        global-attention op (count, f0 b, f1, f2, b0 b, b1, b2, dy, s, case) with dx = (f1 + f2) b,
        dy = (b1 + b2) b, s = dx - dy and case = 0, 1, 2 for s = 0, > 0, < 0 (the same products decode_run_time
        forms, computed once per batch)."""
        if b <= self.max_tokens:
            per_step = self.step_overhead_s + self.token_time[b] + self.lm_time[b]
        else:
            per_step = self.step_overhead_s + self._tok(b) + self._lm(b)
        ops = []
        for count, f0, f1, f2, b0, b1, b2, f12, b12 in self._glob_ops:
            dx, dy = f12 * b, b12 * b
            s = dx - dy
            ops.append((count, f0 * b, f1, f2, b0 * b, b1, b2, dy, s, 0 if s == 0 else 1 if s > 0 else 2))
        return per_step, ops

    def _window_run(self, idx: int, b: int, sum_ctx: float, k: int) -> float:
        """Sliding-window layers over a run of k steps: the per-step time is piecewise linear in the step, bending
        where the mean context reaches the window; trapezoid rule on each side of the bend (exact on linear pieces)."""
        g = self.groups[idx]

        def at(j):
            return self._attn([self.decode_features(b, sum_ctx + b * j)[idx]], [g])

        kink = g.window - 1 - sum_ctx / b  # step where min(mean + 1, W) saturates
        pieces = [(0, k - 1)]
        if 0 < kink < k - 1:
            pieces = [(0, math.floor(kink)), (math.floor(kink) + 1, k - 1)]
        # sum over integer j in [lo, hi] of a linear function = (hi - lo + 1) (f(lo) + f(hi)) / 2
        return sum((hi - lo + 1) * (at(lo) + at(hi)) / 2 for lo, hi in pieces if hi >= lo)

    def scaled(self, factor: float, prefill: float | None = None) -> "StepModel":
        """The same engine with every step time multiplied by `factor` (a system 1/factor as fast), and prompt
        work by `prefill` instead when given (a step mixing both: by its token shares): used for the p10-p90
        range of a simulation, with the decode and prefill intervals of estimate (engine.py)."""
        import dataclasses

        pf = self.prefill_factor * (1.0 if prefill is None else prefill / factor)

        def grp(gs):
            return [_AttnGroup(g.window, [(c, *(v * factor for v in coefs)) for c, *coefs in g.ops]) for g in gs]

        return dataclasses.replace(
            self, token_time=[t * factor for t in self.token_time], lm_time=[t * factor for t in self.lm_time],
            groups=grp(self.groups), prefill_groups=grp(self.prefill_groups),
            kernel_overhead_s=self.kernel_overhead_s * factor, step_overhead_s=self.step_overhead_s * factor,
            prefill_factor=pf)

    # ------------------------------------------------------------ capacity

    def tp_pp_gpus(self) -> int:
        return self.tp * self.pp


def _fwin(x: float, W: int) -> float:
    """sum_{n=1}^{x} min(n, W) (planner.ops.causal_key_sum)."""
    xc = x if x < W else W
    return xc * (xc + 1) / 2 + W * (x - W if x > W else 0)


def _sum_max_linear(x0: float, dx: float, y0: float, dy: float, k: int) -> float:
    """sum_{j=0}^{k-1} max(x0 + dx j, y0 + dy j) in closed form. The reference for decode_run, which inlines it
    with its per-batch and per-run parts hoisted (tests/serving/test_fast_paths.py: equal bit for bit)."""
    # max(x, y) = y + max(x - y, 0); d_j = d0 + s j
    d0, s = x0 - y0, dx - dy
    total_y = k * y0 + dy * k * (k - 1) / 2
    if s == 0:
        return total_y + k * max(d0, 0.0)
    # indices where d_j > 0
    root = -d0 / s
    if s > 0:
        lo = max(0, math.floor(root) + 1)
        hi = k - 1
    else:
        lo = 0
        hi = min(k - 1, math.ceil(root) - 1)
    if hi < lo:
        return total_y
    n = hi - lo + 1
    return total_y + n * d0 + s * (lo + hi) * n / 2


def _attention_coefficients(m, fmt, kv_dtype, dev: DeviceModel, tp: int, flash: bool, stage: str) -> list[_AttnGroup]:
    """Read per-sequence attention costs off the core's operators as linear functions of (new, cached, keys)
    (_attention_fit, which does not depend on the device), then divide the flops coefficients by the device's
    effective peak for the op and the bytes coefficients by its effective bandwidth: seconds per unit."""
    try:
        fit = _attention_fit_cached(m, fmt, kv_dtype, tp, flash, stage)
    except TypeError:   # an unhashable model or format (never in the catalog): fit it afresh
        fit = _attention_fit(m, fmt, kv_dtype, tp, flash, stage)
    groups = []
    for w, ops in fit:
        g = _AttnGroup(window=w)
        for count, op, cf, cb, ckv, csc in ops:
            # the bytes the device moves: op.bytes + a x the K/V read + b x the score matrix (roofline.op_bytes:
            # conversion of the cache format, passes over it, its copy, a wider score matrix), and the compute of
            # converting cached K/V (roofline.attention_peak_divisor), as time_ops takes them
            a, b = op_bytes_multipliers(op, dev)
            peak = dev.eff_peak_flops[op.compute] / attention_peak_divisor(op, dev)
            bw = dev.eff_bandwidth_bytes_s
            g.ops.append((count, *(v / peak for v in cf),
                          *((vb + a * vk + b * vs) / bw for vb, vk, vs in zip(cb, ckv, csc))))
        groups.append(g)
    return groups


def _attention_fit(m, fmt, kv_dtype, tp: int, flash: bool, stage: str) -> tuple:
    """Per attention group (window None = global layers), per attention op: (count, the op at the 12 points, and the
    coefficients over (new, cached, keys) of its flops, bytes, K/V read bytes and score-matrix bytes), fitted to the
    core's operators at 12 points (the last two: the terms roofline.op_bytes scales by device).

    Decode has one new token (keys = cached + 1 on global layers: the features are collinear and the least-squares
    fit takes the minimum-norm coefficients, which are exact on every point that satisfies the same relation)."""
    windows = [None] if not m.attention_window else [None, m.attention_window]
    W = m.attention_window or 0
    pasts = np.array([0, 100, 0, 300, 5000, 70000, 2 * W + 5, W // 2 + 1, 0, W, W + 1, 3], dtype=np.float64)
    if stage == "decode":
        news = np.ones_like(pasts)
    else:
        news = np.array([1, 1, 7, 50, 1000, 3, 1, 129, 4096, 2, 5, 1], dtype=np.float64)
    ops = split_ops(step_ops(m, fmt, kv_dtype, stage, 1, news, pasts, flash), m, tp)
    attn = [o for o in ops if _is_attention(o)]
    groups = []
    for w in windows:
        suffix = "" if w is None else "_local"
        g = []
        cached = pasts if w is None else np.minimum(pasts, w)
        X = np.stack([news, cached, causal_key_sum(pasts, news, w)], axis=1)
        for op in attn:
            if not (op.name.endswith("_local") == (w is not None)) or not op.name.endswith(suffix):
                continue
            coefs = []
            for i, field_ in enumerate((op.flops, op.bytes, op.kv_read_bytes, op.score_bytes)):
                y = np.broadcast_to(np.asarray(field_, dtype=np.float64), news.shape)
                if i < 2:  # flops and bytes: the plain solve (the coefficients every simulation has used)
                    coef = np.linalg.lstsq(X, y, rcond=None)[0]
                else:  # columns scaled to 1 first: the K/V read depends on `cached` alone, which the keys column
                    # (up to 2.5e9 at 70,000 cached tokens) otherwise swamps to a relative residual of ~2e-6
                    scale = np.maximum(np.max(np.abs(X), axis=0), 1.0)
                    coef = np.linalg.lstsq(X / scale, y, rcond=None)[0] / scale
                err = np.max(np.abs(X @ coef - y) / np.maximum(np.abs(y), 1.0))
                if err > 1e-6:
                    raise PlannerError(f"internal: attention op {op.name} is not linear in (new, cached, keys) "
                                       f"(relative residual {err:.2e}); the serving step model needs updating")
                coefs.append(tuple(float(v) if abs(v) > 1e-9 * max(1.0, float(np.max(np.abs(coef)))) else 0.0
                                   for v in coef))
            g.append((op.count, op, *coefs))
        groups.append((w, tuple(g)))
    return tuple(groups)


# the fit is a pure function of the model and format (frozen, compared by value): every device of a plan shares it
_attention_fit_cached = functools.lru_cache(maxsize=256)(_attention_fit)


# ---------------------------------------------------------------- memory of a replica


@dataclass(frozen=True)
class ReplicaMemory:
    """KV pool of one engine (a TP group, or one of the p virtual engines of a PP replica)."""

    fits: bool
    verdict: str
    weights_gb_per_gpu: float
    kv_pool_tokens: int          # tokens of KV (all layers) the engine can hold
    kv_bytes_per_token: float    # whole model, before the TP split
    capacity_gb_per_gpu: float


def replica_memory(m, fmt, kv_dtype: str, spec: HardwareSpec, tp: int = 1, pp: int = 1, max_tokens: int | None = None,
                   flash_attention: bool = True, gpu_memory_utilization: float = 0.9,
                   max_num_seqs: int | None = None) -> ReplicaMemory:
    """The KV pool of one engine, by the same rule as `planner estimate --engine vllm` (planner.memory.plan_memory,
    vLLM V1 with max_num_batched_tokens = max_tokens and max_num_seqs; None = `vllm serve`'s defaults on this
    device, planner/scheduler_defaults.py): per GPU, gpu_memory_utilization x usable capacity less
    weights / (t p), the profiling run's peak and the runtime overhead holds KV. A token's KV (all layers) takes
    kv_bytes_per_token x (t / kv_split) / (t p) per GPU, spread over the t p GPUs of the replica.
    """
    s = EngineSettings(vllm_version="v1", gpu_memory_utilization=gpu_memory_utilization,
                       max_num_batched_tokens=max_tokens, max_num_seqs=max_num_seqs)
    mb = plan_memory(m, fmt, kv_dtype, 1, 1, 0, spec, "vllm", s, tp, kv_split(m, tp), flash_attention, pp=pp)
    cap = mb.budget
    per_tok_total = kv_bytes_per_token(m, kv_dtype)
    per_tok_gpu = per_tok_total / kv_split(m, tp) / pp
    free = mb.kv_pool_bytes
    # a pure state-space model caches nothing per token: its pool is bounded only by the 2^53 count limit
    tokens = int(min(free // per_tok_gpu, 2 ** 53)) if free > 0 and per_tok_gpu > 0 else (2 ** 53 if free > 0 else 0)
    need = (mb.weights_bytes + mb.activations_bytes + mb.overhead_bytes) / GB
    if free <= 0:
        verdict = (f"does not fit: needs {need:.1f} GB per device before any KV cache, of {cap / GB:.1f} GB "
                   f"({gpu_memory_utilization:g} x usable)")
    else:
        verdict = f"fits: {need:.1f} GB per device + KV pool of {tokens:,} tokens"
    return ReplicaMemory(free > 0, verdict, mb.weights_bytes / GB, tokens, per_tok_total, cap / GB)
