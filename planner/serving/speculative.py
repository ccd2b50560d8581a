"""Speculative decoding (Leviathan, Kalman & Matias, ICML 2023, arXiv:2211.17192; Chen et al. 2023).

A draft model proposes gamma tokens; the target verifies them in one forward pass of gamma + 1 tokens. With
acceptance rate alpha (each drafted token accepted independently with probability alpha), the expected number of
tokens produced per target pass is (Leviathan et al., eq. 1):

  E[tokens] = (1 - alpha^(gamma + 1)) / (1 - alpha)          (= gamma + 1 at alpha = 1)

Their walltime speed-up with draft/target step cost ratio c, verification costing one target step, is
  (1 - alpha^(gamma + 1)) / ((1 - alpha) (gamma c + 1)).
Here the step costs come from the core cost model on the same device: t_draft = a draft decode step,
t_verify = a target forward of gamma + 1 new tokens after `context` cached ones (planner.latency.prefill_time_s
with past = context), t_target = one target decode step:

  speed-up = E[tokens] x t_target / (gamma x t_draft + t_verify)

The break-even acceptance rate solves speed-up = 1 (bisection; the speed-up increases with alpha).
"""

from __future__ import annotations

from ..errors import PlannerError


def expected_tokens(alpha: float, gamma: int) -> float:
    """(1 - alpha^(gamma+1)) / (1 - alpha): expected tokens per target step (Leviathan et al. 2023, eq. 1)."""
    if not 0 <= alpha <= 1:
        raise PlannerError(f"--acceptance: must be in [0, 1], got {alpha}")
    if gamma < 1:
        raise PlannerError(f"--gamma: must be an integer >= 1, got {gamma}")
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def leviathan_speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """(1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)): Leviathan et al. Theorem 3.8."""
    return expected_tokens(alpha, gamma) / (gamma * cost_ratio + 1)


def draft_candidates(target) -> list[str]:
    """Catalog models that can draft for `target`: same vocabulary size, at most a quarter of its active params."""
    from ..architecture import list_model_ids, load_model

    out = []
    for mid in list_model_ids():
        d = load_model(mid)
        if d.vocab_size == target.vocab_size and d.active_params * 4 <= target.active_params:
            out.append(mid)
    return sorted(out, key=lambda i: load_model(i).active_params)


def speculative(target, draft, hardware, gamma: int = 4, alpha: float = 0.7, weights: str = "fp16",
                kv_dtype: str = "fp16", context: int = 1024, batch: int = 1, efficiency="auto") -> dict:
    """Expected tokens per target step, step costs from the core, speed-up, and the break-even acceptance rate."""
    from ..architecture import load_model
    from ..efficiency import resolve_efficiency
    from ..hardware import load_hardware
    from ..latency import decode_step_time_s, prefill_time_s
    from ..ops import weight_bytes
    from ..quantization import kv_dtype as norm_kv, weight_format
    from ..roofline import device_model, select_unit

    tm = target if not isinstance(target, str) else load_model(target)
    dm = draft if not isinstance(draft, str) else load_model(draft)
    if dm.vocab_size != tm.vocab_size:
        raise PlannerError(f"--draft: {dm.name} has vocabulary {dm.vocab_size}, target {tm.name} has {tm.vocab_size}; "
                           "a draft must share the target's tokenizer")
    spec = hardware if not isinstance(hardware, str) else load_hardware(hardware)
    fmt = weight_format(weights)
    kvd = norm_kv(kv_dtype)
    u = select_unit(spec, fmt)
    dev = device_model(spec, u, fmt, resolve_efficiency(spec, u, efficiency))
    # both models live on the device: weights + KV of the context for each, plus the runtime overhead
    from ..memory import runtime_overhead_bytes
    from ..ops import kv_bytes_per_sequence
    draft_kv = batch * float(kv_bytes_per_sequence(dm, kvd, context + gamma + 1))
    need = (weight_bytes(tm, fmt) + weight_bytes(dm, fmt) + runtime_overhead_bytes(spec, tm, fmt, draft_kv_bytes=draft_kv)
            + batch * float(kv_bytes_per_sequence(tm, kvd, context + gamma + 1)))
    cap = spec.usable_capacity_gb * 1e9
    fits = need <= cap
    verdict = (f"{'fits' if fits else 'does not fit'}: target + draft weights and KV need {need / 1e9:.2f} GB of "
               f"{cap / 1e9:.2f} GB usable")
    t_target = float(decode_step_time_s(tm, fmt, kvd, dev, batch, context))
    t_draft = float(decode_step_time_s(dm, fmt, kvd, dev, batch, context))
    t_verify = float(prefill_time_s(tm, fmt, kvd, dev, batch, gamma + 1, context))

    def speed(a: float) -> float:
        return expected_tokens(a, gamma) * t_target / (gamma * t_draft + t_verify)

    if speed(1.0) < 1:
        breakeven = None
    elif speed(0.0) >= 1:
        breakeven = 0.0
    else:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if speed(mid) < 1 else (lo, mid)
        breakeven = hi
    return {
        "target": tm.name, "draft": dm.name, "hardware": spec.id, "weights": fmt.name, "gamma": gamma, "alpha": alpha,
        "context": context, "batch": batch,
        "expected_tokens_per_step": expected_tokens(alpha, gamma),
        "target_step_ms": t_target * 1e3, "draft_step_ms": t_draft * 1e3, "verify_step_ms": t_verify * 1e3,
        "cost_ratio": t_draft / t_target,
        "speedup": speed(alpha),
        "leviathan_speedup": leviathan_speedup(alpha, gamma, t_draft / t_target),
        "breakeven_alpha": breakeven,
        "extra_weights_gb": weight_bytes(dm, fmt) / 1e9,
        "fits": fits, "memory_gb": need / 1e9, "capacity_gb": cap / 1e9, "verdict": verdict,
    }


def best_gamma(target, draft, hardware, alpha: float, gammas=(1, 2, 3, 4, 5, 6, 8), **kw) -> dict:
    """The draft length with the largest modelled speed-up at this acceptance rate."""
    rows = [speculative(target, draft, hardware, g, alpha, **kw) for g in gammas]
    return max(rows, key=lambda r: r["speedup"])
