"""A record -> the planner's prediction for the same work, through the planner's own roofline.

Each measured kernel becomes planner ``OpCost``s with the kernel's exact bytes and FLOPs (from the record), timed
by ``planner.roofline.time_ops`` against a device spec and an ``Efficiency``:

* ``quant_matmul``: one weight GEMM (class ``matmul``) with weight + scale + zero bytes as weight bytes and the
  activations in and out as activation bytes; the compute dtype is the planner's choice for the weight format
  (weight-only int8/int4 run at the 16-bit peak, with ``dequant_overhead[format]`` and ``compute_half_rows``).
* ``paged_attention``: the planner's decode attention as in ``planner/ops.py`` with flash attention: ``attn_scores``
  (2 x pairs x D FLOPs; K, half the KV scales, q and block table bytes), ``attn_softmax`` (5 x pairs, no bytes)
  and ``attn_values`` (2 x pairs x D; V, the other half of the scales, the output), pairs = sum(ctx) x Hq.
* ``decode_step``: a ``planner.architecture.ModelArch`` with the stack's shape and ``planner.ops.decode_ops``
  minus the embedding and the LM head (the stack has neither), timed with ``step_time_s`` (step overhead
  included): the whole-step prediction runs the planner's real path, its byte counts included.

Records are grouped by (kernel, format, shape) so that each group is one vectorized ``time_ops`` call; a fit can
re-time a few hundred records thousands of times.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.architecture import ModelArch
from planner.efficiency import resolve_efficiency
from planner.errors import PlannerError
from planner.hardware import Efficiency, HardwareSpec
from planner.ops import ATTENTION, MATMUL, VECTOR, OpCost, decode_ops
from planner.quantization import WeightFormat, weight_format
from planner.roofline import device_model, select_unit, step_bound, step_time_s, time_ops

from .records import CEILINGS, Prediction, Record

_NOT_IN_STACK = ("embedding", "lm_head")  # the decode stack has no embedding, final norm or LM head


def planner_format(params) -> str:
    """The planner weight format of a record: dense dtype names as is, int8 -> int8, int4 g -> int4-g<g>.
    Paged attention runs at its query (activation) dtype."""
    if params.kernel == "paged_attention":
        return params.q_dtype
    fmt = params.weight_format
    if fmt == "int4":
        return f"int4-g{params.group_size}"
    return fmt


def predictable(r: Record) -> bool:
    return r.status == "ok" and r.kernel not in CEILINGS and r.work is not None and r.measured is not None


@dataclass(frozen=True)
class _Group:
    """Records sharing one planner format and op structure; op fields are arrays over the group."""

    index: np.ndarray           # positions in the records list
    fmt: WeightFormat
    ops: list[OpCost]
    is_step: bool               # whole decode step: add step_overhead_ms
    bytes_per_weight: float     # for GEMM rows = flops / (2 x weight_bytes / bytes_per_weight)


def _col(records, fn):
    return np.array([fn(r) for r in records], dtype=np.float64)


def _matmul_group(recs) -> tuple[list[OpCost], float]:
    w = _col(recs, lambda r: r.work.weight_bytes + r.work.scale_bytes + r.work.zero_bytes)
    act = _col(recs, lambda r: r.work.act_in_bytes + r.work.act_out_bytes)
    flops = _col(recs, lambda r: r.work.flops)
    params = _col(recs, lambda r: r.params.n * r.params.k)
    op = OpCost("matmul", "decode", 1, flops, w, act, compute=MATMUL)
    return [op], float(np.mean(w / params))


def _attention_group(recs) -> list[OpCost]:
    flops = _col(recs, lambda r: r.work.flops)          # 4 x sum(ctx) x Hq x D
    d = _col(recs, lambda r: r.params.head_dim)
    pairs = flops / (4 * d)
    kv = _col(recs, lambda r: r.work.kv_bytes)
    sc = _col(recs, lambda r: r.work.scale_bytes)
    q = _col(recs, lambda r: r.work.act_in_bytes + r.work.other_bytes)
    o = _col(recs, lambda r: r.work.act_out_bytes)
    kvd = recs[0].params.kv_dtype  # one KV dtype per group (_group_key)
    return [
        OpCost("attn_scores", "decode", 1, flops / 2, 0.0, q, kv / 2 + sc / 2, 0.0, ATTENTION, kvd),
        OpCost("attn_softmax", "decode", 1, 5 * pairs, 0.0, 0.0, 0.0, 0.0, VECTOR),
        OpCost("attn_values", "decode", 1, flops / 2, 0.0, o, kv / 2 + sc / 2, 0.0, ATTENTION, kvd),
    ]


def stack_arch(p) -> ModelArch:
    """The decode stack's shape as a planner architecture (Llama-style: gated MLP, no biases, untied)."""
    return ModelArch(name=p.config, hidden_size=p.hidden, num_layers=p.n_layers, num_attention_heads=p.n_heads,
                     num_kv_heads=p.n_kv_heads, head_dim=p.head_dim, intermediate_size=p.intermediate,
                     vocab_size=1, max_position_embeddings=1 << 24)


def _decode_group(recs, fmt: WeightFormat) -> list[OpCost]:
    p = recs[0].params
    m = stack_arch(p)
    batch = _col(recs, lambda r: r.params.batch)
    # decode_ops: each sequence attends to `past` cached tokens plus itself; a record's context_lens count the
    # new token, and the ops are linear in past, so the mean context stands for a mixed batch exactly
    past = _col(recs, lambda r: float(np.mean(r.params.context_lens)) - 1.0)
    ops = decode_ops(m, fmt, p.dtype, batch, past)
    return [op for op in ops if op.name not in _NOT_IN_STACK]


def _group_key(r: Record):
    p = r.params
    if p.kernel == "decode_step":
        return (p.kernel, planner_format(p), p.dtype, p.hidden, p.n_heads, p.n_kv_heads, p.head_dim,
                p.intermediate, p.n_layers, p.config)
    if p.kernel == "paged_attention":
        return (p.kernel, planner_format(p), p.kv_dtype)
    return (p.kernel, planner_format(p))


def prepare(records: list[Record]) -> list[_Group]:
    """Group the predictable records; each group's ops are built once."""
    buckets: dict[tuple, list[int]] = {}
    for i, r in enumerate(records):
        if predictable(r):
            buckets.setdefault(_group_key(r), []).append(i)
    groups = []
    for key, idx in buckets.items():
        recs = [records[i] for i in idx]
        fmt = weight_format(key[1])
        bpw = fmt.bytes_per_weight
        if key[0] == "quant_matmul":
            ops, bpw = _matmul_group(recs)
        elif key[0] == "paged_attention":
            ops = _attention_group(recs)
        else:
            ops = _decode_group(recs, fmt)
        groups.append(_Group(np.array(idx), fmt, ops, key[0] == "decode_step", bpw))
    return groups


def _for_unit(eff, unit: str, hardware_id: str):
    """An efficiency per compute unit ({unit name: Efficiency}, as a calibration file holds) -> this unit's."""
    if isinstance(eff, dict):
        if unit not in eff:
            raise PlannerError(f"calibration for {hardware_id} has no unit '{unit}'; it has: {', '.join(eff)}")
        return eff[unit]
    return eff


def _smooth_max(a, b, p: float):
    """(a^p + b^p)^(1/p): a smooth stand-in for max(a, b) (exact as p -> inf), computed without overflow."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    hi = np.maximum(np.maximum(a, b), 1e-300)
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


def evaluate(groups: list[_Group], n: int, spec: HardwareSpec, eff: Efficiency | str | dict = "auto",
             unit: str | None = None, smooth_p: float | None = None):
    """(predicted ms [n] (NaN where not predictable), bound [n] ('' where not), efficiency sources).

    ``smooth_p``: for fitting only -- combine each op's compute and memory time (as planner.roofline.time_ops
    computed them) with a p-norm instead of max(), so that the fit sees a gradient on both sides of the ridge."""
    ms = np.full(n, np.nan)
    bound = np.full(n, "", dtype=object)
    sources = set()
    for g in groups:
        u = select_unit(spec, g.fmt, unit)
        e = resolve_efficiency(spec, u, _for_unit(eff, u.name, spec.id))
        sources.add(e.source)
        dev = replace(device_model(spec, u, g.fmt, e), bytes_per_weight=g.bytes_per_weight)
        times = time_ops(g.ops, dev)
        if smooth_p is None:
            t = step_time_s(times, dev) if g.is_step else sum(ot.time_s for ot in times)
        else:
            t = sum(_smooth_max(ot.compute_s, ot.memory_s, smooth_p) + ot.overhead_s for ot in times)
            t = t + (e.step_overhead_ms * 1e-3 if g.is_step else 0.0)
        ms[g.index] = np.broadcast_to(np.asarray(t, dtype=np.float64) * 1e3, g.index.shape)
        bound[g.index] = np.broadcast_to(step_bound(times), g.index.shape)
    return ms, bound, sources


def predict(records: list[Record], spec: HardwareSpec, eff: Efficiency | str | dict = "auto",
            unit: str | None = None) -> list[Prediction | None]:
    """The planner's prediction for every record (None for ceilings and failed configurations)."""
    if not records:
        return []
    ms, bound, _ = evaluate(prepare(records), len(records), spec, eff, unit)
    out: list[Prediction | None] = []
    for i, r in enumerate(records):
        if not np.isfinite(ms[i]):
            out.append(None)
            continue
        if not ms[i] > 0:
            raise PlannerError(f"prediction for record {i} ({r.kernel}) is not positive: {ms[i]}")
        fmt = weight_format(planner_format(r.params))
        u = select_unit(spec, fmt, unit)
        src = resolve_efficiency(spec, u, _for_unit(eff, u.name, spec.id)).source
        out.append(Prediction(predicted_ms=float(ms[i]), hardware_id=spec.id, efficiency_source=src,
                              bound=str(bound[i])))
    return out
