"""The tables behind the web UI's charts, computed from the core API only (the CLI could print the same).

Pure functions: (model, device, workload) -> pandas DataFrames for the headline, the memory bars, the batch and
context sweeps, the quantization comparison, the roofline and the validation scatter. No streamlit import here;
app.py caches and renders these. pandas is imported inside functions so that `import planner` stays light.

Definitions used below:
  batch knee     the batch of largest Kleinrock power, (requests/s) / end-to-end latency = B / e2e(B)^2, among the
                 batches that fit (`planner.serving.static_batching.knee_batch`, the one definition the CLI's
                 `planner batching` uses too): past it more batch buys less throughput than it costs in latency.
  achieved FLOP/s  op flops / op time (time includes the efficiency factors and launch overhead), so an op's
                 roofline point sits at or below the datasheet roofs.
  spare / short  usable capacity - total memory (GB, 1e9 bytes).
  cost per million tokens   devices x USD per device-hour / (decode tok/s total x 3600) x 1e6.
  energy per token          devices x board power (W) / decode tok/s total (J/token, at full board power).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import yaml

from .architecture import ModelArch, from_hf_config, load_model
from .efficiency import CALIBRATION_DIR, resolve_efficiency
from .errors import PlannerError
from .io import parse_json_text, parse_yaml_text
from .memory import LMDEPLOY_CACHE_MAX_ENTRY_COUNT
from .estimate import Estimate, estimate
from .hardware import REPO_ROOT, HardwareSpec, load_hardware, parse_hardware
from .ops import decode_ops
from .quantization import kv_dtype as norm_kv, weight_format
from .roofline import device_model, step_bound, time_ops

# formats of the quantization comparison: 16-bit, 8-bit, 4-bit GPU formats and llama.cpp GGUF formats
QUANT_FORMATS: tuple[str, ...] = ("fp16", "fp8", "int8", "int4-g128", "q8_0", "q4_k_m", "q4_0")
BATCH_TABLE_ROWS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
RECORDS_DIR = REPO_ROOT / "validate" / "records"


# ---------------------------------------------------------------- inputs (uploads)

ModelRef = tuple  # ("catalog", id) or ("upload", filename, text): hashable, so the UI can cache on it
HardwareRef = tuple  # ("catalog", id) or ("upload", filename, text)


def _text(data: bytes | str, where: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PlannerError(f"{where}: not UTF-8 text") from None


def parse_model_upload(data: bytes | str, filename: str = "config.json") -> ModelArch:
    """A Hugging Face config.json (bytes or text) -> ModelArch; malformed JSON is a one-line PlannerError."""
    cfg = parse_json_text(_text(data, filename), filename)
    stem = Path(filename).stem
    try:
        return from_hf_config(cfg, name=stem if stem != "config" else "uploaded-model", where=filename)
    except PlannerError:
        raise
    except (ValueError, TypeError, OverflowError, ZeroDivisionError, ArithmeticError, RecursionError) as exc:
        # the one schema for config.json lives in planner.architecture; until it names the field, the page still
        # gets one line instead of a traceback
        raise PlannerError(f"{filename}: not a usable model config ({type(exc).__name__}: {str(exc)[:160]})") from None


def parse_hardware_upload(data: bytes | str, filename: str = "hardware.yaml") -> HardwareSpec:
    """A hardware spec YAML (bytes or text) -> HardwareSpec, validated by the same schema as hardware_specs/."""
    try:
        return parse_hardware(parse_yaml_text(_text(data, filename), filename), filename)
    except PlannerError:
        raise
    except (ValueError, TypeError, OverflowError, ArithmeticError, RecursionError) as exc:
        raise PlannerError(f"{filename}: not a usable hardware spec ({type(exc).__name__}: {str(exc)[:160]})") from None


def resolve_model(ref: ModelRef) -> ModelArch:
    if ref[0] == "catalog":
        return load_model(ref[1])
    return parse_model_upload(ref[2], ref[1])


UPLOAD_SUFFIX = "-uploaded"


def resolve_hardware(ref: HardwareRef) -> HardwareSpec:
    """A catalog id, an uploaded YAML, or ("custom", json of custom_gpu_spec's arguments). An upload whose id is a
    catalog id is renamed `<id>-uploaded`, so that nothing keyed by id (calibration files, node files, tables) mixes
    it up with the catalog device."""
    if ref[0] == "catalog":
        return load_hardware(ref[1])
    if ref[0] == "custom":
        return custom_gpu_spec(**json.loads(ref[1]))
    spec = parse_hardware_upload(ref[2], ref[1])
    from .hardware import list_hardware_ids

    if spec.id in list_hardware_ids():
        spec = spec.model_copy(update={"id": spec.id + UPLOAD_SUFFIX})
    return spec


# ---------------------------------------------------------------- headline and memory


def headline(e: Estimate) -> dict:
    """The numbers the page leads with, for one device (latencies None when the configuration does not fit)."""
    m = e.memory
    return {
        "hardware": e.hardware, "name": e.hardware_name, "unit": e.roofline.unit, "fits": m.fits,
        "verdict": m.verdict, "spare_gb": m.capacity_gb - m.total_gb, "total_gb": m.total_gb,
        "capacity_gb": m.capacity_gb, "ttft_ms": e.end_to_end.ttft_ms, "tpot_ms": e.end_to_end.tpot_ms,
        "tok_s_per_seq": e.decode.tokens_per_s_per_sequence, "tok_s_total": e.decode.tokens_per_s_total,
        "e2e_s": e.end_to_end.latency_s, "prefill_bound": e.prefill.bound, "decode_bound": e.decode.bound,
        "max_batch": m.max_batch_at_context, "max_context": m.max_context_at_batch,
        "model_max_context": m.model_max_context, "efficiency": e.efficiency.source,
        "ttft_ms_range": (e.prefill.latency_ms_low, e.prefill.latency_ms_high),
        "tpot_ms_range": (e.decode.latency_ms_per_token_low, e.decode.latency_ms_per_token_high),
        "tok_s_total_range": (e.decode.tokens_per_s_total_low, e.decode.tokens_per_s_total_high),
        "range_source": None if e.intervals is None else ("the kind-default efficiencies" if e.runtime is None else
                                                          f"the {e.runtime} profile ({e.intervals.hardware_class})"),
        # the TTFT through the engine's OpenAI server (its request path added, runtimes.REQUEST_PATH_MS), or None
        "server_ttft_ms": e.prefill.server_ttft_ms, "request_path_ms": e.prefill.request_path_ms,
        # the decode step the TTFT holds where the engine samples the first token in one (TurboMind), or None
        "first_token_step_ms": e.prefill.first_token_step_ms,
        "runtime": e.runtime,
    }


def estimate_range_coverage(res) -> dict:
    """{regime: % of its held-out rows inside the range `planner estimate` shows for them} (the engine profile's
    class range drawn without the row's source: benchmark.profile_range_loso), where the results carry it."""
    from .accuracy.benchmark import regime_figures

    return {f["regime"]: f["profile_coverage"] for f in regime_figures(res) if "profile_coverage" in f}


def accuracy_results():
    """The published-measurement benchmark for the app's Accuracy section: per-row results, the held-out target
    checks and the default-range coverage, read from the committed report of `planner accuracy`
    (reports/accuracy_rows.csv), or computed (committed runtime profiles, no files written) where it is missing."""
    from .accuracy.benchmark import committed_results, run

    got = committed_results()
    if got is not None:
        return got
    out = run(write=False, png=False)
    return out["results"], out["checks"], out["default_coverage"]


MAX_UPLOAD_ROWS = 20_000  # a measurements upload the page checks in a few seconds


def check_measurements(name: str, content: bytes) -> dict:
    """`planner accuracy --data` on an uploaded CSV (planner/accuracy/external.py): {"summary" (per regime, fitted
    to or not), "rows" (every mapped row: measured, predicted, range, error), "unmapped" (row, reason)}; a
    PlannerError for a file outside the schema or longer than MAX_UPLOAD_ROWS rows."""
    import pandas as pd

    from .accuracy import external
    from .errors import PlannerError

    if content.count(b"\n") > MAX_UPLOAD_ROWS + 1:
        raise PlannerError(f"{name}: more than {MAX_UPLOAD_ROWS:,} rows; check it with `planner accuracy --data`")
    out = external.check([(name, content)])
    res, unmapped = out["results"], out["unmapped"]
    cols = ["row", "source", "hardware", "model", "weights", "runtime", "metric", "regime", "batch", "prompt",
            "output", "measured", "pred", "low", "high", "err_pct", "covered", "in_fit"]
    rows = res[cols].rename(columns={"pred": "predicted", "err_pct": "error %", "in_fit": "source fitted to"}) \
        if len(res) else pd.DataFrame(columns=cols)
    return {"summary": external.regime_summary(res) if len(res) else pd.DataFrame(),
            "rows": rows, "unmapped": unmapped[["row", "reason"]] if len(unmapped) else pd.DataFrame()}


def headline_frame(estimates: list[Estimate]):
    import pandas as pd

    return pd.DataFrame([headline(e) for e in estimates])


def memory_frame(estimates: list[Estimate]):
    """Long form: one row per (device, component) with GB, plus each device's usable capacity."""
    import pandas as pd

    rows = []
    for e in estimates:
        m = e.memory
        for order, (part, gb) in enumerate((("weights", m.weights_gb), ("KV cache", m.kv_cache_gb),
                                            ("activations", m.activations_gb), ("overhead", m.overhead_gb))):
            rows.append({"hardware": e.hardware, "component": part, "order": order, "gb": gb,
                         "capacity_gb": m.capacity_gb, "total_gb": m.total_gb, "fits": m.fits})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- sweeps

RUNTIME_PREFIX = "runtime:"


def split_efficiency(eff: str) -> tuple[str, str | None]:
    """The UI's one efficiency choice -> (efficiency mode, runtime id): 'runtime:llamacpp' -> ('auto', 'llamacpp')."""
    if eff.startswith(RUNTIME_PREFIX):
        return "auto", eff[len(RUNTIME_PREFIX):]
    return eff, None


def runtime_gap(eff: str, spec: HardwareSpec, weights: str) -> str | None:
    """What the page says about the UI's runtime choice on this device, or None where the runtime has a class for
    it or no runtime is chosen: where the runtime does not run on the vendor (CUDA-only engines on AMD), that the
    device is shown with its calibrated / default efficiencies (split_efficiency_for drops the runtime); where no
    published measurement covers the vendor's unit, the runtime's note (RuntimeProfile.unmeasured_note: the kind
    defaults, their range widened). The device stays on the page either way (webui/main.py)."""
    _, runtime = split_efficiency(eff)
    if runtime is None:
        return None
    from .roofline import select_unit
    from .runtimes import load_runtime

    prof = load_runtime(runtime)
    if not prof.runs_on_vendor(spec):
        return f"{prof.name} does not run on {spec.vendor} hardware: shown with the calibrated or default efficiencies"
    return prof.unmeasured_note(spec, select_unit(spec, weight_format(weights), prof.default_unit(spec)))


def split_efficiency_for(eff: str, spec: HardwareSpec, weights: str) -> tuple[str, str | None]:
    """split_efficiency, without the runtime where it does not run on this device's vendor (runtime_gap)."""
    mode, runtime = split_efficiency(eff)
    if runtime is None:
        return mode, None
    from .runtimes import load_runtime
    return (mode, runtime) if load_runtime(runtime).runs_on_vendor(spec) else (mode, None)


def ui_estimate(m, spec, weights, kv, batch, prompt, output, eff: str, tp: int = 1) -> Estimate:
    mode, runtime = split_efficiency_for(eff, spec, weights)
    return estimate(m, spec, weights, kv, batch, prompt, output, efficiency=mode, runtime=runtime, tp=tp)


def sweep_batches(max_fit: int, cap: int = 4096) -> tuple[int, ...]:
    """Batch sizes for the batch sweep: every batch 1..64, then steps of ~5% up to the largest batch that fits
    (at most `cap`), and a few past it so the chart shows where memory runs out."""
    top = max(1, min(int(max_fit), cap))
    pts = set(range(1, min(top, 64) + 1))
    b = 64.0
    while b < top:
        b *= 1.05
        pts.add(min(int(round(b)), top))
    pts |= {top, min(top + 1, cap + 1), min(int(top * 1.25) + 1, cap + 1)}
    return tuple(sorted(pts))


def batch_sweep(m: ModelArch, spec: HardwareSpec, weights: str, kv: str, prompt: int, output: int,
                efficiency: str = "auto", batches=None, flash_attention: bool = True, tp: int = 1):
    """The batch sweep in one vectorized `planner.sweep.sweep` call, plus the first decode step's bound. batches:
    None = `sweep_batches` up to the largest batch that fits at this prompt + output (planner.estimate's
    max_batch_at_context)."""
    from .sweep import sweep

    mode, runtime = split_efficiency_for(efficiency, spec, weights)
    if batches is None:
        e1 = estimate(m, spec, weights, kv, 1, prompt, output, efficiency=mode, runtime=runtime, tp=tp)
        batches = sweep_batches(max(e1.memory.max_batch_at_context, 1))
    batches = tuple(int(b) for b in batches)
    if tp > 1:
        return _tp_sweep(m, spec, weights, kv, batches, [prompt], output, mode, runtime, tp, flash_attention)
    df = sweep([m], [spec], [weights], batches, [prompt], [output], kv, mode, flash_attention, runtime)
    if df.empty:
        return df
    fmt, kvd = weight_format(weights), norm_kv(kv)
    u = spec.unit(str(df["unit"].iloc[0]))
    prof = None
    if runtime is not None:
        from .runtimes import load_runtime
        prof = load_runtime(runtime)
    dev = device_model(spec, u, fmt, resolve_efficiency(spec, u, mode, prof))
    B = df["batch"].to_numpy(dtype=np.float64)
    df["decode_bound"] = step_bound(time_ops(decode_ops(m, fmt, kvd, B, prompt, flash_attention), dev))
    df["tok_s_per_seq"] = 1e3 / df["tpot_ms"]
    return df


def _tp_sweep(m, spec, weights, kv, batches, prompts, output, mode, runtime, tp, flash_attention):
    """The sweep rows for tensor parallelism (which the vectorized sweep does not model): one `estimate(tp=...)`
    per point, the same columns."""
    import pandas as pd

    rows = []
    for b in batches:
        for p in prompts:
            e = estimate(m, spec, weights, kv, int(b), int(p), output, efficiency=mode, runtime=runtime, tp=tp,
                         flash_attention=flash_attention)
            fits = e.memory.fits
            rows.append({"model": m.name, "hardware": spec.id, "weights": e.weights, "unit": e.roofline.unit,
                         "batch": int(b), "prompt": int(p), "output": output, "context": int(p) + output,
                         "fits": fits, "total_gb": e.memory.total_gb,
                         "ttft_ms": e.end_to_end.ttft_ms if fits else np.nan,
                         "tpot_ms": e.end_to_end.tpot_ms if fits else np.nan,
                         "e2e_s": e.end_to_end.latency_s if fits else np.nan,
                         "decode_tok_s_total": e.decode.tokens_per_s_total if fits else np.nan,
                         "decode_bound": e.decode.bound})
    df = pd.DataFrame(rows)
    df["tok_s_per_seq"] = 1e3 / df["tpot_ms"]
    return df


def find_knee(df) -> dict | None:
    """The batch knee (module docstring: Kleinrock's power over end-to-end latency, `knee_batch`) among the batches
    that fit, or None."""
    from .serving.static_batching import knee_batch

    if df.empty:
        return None
    k = knee_batch(df["batch"], df["e2e_s"], df["fits"])
    if k is None:
        return None
    row = df[df["batch"] == k].iloc[0]
    return {"hardware": row["hardware"], "batch": int(row["batch"]), "tpot_ms": float(row["tpot_ms"]),
            "decode_tok_s_total": float(row["decode_tok_s_total"]), "e2e_s": float(row["e2e_s"]),
            "rule": "largest (requests/s) / end-to-end latency"}


def batch_table(df, rows=BATCH_TABLE_ROWS):
    """'batch 1: X ms, Y tok/s; batch 8: ...' as a table (does-not-fit rows say so)."""
    import pandas as pd

    out = []
    for _, r in df[df["batch"].isin(rows)].iterrows():
        fits = bool(r["fits"])
        out.append({"hardware": r["hardware"], "batch": int(r["batch"]),
                    "TPOT (ms)": round(float(r["tpot_ms"]), 3) if fits else None,
                    "tok/s per sequence": round(float(r["tok_s_per_seq"]), 1) if fits else None,
                    "tok/s total": round(float(r["decode_tok_s_total"]), 1) if fits else None,
                    "TTFT (ms)": round(float(r["ttft_ms"]), 2) if fits else None,
                    "memory (GB)": round(float(r["total_gb"]), 2), "fits": fits})
    return pd.DataFrame(out)


def context_points(model_max: int, output: int, prompt: int) -> list[int]:
    """Prompt lengths for the context sweep: powers of two from 128 up to the model's maximum context (minus the
    output), that maximum itself, and the current prompt."""
    top = max(model_max - output, 1)
    pts = {p for p in (2 ** k for k in range(7, 23)) if p <= top} | {top, prompt}
    return sorted(pts)


def context_sweep(m: ModelArch, spec: HardwareSpec, weights: str, kv: str, batch: int, prompt: int, output: int,
                  efficiency: str = "auto", flash_attention: bool = True, tp: int = 1):
    """Prompt lengths 128 .. model maximum at this batch and output length, one vectorized sweep call."""
    from .sweep import sweep

    prompts = context_points(m.max_position_embeddings, output, prompt)
    mode, runtime = split_efficiency_for(efficiency, spec, weights)
    if tp > 1:
        return _tp_sweep(m, spec, weights, kv, [batch], prompts, output, mode, runtime, tp, flash_attention)
    df = sweep([m], [spec], [weights], [batch], prompts, [output], kv, mode, flash_attention, runtime)
    df["context"] = df["prompt"] + df["output"]
    df["tok_s_per_seq"] = 1e3 / df["tpot_ms"]
    return df


def quant_comparison(m: ModelArch, spec: HardwareSpec, kv: str, batch: int, prompt: int, output: int,
                     efficiency: str = "auto", formats=QUANT_FORMATS, tp: int = 1):
    """The same model and workload in each format: memory and speed from `estimate` (a format the device cannot
    run is a row saying so)."""
    import pandas as pd

    rows = []
    for f in formats:
        fmt = weight_format(f)
        try:
            e = ui_estimate(m, spec, fmt.name, kv, batch, prompt, output, efficiency, tp)
        except PlannerError as exc:
            rows.append({"hardware": spec.id, "format": fmt.name, "bits_per_weight": fmt.bits_per_weight,
                         "fits": False, "note": str(exc)})
            continue
        rows.append({"hardware": spec.id, "format": fmt.name, "bits_per_weight": round(fmt.bits_per_weight, 3),
                     "weights_gb": e.memory.weights_gb, "total_gb": e.memory.total_gb, "fits": e.memory.fits,
                     "ttft_ms": e.end_to_end.ttft_ms, "tpot_ms": e.end_to_end.tpot_ms,
                     "tok_s_per_seq": e.decode.tokens_per_s_per_sequence, "tok_s_total": e.decode.tokens_per_s_total,
                     "matmul_dtype": e.roofline.dtypes.get("matmul"),
                     "note": "" if e.memory.fits else e.memory.verdict})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- roofline


def cluster_labels(points, x: str = "intensity", y: str = "achieved_tflops", text: str = "op",
                   tol_decades: float = 0.15):
    """One label per cluster of chart points that would print on top of each other: points whose log10 x and
    log10 y are both within tol_decades (0.15: ~40%, a 10-px label on a 400-px chart of five decades) of a
    cluster's first point join it, and the cluster's label lists their names ("qkv_proj / o_proj / mlp"), at that
    first point. Non-positive coordinates are left out."""
    import pandas as pd

    ok = points[(points[x] > 0) & (points[y] > 0)]
    lx, ly = np.log10(ok[x].to_numpy(float)), np.log10(ok[y].to_numpy(float))
    clusters: list[list[int]] = []
    for i in np.argsort(lx, kind="stable"):
        for c in clusters:
            if abs(lx[c[0]] - lx[i]) <= tol_decades and abs(ly[c[0]] - ly[i]) <= tol_decades:
                c.append(i)
                break
        else:
            clusters.append([i])
    rows = []
    for c in clusters:
        names = list(dict.fromkeys(str(ok[text].iloc[j]) for j in c))
        rows.append({x: float(ok[x].iloc[c[0]]), y: float(ok[y].iloc[c[0]]), text: " / ".join(names)})
    return pd.DataFrame(rows, columns=[x, y, text])


def roofline_frames(e: Estimate, spec: HardwareSpec):
    """(roofs, points, ridge) for a log-log roofline of the estimate's compute unit.

    roofs: one polyline per dtype, min(bandwidth * I, peak_dtype) sampled at its ridge and the x-range ends, in
    TFLOP/s; plus 'effective' for the matmul dtype scaled by the efficiency fractions. points: every prefill and
    decode op with flops > 0 at (intensity, achieved TFLOP/s). ridge: the matmul dtype's datasheet ridge point.
    """
    import pandas as pd

    unit = spec.unit(e.roofline.unit)
    bw = e.roofline.bandwidth_gbs * 1e9  # B/s
    pts = []
    for stage, rep in (("prefill", e.prefill), ("decode", e.decode)):
        for o in rep.ops:
            if o.flops <= 0 or o.bytes <= 0 or o.time_ms <= 0:
                continue
            pts.append({"stage": stage, "op": o.name, "layers": o.count, "gflop": o.flops / 1e9,
                        "mb": o.bytes / 1e6, "intensity": o.flops / o.bytes,
                        "achieved_tflops": o.flops / (o.time_ms * 1e-3) / 1e12, "time_ms": o.time_ms,
                        "bound": o.bound})
    points = pd.DataFrame(pts, columns=["stage", "op", "layers", "gflop", "mb", "intensity", "achieved_tflops",
                                        "time_ms", "bound"])
    ridges = {d: p * 1e12 / bw for d, p in unit.peak_tflops.items()}
    lo_pts = points["intensity"].min() if len(points) else 1.0
    hi_pts = points["intensity"].max() if len(points) else 1.0
    x_lo = 10 ** np.floor(np.log10(min(lo_pts, min(ridges.values())) / 2))
    x_hi = 10 ** np.ceil(np.log10(max(hi_pts, max(ridges.values())) * 2))
    roofs = []
    by_peak: dict[float, list[str]] = {}
    for d, peak in unit.peak_tflops.items():  # dtypes with the same peak share one roof
        by_peak.setdefault(peak, []).append(d)
    for peak, dts in sorted(by_peak.items(), reverse=True):
        r = peak * 1e12 / bw
        for x in (x_lo, r, x_hi):
            roofs.append({"roof": f"{'/'.join(dts)} ({peak:g} TFLOP/s)", "dtype": dts[0], "intensity": x,
                          "tflops": min(bw * x, peak * 1e12) / 1e12, "kind": "datasheet"})
    eff = e.efficiency
    mm = e.roofline.dtypes["matmul"]
    peak_eff = e.roofline.peak_tflops["matmul"] * eff.compute_fraction
    bw_eff = e.roofline.effective_bandwidth_gbs * 1e9  # bandwidth_fraction and the SM cap (roofline)
    r_eff = peak_eff * 1e12 / bw_eff
    for x in (x_lo, r_eff, x_hi):
        roofs.append({"roof": f"effective {mm} ({peak_eff:.4g} TFLOP/s)", "dtype": mm, "intensity": x,
                      "tflops": min(bw_eff * x, peak_eff * 1e12) / 1e12, "kind": "effective"})
    ridge = {"dtype": mm, "intensity": e.roofline.ridge_flop_per_byte, "tflops": e.roofline.peak_tflops["matmul"],
             "label": f"ridge {e.roofline.ridge_flop_per_byte:.0f} FLOP/B ({mm})"}
    return pd.DataFrame(roofs), points, pd.DataFrame([ridge])


# ---------------------------------------------------------------- validation records and calibrations


def load_validation_records(root: str | Path | None = None):
    """Harness records `<root>/<device>/*.jsonl` -> (DataFrame[device, file, kernel, predicted_ms, measured_ms,
    error_pct], notes). A missing folder gives an empty frame; malformed lines and records without the fields are
    skipped and counted in the notes."""
    import pandas as pd

    cols = ["device", "file", "kernel", "predicted_ms", "measured_ms", "error_pct"]
    root = Path(RECORDS_DIR if root is None else root)
    rows, bad, incomplete = [], 0, 0
    for path in sorted(root.glob("*/*.jsonl")) if root.is_dir() else []:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            bad += 1
            continue
        for line in lines:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if not isinstance(rec, dict):
                bad += 1
                continue
            meas = rec.get("measured")
            measured = meas.get("median_ms") if isinstance(meas, dict) else None
            pred = rec.get("predicted_ms")
            try:
                pred, measured = float(pred), float(measured)
            except (TypeError, ValueError):
                incomplete += 1
                continue
            if not (np.isfinite(pred) and np.isfinite(measured) and pred > 0 and measured > 0):
                incomplete += 1
                continue
            rows.append({"device": path.parent.name, "file": path.name, "kernel": str(rec.get("kernel", "?")),
                         "predicted_ms": pred, "measured_ms": measured,
                         "error_pct": 100.0 * (pred - measured) / measured})
    notes = []
    if bad:
        notes.append(f"{bad} unreadable line(s) or file(s) skipped")
    if incomplete:
        notes.append(f"{incomplete} record(s) without predicted_ms and measured.median_ms skipped")
    return pd.DataFrame(rows, columns=cols), notes


def validation_summary(recs):
    """Per device: number of records, median and max |predicted - measured| / measured in percent."""
    return recs.assign(abs_err=recs["error_pct"].abs()).groupby("device").agg(
        records=("kernel", "size"), median_abs_error_pct=("abs_err", "median"), max_abs_error_pct=("abs_err", "max"))


def validation_reference(recs, band: float = 0.2):
    """The y = x line and the +-band error band over the records' range (ms), for the predicted-vs-measured plot."""
    import pandas as pd

    lo = min(recs["measured_ms"].min(), recs["predicted_ms"].min()) / 2
    hi = max(recs["measured_ms"].max(), recs["predicted_ms"].max()) * 2
    x = np.array([lo, hi])
    return pd.DataFrame({"measured_ms": x, "predicted_ms": x, "lo": x * (1 - band), "hi": x * (1 + band)})


def calibration_files(folder: str | Path | None = None):
    """The calibration YAMLs present: device id, units calibrated, and their source lines (unreadable files say so)."""
    import pandas as pd

    rows = []
    folder = Path(CALIBRATION_DIR if folder is None else folder)
    for p in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
            units = (data.get("units") or {}) if isinstance(data, dict) else {}
            rows.append({"device": p.stem, "units": ", ".join(units) if isinstance(units, dict) else "?",
                         "source": "; ".join(str(u.get("source", "")) for u in units.values() if isinstance(u, dict))
                         if isinstance(units, dict) else "", "file": p.name})
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            rows.append({"device": p.stem, "units": "?", "source": "unreadable", "file": p.name})
    return pd.DataFrame(rows, columns=["device", "units", "source", "file"])


# ---------------------------------------------------------------- export


def export_json(estimates: list[Estimate], inputs: dict) -> str:
    """The current sizing as JSON: the inputs and one full Estimate per device."""
    return json.dumps({"inputs": inputs, "estimates": [e.model_dump() for e in estimates]}, indent=2)


# ---------------------------------------------------------------- serving (planner.serving)


SERVING_COLUMNS = {"rank": "rank", "hardware": "device", "weights": "weights", "tp": "TP", "pp": "PP",
                   "replicas": "replicas", "gpus": "devices", "max_num_seqs": "max sequences",
                   "ttft_p95_ms": "TTFT p95 (ms)", "tpot_p95_ms": "TPOT p95 (ms)",
                   "mean_running": "concurrent requests (mean)", "usd_per_hour": "$/hour",
                   "usd_per_m_output_tokens": "$ per million output tokens",
                   "energy_j_per_output_token": "J per output token"}


def users_to_qps(users: float, output_mean: float, tpot_ms: float, think_s: float = 0.0) -> float:
    """Concurrent users -> request rate by Little's law, rate = users / time per request cycle, where a cycle is a
    user's think time plus the time to stream the mean output at the TPOT target (the slowest acceptable service;
    a faster setup serves the same users with fewer requests in flight)."""
    if not (users > 0 and output_mean > 0 and tpot_ms > 0 and think_s >= 0):
        raise PlannerError(f"users: need users > 0, output > 0, TPOT > 0 and think time >= 0; got users={users}, "
                           f"output={output_mean}, TPOT={tpot_ms} ms, think={think_s} s")
    return float(users) / (think_s + output_mean * tpot_ms / 1e3)


def serving_plan(m: ModelArch, hardware: list, scenario: str, qps: float, ttft_p95_ms: float,
                 tpot_p95_ms: float, n_requests: int = 600, kv: str = "fp16", efficiency: str = "auto",
                 formats: tuple[str, ...] | None = None):
    """The capacity plan (planner.serving.plan) over the given devices (catalog ids or HardwareSpec objects, uploads
    included; None = the whole catalog), with the sidebar's KV dtype and efficiency and, when given, only these
    weight formats. Returns a dict: table (ranked, readable columns), rejected (device, reason), recommendations,
    workload description, formats searched, configs (every simulated configuration, for the Pareto chart), best
    (the first row as a dict, or None)."""
    from dataclasses import replace

    from .serving import plan
    from .serving.scenarios import get_scenario

    sc = get_scenario(scenario)
    if formats:
        sc = replace(sc, formats=tuple(formats))
    mode, _ = split_efficiency(efficiency)
    res = plan(m, sc, qps=qps, ttft_p95_ms=ttft_p95_ms, tpot_p95_ms=tpot_p95_ms, hardware=hardware or None,
               n_requests=n_requests, kv_dtype=kv, efficiency=mode)
    t = res.table
    ok = t[t["status"] == "ok"]
    table = ok[[c for c in SERVING_COLUMNS if c in ok]].rename(columns=SERVING_COLUMNS)
    rejected = t[t["status"] != "ok"][["hardware", "reason"]].rename(columns={"hardware": "device"})
    return {"table": table, "rejected": rejected, "recommendations": res.recommendations,
            "workload": res.scenario.workload.describe(), "formats": res.scenario.formats,
            "configs": pareto_frame(res.configs, res.scenario.workload.qps, res.scenario.workload.output.mean), "best": res.best,
            "output_mean": res.scenario.workload.output.mean, "prompt_mean": res.scenario.workload.prompt.mean}


def pareto_frame(configs, qps: float, output_mean: float):
    """Every configuration that met the targets (at the plan's load) as output tok/s per device = requests/s x mean
    output / devices against tok/s per user = 1000 / TPOT p95, and whether it is on the Pareto front (no other point
    is at least as good on both and better on one)."""
    import pandas as pd

    cols = ["hardware", "weights", "tp", "pp", "replicas", "gpus", "tok_s_per_gpu", "tok_s_per_user", "pareto",
            "label"]
    if configs is None or configs.empty or "status" not in configs:
        return pd.DataFrame(columns=cols)
    c = configs[configs["status"].astype(str).str.startswith("meets")].copy()
    need = {"gpus", "tpot_p95_ms"}
    if c.empty or not need <= set(c.columns):
        return pd.DataFrame(columns=cols)
    c = c[(c["gpus"] > 0) & (c["tpot_p95_ms"] > 0)]
    c["tok_s_per_gpu"] = qps * output_mean / c["gpus"]
    c["tok_s_per_user"] = 1e3 / c["tpot_p95_ms"]
    c = c.drop_duplicates(["hardware", "weights", "tp", "pp", "gpus"]).reset_index(drop=True)
    x, y = c["tok_s_per_user"].to_numpy(), c["tok_s_per_gpu"].to_numpy()
    c["pareto"] = [not bool(np.any((x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i])))) for i in range(len(c))]
    c["label"] = [f"{r.hardware} {r.weights} TP{int(r.tp)}" + (f" PP{int(r.pp)}" if r.pp > 1 else "")
                  + f" x{int(r.replicas)}" for r in c.itertuples()]
    return c[cols]


HF_ID = re.compile(r"huggingface\.co/([\w.\-]+/[\w.\-]+)")
KV_FLAGS = {"fp16": ("auto", "auto", "auto", "f16"), "bf16": ("auto", "auto", "auto", "f16"),
            "fp8": ("fp8", "fp8_e4m3", "fp8", "q8_0"), "int8": ("fp8", "fp8_e4m3", "int8", "q8_0"),
            "int4": ("fp8", "fp8_e4m3", "fp8", "q4_0"), "fp8-per-token": ("fp8", "fp8_e4m3", "fp8", "q8_0"),
            "q8_0": (None, None, None, "q8_0"), "q4_0": (None, None, None, "q4_0")}  # None: no such cache
QUANT_FLAGS = {"fp8": ("fp8", "fp8", "FP8"), "int8": ("bitsandbytes", "w8a8_int8", "W8A16"),
               "w8a8-int8": ("compressed-tensors", "w8a8_int8", "W8A8_SQ_PER_CHANNEL"),
               "int4-g128": ("awq", "awq", "W4A16_AWQ")}


# LMDeploy TurboMind: --model-format per weight format (hf = the checkpoint's own 16-bit weights), and --quant-policy
# per KV dtype (8 = int8, 4 = int4); a format or cache not listed is not TurboMind's
LMDEPLOY_MODEL_FORMATS = {"fp16": "hf", "bf16": "hf", "int4-g128": "awq", "awq-int4": "awq", "gptq-int4": "gptq"}
LMDEPLOY_QUANT_POLICY = {"fp16": 0, "bf16": 0, "int8": 8, "int4": 4}


def hf_id(m: ModelArch) -> str:
    """The Hugging Face repository of a catalog model (from its source URL), else its name."""
    found = HF_ID.search(m.source or "")
    return found.group(1) if found else m.name


def launch_commands(m: ModelArch, weights: str, kv: str, tp: int, pp: int, max_num_seqs: int,
                    max_len: int, gpu_mem_util: float = 0.90) -> dict[str, str]:
    """Copy-ready launch lines for the chosen setup, per engine. Flag names from each engine's documentation:
    vLLM `vllm serve` (--tensor-parallel-size, --pipeline-parallel-size, --max-num-seqs, --gpu-memory-utilization,
    --kv-cache-dtype, --quantization, --max-model-len); SGLang `python -m sglang.launch_server` (--tp, --pp-size,
    --max-running-requests, --mem-fraction-static, --kv-cache-dtype, --quantization, --context-length);
    TensorRT-LLM `trtllm-serve` (--tp_size, --pp_size, --max_batch_size, --max_seq_len,
    --kv_cache_free_gpu_memory_fraction; KV dtype and quantization come with the checkpoint); llama.cpp
    `llama-server` (-ngl, -np, -c = parallel x context, -sm, -ctk/-ctv, -fa); LMDeploy `lmdeploy serve api_server
    --backend turbomind` (--tp, --max-batch-size, --session-len, --cache-max-entry-count, --quant-policy 8 / 4 for an
    int8 / int4 KV cache, --model-format awq / gptq). A weight format or cache an engine does not take is a comment on
    its line."""
    repo, kvk = hf_id(m), KV_FLAGS.get(kv, ("auto",) * 3 + ("f16",))
    q = QUANT_FLAGS.get(weights)
    no_kv = f"  # no {kv} KV cache in this engine: the model's dtype"
    v = [f"vllm serve {repo}", f"--tensor-parallel-size {tp}"] + ([f"--pipeline-parallel-size {pp}"] if pp > 1 else []) \
        + [f"--max-num-seqs {max_num_seqs}", f"--gpu-memory-utilization {gpu_mem_util:.2f}",
           f"--kv-cache-dtype {kvk[0] or 'auto'}", f"--max-model-len {max_len}"] \
        + ([f"--quantization {q[0]}"] if q else [])
    sg = [f"python -m sglang.launch_server --model-path {repo}", f"--tp {tp}"] \
        + ([f"--pp-size {pp}"] if pp > 1 else []) \
        + [f"--max-running-requests {max_num_seqs}", f"--mem-fraction-static {gpu_mem_util - 0.02:.2f}",
           f"--kv-cache-dtype {kvk[1] or 'auto'}", f"--context-length {max_len}"] \
        + ([f"--quantization {q[1]}"] if q else [])
    trt = [f"trtllm-serve {repo}", f"--tp_size {tp}", f"--pp_size {pp}", f"--max_batch_size {max_num_seqs}",
           f"--max_seq_len {max_len}", f"--kv_cache_free_gpu_memory_fraction {gpu_mem_util:.2f}"]
    notes = ([f"checkpoint quantized to {q[2]} (modelopt)"] if q else []) \
        + ([f"KV cache {kvk[2] or 'in the model dtype (no ' + kv + ' cache)'}"] if kv not in ("fp16", "bf16") else [])
    trt_note = "  # " + ", ".join(notes) if notes else ""
    gguf = {"q8_0": "Q8_0", "q6_k": "Q6_K", "q5_k_m": "Q5_K_M", "q4_k_m": "Q4_K_M", "q4_0": "Q4_0"}.get(
        weights, "Q4_K_M" if weights.startswith("int4") else "Q8_0" if "8" in weights else "F16")
    lc = [f"llama-server -m {repo.split('/')[-1]}-{gguf}.gguf", "-ngl 99", f"-np {max_num_seqs}",
          f"-c {max_num_seqs * max_len}", "-fa on", f"-ctk {kvk[3]} -ctv {kvk[3]}"] \
        + ([f"-sm row -ts {','.join(['1'] * tp)}"] if tp > 1 else [])
    lm_fmt = LMDEPLOY_MODEL_FORMATS.get(weights)
    lm_kv = LMDEPLOY_QUANT_POLICY.get(kv)
    lm = [f"lmdeploy serve api_server {repo} --backend turbomind", f"--tp {tp}", f"--max-batch-size {max_num_seqs}",
          f"--session-len {max_len}", f"--cache-max-entry-count {LMDEPLOY_CACHE_MAX_ENTRY_COUNT:g}"] \
        + ([f"--quant-policy {lm_kv}"] if lm_kv else []) + ([f"--model-format {lm_fmt}"] if lm_fmt not in (None, "hf") else [])
    lm_notes = ([f"{weights} is not a TurboMind weight format (hf, awq, gptq)"] if lm_fmt is None else []) \
        + ([f"no {kv} KV cache in TurboMind (int8 / int4 via --quant-policy): the model's dtype"]
           if lm_kv is None and kv not in ("fp16", "bf16") else []) \
        + (["no pipeline parallelism in TurboMind: one replica spans --tp GPUs"] if pp > 1 else [])
    return {"vLLM": " \\\n  ".join(v) + (no_kv if kvk[0] is None else ""),
            "SGLang": " \\\n  ".join(sg) + (no_kv if kvk[1] is None else ""),
            "TensorRT-LLM": " \\\n  ".join(trt) + trt_note, "llama.cpp": " \\\n  ".join(lc),
            "LMDeploy": " \\\n  ".join(lm) + ("  # " + "; ".join(lm_notes) if lm_notes else "")}


def batching_tradeoff(m: ModelArch, spec: HardwareSpec, weights: str, kv: str, prompt: int, output: int,
                      efficiency: str = "auto", knee: int | None = None):
    """'batch 1, 8, 32, 64 (and the knee): latency per step, requests/s' for one device
    (planner.serving.batching_table, given the objects themselves)."""
    from .serving import batching_table

    mode, runtime = split_efficiency_for(efficiency, spec, weights)
    batches = {1, 8, 32, 64, 128, 256} | ({int(knee)} if knee else set())
    df = batching_table(m, spec, sorted(batches), prompt, output, weights, kv, mode, runtime=runtime)
    if knee:  # the knee of the full batch sweep (find_knee), the same number the Batching section shows
        df["knee"] = df["batch"] == int(knee)
    return df.rename(columns={"batch": "batch", "fits": "fits", "ttft_ms": "TTFT (ms)",
                              "step_ms": "step = TPOT (ms)", "e2e_s": "end-to-end (s)",
                              "requests_per_s": "requests/s", "output_tokens_per_s": "output tok/s",
                              "power": "power (req/s per s)", "knee": "knee", "total_gb": "memory (GB)"})


# ---------------------------------------------------------------- comparison, fit search, operators, summaries


def compare_frame(estimates: list[Estimate], specs: list[HardwareSpec], tp: int = 1):
    """One row per device: fit, TTFT, TPOT, total tok/s, $/hour, $ per million output tokens and J per token (module
    docstring), plus `winners`: column -> the device that is best in it (None where fewer than two devices have a
    value)."""
    import pandas as pd

    rows = []
    for e, s in zip(estimates, specs):
        tok = e.decode.tokens_per_s_total if e.memory.fits else None
        price = s.price.usd_per_hour * tp if s.price else None
        watts = s.power.tdp_w * tp if s.power else None
        rows.append({"device": e.hardware, "fits": "yes" if e.memory.fits else "no",
                     "TTFT (ms)": e.end_to_end.ttft_ms if e.memory.fits else None,
                     "TPOT (ms)": e.end_to_end.tpot_ms if e.memory.fits else None,
                     "tok/s total": tok, "memory (GB)": e.memory.total_gb, "usable (GB)": e.memory.capacity_gb,
                     "$/hour": price,
                     "$ per million tokens": price / (tok * 3600) * 1e6 if price and tok else None,
                     "J per token": watts / tok if watts and tok else None})
    df = pd.DataFrame(rows)
    best = {"TTFT (ms)": "min", "TPOT (ms)": "min", "tok/s total": "max", "$/hour": "min",
            "$ per million tokens": "min", "J per token": "min"}
    winners = {}
    for col, how in best.items():
        vals = pd.to_numeric(df[col], errors="coerce")
        if vals.notna().sum() >= 2:
            winners[col] = df.loc[vals.idxmin() if how == "min" else vals.idxmax(), "device"]
    return df, winners


def node_size(spec: HardwareSpec) -> int:
    """Devices of one node of this device (serving.parallelism.node_for): 1 for a SoC or a card without a link."""
    from .serving.parallelism import node_for

    return node_for(spec).gpus_per_node


def smallest_setup(m: ModelArch, spec: HardwareSpec, weights: str, kv: str, batch: int, prompt: int, output: int,
                   efficiency: str = "auto", formats=("fp16", "fp8", "int8", "int4-g128")) -> dict | None:
    """The smallest setup that fits one node of this device: the fewest devices (tensor parallel 1, 2, 4, 8 up to the
    node's size, heads permitting) in the chosen format, else in the first of `formats` (highest precision first)
    that fits. None when nothing fits one node."""
    from .serving.parallelism import check_tp

    tps = [t for t in (1, 2, 4, 8) if t <= node_size(spec)]
    for fmt in [weights] + [f for f in formats if f != weights]:
        for tp in tps:
            try:
                check_tp(m, tp)
                e = ui_estimate(m, spec, fmt, kv, batch, prompt, output, efficiency, tp)
            except PlannerError:
                continue
            if e.memory.fits:
                return {"tp": tp, "weights": e.weights, "total_gb": e.memory.total_gb,
                        "capacity_gb": e.memory.capacity_gb}
    return None


def operator_table(e: Estimate):
    """Per operator (LLM-Viewer's table): stage, op, layers, GFLOP, MB moved, FLOP/byte, time (ms, all layers),
    share of the stage's time, and what bounds it."""
    import pandas as pd

    rows = []
    for stage, rep in (("prefill", e.prefill), ("decode (first step)", e.decode)):
        total = sum(o.time_ms for o in rep.ops) or 1.0
        for o in rep.ops:
            rows.append({"stage": stage, "operator": o.name, "layers": o.count, "GFLOP": o.flops / 1e9,
                         "MB moved": o.bytes / 1e6,
                         "FLOP/byte": o.flops / o.bytes if o.bytes > 0 else None,
                         "time (ms)": o.time_ms, "share of stage (%)": 100 * o.time_ms / total, "bound": o.bound})
    return pd.DataFrame(rows)


def roofline_overlay(estimates: list[Estimate]):
    """One roof per device (its matmul dtype's datasheet peak and bandwidth, TFLOP/s against FLOP/byte) over a shared
    x range, and every device's decode and prefill operators, for the overlay chart."""
    import pandas as pd

    pts, lo, hi = [], [], []
    for e in estimates:
        for stage, rep in (("prefill", e.prefill), ("decode", e.decode)):
            for o in rep.ops:
                if o.flops > 0 and o.bytes > 0 and o.time_ms > 0:
                    pts.append({"hardware": e.hardware, "stage": stage, "op": o.name, "intensity": o.flops / o.bytes,
                                "achieved_tflops": o.flops / (o.time_ms * 1e-3) / 1e12, "bound": o.bound})
        lo.append(e.roofline.ridge_flop_per_byte)
        hi.append(e.roofline.ridge_flop_per_byte)
    points = pd.DataFrame(pts, columns=["hardware", "stage", "op", "intensity", "achieved_tflops", "bound"])
    x_lo = 10 ** np.floor(np.log10(min(lo + ([points["intensity"].min()] if len(points) else [])) / 2))
    x_hi = 10 ** np.ceil(np.log10(max(hi + ([points["intensity"].max()] if len(points) else [])) * 2))
    roofs = []
    for e in estimates:
        peak, bw, r = e.roofline.peak_tflops["matmul"], e.roofline.bandwidth_gbs, e.roofline.ridge_flop_per_byte
        for x in (x_lo, r, x_hi):
            roofs.append({"hardware": e.hardware, "intensity": x, "tflops": min(bw * 1e9 * x, peak * 1e12) / 1e12,
                          "label": f"{e.hardware}: {peak:g} TFLOP/s, {bw:g} GB/s"})
    return pd.DataFrame(roofs), points


def model_summary(m: ModelArch) -> dict:
    """What the parse of a config.json gave: parameters (total, active), layers, attention, MLP, KV bytes per token
    at 16 bits, maximum context."""
    from .ops import kv_bytes_per_token

    attn = "MLA" if m.mla else (f"GQA {m.num_attention_heads}/{m.num_kv_heads}" if m.num_kv_heads <
                                 m.num_attention_heads else f"MHA {m.num_attention_heads}")
    return {"name": m.name, "family": m.family, "parameters (B)": m.total_params / 1e9,
            "active parameters (B)": m.active_params / 1e9, "layers": m.num_layers, "hidden size": m.hidden_size,
            "attention": f"{attn} heads x {m.head_dim}", "MLP": (f"MoE {m.moe.num_experts} experts, "
                                                                  f"{m.moe.experts_per_token} active"
                                                                  if m.moe else f"dense {m.intermediate_size}"),
            "KV per token (fp16, bytes)": float(kv_bytes_per_token(m, "fp16")),
            "max context (tokens)": m.max_position_embeddings}


def custom_gpu_spec(name: str, memory_gb: float, bandwidth_gbs: float, fp16_tflops: float,
                    int8_tflops: float | None = None, fp8_tflops: float | None = None,
                    tdp_w: float | None = None, usd_per_hour: float | None = None) -> HardwareSpec:
    """A GPU typed into the page's form -> HardwareSpec through the same schema as hardware_specs/*.yaml (numbers
    checked there); every number's source is 'typed by the user'."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-") or "custom-gpu"
    peaks = {"fp16": fp16_tflops, "bf16": fp16_tflops, "fp32": fp16_tflops / 2}
    if int8_tflops:
        peaks["int8"] = int8_tflops
    if fp8_tflops:
        peaks["fp8"] = fp8_tflops
    src = "typed into the web UI's custom GPU form by the user"
    data = {"id": f"custom-{slug}", "name": name.strip() or "custom GPU", "kind": "gpu", "vendor": "user",
            "memory": {"capacity_gb": memory_gb, "bandwidth_gbs": bandwidth_gbs, "source": src},
            "units": [{"name": "gpu", "kind": "gpu", "peak_tflops": peaks, "source": src}]}
    if tdp_w:
        data["power"] = {"tdp_w": tdp_w, "source": src}
    if usd_per_hour:
        data["price"] = {"usd_per_hour": usd_per_hour, "source": src}
    return parse_hardware(data, "custom GPU form")
