"""Peer tools' latency formulas, reproduced on the planner's operator costs so that the report can put their
error next to ours on the same rows.

llm-analysis (Cheng Li, https://github.com/cli99/llm-analysis, llm_analysis/analysis.py and constant.py):
  per layer:   attention module  max(flops / (peak x flops_efficiency), (weights + activations) / (hbm x hbm_eff))
               MLP module         the same over the MLP
               2 x layernorm      activation bytes / (hbm x hbm_eff)       (memory only)
  per step:    input embedding    the whole vocab x hidden table / (hbm x hbm_eff)   (get_latency_fwd_input_embedding)
               output embedding   2 x batch x seq_len x vocab x hidden / (peak x flops_efficiency)  (all positions,
                                  compute only; get_latency_fwd_output_embedding_loss)
  Efficiencies: the package defaults are 1.0 (constant.py FLOPS_EFFICIENCY = HBM_MEMORY_EFFICIENCY = 1); its README
  validates against measured latencies with flops_efficiency 0.7 and hbm_memory_efficiency 0.9 ("observed by
  profiling"), which is what we use here. KV-cache reads are counted with the attention module's memory.
  Steps (decode contexts, prefill micro-batches) are those of the row, as for the planner.

LLM-Viewer (hahnyuan/LLM-Viewer, hardwares/roofline_model.py): every operator at max(OPs / peak,
  memory_access / bandwidth) with datasheet peaks and no efficiency or overhead terms. That is the planner's
  `datasheet` mode (per-op roofline at efficiency 1.0), reported as "datasheet roofline (= LLM-Viewer's
  roofline_model)"; the operator lists differ only in small elementwise terms.
"""

from __future__ import annotations

import numpy as np

from ..architecture import load_model
from ..hardware import load_hardware
from ..ops import step_ops
from ..quantization import weight_format
from ..roofline import select_unit
from ..units import TERA
from .predict import steps_of_row

LLM_ANALYSIS_FLOPS_EFFICIENCY = 0.7   # llm-analysis README validation ("profiled efficiency")
LLM_ANALYSIS_HBM_EFFICIENCY = 0.9

_ATTN = ("qkv_proj", "o_proj")
_MLP = ("mlp", "moe_router", "moe_experts", "moe_shared_experts")


def llm_analysis_time_s(df, flops_eff: float = LLM_ANALYSIS_FLOPS_EFFICIENCY,
                        hbm_eff: float = LLM_ANALYSIS_HBM_EFFICIENCY) -> np.ndarray:
    """Predicted time of every mapped row (same steps as the planner) under llm-analysis's formulas."""
    recs = df.to_dict("records")
    out = np.zeros(len(recs))
    groups: dict[tuple, list] = {}
    for i, r in enumerate(recs):
        steps, _ = steps_of_row(r)
        for stage, B, S, P, w in steps:
            key = (r["model"], r["weights"], r["kv_dtype"], bool(r["flash_attention"]), stage, r["hardware"], r["unit"])
            groups.setdefault(key, []).append((i, B, S, P, w))
    for (model, weights, kv, flash, stage, hw, unit), items in groups.items():
        a = np.array(items, dtype=np.float64)
        ri, B, S, P, w = a[:, 0].astype(int), a[:, 1], a[:, 2], a[:, 3], a[:, 4]
        m, fmt, spec = load_model(model), weight_format(weights), load_hardware(hw)
        u = select_unit(spec, fmt, unit)
        dt = next(d for d in fmt.compute_dtypes if d in u.peak_tflops)
        peak = u.peak_tflops[dt] * TERA * flops_eff
        bw = spec.memory.bandwidth_gbs * 1e9 * hbm_eff
        mods = {"attn": [0.0, 0.0], "mlp": [0.0, 0.0]}
        norm_t = 0.0
        for op in step_ops(m, fmt, kv, stage, B, S, P, flash):
            f, b = op.count * np.asarray(op.flops, float), op.count * np.asarray(op.bytes, float)
            if op.name in _ATTN or op.name.startswith("attn_"):
                mods["attn"][0] = mods["attn"][0] + f
                mods["attn"][1] = mods["attn"][1] + b
            elif op.name in _MLP:
                mods["mlp"][0] = mods["mlp"][0] + f
                mods["mlp"][1] = mods["mlp"][1] + b
            elif op.name == "norms":
                norm_t = norm_t + np.asarray(op.act_bytes, float) * op.count / bw
        t = sum(np.maximum(fl / peak, by / bw) for fl, by in mods.values()) + norm_t
        emb = m.vocab_size * m.hidden_size * fmt.embedding_bits / 8 / bw              # whole table read
        logits = 2 * B * S * m.vocab_size * m.hidden_size / peak                       # every position
        t = t + emb + logits
        np.add.at(out, ri, w * np.broadcast_to(t, ri.shape))
    return out
