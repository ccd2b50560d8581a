"""Speculative decoding (Leviathan, Kalman & Matias, ICML 2023, arXiv:2211.17192; Chen et al. 2023).

A draft model proposes gamma tokens; the target verifies them in one forward pass of gamma + 1 tokens. With
acceptance rate alpha (each drafted token accepted independently with probability alpha), the expected number of
tokens produced per target pass is (Leviathan et al., eq. 1):

  E[tokens] = (1 - alpha^(gamma + 1)) / (1 - alpha)          (= gamma + 1 at alpha = 1)

Their walltime speed-up with draft/target step cost ratio c, verification costing one target step, is
  (1 - alpha^(gamma + 1)) / ((1 - alpha) (gamma c + 1)).
Here the step costs come from the core cost model on the same device: t_draft = a draft decode step (its
operators only: the engine's fixed per-step cost, Efficiency.step_overhead_ms for scheduling, sampling and
launch, is paid once per speculative iteration, by the verify pass, as vLLM / SGLang / TensorRT-LLM run the
drafts inside the iteration),
t_verify = a target forward of gamma + 1 new tokens after `context` cached ones with logits at every position
(verify_time_s), t_target = one target decode step:

  speed-up = E[tokens] x t_target / (gamma x t_draft + t_verify)

The break-even acceptance rate solves speed-up = 1 (bisection; the speed-up increases with alpha).
"""

from __future__ import annotations

import math

from ..errors import PlannerError

# a configuration that does not fit has no step times or speed-up (as `planner estimate` blanks its latencies): its
# rows keep the verdict, the memory and the modelling quantities (expected tokens, cost ratio, break-even)
NO_TIMES = {"target_step_ms": None, "draft_step_ms": None, "verify_step_ms": None, "speedup": None,
            "leviathan_speedup": None}


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
                kv_dtype: str = "fp16", context: int = 1024, batch: int = 1, efficiency="auto", runtime=None) -> dict:
    """Expected tokens per target step, step costs from the core, speed-up, and the break-even acceptance rate.
    runtime: a runtime profile id, whose unit and fitted efficiency time both models (serving.engine.device_for,
    as `planner estimate --runtime`)."""
    from ..architecture import load_model
    from ..hardware import load_hardware
    from ..latency import decode_step_time_s
    from ..ops import decode_ops, weight_bytes
    from ..quantization import kv_dtype as norm_kv, weight_format
    from .engine import device_for

    tm = target if not isinstance(target, str) else load_model(target)
    dm = draft if not isinstance(draft, str) else load_model(draft)
    if dm.vocab_size != tm.vocab_size:
        raise PlannerError(f"--draft: {dm.name} has vocabulary {dm.vocab_size}, target {tm.name} has {tm.vocab_size}; "
                           "a draft must share the target's tokenizer")
    spec = hardware if not isinstance(hardware, str) else load_hardware(hardware)
    fmt = weight_format(weights)
    kvd = norm_kv(kv_dtype)
    _, dev, _ = device_for(tm, spec, fmt, efficiency, runtime)
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
    t_draft = _tp_time(decode_ops(dm, fmt, kvd, batch, context), dev, dm, fmt, batch, 1, None, per_step=False)
    t_verify = verify_time_s(tm, fmt, kvd, dev, batch, gamma, context)

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
    } | ({} if fits else NO_TIMES)


def best_gamma(target, draft, hardware, alpha: float, gammas=(1, 2, 3, 4, 5, 6, 8), **kw) -> dict:
    """The draft length with the largest modelled speed-up at this acceptance rate."""
    rows = [speculative(target, draft, hardware, g, alpha, **kw) for g in gammas]
    return max(rows, key=lambda r: -math.inf if r["speedup"] is None else r["speedup"])


# ---------------------------------------------------------------- the drafts used today: MTP, EAGLE, n-gram
#
# Every method proposes gamma tokens that the target verifies in one forward pass of gamma + 1 tokens (logits at
# all gamma + 1 positions). What differs is the draft's cost per proposed token:
#   * mtp: DeepSeek-V3's multi-token-prediction module (arXiv:2412.19437 sec. 2.2): RMSNorm of the last hidden state
#     and of the next token's embedding, concatenated and projected 2h -> h (M_k), one transformer block of the
#     target's own kind (an MoE layer in V3), then the output head shared with the target. Its step costs the
#     core's operators of a one-layer copy of the target plus the 2h x h projection. DeepSeek-V3 ships one module
#     (D = 1); gamma > 1 reuses it autoregressively, as SGLang's --speculative-num-steps does.
#   * eagle: an EAGLE draft head (Li et al., arXiv:2401.15077; EAGLE-2 arXiv:2406.16858; EAGLE-3 arXiv:2503.01840):
#     the same 2h -> h fusion of feature and embedding, one dense decoder layer at the target's width
#     (its dense intermediate size) and the target's LM head. Acceptance is an input (EAGLE papers report the
#     mean acceptance length tau, tokens per target pass, e.g. 3-4 on chat with a tree of drafts).
#   * ngram: prompt lookup (vLLM's ngram proposer, Saxena 2023 "prompt lookup decoding"): drafts are copied from
#     the context by matching the last n tokens; no draft compute (the match is a CPU string search, taken as 0).
# With tau tokens per target pass (tau = (1 - alpha^(gamma+1)) / (1 - alpha) when a per-token rate alpha is given):
#   speed-up = tau x t_target / (gamma x t_draft + t_verify);  break-even tau = (gamma t_draft + t_verify) / t_target
# (a tree of drafts verifies more than gamma + 1 positions; modelled here as a chain).

METHODS = ("draft", "mtp", "eagle", "ngram")
MTP_FAMILIES = ("deepseek_v3",)


def fusion_params(target) -> int:
    """The 2h -> h projection of MTP (M_k) and EAGLE (fc) over [hidden state; embedding], plus two RMSNorms."""
    return 2 * target.hidden_size * target.hidden_size + 2 * target.hidden_size


def draft_head(target, method: str):
    """The draft's own architecture as a one-layer model sharing the target's embedding and LM head:
    mtp = one layer of the target's kind (MoE if the target's later layers are), eagle = one dense decoder layer."""
    if method == "mtp":
        if target.family not in MTP_FAMILIES:
            raise PlannerError(f"--method: mtp needs a model trained with multi-token-prediction modules "
                               f"(DeepSeek-V3/R1); {target.name} ({target.family}) has none; allowed: draft, eagle, "
                               "ngram")
        upd = {"num_layers": 1, "name": f"{target.name}-mtp"}
        if target.moe:
            upd["moe"] = target.moe.model_copy(update={"first_dense_layers": 0})
        return target.model_copy(update=upd)
    if method == "eagle":
        return target.model_copy(update={"num_layers": 1, "moe": None, "name": f"{target.name}-eagle"})
    raise PlannerError(f"--method: {method!r} has no draft head; allowed: mtp, eagle")


def draft_head_params(target, method: str) -> int:
    """Parameters the draft adds to the deployment: its layer + the fusion projection (embedding and head shared)."""
    if method == "ngram":
        return 0
    b = draft_head(target, method).param_breakdown()
    return b["total"] - b["embedding"] - b["lm_head"] + fusion_params(target)


def acceptance_length(gamma: int, alpha: float | None = None, tau: float | None = None) -> float:
    """Tokens per target pass: tau as given (1 <= tau <= gamma + 1), else Leviathan's expected_tokens(alpha, gamma)."""
    if tau is not None:
        if not (isinstance(tau, (int, float)) and 1 <= tau <= gamma + 1):
            raise PlannerError(f"--acceptance-length: tokens per target pass must be in [1, gamma + 1 = {gamma + 1}], "
                               f"got {tau}")
        return float(tau)
    if alpha is None:
        raise PlannerError("--acceptance: give a per-token acceptance rate or --acceptance-length")
    return expected_tokens(alpha, gamma)


def speedup_from_costs(tau: float, gamma: int, t_target: float, t_draft: float, t_verify: float) -> float:
    """tau x t_target / (gamma x t_draft + t_verify)."""
    return tau * t_target / (gamma * t_draft + t_verify)


def _tp_time(ops, dev, m, fmt, tokens, tp, link, per_step: bool = True):
    """Time of one forward of `ops` on tp devices: the operators, the all-reduces, and (per_step) the engine's fixed
    per-step cost; a draft forward runs inside the iteration its verify pass pays that cost for (module docstring)."""
    from ..roofline import step_time_s, time_ops
    from .parallelism import split_ops, tp_comm_time_s

    times = time_ops(split_ops(ops, m, tp), dev)
    ops_s = float(step_time_s(times, dev)) if per_step else float(sum(ot.time_s for ot in times))
    return ops_s + float(tp_comm_time_s(m, fmt, tokens, tp, link))


def verify_time_s(m, fmt, kv_dtype, dev, batch: int, gamma: int, context: int, tp: int = 1, link=None) -> float:
    """The target's forward of gamma + 1 tokens per sequence after `context` cached ones, with logits at every
    position (the core's prefill operators, its last-position LM head replaced by one over batch x (gamma + 1))."""
    from ..ops import step_ops

    ops = [o for o in step_ops(m, fmt, kv_dtype, "prefill", batch, gamma + 1, context) if o.name != "lm_head"]
    ops += [o for o in step_ops(m, fmt, kv_dtype, "decode", batch * (gamma + 1), 1, context) if o.name == "lm_head"]
    return _tp_time(ops, dev, m, fmt, batch * (gamma + 1), tp, link)


def draft_step_time_s(target, method: str, fmt, kv_dtype, dev, batch: int, context: int, tp: int = 1,
                      link=None) -> float:
    """One draft token for `batch` sequences: 0 for ngram; else the core's decode operators of the one-layer
    draft head (embedding gather, its layer, the shared LM head) plus the 2h -> h fusion GEMM."""
    from ..ops import MATMUL, OpCost, step_ops
    from ..quantization import activation_bytes

    if method == "ngram":
        return 0.0
    head = draft_head(target, method)
    h, a, T = target.hidden_size, activation_bytes(fmt), float(batch)
    fuse = OpCost("fusion_proj", "decode", 1, 2 * T * 2 * h * h, 2 * h * h * fmt.bytes_per_weight, T * 3 * h * a,
                  compute=MATMUL)
    return _tp_time(step_ops(head, fmt, kv_dtype, "decode", batch, 1, context) + [fuse], dev, head, fmt, T, tp, link,
                    per_step=False)


def speculative_method(target, hardware, method: str = "eagle", gamma: int = 3, alpha: float | None = None,
                       tau: float | None = None, weights: str = "fp16", kv_dtype: str = "fp16", context: int = 1024,
                       batch: int = 1, efficiency="auto", tp: int = 1, draft=None, runtime=None) -> dict:
    """Speed-up of one speculative method on `tp` devices of `hardware` (tp = 1: one device). method 'draft' is
    `speculative` (a separate draft model, single device). runtime: as in `speculative`."""
    from ..architecture import load_model
    from ..hardware import load_hardware
    from ..ops import kv_bytes_per_sequence, weight_bytes
    from ..quantization import kv_dtype as norm_kv, weight_format
    from .engine import device_for
    from .parallelism import check_tp, kv_split, node_for

    if method not in METHODS:
        raise PlannerError(f"--method: unknown method {method!r}; allowed: {', '.join(METHODS)}")
    if gamma < 1:
        raise PlannerError(f"--gamma: must be an integer >= 1, got {gamma}")
    if method == "draft":
        if draft is None:
            raise PlannerError("--draft: the draft method needs a draft model (same vocabulary); allowed: a catalog id")
        if tp != 1:
            raise PlannerError("--tp: the draft-model method is modelled on one device; allowed: 1")
        r = speculative(target, draft, hardware, gamma, alpha if alpha is not None else 0.7, weights, kv_dtype,
                        context, batch, efficiency, runtime)
        return r | {"method": "draft", "acceptance_length": r["expected_tokens_per_step"], "tp": 1}
    tm = target if not isinstance(target, str) else load_model(target)
    spec = hardware if not isinstance(hardware, str) else load_hardware(hardware)
    fmt, kvd = weight_format(weights), norm_kv(kv_dtype)
    check_tp(tm, tp)
    node = node_for(spec)
    if tp > node.gpus_per_node:
        raise PlannerError(f"--tp: {tp} exceeds the {node.gpus_per_node} device(s) of one {node.name} node")
    link = node.intra_link() if tp > 1 else None
    _, dev, _ = device_for(tm, spec, fmt, efficiency, runtime)
    tau_v = acceptance_length(gamma, alpha, tau)
    from .parallelism import tp_step_time_s

    t_target = float(tp_step_time_s(tm, fmt, kvd, dev, "decode", batch, 1, context, tp, link))
    t_draft = draft_step_time_s(tm, method, fmt, kvd, dev, batch, context, tp, link)
    t_verify = verify_time_s(tm, fmt, kvd, dev, batch, gamma, context, tp, link)
    extra_params = draft_head_params(tm, method)
    extra_w = extra_params * fmt.bytes_per_weight
    ctx = context + gamma + 1
    from ..memory import runtime_overhead_bytes

    kv = batch * float(kv_bytes_per_sequence(tm, kvd, ctx)) / kv_split(tm, tp)
    draft_kv = 0.0 if method == "ngram" else (
        batch * float(kv_bytes_per_sequence(draft_head(tm, method), kvd, ctx)) / kv_split(tm, tp))
    need = (weight_bytes(tm, fmt) + extra_w) / tp + runtime_overhead_bytes(spec, tm, fmt, tp, draft_kv_bytes=draft_kv) + kv
    cap = spec.usable_capacity_gb * 1e9
    fits = need <= cap
    be_tau = (gamma * t_draft + t_verify) / t_target
    if be_tau <= 1:
        be_alpha = 0.0
    elif be_tau > gamma + 1:
        be_alpha = None
    else:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if expected_tokens(mid, gamma) < be_tau else (lo, mid)
        be_alpha = hi
    where = f"{tp} x {spec.id}" if tp > 1 else spec.id
    return {
        "method": method, "target": tm.name, "draft": None if method == "ngram" else draft_head(tm, method).name,
        "hardware": spec.id, "tp": tp, "weights": fmt.name, "gamma": gamma, "alpha": alpha,
        "acceptance_length": tau_v, "context": context, "batch": batch,
        "target_step_ms": t_target * 1e3, "draft_step_ms": t_draft * 1e3, "verify_step_ms": t_verify * 1e3,
        "cost_ratio": t_draft / t_target, "speedup": speedup_from_costs(tau_v, gamma, t_target, t_draft, t_verify),
        "breakeven_acceptance_length": be_tau, "breakeven_alpha": be_alpha,
        "extra_params_b": extra_params / 1e9, "extra_weights_gb": extra_w / 1e9,
        "fits": fits, "memory_gb": need / 1e9, "capacity_gb": cap / 1e9,
        "verdict": (f"{'fits' if fits else 'does not fit'}: target + draft weights and KV need {need / 1e9:.2f} GB "
                    f"per device of {cap / 1e9:.2f} GB usable on {where}"),
    } | ({} if fits else NO_TIMES)
