"""The tables behind the web UI's charts, computed from the core API only (the CLI could print the same).

Pure functions: (model, device, workload) -> pandas DataFrames for the headline, the memory bars, the batch and
context sweeps, the quantization comparison, the roofline and the validation scatter. No streamlit import here;
app.py caches and renders these. pandas is imported inside functions so that `import planner` stays light.

Definitions used below:
  batch knee     the smallest batch whose first decode step is compute bound (the roofline ridge: past it every
                 extra sequence costs matmul time, so time per token grows ~linearly and total tok/s flattens);
                 when decode stays memory bound over the fitting batches (KV reads grow with the batch), the smallest
                 batch whose TPOT is twice batch 1's (each sequence runs at half its solo speed).
  achieved FLOP/s  op flops / op time (time includes the efficiency factors and launch overhead), so an op's
                 roofline point sits at or below the datasheet roofs.
  spare / short  usable capacity - total memory (GB, 1e9 bytes).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from .architecture import ModelArch, from_hf_config, load_model
from .efficiency import CALIBRATION_DIR, resolve_efficiency
from .errors import PlannerError
from .io import parse_json_text, parse_yaml_text
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
    return from_hf_config(cfg, name=stem if stem != "config" else "uploaded-model", where=filename)


def parse_hardware_upload(data: bytes | str, filename: str = "hardware.yaml") -> HardwareSpec:
    """A hardware spec YAML (bytes or text) -> HardwareSpec, validated by the same schema as hardware_specs/."""
    return parse_hardware(parse_yaml_text(_text(data, filename), filename), filename)


def resolve_model(ref: ModelRef) -> ModelArch:
    if ref[0] == "catalog":
        return load_model(ref[1])
    return parse_model_upload(ref[2], ref[1])


def resolve_hardware(ref: HardwareRef) -> HardwareSpec:
    if ref[0] == "catalog":
        return load_hardware(ref[1])
    return parse_hardware_upload(ref[2], ref[1])


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
        "efficiency": e.efficiency.source,
        "ttft_ms_range": (e.prefill.latency_ms_low, e.prefill.latency_ms_high),
        "tpot_ms_range": (e.decode.latency_ms_per_token_low, e.decode.latency_ms_per_token_high),
        "tok_s_total_range": (e.decode.tokens_per_s_total_low, e.decode.tokens_per_s_total_high),
        "range_source": None if e.intervals is None else ("the kind-default efficiencies" if e.runtime is None else
                                                          f"the {e.runtime} profile ({e.intervals.hardware_class})"),
    }


def accuracy_results():
    """The published-measurement benchmark (committed runtime profiles, no files written): per-row results and the
    held-out target checks, for the app's Accuracy section."""
    from .accuracy.benchmark import run

    out = run(write=False, png=False)
    return out["results"], out["checks"], out["default_coverage"]


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


def ui_estimate(m, spec, weights, kv, batch, prompt, output, eff: str) -> Estimate:
    mode, runtime = split_efficiency(eff)
    return estimate(m, spec, weights, kv, batch, prompt, output, efficiency=mode, runtime=runtime)


def batch_sweep(m: ModelArch, spec: HardwareSpec, weights: str, kv: str, prompt: int, output: int,
                efficiency: str = "auto", batches=tuple(range(1, 257)), flash_attention: bool = True):
    """Batch sizes 1..256 in one vectorized `planner.sweep.sweep` call, plus the first decode step's bound."""
    from .sweep import sweep

    batches = tuple(int(b) for b in batches)
    mode, runtime = split_efficiency(efficiency)
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


def find_knee(df) -> dict | None:
    """The batch knee (definition in the module docstring) among the batches that fit, or None."""
    ok = df[df["fits"]]
    if ok.empty:
        return None
    comp = ok[ok["decode_bound"] == "compute"]
    if not comp.empty:
        row, rule = comp.iloc[0], "decode turns compute bound"
    else:
        base = ok.iloc[0]["tpot_ms"] if ok.iloc[0]["batch"] == 1 else None
        slow = ok[ok["tpot_ms"] >= 2 * base] if base is not None else ok.iloc[0:0]
        if slow.empty:
            return None
        row, rule = slow.iloc[0], "TPOT twice batch 1's"
    return {"hardware": row["hardware"], "batch": int(row["batch"]), "tpot_ms": float(row["tpot_ms"]),
            "decode_tok_s_total": float(row["decode_tok_s_total"]), "rule": rule}


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
    output), plus the current prompt."""
    top = max(model_max - output, 1)
    pts = {p for p in (2 ** k for k in range(7, 23)) if p <= top} | {prompt}
    return sorted(pts)


def context_sweep(m: ModelArch, spec: HardwareSpec, weights: str, kv: str, batch: int, prompt: int, output: int,
                  efficiency: str = "auto", flash_attention: bool = True):
    """Prompt lengths 128 .. model maximum at this batch and output length, one vectorized sweep call."""
    from .sweep import sweep

    prompts = context_points(m.max_position_embeddings, output, prompt)
    mode, runtime = split_efficiency(efficiency)
    df = sweep([m], [spec], [weights], [batch], prompts, [output], kv, mode, flash_attention, runtime)
    df["context"] = df["prompt"] + df["output"]
    df["tok_s_per_seq"] = 1e3 / df["tpot_ms"]
    return df


def quant_comparison(m: ModelArch, spec: HardwareSpec, kv: str, batch: int, prompt: int, output: int,
                     efficiency: str = "auto", formats=QUANT_FORMATS):
    """The same model and workload in each format: memory and speed from `estimate` (a format the device cannot
    run is a row saying so)."""
    import pandas as pd

    rows = []
    for f in formats:
        fmt = weight_format(f)
        try:
            e = ui_estimate(m, spec, fmt.name, kv, batch, prompt, output, efficiency)
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
    bw_eff = bw * eff.bandwidth_fraction
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


def serving_plan(m: ModelArch, hardware: list[str], scenario: str, qps: float, ttft_p95_ms: float,
                 tpot_p95_ms: float, n_requests: int = 600):
    """The capacity plan for the chosen catalog devices: (ranked table, rejected rows, recommendations, workload
    description). Thin wrapper over planner.serving.plan with the table columns the page shows."""
    from .serving import plan

    res = plan(m, scenario, qps=qps, ttft_p95_ms=ttft_p95_ms, tpot_p95_ms=tpot_p95_ms, hardware=hardware,
               n_requests=n_requests)
    t = res.table
    ok = t[t["status"] == "ok"]
    cols = {"rank": "rank", "hardware": "hardware", "weights": "weights", "tp": "TP", "pp": "PP",
            "replicas": "replicas", "gpus": "devices", "ttft_p95_ms": "TTFT p95 (ms)", "tpot_p95_ms": "TPOT p95 (ms)",
            "usd_per_hour": "$/h", "usd_per_m_output_tokens": "$/M output tokens",
            "energy_j_per_output_token": "J/output token"}
    table = ok[list(cols)].rename(columns=cols)
    rejected = t[t["status"] != "ok"][["hardware", "reason"]]
    return table, rejected, [r["recommendation"] for r in res.recommendations], res.scenario.workload.describe()


def batching_tradeoff(m: ModelArch, spec: HardwareSpec, weights: str, kv: str, prompt: int, output: int,
                      efficiency: str = "auto"):
    """'batch 1, 8, 32, 64: latency per step, requests/s' for one device (planner.serving.batching_table)."""
    from .serving import batching_table

    df = batching_table(m, spec, (1, 8, 32, 64, 128, 256), prompt, output, weights, kv, split_efficiency(efficiency)[0])
    return df.rename(columns={"ttft_ms": "TTFT (ms)", "step_ms": "step = TPOT (ms)", "e2e_s": "end-to-end (s)",
                              "requests_per_s": "requests/s", "output_tokens_per_s": "output tok/s",
                              "power": "power (req/s per s)", "total_gb": "memory (GB)"})
