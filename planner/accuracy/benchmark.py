"""The accuracy benchmark: published rows -> predictions (fitted runtime profiles, the plain datasheet roofline,
a peer tool's formulas) -> absolute % errors, summaries, intervals and their coverage.

  error %       = |predicted - measured| / measured x 100, in the row's own unit
  ratio         = measured / predicted speed (for TTFT rows: predicted / measured latency)
  interval      = [predicted x p10, predicted x p90] of the runtime class's ratio quantiles (regime of the row)
  covered       = measured inside the interval
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import numpy as np

from ..hardware import load_hardware
from ..quantization import weight_format
from ..roofline import select_unit
from .data import DATA_PATH, load_rows
from .fit import PRIOR, WEIGHT_FORMATS_SET, assign_split, fit_design, pack, predict_with
from .predict import Design, build_design, hardware_class, value_from_time

RUNTIME_NAMES = {
    "llamacpp": ("llama.cpp", "llama.cpp (llama-bench; Metal on Apple GPUs, CUDA on NVIDIA GPUs)"),
    "trtllm": ("TensorRT-LLM", "NVIDIA TensorRT-LLM v0.8 (gptSessionBenchmark, static batching, fused kernels)"),
    "gpt-fast": ("gpt-fast", "pytorch-labs gpt-fast (torch.compile, CUDA graphs, batch-1 decode)"),
}
# llama.cpp's CUDA backend runs 16-bit (and dequantized) GEMMs through cuBLAS with CUBLAS_COMPUTE_16F
# (ggml-cuda.cu, ggml_cuda_op_mul_mat_cublas, 2024); TRT-LLM and gpt-fast accumulate in fp32.
FP16_ACCUMULATE = {"llamacpp": True, "trtllm": False, "gpt-fast": False}
RUNTIME_UNIT_KIND = "gpu"  # all three run on the GPU (llama.cpp on a Mac: Metal, not the Neural Engine)


def prepare(path=DATA_PATH, tensor_parallel: bool = False):
    """(mapped 1-GPU rows with unit/class/split columns, unmapped rows, op design). With tensor_parallel=True,
    a 4th item: the mapped TP > 1 rows (same columns; evaluated by `evaluate_tp`, never fitted)."""
    rows, unmapped = load_rows(path)
    df, d = prepare_rows(rows[rows["tp"] == 1].reset_index(drop=True))
    if not tensor_parallel:
        return df, unmapped, d
    tp = _add_units(rows[rows["tp"] > 1].reset_index(drop=True))
    tp["held_out"] = False
    return df, unmapped, d, tp


def _add_units(df):
    units, classes = [], []
    for h, w in zip(df["hardware"], df["weights"]):
        spec = load_hardware(h)
        name = next(u.name for u in spec.units if u.kind == RUNTIME_UNIT_KIND)
        u = select_unit(spec, weight_format(w), name)
        units.append(u.name)
        classes.append(hardware_class(spec, u))
    df = df.copy()
    df["unit"], df["hw_class"] = units, classes
    return df


def prepare_rows(df):
    df = assign_split(_add_units(df)).reset_index(drop=True)
    return df, build_design(df)


def _fit_mask(df):
    return (~df["held_out"]) & (df["anomalous"] == "")


def fit_all(df, d: Design, lodo: bool = True) -> dict:
    """{(runtime, class): {"params", "formats", "residuals", "lodo", "devices_fit", "devices_held_out", ...}}."""
    out = {}
    fit_rows = _fit_mask(df).to_numpy()
    for (rt, cls), g in df.groupby(["runtime", "hw_class"]):
        in_cls = np.zeros(len(df), bool)
        in_cls[g.index] = True
        m = in_cls & fit_rows
        sub = d.subset(m)
        formats = sorted({f for f in sub.fmt if f in WEIGHT_FORMATS_SET})
        acc = FP16_ACCUMULATE[rt]
        params, resid = fit_design(sub, formats, acc)
        devices = sorted(df.loc[m, "hardware"].unique())
        # leave-one-device-out residuals for the intervals
        lodo_r = np.full(m.sum(), np.nan)
        if lodo and len(devices) > 1:
            hw = df.loc[m, "hardware"].to_numpy()
            for dev in devices:
                keep = hw != dev
                p_wo, _ = fit_design(sub.subset(keep), formats, acc, x_init=pack(formats, params))
                held = sub.subset(~keep)
                lodo_r[~keep] = np.log(predict_with(held, p_wo) / held.measured_time_s)
        out[(rt, cls)] = {
            "params": params, "formats": formats, "residuals": resid, "lodo": lodo_r,
            "regimes": df.loc[m, "regime"].to_numpy(), "rows_fit": int(m.sum()), "devices_fit": devices,
            "devices_held_out": sorted(df.loc[in_cls & df["held_out"].to_numpy(), "hardware"].unique()),
        }
    return out


def intervals_from(fit: dict) -> tuple[dict, str]:
    """{regime: (p10, p90, n)} of measured/predicted speed = exp(-residual)."""
    use_lodo = not np.all(np.isnan(fit["lodo"]))
    r = fit["lodo"] if use_lodo else fit["residuals"]
    out = {}
    for reg in np.unique(fit["regimes"]):
        x = -r[(fit["regimes"] == reg) & ~np.isnan(r)]
        if len(x):
            out[str(reg)] = (float(np.exp(np.quantile(x, 0.10))), float(np.exp(np.quantile(x, 0.90))), int(len(x)))
    src = ("leave-one-device-out residuals of the fit rows" if use_lodo else
           "residuals of the fit rows (a single fit device: no leave-one-device-out possible; in-sample, optimistic)")
    return out, src


# ---------------------------------------------------------------- profiles (data with provenance)

EFF_KEYS = ("bandwidth_fraction", "compute_fraction", "compute_half_rows", "kernel_overhead_us", "step_overhead_ms",
            "matmul_tflops_per_watt", "fp16_accumulate", "dequant_overhead")


def _round(v, n=4):
    if isinstance(v, dict):
        return {k: _round(x, n) for k, x in v.items()}
    if isinstance(v, bool):
        return v
    return float(f"{v:.{n}g}")


def build_profiles(df, fits: dict, today: str | None = None) -> dict:
    """{runtime id: RuntimeProfile} from fit_all's result."""
    from ..runtimes import RuntimeProfile

    today = today or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    out = {}
    for rt in sorted({k[0] for k in fits}):
        classes = []
        for (r, cls), f in sorted(fits.items()):
            if r != rt:
                continue
            ivs, src = intervals_from(f)
            vendor, kind = cls.rsplit("-", 1)
            eff = {k: _round(f["params"][k]) for k in EFF_KEYS}
            at_prior = [k for k in PRIOR if k in eff and not isinstance(eff[k], (dict, bool))
                        and abs(f["params"][k] / PRIOR[k] - 1) < 1e-3]
            at_prior += [f"dequant_overhead.{k}" for k, v in f["params"]["dequant_overhead"].items()
                         if abs(v / PRIOR["dequant"] - 1) < 1e-3]
            if not any(load_hardware(h).power for h in f["devices_fit"]):
                eff["matmul_tflops_per_watt"] = 0.0  # no fit device publishes a TDP: the cap is off
                at_prior = [k for k in at_prior if k != "matmul_tflops_per_watt"]
            eff["source"] = (f"fitted to {f['rows_fit']} published rows on {len(f['devices_fit'])} devices "
                             f"({DATA_PATH.name}), {today}")
            resid = {}
            for reg in np.unique(f["regimes"]):
                x = f["residuals"][f["regimes"] == reg]
                resid[str(reg)] = _round(float(np.median(np.abs(np.exp(-x) - 1)) * 100), 3)
            classes.append({
                "vendor": vendor, "unit_kind": kind, "efficiency": eff,
                "intervals": {k: {"p10": _round(v[0]), "p90": _round(v[1]), "rows": v[2]} for k, v in ivs.items()},
                "fit": {"rows_fit": f["rows_fit"], "devices_fit": f["devices_fit"],
                        "devices_held_out": f["devices_held_out"], "residual_median_abs_pct": resid,
                        "interval_source": src, "at_prior": at_prior},
            })
        sources = sorted(df.loc[df["runtime"] == rt, "source"].unique())
        name, desc = RUNTIME_NAMES[rt]
        out[rt] = RuntimeProfile.model_validate({
            "id": rt, "name": name, "description": desc, "unit_kind": RUNTIME_UNIT_KIND, "classes": classes,
            "provenance": {
                "data": f"data/{DATA_PATH.name} (sources and caveats: data/measured_public.md)",
                "sources": sources, "fitted": today, "command": "planner accuracy --fit",
                "split": "devices with int(sha256(hardware id), 16) % 3 == 0 held out of the fit (at least one fit "
                         "device kept per class); rows the data's caveats call anomalous never fitted",
                "model": "per-op roofline: max(flops / min(peak x compute_fraction, tdp_w x matmul_tflops_per_watt) "
                         "x (R + compute_half_rows) / R x (1 + dequant_overhead[format]), bytes / (bandwidth x "
                         "bandwidth_fraction)) + kernel_overhead_us per op + step_overhead_ms per step; fp16_accumulate "
                         "is set from the runtime's code, not fitted (planner/accuracy/fit.py)",
            }})
    return out


def write_profiles(profiles: dict) -> list[str]:
    from ..io import atomic_write_yaml
    from ..runtimes import RUNTIMES_DIR, _load_path

    paths = []
    for rt, prof in profiles.items():
        path = RUNTIMES_DIR / f"{rt}.yaml"
        atomic_write_yaml(path, prof.model_dump(mode="json"))
        paths.append(str(path))
    _load_path.cache_clear()
    return paths


def committed_profiles(df) -> dict:
    from ..runtimes import load_runtime

    return {rt: load_runtime(rt) for rt in sorted(df["runtime"].unique())}


# ---------------------------------------------------------------- evaluation


def evaluate(df, d: Design, profiles: dict, peers: bool = True):
    """Per-row predictions and errors for the runtime profiles, the datasheet roofline and llm-analysis."""
    from ..hardware import DATASHEET_EFFICIENCY
    from .predict import params_for_rows, predict_time_s

    from ..efficiency import resolve_efficiency

    effs, effs_def, p10, p90 = [], [], np.full(len(df), np.nan), np.full(len(df), np.nan)
    for i, r in enumerate(df.to_dict("records")):
        spec = load_hardware(r["hardware"])
        unit = spec.unit(r["unit"])
        pc = profiles[r["runtime"]].for_unit(spec, unit)
        effs.append(pc.efficiency)
        effs_def.append(resolve_efficiency(spec, unit, "default"))
        iv = pc.intervals.get(r["regime"])
        if iv is not None:
            p10[i], p90[i] = iv.p10, iv.p90
    res = df.copy()
    t_rt = predict_time_s(d, params_for_rows(d, effs))
    t_ds = predict_time_s(d, params_for_rows(d, [DATASHEET_EFFICIENCY] * len(df)))
    t_def = predict_time_s(d, params_for_rows(d, effs_def))
    methods = {"runtime": t_rt, "datasheet": t_ds, "default": t_def}
    if peers:
        from .peers import llm_analysis_time_s
        methods["llm_analysis"] = llm_analysis_time_s(df)
    for name, t in methods.items():
        pred = value_from_time(d, t)
        res[f"pred_{name}"] = pred
        res[f"err_{name}_pct"] = np.abs(pred - res["measured"]) / res["measured"] * 100
    ratio = d.measured_time_s  # measured / predicted speed = predicted time / measured time
    ratio = t_rt / ratio
    res["ratio_runtime"] = ratio
    res["ratio_p10"], res["ratio_p90"] = p10, p90
    is_ttft = (res["metric"] == "ttft_ms").to_numpy()
    # interval in the row's unit: rates x [p10, p90]; TTFT / [p90, p10]
    pr = res["pred_runtime"].to_numpy()
    res["low"] = np.where(is_ttft, pr / p90, pr * p10)
    res["high"] = np.where(is_ttft, pr / p10, pr * p90)
    res["covered"] = (res["measured"] >= res["low"]) & (res["measured"] <= res["high"])
    res["split"] = np.where(res["held_out"], "held-out", "fit")
    res["ratio_default"] = t_def / d.measured_time_s
    return res


def default_intervals(res) -> dict:
    """p10/p90 of measured / predicted speed of the kind-default efficiencies (no runtime named), per regime, over
    the fit rows (anomalous rows excluded): the range an estimate without `--runtime` carries."""
    fit_rows = res[(~res["held_out"]) & (res["anomalous"] == "")]
    out = {}
    for reg, g in fit_rows.groupby("regime"):
        x = g["ratio_default"].to_numpy()
        out[str(reg)] = {"p10": _round(float(np.quantile(x, 0.10))), "p90": _round(float(np.quantile(x, 0.90))),
                         "rows": int(len(x))}
    return out


def default_interval_coverage(res, intervals: dict) -> float:
    """Share of held-out rows whose measured value lies in the default-efficiency interval."""
    ho = scored(res)
    lo = ho["regime"].map(lambda r: intervals.get(r, {}).get("p10", np.nan)).to_numpy(dtype=float)
    hi = ho["regime"].map(lambda r: intervals.get(r, {}).get("p90", np.nan)).to_numpy(dtype=float)
    ratio = ho["ratio_default"].to_numpy()
    return float(np.mean((ratio >= lo) & (ratio <= hi)) * 100)


def _default_section(res, intervals: dict, coverage: float) -> str:
    """Markdown: how estimates that name no runtime fare (kind-default efficiencies) and the range they carry."""
    ho = scored(res)
    lines = ["", "## Estimates without `--runtime` (kind-default efficiencies)", "",
             "Every estimate carries a p10-p90 range. Without a runtime the planner uses the documented kind defaults "
             "(hardware_specs/defaults/efficiency.yaml); their range comes from the fit rows "
             "(hardware_specs/defaults/intervals.yaml) and is checked on the held-out rows here.", "",
             "| metric | held-out rows | median % | p90 % |", "|---|---|---|---|"]
    for metric, g in ho.groupby("metric"):
        x = g["err_default_pct"]
        lines.append(f"| {metric} | {len(g)} | {np.median(x):.1f} | {np.quantile(x, 0.9):.1f} |")
    lines += ["", "| regime | p10 | p90 | fit rows |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['p10']:.3f} | {v['p90']:.3f} | {v['rows']} |" for k, v in sorted(intervals.items())]
    lines += ["", f"Held-out coverage of the default range: {coverage:.1f}% of {len(ho)} rows.", ""]
    return "\n".join(lines)


def write_default_intervals(intervals: dict, today: str | None = None) -> str:
    from ..io import atomic_write_yaml
    from ..runtimes import DEFAULT_INTERVALS_PATH, _default_intervals

    today = today or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    atomic_write_yaml(DEFAULT_INTERVALS_PATH, {
        "description": "p10-p90 range of measured / predicted speed for estimates that name no runtime (the kind-"
                       "default efficiencies of hardware_specs/defaults/efficiency.yaml), per regime",
        "intervals": intervals,
        "provenance": {"data": f"data/{DATA_PATH.name}", "fitted": today, "command": "planner accuracy --fit",
                       "rows": "fit rows of the device split (held-out devices and anomalous rows excluded)"},
    })
    _default_intervals.cache_clear()
    return str(DEFAULT_INTERVALS_PATH)


def evaluate_tp(df_tp, profiles: dict):
    """Tensor-parallel rows through planner.serving.parallelism.tp_step_time_s with the 1-GPU runtime profiles
    (each GPU runs 1/t of the ops; two ring all-reduces per layer over the node's link). Per-GPU throughput rows
    divide by t. Columns as `evaluate` (runtime method only)."""
    from ..architecture import load_model
    from ..roofline import device_model
    from ..serving.parallelism import node_for, tp_step_time_s
    from .predict import steps_of_row

    res = df_tp.copy()
    pred, p10, p90 = np.zeros(len(res)), np.full(len(res), np.nan), np.full(len(res), np.nan)
    for i, r in enumerate(res.to_dict("records")):
        spec = load_hardware(r["hardware"])
        unit = spec.unit(r["unit"])
        fmt = weight_format(r["weights"])
        pc = profiles[r["runtime"]].for_unit(spec, unit)
        dev = device_model(spec, unit, fmt, pc.efficiency)
        m = load_model(r["model"])
        link = node_for(spec).intra_link()
        steps, work = steps_of_row(r)
        t = 0.0
        for stage, B, S, P, w in steps:
            t += w * float(tp_step_time_s(m, fmt, r["kv_dtype"], dev, stage, B, S, P, r["tp"], link,
                                          bool(r["flash_attention"])))
        per_gpu = r["tp"] if r["metric"] == "throughput_tok_s" else 1
        pred[i] = work / t / per_gpu if work else t * 1e3
        iv = pc.intervals.get(r["regime"])
        if iv is not None:
            p10[i], p90[i] = iv.p10, iv.p90
    res["pred_runtime"] = pred
    res["err_runtime_pct"] = np.abs(pred - res["measured"]) / res["measured"] * 100
    is_ttft = (res["metric"] == "ttft_ms").to_numpy()
    res["low"] = np.where(is_ttft, pred / p90, pred * p10)
    res["high"] = np.where(is_ttft, pred / p10, pred * p90)
    res["covered"] = (res["measured"] >= res["low"]) & (res["measured"] <= res["high"])
    res["split"] = "tensor-parallel"
    return res


TARGETS = [  # (metric, statistic, limit %) on held-out rows (anomalous rows excluded), issue 6
    ("decode_tok_s_per_seq", "median", 10.0), ("decode_tok_s_per_seq", "p90", 25.0),
    ("prefill_tok_s", "median", 20.0), ("prefill_tok_s", "p90", 40.0),
    ("throughput_tok_s", "median", 20.0),
]
COVERAGE_TARGET = (70.0, 90.0)


def scored(res):
    """Held-out rows that count for the targets: not fitted, not flagged anomalous by the data's caveats; decode
    rows at batch 1 only (all decode rows here are)."""
    return res[(res["held_out"]) & (res["anomalous"] == "")]


def target_checks(res, method: str = "runtime") -> list[dict]:
    ho = scored(res)
    out = []
    for metric, stat, limit in TARGETS:
        x = ho.loc[ho["metric"] == metric, f"err_{method}_pct"]
        v = float(np.median(x)) if stat == "median" else float(np.quantile(x, 0.9))
        out.append({"check": f"{metric} {stat}", "value": v, "limit": f"<= {limit:g}%", "ok": v <= limit,
                    "rows": int(len(x))})
    if method == "runtime":
        cov = float(ho["covered"].mean() * 100)
        out.append({"check": "p10-p90 interval coverage", "value": cov,
                    "limit": f"{COVERAGE_TARGET[0]:g}-{COVERAGE_TARGET[1]:g}%",
                    "ok": COVERAGE_TARGET[0] <= cov <= COVERAGE_TARGET[1], "rows": int(len(ho))})
    return out


def summary(res, by: list[str], methods=("runtime", "datasheet", "llm_analysis")):
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
        if "covered" in g:
            rec["coverage %"] = float(g["covered"].mean() * 100)
        rows.append(rec)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- one call: fit (optional), evaluate, write


def run(out_dir: str | Path = "reports", fit: bool = False, write: bool = True, png: bool = True) -> dict:
    """The whole benchmark. fit=True refits the runtime profiles and writes hardware_specs/runtimes/*.yaml first.
    Returns {"results", "unmapped", "profiles", "checks", "checks_datasheet", "checks_llm_analysis", "files"}."""
    from .report import render_markdown, write_png

    df, unmapped, d, df_tp = prepare(tensor_parallel=True)
    files, notes = [], []
    if fit:
        profiles = build_profiles(df, fit_all(df, d))
        if write:
            files += write_profiles(profiles)
    else:
        profiles = committed_profiles(df)
    res = evaluate(df, d, profiles)
    def_iv = default_intervals(res)
    if fit and write:
        files.append(write_default_intervals(def_iv))
    def_cov = default_interval_coverage(res, def_iv)
    res_tp = evaluate_tp(df_tp, profiles) if len(df_tp) else None
    checks = target_checks(res, "runtime")
    checks_ds = target_checks(res, "datasheet")
    checks_pe = target_checks(res, "llm_analysis")
    ho = scored(res)
    summaries = [
        ("Held-out rows by metric", summary(ho, ["metric"])),
        ("Fit rows by metric (in-sample)", summary(res[(~res["held_out"]) & (res["anomalous"] == "")], ["metric"])),
        ("All mapped rows by source", summary(res, ["source"])),
        ("All mapped rows by source and metric", summary(res, ["source", "metric"])),
        ("All mapped rows by hardware kind (runtime profile class)", summary(res, ["hw_class", "runtime"])),
        ("Held-out rows by device", summary(ho, ["hardware", "runtime"])),
    ]
    if res_tp is not None:
        summaries.append(("Tensor-parallel rows (never fitted; 1-GPU profiles + planner.serving.parallelism)",
                          summary(res_tp, ["source", "metric", "tp"], methods=("runtime",))))
    if write:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        from ..io import atomic_write_text
        cols = ["row", "source", "hardware_label", "hardware", "hw_class", "model", "weights", "kv_dtype", "runtime",
                "metric", "batch", "prompt", "output", "measured", "pred_runtime", "low", "high", "covered",
                "err_runtime_pct", "pred_datasheet", "err_datasheet_pct", "pred_llm_analysis",
                "err_llm_analysis_pct", "split", "anomalous"]
        import pandas as pd
        both = res[cols] if res_tp is None else pd.concat([res[cols], res_tp.reindex(columns=cols)],
                                                          ignore_index=True)
        atomic_write_text(out / "accuracy_rows.csv", both.to_csv(index=False, float_format="%.6g"))
        files.append(str(out / "accuracy_rows.csv"))
        if png:
            msg = write_png(res, out / "accuracy.png")
            if msg:
                notes.append(msg)
            else:
                files.append(str(out / "accuracy.png"))
        cmd = "planner accuracy" + (" --fit" if fit else "") + (f" --out-dir {out_dir}" if str(out_dir) != "reports"
                                                               else "")
        md = render_markdown(res, unmapped, profiles, checks, checks_ds, checks_pe, summaries, cmd, res_tp)
        atomic_write_text(out / "accuracy.md", md + _default_section(res, def_iv, def_cov))
        files.append(str(out / "accuracy.md"))
    return {"default_intervals": def_iv, "default_coverage": def_cov, "results": res, "results_tp": res_tp, "unmapped": unmapped, "profiles": profiles, "checks": checks,
            "checks_datasheet": checks_ds, "checks_llm_analysis": checks_pe, "files": files, "notes": notes}
