"""The accuracy benchmark: published rows (data/measured_public.csv + data/measured_serving.csv) -> predictions
-> absolute % errors, per-regime summaries, p10-p90 ranges and their coverage, all leave-one-source-out (LOSO).

  error %   = |predicted - measured| / measured x 100, in the row's own unit
  ratio     = predicted time / measured time (= measured / predicted speed)
  LOSO      every row of source s is predicted by parameters fitted without any row of s. The parameters come from
            the first level of this chain that has >= MIN_FIT_ROWS fit rows outside s:
              engine          the same engine on the same hardware class ('<vendor>-<unit kind>')
              engine-other-hw the same engine on any hardware class (peaks and bandwidth stay the device's own)
              family          the pooled fit of the engine's family (serving engines: vLLM, SGLang, TGI, LMDeploy,
                              TensorRT-LLM; local: llama.cpp, gpt-fast, ExLlamaV2, HF eager; every row keeps its
                              engine's fp16-accumulate setting) on that class
              default         the documented kind defaults (hardware_specs/defaults/efficiency.yaml)
            Levels other than `engine` are extrapolation: their residuals make the (wider) ranges of unmeasured
            engines.
  range     [p10, p90] of the LOSO ratios of rows from *other* sources in the same regime (>= 10 rows from >= 2
            sources; from fewer than OFFSET_SOURCES other sources: their rows' scatter around each offset of the
            interval key's sources, _offset_shape; else the same interval key, else all other sources), each row
            weighted 1 / sqrt(rows of its source) (source_weights), widened
            x EXTRAPOLATION_WIDEN in log space around the median when the row is predicted by extrapolation
  covered   ratio inside that range
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import numpy as np

from ..architecture import load_model
from ..hardware import load_hardware
from ..quantization import weight_format
from ..regimes import kernel_library
from ..roofline import select_unit
from ..runtimes import EXTRAPOLATION_WIDEN  # log-space widening of a range predicted without the class's data
from .data import DATA_PATH, REGIME_NAMES, interval_keys, load_rows, served_under_load
from .decode_kernels import REPEAT_KV_ENGINES, score_bytes_factor
from .fit import WEIGHT_FORMATS_SET, fit_design, own_fraction_formats, predict_with
from .predict import Design, build_design, hardware_class, value_from_time

MIN_FIT_ROWS = 10  # a level is fitted from >= 10 rows: the fit has 5-8 free parameters (fewer rows of one shape leave
#                    some unidentified: 8 LMDeploy request-throughput rows fitted the static runs worse than the family)
MIN_INTERVAL_ROWS = 10
OWN_FIT_LEVELS = ("engine", "engine-other-hw")  # LOSO levels at which a row was predicted by its engine's own fit
# a regime that fewer other sources measured takes their shape around the interval key's offsets: two sources'
# medians are two draws of a new source's offset, not its distribution (with the vLLM perf benchmark's 9 e2e rows
# pooled beside the ROCm 0.9.1 ones, the ROCm 0.6.6 rows' range was 0.84-1.06 x the predicted time where they
# measured 0.92-1.38 x; their shape around the key's offsets: 0.87-1.27 x)
OFFSET_SOURCES = 3
MIN_INTERVAL_SOURCES = 2  # a regime's range from one other source is that source's offset, not a spread
# engine id -> (name, description, family, fp16_accumulate). llama.cpp's CUDA backend runs 16-bit (and dequantized)
# GEMMs through cuBLAS with CUBLAS_COMPUTE_16F (ggml-cuda.cu, ggml_cuda_op_mul_mat_cublas, 2024); the others
# accumulate in fp32.
ENGINES = {
    "llamacpp": ("llama.cpp", "llama.cpp (llama-bench; Metal on Apple GPUs, CUDA on NVIDIA GPUs)", "local", True),
    "gpt-fast": ("gpt-fast", "pytorch-labs gpt-fast (torch.compile, CUDA graphs, batch-1 decode)", "local", False),
    "exllamav2": ("ExLlamaV2", "turboderp ExLlamaV2 (GPTQ/EXL2 kernels, single-stream decode)", "local", False),
    "hf-eager": ("HF transformers (eager)", "Hugging Face transformers generate() in eager PyTorch: no CUDA graphs, "
                 "no fused attention, one kernel launch per op from Python", "local", False),
    "trtllm": ("TensorRT-LLM", "NVIDIA TensorRT-LLM (static batching, fused kernels)", "serving", False),
    "vllm": ("vLLM", "vLLM (CUDA and ROCm builds; paged attention, continuous batching)", "serving", False),
    "sglang": ("SGLang", "SGLang (radix attention, continuous batching; FlashInfer kernels)", "serving", False),
    "tgi": ("TGI", "Hugging Face text-generation-inference (flash/paged attention, continuous batching)", "serving",
            False),
    "lmdeploy": ("LMDeploy TurboMind", "InternLM LMDeploy TurboMind engine (C++/CUDA, persistent batching)",
                 "serving", False),
    # no published row: its classes are the pooled serving family's (production_fits), its ranges the extrapolation
    # range of unmeasured engines (profile_intervals)
    "deepspeed-mii": ("DeepSpeed-MII", "DeepSpeed-MII / FastGen (blocked KV cache, Dynamic SplitFuse; the inference-v2 "
                      "engine launches its ragged kernels one by one)", "serving", False),
}
# engines whose code runs on some vendors' GPUs only (RuntimeProfile.runs_on; every other engine: no limit): a serving
# engine without rows on a datacenter class gets the pooled family's profile there (production_fits) only where it
# runs. TensorRT-LLM builds CUDA engines for NVIDIA GPUs (its README: "on NVIDIA GPUs"); LMDeploy's TurboMind engine
# is CUDA C++ (the profile is TurboMind's, not LMDeploy's PyTorch engine); DeepSpeed-FastGen's inference-v2 ragged
# kernels are CUDA ("high-performance CUDA kernels", DeepSpeed-MII README; its CI runs on NVIDIA V100 and A6000).
ENGINE_VENDORS = {"trtllm": ("nvidia",), "lmdeploy": ("nvidia",), "deepspeed-mii": ("nvidia",)}
# engines whose CUDA tensor-core kernels are warp-level mma.sync ones with no wgmma path (Efficiency.sync_mma): on
# Hopper they reach the unit's mma_sync_share of the listed peak. llama.cpp: its MMQ and flash-attention kernels
# (ggml-org/llama.cpp#24777 adds an opt-in sm_90a wgmma path that falls through to stock MMQ); its H100 rows run at
# the A100 per-SM rate on its 16-bit path too (hardware_specs/h100-pcie.yaml mma_sync_source)
SYNC_MMA_ENGINES = frozenset({"llamacpp"})
# serving engines whose decode steps replay captured CUDA / HIP graphs in the measured versions (one launch per
# step, the kernels back to back): vLLM (enforce_eager off by default), SGLang (cuda_graph_max_bs), TGI (CUDA graphs
# for its batch buckets since 1.4). TensorRT-LLM's gptSessionBenchmark runs graphs only with --enable_cuda_graph
# (off in the perf docs' commands), LMDeploy TurboMind v0.1-v0.2 launches each kernel, and so does DeepSpeed-FastGen
# (DeepSpeed's graph capture is opt-in for its v1 inference engine, `enable_cuda_graph`, PR #1952, and for HybridEngine
# generation, PR #8271; its ragged inference-v2 kernels run without one: issue #1746 open). A serving engine with no
# rows on a class takes the pooled rows of the engines that launch as it does, where they are enough (_chain): the
# per-op and per-step costs are the launch path's.
GRAPH_ENGINES = frozenset({"vllm", "sglang", "tgi"})
# (engine, hardware class) -> tokens per tile over which the engine's quantized GEMM dequantizes each weight once
# (Efficiency.dequant_tile_tokens, roofline.dequant_factor_at): read from the kernels, not fitted. llama.cpp on Metal:
# kernel_mul_mm stages a 64-row weight tile in threadgroup memory per 32-token block (ggml-metal.metal BLOCK_SIZE_N
# 32) for more than 8 tokens, kernel_mul_mv / mul_mv_ext dequantize every weight for each token up to 8
# (hardware.DEQUANT_MATVEC_TOKENS); so the fitted dequant_overhead is the decode share and a prompt pays 1/32 of it.
# Not on CUDA: there the fitted overhead stands for the quantized prompt path itself (MMQ's int8 tiles, or
# dequantize-to-fp16 + cuBLAS) and 1/32 of it left the Spark's MMQ prefill to a 13x decode overhead (README, tried
# and rejected in session 28).
DEQUANT_TILE_TOKENS = {("llamacpp", "apple-gpu"): 32}
# engines whose weight-only quantized GEMMs (GPTQ/AWQ int4, MXFP4 W4A16, W8A16) are Marlin-style mixed-input kernels
# (Efficiency.weight_only_regime: 16-bit MMAs on weights dequantized in registers, so the 16-bit GEMM regime curve
# applies with the format's bytes): vLLM (gptq_marlin / awq_marlin / the Marlin and Triton matmul_ogs MXFP4 MoE
# paths), SGLang (the same vLLM-derived Marlin kernels, sgl-kernel), TGI (Marlin for GPTQ/AWQ since 2.0). Read from
# the kernels, not fitted. Not llama.cpp (int8-dot MMQ / MMVQ), gpt-fast (tinygemm), ExLlamaV2 (its own GEMV),
# TensorRT-LLM (FpA_IntB: aiconfigurator's a100 int4_wo tables keep a compute-like share at M = 1).
MIXED_INPUT_ENGINES = frozenset({"vllm", "sglang", "tgi"})
RUNTIME_UNIT_KIND = "gpu"  # every engine here runs on the GPU (llama.cpp on a Mac: Metal, not the Neural Engine)
BASELINE_DIR = Path(__file__).resolve().parents[2] / "reports" / "baseline_profiles"


def prepare(path=DATA_PATH, serving_path=None):
    """(mapped rows with unit/class columns, unmapped rows, op design of the mapped rows)."""
    rows, unmapped = load_rows(path, serving_path)
    df = _add_units(rows).reset_index(drop=True)
    return df, unmapped, build_design(df)


def _add_units(df):
    units, classes = [], []
    for h, w in zip(df["hardware"], df["weights"]):
        spec = load_hardware(h)
        # the engine's GPU, as `estimate --runtime` picks it (RuntimeProfile.default_unit); a device without one (a
        # CPU-only spec) runs on the unit select_unit picks
        name = next((u.name for u in spec.units if u.kind == RUNTIME_UNIT_KIND), None)
        u = select_unit(spec, weight_format(w), name)
        units.append(u.name)
        classes.append(hardware_class(spec, u))
    df = df.copy()
    df["unit"], df["hw_class"] = units, classes
    df["family"] = [ENGINES[r][2] for r in df["runtime"]]
    df["fp16_acc"] = [ENGINES[r][3] for r in df["runtime"]]
    df["sync_mma"] = [r in SYNC_MMA_ENGINES for r in df["runtime"]]
    df["dq_tile"] = [DEQUANT_TILE_TOKENS.get((r, c), 0) for r, c in zip(df["runtime"], classes)]
    df["wo_regime"] = [r in MIXED_INPUT_ENGINES for r in df["runtime"]]
    moe = {m: load_model(m).moe is not None for m in df["model"].unique()}  # the architecture says, not the name
    df["moe"] = [moe[m] for m in df["model"]]
    return df


# GEMM-library parameters: properties of the kernels on one hardware class (Metal vs cuBLAS vs rocBLAS), not of the
# engine; when an engine's parameters come from another class (fewer than MIN_FIT_ROWS rows of its own class in
# the fit) they fall back to the prior (fit.PRIOR). They fall back too where a local engine is predicted from its
# family (OWN_KERNEL_FAMILIES): each local engine brings its own matmul kernels (llama.cpp's ggml MMQ / mat-vec,
# ExLlamaV2's GPTQ/EXL2 kernels, gpt-fast's torch.compile GEMMs), so one's compute fraction and GEMM half point say
# nothing about another's (llama.cpp's 20-row half point made ExLlamaV2's batch-1 GPTQ decode compute bound on an
# RTX 3090 Ti: 30-64% slow; the prior: 5-23%); the serving engines share cuBLAS / CUTLASS-class GEMMs, and theirs
# transfer (resetting them too: prefill p90 49 -> 57%).
COMPUTE_KEYS = ("compute_fraction", "compute_half_rows")
OWN_KERNEL_FAMILIES = frozenset({"local"})


def _fit(df, d: Design, mask: np.ndarray, fp16_acc: bool, cls: str | None = None, level: str = "engine",
         sync_mma: bool = False, dequant_tile: int = 0, weight_only_regime: bool = False) -> dict:
    """Parameters fitted on the masked rows (each row keeps its engine's fp16-accumulate setting); the result
    carries fp16_acc, the setting of the engine it is for. With cls set and fewer than MIN_FIT_ROWS of the rows from
    that class, the compute parameters are reset to the prior (COMPUTE_KEYS): a handful of rows cannot outweigh
    another class's GEMM library in the pooled fit; so are they for a local engine predicted from its family
    (OWN_KERNEL_FAMILIES: each brings its own matmul kernels). The SM bandwidth cap (fit.fit_design sm_cap) is tried
    only at level `engine`: it belongs to one engine's kernels on one hardware class, so neither another class nor
    the pooled family passes it on."""
    from .fit import PRIOR

    sub = d.subset(mask)
    formats = sorted({f for f in sub.fmt if f in WEIGHT_FORMATS_SET})
    own = level == "engine"  # the SM cap and per-format fractions belong to one engine's build on one class
    # the formats whose kernels the rows run: each row's (its non-expert GEMMs': WeightFormat.kernel_name), and that
    # of its routed experts where they keep a format of their own (OpCost.weight_format)
    experts = {int(r): f for r, f in zip(sub.row[sub.own_wo], sub.fmt[sub.own_wo])}  # row -> its experts' format
    row_fmts = [weight_format(w).kernel_name for w in df.loc[mask, "weights"]] + list(experts.values())
    params, _ = fit_design(sub, formats, df.loc[mask, "fp16_acc"].to_numpy(dtype=np.float64), sm_cap=own,
                           frac_formats=own_fraction_formats(row_fmts) if own else (),
                           sync_mma=df.loc[mask, "sync_mma"].to_numpy(dtype=np.float64),
                           dequant_tile=df.loc[mask, "dq_tile"].to_numpy(dtype=np.float64),
                           weight_only_regime=df.loc[mask, "wo_regime"].to_numpy(dtype=np.float64))
    params["fp16_accumulate"] = bool(fp16_acc)
    params["sync_mma"] = bool(sync_mma)
    params["dequant_tile_tokens"] = int(dequant_tile)
    params["weight_only_regime"] = bool(weight_only_regime)
    if not weight_only_regime:  # the share belongs to mixed-input kernels this engine does not run
        params["weight_only_bandwidth_share"] = 1.0
    own_kernels = level == "family" and set(df.loc[mask, "family"]) <= OWN_KERNEL_FAMILIES
    if own_kernels or (cls is not None and (df.loc[mask, "hw_class"] == cls).sum() < MIN_FIT_ROWS):
        params.update({k: PRIOR[k] for k in COMPUTE_KEYS}, format_compute_fraction={})
    return params


def _eff_dict(eff) -> dict:
    keys = ("bandwidth_fraction", "compute_fraction", "compute_half_rows", "kernel_overhead_us", "step_overhead_ms",
            "matmul_tflops_per_watt", "sm_bandwidth_gbs")
    v = {k: float(getattr(eff, k)) for k in keys}
    v["format_compute_fraction"] = dict(eff.format_compute_fraction or {})
    v["dequant_overhead"] = dict(eff.dequant_overhead or {})
    v["fp16_accumulate"] = bool(eff.fp16_accumulate)
    v["sync_mma"] = bool(eff.sync_mma)
    v["dequant_tile_tokens"] = int(eff.dequant_tile_tokens)
    v["weight_only_regime"] = bool(eff.weight_only_regime)
    v["weight_only_bandwidth_share"] = float(eff.weight_only_bandwidth_share)
    v["kv_reread_share"] = float(eff.kv_reread_share)
    return v


def _default_times(df, d: Design, mask: np.ndarray) -> np.ndarray:
    """Times of the masked rows under the kind-default efficiencies (per row's device and unit)."""
    from ..efficiency import resolve_efficiency
    from .predict import params_for_rows, predict_time_s

    sub = d.subset(mask)
    effs = []
    for r in df[mask].to_dict("records"):
        spec = load_hardware(r["hardware"])
        effs.append(resolve_efficiency(spec, spec.unit(r["unit"]), "default"))
    return predict_time_s(sub, params_for_rows(sub, effs))


def _chain(df, fit_ok: np.ndarray, rt: str, cls: str):
    """Candidate fit masks for engine rt on class cls, best first (module docstring)."""
    fam = ENGINES[rt][2]
    is_rt = (df["runtime"] == rt).to_numpy()
    is_cls = (df["hw_class"] == cls).to_numpy()
    is_fam = (df["family"] == fam).to_numpy()
    chain = [("engine", fit_ok & is_rt & is_cls), ("engine-other-hw", fit_ok & is_rt)]
    if fam == "serving":  # first the serving engines that launch as this one does (GRAPH_ENGINES)
        same_launch = df["runtime"].isin(GRAPH_ENGINES).to_numpy() == (rt in GRAPH_ENGINES)
        chain.append(("family", fit_ok & is_fam & is_cls & same_launch))
    return chain + [("family", fit_ok & is_fam & is_cls)]


def loso_predict(df, d: Design, sources=None):
    """(predicted times, level per row, parameters used per (source, engine, class)) under leave-one-source-out;
    `sources` limits the prediction to those sources (other rows stay 0)."""
    n = len(df)
    t = np.zeros(n)
    level = np.empty(n, dtype=object)
    fit_ok = (df["anomalous"] == "").to_numpy()
    used = {}
    for src in sorted(sources or df["source"].unique()):
        in_s = (df["source"] == src).to_numpy()
        for (rt, cls), g in df[in_s].groupby(["runtime", "hw_class"]):
            rows = np.zeros(n, bool)
            rows[g.index] = True
            for lvl, m in _chain(df, fit_ok & ~in_s, rt, cls):
                if m.sum() >= MIN_FIT_ROWS:
                    params = _fit(df, d, m, ENGINES[rt][3], cls, lvl, rt in SYNC_MMA_ENGINES,
                                  DEQUANT_TILE_TOKENS.get((rt, cls), 0), rt in MIXED_INPUT_ENGINES)
                    t[rows] = predict_with(d.subset(rows), params)
                    level[rows] = lvl
                    used[(src, rt, cls)] = (lvl, params)
                    break
            else:
                t[rows] = _default_times(df, d, rows)
                level[rows] = "default"
                used[(src, rt, cls)] = ("default", None)
    return t, level, used


def source_weights(sources) -> np.ndarray:
    """Weight of each residual in a range: 1 / sqrt(rows of its source). Counting rows lets one 139-row source
    dictate every range; counting sources lets a 3-row source weigh as much as it. The square root sits between:
    a source's say grows with its rows, but less than in proportion (its rows share one setup, one build, one
    transcription: they are not independent draws)."""
    _, inv, counts = np.unique(np.asarray(sources, dtype=object).astype(str), return_inverse=True, return_counts=True)
    return 1.0 / np.sqrt(counts[inv])


def weighted_quantiles(x: np.ndarray, w: np.ndarray, qs) -> np.ndarray:
    """Quantiles of x under weights w: the weighted empirical CDF at the midpoints of each value's weight,
    interpolated linearly (with equal weights: numpy's 'hazen' quantiles)."""
    o = np.argsort(x, kind="stable")
    x, w = np.asarray(x, dtype=np.float64)[o], np.asarray(w, dtype=np.float64)[o]
    c = (np.cumsum(w) - 0.5 * w) / w.sum()
    return np.interp(qs, c, x)


def _quantiles(x: np.ndarray, sources) -> tuple[float, float]:
    q10, q90 = weighted_quantiles(x, source_weights(sources), [0.10, 0.90])
    return float(np.exp(q10)), float(np.exp(q90))


def _offset_shape(x: np.ndarray, sources, key_x: np.ndarray, key_src) -> tuple[np.ndarray, np.ndarray]:
    """(values, weights) of a new source's log-ratio in a regime that fewer than OFFSET_SOURCES other sources
    measured: each of those rows' deviation from its own source's median (the sources' shape) shifted by each offset
    (the median of its rows) that the sources of the interval key show, every combination. A key source weighs
    sqrt(its rows) in all, as in source_weights; within an offset, a shape row weighs 1 / sqrt(rows of its source).
    With one regime source this is that source's spread around each key offset."""
    sources, key_src = (np.asarray(a, dtype=object).astype(str) for a in (sources, key_src))
    med = {s: np.median(x[sources == s]) for s in set(sources)}
    centred = x - np.array([med[s] for s in sources])
    names = sorted(set(key_src))
    offsets = np.array([np.median(key_x[key_src == s]) for s in names])
    weights = np.sqrt([np.sum(key_src == s) for s in names])
    return np.add.outer(offsets, centred).ravel(), np.outer(weights, source_weights(sources)).ravel()


def loso_intervals(df, log_ratio: np.ndarray, level: np.ndarray):
    """(p10, p90) of predicted/measured time per row from the LOSO log-ratios of rows of *other* sources in the
    same regime; where those are >= MIN_INTERVAL_ROWS rows of fewer than OFFSET_SOURCES other sources (one or two
    sources' residuals are their offsets, not a spread), their shape around each offset the interval key's other
    sources show (_offset_shape: a new source's error is its own offset plus the scatter of its rows); where they
    are fewer rows, in the same interval key (data.interval_keys: e2e, batched decode and whole-request rates are
    all 'throughput'), else every other source; each weighted by source_weights (1 / sqrt(rows of its source)): a
    new source's error is one source's systematic offset plus its own spread, so the big sources must not drown the
    others. Widened around the median by EXTRAPOLATION_WIDEN for a row predicted by extrapolation (level other than
    `engine`)."""
    n = len(df)
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    src = df["source"].to_numpy()
    reg = df["regime"].to_numpy()
    key = interval_keys(df)
    ok = (df["anomalous"] == "").to_numpy()
    served = served_under_load(df)
    for i in range(n):
        other = ok & (src != src[i])
        regime, keyed = other & (reg == reg[i]), other & (key == key[i])
        if (regime.sum() >= MIN_INTERVAL_ROWS and len(set(src[regime])) < OFFSET_SOURCES
                and len(set(src[keyed])) >= OFFSET_SOURCES):  # few other sources: their shape, the key's offsets
            x, w = _offset_shape(log_ratio[regime], src[regime], log_ratio[keyed], src[keyed])
        else:
            for m in (regime, keyed, other):  # the regime, its interval key, everything (the last one regardless)
                if m.sum() >= MIN_INTERVAL_ROWS and len(set(src[m])) >= MIN_INTERVAL_SOURCES:
                    break
            x, w = log_ratio[m], source_weights(src[m])
        q10, q50, q90 = weighted_quantiles(x, w, [0.10, 0.50, 0.90])
        wid = 1.0 if level[i] == "engine" else EXTRAPOLATION_WIDEN
        lo[i], hi[i] = np.exp(q50 + (q10 - q50) * wid), np.exp(q50 + (q90 - q50) * wid)
        if served[i]:  # a run through a server under load: widened to the served rows' range (regime, else key)
            m = next((m for m in (regime & served, keyed & served)
                      if m.sum() >= MIN_INTERVAL_ROWS and len(set(src[m])) >= MIN_INTERVAL_SOURCES), None)
            if m is not None:
                q10, q50, q90 = weighted_quantiles(log_ratio[m], source_weights(src[m]), [0.10, 0.50, 0.90])
                lo[i] = min(lo[i], np.exp(q50 + (q10 - q50) * wid))
                hi[i] = max(hi[i], np.exp(q50 + (q90 - q50) * wid))
    return lo, hi


# ---------------------------------------------------------------- production profiles (data with provenance)

EFF_KEYS = ("bandwidth_fraction", "compute_fraction", "compute_half_rows", "kernel_overhead_us", "step_overhead_ms",
            "matmul_tflops_per_watt", "fp16_accumulate", "sync_mma", "dequant_overhead", "sm_bandwidth_gbs",
            "format_compute_fraction", "dequant_tile_tokens", "weight_only_regime", "weight_only_bandwidth_share",
            "kv_reread_share")

# HF transformers eager has no published row in the data; its parameters are physical estimates (documented):
# an eager HF Llama decoder layer launches ~55 kernels per step (fp32 RMSNorm decomposed into pow/mean/rsqrt/mul,
# rotary embedding via slicing and cat, unfused attention, SiLU-gated MLP), each costing ~20 us of Python + ATen
# dispatch with no CUDA graphs: ~1.1 ms per layer, i.e. ~160 us per planner op (7 ops per layer). Its cuBLAS and
# elementwise kernels reach ~75% of bandwidth and large GEMMs ~60% of the tensor peak; ~2 ms per step for logits
# processing, sampling and the generate() loop. Check: Llama-7B fp16 on an A100 at batch 1 -> ~50 ms per step, the
# figure of the article quoted in issue 11 (tests/accuracy/test_accuracy_targets.py). Its DynamicCache appends each
# step's K/V with torch.cat (transformers cache_utils.DynamicCache.update): the whole cache is read and written again
# every decode step, which is what makes eager decode slow at large batch x context (kv_cache_copy).
HF_EAGER = {"bandwidth_fraction": 0.75, "compute_fraction": 0.6, "compute_half_rows": 16.0,
            "kernel_overhead_us": 160.0, "step_overhead_ms": 2.0, "matmul_tflops_per_watt": 0.0,
            "fp16_accumulate": False, "sync_mma": False, "dequant_overhead": {}, "kv_cache_copy": True,
            "weight_only_regime": False, "weight_only_bandwidth_share": 1.0,  # eager PyTorch dequantizes GPTQ/AWQ through its own (or the exllama) kernels
            "sm_bandwidth_gbs": 0.0,
            "format_compute_fraction": {},
            "kv_read_per_query_head": "hf-eager" in REPEAT_KV_ENGINES,  # transformers' repeat_kv (decode_kernels.py)
            "score_bytes_factor": score_bytes_factor("hf-eager", None)}  # eager attention's fp32 softmax (the same)
HF_EAGER_WIDEN = 1.5  # log-space widening of the extrapolated range for an engine with no measurement at all


def _round(v, n=4):
    if isinstance(v, dict):
        return {k: _round(x, n) for k, x in v.items()}
    if isinstance(v, (bool, int)):
        return v
    return float(f"{v:.{n}g}")


def production_fits(df, d: Design) -> dict:
    """{(engine, class): (level, params, rows used)} fitted on every fit row (no hold-out): what the planner uses."""
    fit_ok = (df["anomalous"] == "").to_numpy()
    out = {}
    classes = sorted(df["hw_class"].unique())
    for rt in ENGINES:
        if rt == "hf-eager":
            continue
        for cls in classes:
            has_rows = ((df["runtime"] == rt) & (df["hw_class"] == cls)).any()
            # serving engines get a profile on every datacenter GPU class (the pooled family where unmeasured)
            if not has_rows and not (ENGINES[rt][2] == "serving" and cls in ("nvidia-gpu", "amd-gpu")):
                continue
            if rt in ENGINE_VENDORS and cls.rsplit("-", 1)[0] not in ENGINE_VENDORS[rt]:
                continue
            for lvl, m in _chain(df, fit_ok, rt, cls):
                if m.sum() >= MIN_FIT_ROWS:
                    out[(rt, cls)] = (lvl, _fit(df, d, m, ENGINES[rt][3], cls, lvl, rt in SYNC_MMA_ENGINES,
                                                DEQUANT_TILE_TOKENS.get((rt, cls), 0), rt in MIXED_INPUT_ENGINES), m)
                    break
    _share_mixed_input_kernels(out, d)
    return out


def _share_mixed_input_kernels(fits: dict, d: Design) -> None:
    """The weight_only_bandwidth_share of a mixed-input engine whose fit rows run no such GEMM (SGLang, TGI: no
    weight-only row) is that of the mixed-input engines that measured it on the same class, pooled by their rows
    (the same Marlin / Triton matmul_ogs kernels: SGLang and TGI import vLLM's), not the fit's prior centre; the
    prior stays where no engine on the class measured it. Production profiles only: a leave-one-source-out row runs
    such a GEMM only where its own engine's fit has rows of it."""
    def mixed_rows(m):
        return int(np.unique(d.row[d.mixed & m[d.row]]).size)

    for cls in {c for _, c in fits}:
        measured = [(mixed_rows(m), p["weight_only_bandwidth_share"]) for (rt, c), (_, p, m) in fits.items()
                    if c == cls and rt in MIXED_INPUT_ENGINES and mixed_rows(m) > 0]
        if not measured:
            continue
        n, share = np.array([x[0] for x in measured], dtype=float), np.array([x[1] for x in measured])
        pooled = float(np.exp(np.sum(n * np.log(share)) / n.sum()))  # geometric mean weighted by rows
        for (rt, c), (_, p, m) in fits.items():
            if c == cls and rt in MIXED_INPUT_ENGINES and mixed_rows(m) == 0:
                p["weight_only_bandwidth_share"] = pooled


def _moe(frame) -> np.ndarray:
    """Per row: a mixture-of-experts model (the `moe` column _add_units writes; False where a frame has none)."""
    return frame["moe"].to_numpy(dtype=bool) if "moe" in frame else np.zeros(len(frame), dtype=bool)


def _spread(pool) -> bool:
    """Whether LOSO residuals show a spread: >= MIN_INTERVAL_ROWS rows of >= MIN_INTERVAL_SOURCES sources."""
    return len(pool) >= MIN_INTERVAL_ROWS and pool["source"].nunique() >= MIN_INTERVAL_SOURCES


def profile_intervals(res, rt: str, cls: str | None = None) -> tuple[dict, str]:
    """{interval key: (p10, p90, n)} of measured/predicted speed for engine rt from the LOSO residuals: the engine's
    own rows on hardware class cls where a key has >= MIN_INTERVAL_ROWS of them (vLLM on NVIDIA is not vLLM-ROCm
    0.6 on an MI300X), else the engine's own rows on every class where they are >= MIN_INTERVAL_ROWS, else all rows
    predicted by extrapolation (levels other than `engine`) in that key; an engine with no row at all gets the
    extrapolated range widened by HF_EAGER_WIDEN.
    "Own rows" are those its own fit predicted from its other sources (levels in OWN_FIT_LEVELS): a range states
    the error of the profile's kind of prediction. An engine with fewer than MIN_INTERVAL_ROWS of those in a key
    (one source, or a second too small to fit on: its LOSO rows came from its family) errs on a new source as an
    engine's own fit does on a held-out source of that engine, so its range is that of every engine's
    `engine`-level rows, widened by EXTRAPOLATION_WIDEN for resting on one setup (its family-level residuals had
    put ExLlamaV2's decode range at 1.07-1.51 x a headline fitted to those very rows, excluding its own estimate).
    A class (cls given) with too few of its own rows in a key is extrapolated there: its error is either the
    engine's error on its other classes or that of any prediction made without the class's data, so its range is
    [min p10, max p90] of the two pools. (vLLM on NVIDIA has no batch-1 decode row: its decode range was the
    vLLM-ROCm 0.6.3 MI300X rows' 0.18-0.79 alone, a range that excluded its own estimate.)
    A pool must hold rows of at least MIN_INTERVAL_SOURCES sources (_spread): one source's LOSO residuals are that
    source's offset from the others, which the profile fitted on it has absorbed, not a spread around the profile
    (vLLM-ROCm's AMD prefill range was the 20 dstack 0.6.3 rows' 0.20-0.65 alone: an fp16 MI300X TTFT of 8.7 s came
    with a range of 13.5-43.6 s); such a class is extrapolated like a thin one. A pool of fewer than
    OFFSET_SOURCES sources (two) shows two offsets, not their spread: its range is its rows' shape around each
    offset (median per source) of the engine's own held-out sources in that key on every class, or of every
    engine's where the engine has fewer than OFFSET_SOURCES there (_offset_shape, as loso_intervals). With the
    2025-07 vLLM-ROCm dev-docker source held out, its AMD range from the 2025-01 one and dstack's 0.6.3 (both
    slower than the fit) had been 0.38-1.00: 22% of its rows, which ran 1.09x faster, inside.
    '<key>_multi_gpu' (runtimes.MULTI_GPU_SUFFIX): the same from the rows of tensor-parallel groups, kept only
    where they are >= MIN_INTERVAL_ROWS, as [min p10, max p90] of the two (as loso_intervals). '<key>_moe'
    (runtimes.MOE_SUFFIX): the same from the pool's mixture-of-experts rows where they spread (_spread), else from
    every engine's own-fit MoE rows in the key: the issue's dense-vs-MoE ranges from cross-validated residuals
    (session 36: the MoE prefill ranges held 54% of held-out rows with the dense key's spread). '<key>_served'
    (runtimes.SERVED_SUFFIX): [min p10, max p90] of the key's and those of the rows measured through a server under
    load (data.served_under_load: bursts, waves, steady queues) of the pool and of every engine in the key, each
    where they spread: such a figure also carries the engine's admission and interleaving, which a fixed-shape step
    does not, and a new serving setup errs as the other served sources do (session 44: vLLM's NVIDIA throughput
    range 0.82-1.18, from one served source, held 30% of GPUStack's unseen bursts)."""
    from ..runtimes import MOE_SUFFIX, MULTI_GPU_SUFFIX, SERVED_SUFFIX

    ok = res[res["anomalous"] == ""]
    keys = interval_keys(ok)
    out, srcs, thin = {}, set(), False
    for key in ("decode", "prefill", "throughput"):
        mine = ok[(ok["runtime"] == rt) & (keys == key)]
        own = mine[mine["level"].isin(OWN_FIT_LEVELS)]  # the rows its own fit predicted from its other sources
        own_cls = own[own["hw_class"] == cls] if cls is not None and "hw_class" in own else own.iloc[:0]
        extrapolated = ok[(ok["level"] != "engine") & (keys == key)]
        engine_fits = ok[(ok["level"] == "engine") & (keys == key)]  # every engine's own fit on a held-out source
        also = None  # a second pool whose range the first's is widened to (a thin class)
        widen = 1.0
        if _spread(own_cls):
            pool, srcs = own_cls, srcs | {"class"}
        elif _spread(own):
            pool, srcs = own, srcs | {"own"}
            if cls is not None and len(extrapolated) >= 3:
                also, srcs, thin = extrapolated, srcs | {"extrapolated"}, True
        elif len(mine) >= MIN_INTERVAL_ROWS and len(engine_fits) >= 3:  # one source (docstring)
            pool, widen, srcs = engine_fits, EXTRAPOLATION_WIDEN, srcs | {"new"}
            if cls is not None and (mine["hw_class"] == cls).sum() < MIN_INTERVAL_ROWS and len(extrapolated) >= 3:
                also, srcs, thin = extrapolated, srcs | {"extrapolated"}, True
        else:
            pool = extrapolated
            if len(pool) < 3:
                continue
            srcs = srcs | {"extrapolated"}
        x = np.log(pool["ratio"].to_numpy())  # ratio = predicted / measured time = measured / predicted speed
        if not (res["runtime"] == rt).any():
            widen = HF_EAGER_WIDEN
        if widen != 1.0:
            x = (x - np.median(x)) * widen + np.median(x)
        offsets = own if own["source"].nunique() >= OFFSET_SOURCES else engine_fits
        few = pool["source"].nunique() < OFFSET_SOURCES <= offsets["source"].nunique()
        if few and (pool is own_cls or pool is own):
            xs, ws = _offset_shape(x, pool["source"].to_numpy(), np.log(offsets["ratio"].to_numpy()),
                                   offsets["source"].to_numpy())  # two sources: their shape, others' offsets
            lo, hi = (float(np.exp(q)) for q in weighted_quantiles(xs, ws, [0.10, 0.90]))
            srcs = srcs | {"offsets"}
        else:
            lo, hi = _quantiles(x, pool["source"].to_numpy())
        if also is not None:
            lo2, hi2 = _quantiles(np.log(also["ratio"].to_numpy()), also["source"].to_numpy())
            lo, hi = min(lo, lo2), max(hi, hi2)
        out[key] = (lo, hi, len(set(pool.index) | set(also.index)) if also is not None else int(len(pool)))
        multi = pool[pool["tp"] > 1]
        if len(multi) >= MIN_INTERVAL_ROWS:
            lo, hi = _quantiles(np.log(multi["ratio"].to_numpy()), multi["source"].to_numpy())
            out[key + MULTI_GPU_SUFFIX] = (min(lo, out[key][0]), max(hi, out[key][1]), int(len(multi)))
        # mixture-of-experts models: the pool's MoE rows where they spread over sources, else every engine's own
        # fits' MoE rows in the key (a MoE prediction errs as MoE predictions do: routing, grouped GEMMs)
        moe = next((p for p in (pool[_moe(pool)], engine_fits[_moe(engine_fits)]) if _spread(p)), None)
        if moe is not None:
            lo, hi = _quantiles(np.log(moe["ratio"].to_numpy()), moe["source"].to_numpy())
            out[key + MOE_SUFFIX] = (min(lo, out[key][0]), max(hi, out[key][1]), int(len(moe)))
        in_key = ok[keys == key]
        served = [p for p in (pool[served_under_load(pool)], in_key[served_under_load(in_key)]) if _spread(p)]
        if served:
            qs = [_quantiles(np.log(p["ratio"].to_numpy()), p["source"].to_numpy()) for p in served]
            out[key + SERVED_SUFFIX] = (min([out[key][0]] + [q[0] for q in qs]),
                                        max([out[key][1]] + [q[1] for q in qs]), int(max(len(p) for p in served)))
    text = ("leave-one-source-out residuals: " + " and ".join(
        {"class": f"the engine's own rows on {cls}", "own": "the engine's own rows (every hardware class)",
         "extrapolated": "rows predicted without their engine's data (extrapolation range)",
         "offsets": ("where they are of two sources, those rows' shape around the offsets of the engine's (or, "
                     "fewer than three, every engine's) held-out sources"),
         "new": (f"every engine's rows predicted by its own fit from its other sources, widened x{EXTRAPOLATION_WIDEN} "
                 "(this engine's own rows were predicted from its family: one source, or too few rows to fit on "
                 "without it)")}[k] for k in ("class", "own", "new", "extrapolated", "offsets") if k in srcs))
    if thin:
        text += (f"; where {cls} has fewer than {MIN_INTERVAL_ROWS} of the engine's rows in a regime, the wider of "
                 "the engine's rows elsewhere and the extrapolation range")
    if not (res["runtime"] == rt).any():
        text += f"; no measurement of this engine: widened x{HF_EAGER_WIDEN} in log space"
    return out, text


def profile_range_loso(res) -> tuple[np.ndarray, np.ndarray]:
    """(p10, p90) of predicted / measured time per row: the range `planner estimate` would show for it (its
    engine's profile_intervals on its hardware class: the row's interval key (runtimes.interval_key, as
    runtimes.interval_regime picks it), the key's '_multi_gpu' one for a tensor-parallel row, its '_served' one for a
    run through a server under load (as the serving commands show it); without the MoE / architecture-trait
    widening), drawn from the LOSO residuals of every *other* source: whether the
    ranges users see hold on a source they were not drawn from. NaN for an anomalous row or where no range exists."""
    from ..runtimes import MOE_SUFFIX, MULTI_GPU_SUFFIX, SERVED_SUFFIX, interval_key

    n = len(res)
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    key = interval_keys(res)
    ok = (res["anomalous"] == "").to_numpy()
    pos = {ix: i for i, ix in enumerate(res.index)}
    for src in res.loc[ok, "source"].unique():
        rest = res[res["source"] != src]
        rows = res[ok & (res["source"] == src).to_numpy()]
        for (rt, cls), g in rows.groupby(["runtime", "hw_class"]):
            ivs, _ = profile_intervals(rest, rt, cls)
            for ix, tp, moe, served in zip(g.index, g["tp"], _moe(g), served_under_load(g)):
                k = interval_key(ivs, key[pos[ix]])
                if k is None:
                    continue
                # as runtimes.interval_regime: the MoE key for a MoE model, widened to the multi-GPU key in a group
                # and to the served key for a run through a server under load
                got = [ivs[k + MOE_SUFFIX] if moe and k + MOE_SUFFIX in ivs else ivs[k]]
                if tp > 1 and k + MULTI_GPU_SUFFIX in ivs:
                    got.append(ivs[k + MULTI_GPU_SUFFIX])
                if served and k + SERVED_SUFFIX in ivs:
                    got.append(ivs[k + SERVED_SUFFIX])
                lo[pos[ix]], hi[pos[ix]] = min(x[0] for x in got), max(x[1] for x in got)
    return lo, hi


def build_profiles(df, d: Design, res, today: str | None = None) -> dict:
    """{engine id: RuntimeProfile} from production_fits + LOSO intervals (res: evaluate's result)."""
    from ..runtimes import RuntimeProfile

    today = today or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    fits = production_fits(df, d)
    out = {}
    for rt, (name, desc, fam, _acc) in ENGINES.items():
        ivs, iv_src = profile_intervals(res, rt)  # engine-wide (HF eager; a class below may have its own)
        classes = []
        if rt == "hf-eager":
            for vendor in ("nvidia", "amd"):
                eff = dict(HF_EAGER, source="physical estimate (no published measurement; planner/accuracy/"
                                            "benchmark.py HF_EAGER)")
                classes.append({"vendor": vendor, "unit_kind": "gpu", "efficiency": eff, "intervals": {
                    k: {"p10": _round(v[0]), "p90": _round(v[1]), "rows": v[2]} for k, v in ivs.items()},
                    "fit": {"rows_fit": 0, "devices_fit": [], "devices_held_out": [], "interval_source": iv_src,
                            "level": "default"}})
        for (r, cls), (lvl, params, m) in sorted(fits.items()):
            if r != rt:
                continue
            vendor, kind = cls.rsplit("-", 1)
            eff = {k: _round(params[k]) for k in EFF_KEYS}
            if rt in REPEAT_KV_ENGINES:  # the engine's model code repeats K/V per query head (decode_kernels.py)
                eff["kv_read_per_query_head"] = True
            if score_bytes_factor(rt, vendor) != 1.0:  # its materialized score matrix (decode_kernels.py)
                eff["score_bytes_factor"] = score_bytes_factor(rt, vendor)
            if kernel_library(rt):  # its own measured GEMM kernels (regimes.GemmRegime.libraries)
                eff["kernel_library"] = kernel_library(rt)
            devices = sorted(df.loc[m, "hardware"].unique())
            n_own = int(((df["runtime"] == rt) & (df["hw_class"] == cls)).sum())
            own = "no row" if n_own == 0 else f"{n_own} row" + ("s" if n_own > 1 else "")
            if not any(load_hardware(h).power for h in devices):
                eff["matmul_tflops_per_watt"] = 0.0
            what = {"engine": "this engine's rows", "engine-other-hw": "this engine's rows on other hardware classes",
                    "family": f"the pooled rows of the {fam} engines {', '.join(sorted(set(df.loc[m, 'runtime'])))}: "
                              f"this engine has {own} on this class, fewer than {MIN_FIT_ROWS}"}[lvl]
            eff["source"] = f"fitted to {int(m.sum())} published rows ({what}), {today}"
            c_ivs, c_src = profile_intervals(res, rt, cls)
            classes.append({
                "vendor": vendor, "unit_kind": kind, "efficiency": eff,
                "intervals": {k: {"p10": _round(v[0]), "p90": _round(v[1]), "rows": v[2]} for k, v in c_ivs.items()},
                "fit": {"rows_fit": int(m.sum()), "devices_fit": devices, "devices_held_out": [],
                        "interval_source": c_src, "level": lvl,
                        "sources": sorted(df.loc[m, "source"].unique()),
                        "moe_rows": int(df.loc[m, "moe"].sum()), "multi_gpu_rows": int((df.loc[m, "tp"] > 1).sum()),
                        "traits": sorted({t for mid in df.loc[m, "model"].unique() for t in load_model(mid).traits})},
            })
        if not classes:
            continue
        sources = sorted(df.loc[df["runtime"] == rt, "source"].unique())
        out[rt] = RuntimeProfile.model_validate({
            "id": rt, "name": name, "description": desc, "unit_kind": RUNTIME_UNIT_KIND, "classes": classes,
            "runs_on": list(ENGINE_VENDORS.get(rt, ())),
            "provenance": {
                "data": "data/measured_public.csv and data/measured_serving.csv (sources and caveats in the .md files)",
                "sources": sources, "fitted": today, "command": "planner accuracy --fit",
                "split": "parameters fitted on every non-anomalous row of the level named per class; ranges from "
                         "leave-one-source-out residuals (planner/accuracy/benchmark.py)",
                "model": "per-op roofline: max(flops / min(peak x compute_fraction, tdp_w x matmul_tflops_per_watt) "
                         "x (R + compute_half_rows) / R x (1 + dequant_overhead[format] x ceil(R / "
                         "dequant_tile_tokens) / R where a tile is set), bytes / (bandwidth x "
                         "bandwidth_fraction)) + kernel_overhead_us per op + step_overhead_ms per step (+ TP "
                         "all-reduces), a decode attention's K/V passes after the first at kv_reread_share of a "
                         "pass each; fp16_accumulate is set from the engine's code, not fitted",
            }})
    return out


def write_profiles(profiles: dict) -> list[str]:
    from ..io import atomic_write_yaml
    from ..runtimes import RUNTIMES_DIR, _load_path

    paths = []
    for rt, prof in profiles.items():
        path = RUNTIMES_DIR / f"{rt}.yaml"
        atomic_write_yaml(path, prof.model_dump(mode="json", exclude_defaults=False))
        paths.append(str(path))
    _load_path.cache_clear()
    return paths


def committed_profiles(df=None) -> dict:
    from ..runtimes import list_runtime_ids, load_runtime

    return {rt: load_runtime(rt) for rt in list_runtime_ids()}


def _profile_times(df, d: Design, profiles: dict, mask=None) -> np.ndarray:
    """Times of every row under a set of profiles (rows whose engine or class has none: kind defaults)."""
    from .predict import params_for_rows, predict_time_s
    from ..efficiency import resolve_efficiency

    effs = []
    for r in df.to_dict("records"):
        spec = load_hardware(r["hardware"])
        unit = spec.unit(r["unit"])
        prof = profiles.get(r["runtime"])
        cls = prof.fitted_class(spec, unit) if prof else None
        effs.append(cls.efficiency if cls else resolve_efficiency(spec, unit, "default"))
    return predict_time_s(d, params_for_rows(d, effs))


def baseline_profiles() -> dict:
    """Today's model before this benchmark (main branch): its llama.cpp / TensorRT-LLM / gpt-fast profiles, kind
    defaults for every other engine (reports/baseline_profiles/, copied from the main branch)."""
    from ..runtimes import _load_path

    return {p.stem: _load_path(str(p)) for p in sorted(BASELINE_DIR.glob("*.yaml"))}


# ---------------------------------------------------------------- evaluation


def evaluate(df, d: Design, profiles: dict | None = None):
    """Per-row predictions and errors: LOSO (the headline), the fitted profiles in-sample, the datasheet roofline,
    today's model (baseline) and the kind defaults."""
    from ..hardware import DATASHEET_EFFICIENCY
    from .predict import params_for_rows, predict_time_s

    t_loso, level, _ = loso_predict(df, d)
    res = df.copy()
    methods = {"loso": t_loso,
               "datasheet": predict_time_s(d, params_for_rows(d, [DATASHEET_EFFICIENCY] * len(df))),
               "today": _profile_times(df, d, baseline_profiles()),
               "default": _profile_times(df, d, {})}
    if profiles:
        methods["fitted"] = _profile_times(df, d, profiles)
    for name, t in methods.items():
        pred = value_from_time(d, t)
        res[f"pred_{name}"] = pred
        res[f"err_{name}_pct"] = np.abs(pred - res["measured"]) / res["measured"] * 100
    res["level"] = level
    ratio = t_loso / d.measured_time_s  # predicted / measured time = measured / predicted speed
    res["ratio"] = ratio
    lo, hi = loso_intervals(df, np.log(ratio), level)
    res["ratio_p10"], res["ratio_p90"] = lo, hi
    pr = res["pred_loso"].to_numpy()
    is_time = d.work <= 0
    # interval in the row's unit: a time t/measured in [lo, hi] <=> measured time in [t/hi, t/lo]
    res["low"] = np.where(is_time, pr / hi, pr * lo)
    res["high"] = np.where(is_time, pr / lo, pr * hi)
    res["covered"] = (ratio >= lo) & (ratio <= hi)
    plo, phi = profile_range_loso(res)
    res["profile_low"] = np.where(is_time, pr / phi, pr * plo)
    res["profile_high"] = np.where(is_time, pr / plo, pr * phi)
    res["profile_covered"] = (ratio >= plo) & (ratio <= phi)  # False where NaN (an anomalous row)
    res["ratio_default"] = methods["default"] / d.measured_time_s
    res["pred_runtime"], res["err_runtime_pct"] = res["pred_loso"], res["err_loso_pct"]
    res["split"] = "LOSO (" + res["level"] + ")"
    return res


def default_intervals(res) -> dict:
    """p10/p90 of measured / predicted speed of the kind-default efficiencies (no runtime named), per interval key,
    over every non-anomalous row: the range an estimate without `--runtime` carries; '<key>_served' the same over
    the key's runs through a server under load where they spread over sources (_spread), each row weighted
    1 / sqrt(rows of its source) as in the profiles' ranges, as [min p10, max p90] with the key's (the serving
    commands')."""
    from ..runtimes import SERVED_SUFFIX

    ok = res[res["anomalous"] == ""]
    out, keys = {}, interval_keys(ok)
    for key in ("decode", "prefill", "throughput"):
        g = ok[keys == key]
        if len(g):
            x = g["ratio_default"].to_numpy()
            out[key] = {"p10": _round(float(np.quantile(x, 0.10))), "p90": _round(float(np.quantile(x, 0.90))),
                        "rows": int(len(x))}
            sv = g[served_under_load(g)]  # runs of a server under load, each source weighted as in the profiles'
            if _spread(sv):
                lo, hi = _quantiles(np.log(sv["ratio_default"].to_numpy()), sv["source"].to_numpy())
                out[key + SERVED_SUFFIX] = {"p10": min(out[key]["p10"], _round(lo)),
                                            "p90": max(out[key]["p90"], _round(hi)), "rows": int(len(sv))}
    return out


def default_interval_coverage(res, intervals: dict) -> float:
    """Share of rows whose kind-default ratio lies in the default interval (in-sample: the quantiles come from
    the same rows, so about 80% by construction)."""
    ok = res[res["anomalous"] == ""]
    key = interval_keys(ok)
    lo = np.array([intervals.get(r, {}).get("p10", np.nan) for r in key], dtype=float)
    hi = np.array([intervals.get(r, {}).get("p90", np.nan) for r in key], dtype=float)
    ratio = ok["ratio_default"].to_numpy()
    return float(np.mean((ratio >= lo) & (ratio <= hi)) * 100)


def write_default_intervals(intervals: dict, today: str | None = None) -> str:
    from ..io import atomic_write_yaml
    from ..runtimes import DEFAULT_INTERVALS_PATH, _default_intervals

    today = today or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    atomic_write_yaml(DEFAULT_INTERVALS_PATH, {
        "description": "p10-p90 range of measured / predicted speed for estimates that name no runtime (the kind-"
                       "default efficiencies of hardware_specs/defaults/efficiency.yaml), per regime",
        "intervals": intervals,
        "provenance": {"data": "data/measured_public.csv, data/measured_serving.csv", "fitted": today,
                       "command": "planner accuracy --fit", "rows": "every mapped row not flagged anomalous"},
    })
    _default_intervals.cache_clear()
    return str(DEFAULT_INTERVALS_PATH)


# ---------------------------------------------------------------- targets (issue 11), leave-one-source-out

TARGETS = {  # regime: (median limit %, p90 limit %)
    "decode_b1": (8.0, 20.0), "decode_batched": (15.0, 35.0), "prefill": (15.0, 35.0), "e2e": (12.0, 30.0),
}
COVERAGE_TARGET = (70.0, 90.0)
MIN_REGIME_ROWS = 20


def scored(res):
    """Rows that count for the targets: every mapped row the data's caveats do not call anomalous."""
    return res[res["anomalous"] == ""]


def regime_figures(res, method: str = "loso") -> list[dict]:
    """Per regime: rows, median and p90 abs % error of `method`, and (LOSO) p10-p90 coverage."""
    ok = scored(res)
    out = []
    for reg in REGIME_NAMES:
        g = ok[ok["regime"] == reg]
        if not len(g):
            continue
        x = g[f"err_{method}_pct"]
        rec = {"regime": reg, "rows": int(len(g)), "median": float(np.median(x)), "p90": float(np.quantile(x, 0.9))}
        if method == "loso":
            rec["coverage"] = float(g["covered"].mean() * 100)
            if "profile_covered" in g:
                rec["profile_coverage"] = float(g["profile_covered"].mean() * 100)
        out.append(rec)
    return out


def target_checks(res, method: str = "loso") -> list[dict]:
    """One check per (regime with >= MIN_REGIME_ROWS rows, statistic): value, limit, ok."""
    out = []
    for f in regime_figures(res, method):
        if f["rows"] < MIN_REGIME_ROWS:
            continue
        med, p90 = TARGETS[f["regime"]]
        out.append({"check": f"{f['regime']} median", "value": f["median"], "limit": f"<= {med:g}%",
                    "ok": f["median"] <= med, "rows": f["rows"]})
        out.append({"check": f"{f['regime']} p90", "value": f["p90"], "limit": f"<= {p90:g}%",
                    "ok": f["p90"] <= p90, "rows": f["rows"]})
        if method == "loso":
            c = f["coverage"]
            out.append({"check": f"{f['regime']} p10-p90 coverage", "value": c,
                        "limit": f"{COVERAGE_TARGET[0]:g}-{COVERAGE_TARGET[1]:g}%",
                        "ok": COVERAGE_TARGET[0] <= c <= COVERAGE_TARGET[1], "rows": f["rows"]})
    return out


def summary(res, by: list[str], methods=("loso", "datasheet", "today")):
    import pandas as pd

    rows = []
    for key, g in res.groupby(by):
        key = key if isinstance(key, tuple) else (key,)
        rec = dict(zip(by, key))
        rec["rows"] = len(g)
        for m in methods:
            col = f"err_{m}_pct"
            if col in g:
                rec[f"{m} median %"] = float(np.median(g[col]))
                rec[f"{m} p90 %"] = float(np.quantile(g[col], 0.9))
        if "covered" in g and "loso" in methods:
            rec["coverage %"] = float(g["covered"].mean() * 100)
        if "profile_covered" in g and "loso" in methods:
            rec["estimate-range coverage %"] = float(g["profile_covered"].mean() * 100)
        rows.append(rec)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- one call: fit (optional), evaluate, write


def run(out_dir: str | Path = "reports", fit: bool = False, write: bool = True, png: bool = True) -> dict:
    """The whole benchmark. fit=True refits the engine profiles and writes hardware_specs/runtimes/*.yaml and the
    default intervals first. Returns {"results", "unmapped", "profiles", "checks", "checks_datasheet",
    "checks_today", "default_intervals", "default_coverage", "files", "notes"}."""
    from .report import render_markdown, write_png

    df, unmapped, d = prepare()
    files, notes = [], []
    res = evaluate(df, d)
    if fit:
        profiles = build_profiles(df, d, res)
        if write:
            files += write_profiles(profiles)
    else:
        profiles = committed_profiles(df)
    res = res.assign(**{k: v for k, v in zip(("pred_fitted", "err_fitted_pct"), _fitted_cols(df, d, profiles))})
    def_iv = default_intervals(res)
    if fit and write:
        files.append(write_default_intervals(def_iv))
    def_cov = default_interval_coverage(res, def_iv)
    checks = target_checks(res, "loso")
    if write:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        from ..io import atomic_write_text
        cols = ["file", "row", "source", "hardware_label", "hardware", "hw_class", "model", "weights", "kv_dtype",
                "runtime", "metric", "kind", "regime", "batch", "prompt", "output", "tp", "measured", "pred_loso",
                "low", "high", "covered", "profile_low", "profile_high", "profile_covered", "err_loso_pct", "level",
                "pred_fitted", "err_fitted_pct", "pred_datasheet", "err_datasheet_pct", "pred_today", "err_today_pct",
                "anomalous", "ratio_default"]
        atomic_write_text(out / "accuracy_rows.csv", res[cols].to_csv(index=False, float_format="%.6g"))
        files.append(str(out / "accuracy_rows.csv"))
        if png:
            msg = write_png(res, out / "accuracy.png")
            if msg:
                notes.append(msg)
            else:
                files.append(str(out / "accuracy.png"))
        cmd = "planner accuracy" + (" --fit" if fit else "") + (f" --out-dir {out_dir}" if str(out_dir) != "reports"
                                                               else "")
        md = render_markdown(res, unmapped, profiles, checks, cmd, def_iv, def_cov)
        atomic_write_text(out / "accuracy.md", md)
        files.append(str(out / "accuracy.md"))
    return {"default_intervals": def_iv, "default_coverage": def_cov, "results": res, "unmapped": unmapped,
            "profiles": profiles, "checks": checks, "checks_datasheet": target_checks(res, "datasheet"),
            "checks_today": target_checks(res, "today"), "files": files, "notes": notes}


REPORT_ROWS = Path(__file__).resolve().parents[2] / "reports" / "accuracy_rows.csv"


def committed_results(path=REPORT_ROWS):
    """(per-row results, target checks, default-range coverage) from the committed report of `planner accuracy`
    (reports/accuracy_rows.csv; tests/accuracy checks it is what the model computes now), or None where the file
    is missing: what the app shows without running the benchmark (tens of seconds) on every visit."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        return None
    res = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"anomalous": str})
    res["anomalous"] = res["anomalous"].fillna("")
    res["covered"] = res["covered"].astype(str) == "True"
    res["profile_covered"] = res["profile_covered"].astype(str) == "True"
    res["pred_runtime"], res["err_runtime_pct"] = res["pred_loso"], res["err_loso_pct"]
    res["split"] = "LOSO (" + res["level"].astype(str) + ")"
    return res, target_checks(res, "loso"), default_interval_coverage(res, default_intervals(res))


def _fitted_cols(df, d: Design, profiles: dict):
    t = _profile_times(df, d, profiles)
    pred = value_from_time(d, t)
    return pred, np.abs(pred - df["measured"].to_numpy()) / df["measured"].to_numpy() * 100
