"""`planner accuracy --data FILE`: the committed engine profiles against measurements they were not fitted to (a
user's own runs, or a new source), in the schema of data/measured_public.csv and data/measured_serving.csv (the
same columns; measured_public.md / measured_serving.md state the conventions).

Each row is mapped as the project's own rows are (data.map_public_rows for llama.cpp, TensorRT-LLM and gpt-fast;
serving_rows.map_serving_rows for vLLM, SGLang, TGI, LMDeploy and ExLlamaV2; labels.py for labels their tables
do not list) and predicted with the committed profiles of hardware_specs/runtimes/ (no refit), exactly as `planner
estimate --runtime <engine>` would: the prediction, and the p10-p90 range the estimate prints
(runtimes.interval_regime, widened outside the fit; a run through a server under load, data.served_under_load,
takes the range the serving commands print: the '_served' one). Error = |predicted - measured| / measured in the
row's unit; covered = the measured value lies in the range. A row whose source_id is one the project's data
already holds was fitted to (in_fit): the headline figures count the others.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import PlannerError
from ..io import atomic_write_text

REQUIRED = ("source_id", "hardware", "framework", "model", "weight_format", "kv_dtype", "batch", "input_len",
            "output_len", "metric", "value")
OPTIONAL = ("hardware_detail", "params_b", "unit", "notes")
TIME_KINDS = ("ttft", "tpot", "e2e")  # kinds whose value is a latency (predict.value_from_time: no work)
NUMERIC = {"batch": (1, 1_000_000), "input_len": (0, 10_000_000), "output_len": (0, 10_000_000)}  # integer ranges
TEXT = ("source_id", "hardware", "framework", "model", "weight_format", "metric")  # must not be blank


def source_name(src) -> str:
    """A file path's name, or the name of an upload given as (name, bytes)."""
    return str(src[0]) if isinstance(src, tuple) else Path(src).name


def read_file(src) -> "pd.DataFrame":
    """A file path, or an upload as (name, bytes), as a frame with every schema column (optional ones blank);
    a one-line PlannerError for anything else."""
    import io

    if isinstance(src, tuple):
        path, handle = src[0], io.BytesIO(src[1])
    else:
        path = handle = src
        if not Path(src).is_file():
            raise PlannerError(f"{src}: " + ("not a file" if Path(src).exists() else "file not found"))
    import warnings

    try:  # index_col=False and warnings as errors: a row with more fields than the header is refused, not shifted
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            raw = pd.read_csv(handle, index_col=False, on_bad_lines="error")
    except Exception as exc:  # pandas raises ParserError, UnicodeDecodeError, EmptyDataError, ...
        detail = " ".join(str(exc).split())[:120]
        raise PlannerError(f"{path}: not a readable CSV ({type(exc).__name__}: {detail})") from None
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise PlannerError(f"{path}: missing column(s) {', '.join(missing)}; the schema is "
                           f"{', '.join(REQUIRED + OPTIONAL)} (data/measured_public.md)")
    for c in OPTIONAL:
        if c not in raw.columns:
            raw[c] = ""
    raw.insert(0, "row", range(len(raw)))
    return raw


def _shown(x) -> str:
    """A cell as the file has it: 2.0 -> '2' (pandas reads integer columns with a blank as floats)."""
    if isinstance(x, float) and np.isfinite(x) and x == int(x):
        return str(int(x))
    return str(x).strip()


def _bad_value(r) -> str | None:
    """Why a row cannot be a measurement (a blank name, a number that is not one), or None."""
    for c in TEXT:
        if not isinstance(r[c], str) or not r[c].strip():
            return f"{c} is blank"
    if r["value"] is None or (isinstance(r["value"], float) and np.isnan(r["value"])) or not str(r["value"]).strip():
        return "value is blank"
    v = pd.to_numeric(pd.Series([r["value"]]), errors="coerce").iloc[0]
    if not (np.isfinite(v) and v > 0):
        return f"value {_shown(r['value'])} is not a positive number"
    for c, (lo, hi) in NUMERIC.items():
        x = r[c]
        if x is None or (isinstance(x, float) and np.isnan(x)) or (isinstance(x, str) and not x.strip()):
            continue  # blank: the mappers apply the source conventions (a batch-less row is batch 1, ...)
        try:
            f = float(x)
        except (TypeError, ValueError):
            return f"{c} {_shown(x)} is not a number"
        if not (np.isfinite(f) and f == int(f) and lo <= f <= hi):
            return f"{c} {_shown(x)} is not an integer in {lo}..{hi:,}"
    return None


def refused(rec: dict) -> str | None:
    """The one-line error `planner estimate` gives for a mapped row's configuration (an engine on a vendor it does
    not run on, a tensor-parallel group larger than the device's node, a TP degree the model cannot be split by),
    or None: such a row is listed with that reason, not predicted. One estimate per configuration (_refused)."""
    return _refused(rec["model"], rec["hardware"], rec["weights"], rec["kv_dtype"], rec["runtime"],
                    int(rec.get("tp", 1) or 1))


@lru_cache(maxsize=1024)
def _refused(model: str, hardware: str, weights: str, kv_dtype: str, runtime: str, tp: int) -> str | None:
    from .. import estimate
    from ..errors import PlannerError
    try:
        estimate(model, hardware, weights, kv_dtype, 1, 1, 1, runtime=runtime, tp=tp)
    except PlannerError as exc:
        return str(exc)
    return None


def load_external(paths) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """(mapped rows, unmapped rows with `reason`) of every file (a path, or an upload as (name, bytes)), mapped as
    the project's rows are."""
    from .data import KINDS as PUBLIC_KINDS
    from .data import map_public_rows, rows_frame, _runtime
    from .predict import length_problem
    from .serving_rows import METRICS as SERVING_METRICS
    from .serving_rows import map_serving_rows, serving_runtime

    mapped, unmapped = [], []
    for path in paths:
        raw = read_file(path)
        name = source_name(path)
        bad = [_bad_value(r) for r in raw.to_dict("records")]
        for r, why in zip(raw.to_dict("records"), bad):
            if why:
                unmapped.append({**r, "file": name, "reason": why})
        ok = raw.loc[np.array([b is None for b in bad], dtype=bool)].copy()
        for c in ("value", *NUMERIC):
            ok[c] = pd.to_numeric(ok[c], errors="coerce")
        fw = [str(f) for f in ok["framework"]]
        # a serving engine's rows, and any engine's rows of a metric only the serving mapper reads (a TensorRT-LLM
        # or llama.cpp server's TPOT, ITL or end-to-end latency), go to map_serving_rows
        serving_only = np.array([m not in PUBLIC_KINDS and m in SERVING_METRICS for m in ok["metric"]], dtype=bool)
        known = np.array([_runtime(f) is not None for f in fw], dtype=bool)
        serving_fw = np.array([serving_runtime(f) is not None for f in fw], dtype=bool) | (known & serving_only)
        public_fw = known & ~serving_fw
        pub, srv, other = ok.loc[public_fw], ok.loc[serving_fw], ok.loc[~public_fw & ~serving_fw]
        m1, u1 = map_public_rows(pub, name)
        m2, u2 = map_serving_rows(srv.drop(columns="row"), name, rows=list(srv["row"]))
        by_row = {int(r["row"]): r for r in raw.to_dict("records")}
        for rec in m1 + m2:
            why = length_problem(rec) or refused(rec)
            if why:
                unmapped.append({**by_row[int(rec["row"])], "file": name, "reason": why})
            else:
                mapped.append(rec)
        unmapped += u1 + u2
        for r in other.to_dict("records"):
            unmapped.append({**r, "file": name, "reason": f"framework '{r['framework']}' has no runtime profile"})
    unmapped = pd.DataFrame(unmapped)
    if len(unmapped):
        unmapped = unmapped.sort_values(["file", "row"], kind="stable").reset_index(drop=True)
    return (rows_frame(mapped) if mapped else pd.DataFrame()), unmapped


def project_sources() -> set[str]:
    """source_id of every row of the project's data, which the committed profiles were fitted to."""
    from .data import DATA_PATH
    from .serving_rows import SERVING_PATH

    return set(pd.read_csv(DATA_PATH)["source_id"]) | set(pd.read_csv(SERVING_PATH)["source_id"])


def _interval(profiles, r, key: str):
    """(p10, p90) of measured / predicted speed that `planner estimate` prints for this row (module docstring)."""
    from ..architecture import load_model
    from ..runtimes import default_interval_class, interval_regime

    prof = profiles.get(r["runtime"])
    pc = None
    if prof is not None:  # the class estimate prints: fitted, or unmeasured_class's widened kind-default range
        from ..hardware import load_hardware
        spec = load_hardware(r["hardware"])
        if prof.runs_on_vendor(spec):
            pc = prof.for_unit(spec, spec.unit(r["unit"]))
    pc = pc or default_interval_class()
    if pc is None:
        return np.nan, np.nan
    m = load_model(r["model"])
    iv = interval_regime(pc, "prefill" if key == "prefill" else "decode", 1 if key == "decode" else 2,
                         moe=m.moe is not None, multi_gpu=r["tp"] > 1, traits=m.traits,
                         served=bool(r.get("served", False)))  # data.served_under_load, as the frame has it
    return (iv.p10, iv.p90) if iv is not None else (np.nan, np.nan)


def check(paths) -> dict:
    """Predictions, ranges and errors of the committed profiles on the files' rows (module docstring)."""
    from ..hardware import DATASHEET_EFFICIENCY
    from .benchmark import _add_units, _profile_times, committed_profiles
    from .data import interval_keys
    from .predict import build_design, params_for_rows, predict_time_s, value_from_time

    df, unmapped = load_external(paths)
    if df.empty:
        return {"results": df, "unmapped": unmapped}
    df = _add_units(df).reset_index(drop=True)
    burst = (df["ttft_mode"] == "burst").to_numpy() if "ttft_mode" in df else np.zeros(len(df), dtype=bool)
    res = df.copy()
    pred, pred_ds = np.full(len(df), np.nan), np.full(len(df), np.nan)
    profiles = committed_profiles()
    steps = ~burst  # fixed-shape rows: the step model; bursts: the serving simulator (bursts.py)
    if steps.any():
        d = build_design(df.loc[steps].reset_index(drop=True))
        t = _profile_times(df.loc[steps].reset_index(drop=True), d, profiles)
        t_ds = predict_time_s(d, params_for_rows(d, [DATASHEET_EFFICIENCY] * int(steps.sum())))
        pred[steps], pred_ds[steps] = value_from_time(d, t), value_from_time(d, t_ds)
    refused = np.zeros(len(df), dtype=bool)
    if burst.any():
        from .bursts import burst_predictions
        pred[burst], pred_ds[burst], why = burst_predictions(df.loc[burst])
        idx = np.flatnonzero(burst)
        fails = [(i, w) for i, w in zip(idx, why) if w]
        refused[[i for i, _ in fails]] = True
        extra = [{"file": df.at[i, "file"], "row": df.at[i, "row"], "source_id": df.at[i, "source"],
                  "metric": df.at[i, "metric"], "reason": w} for i, w in fails]
        if extra:
            unmapped = pd.concat([unmapped, pd.DataFrame(extra)], ignore_index=True).sort_values(
                ["file", "row"], kind="stable").reset_index(drop=True)
    res["pred"], res["pred_datasheet"] = pred, pred_ds
    res["err_pct"] = np.abs(res["pred"] - res["measured"]) / res["measured"] * 100
    res["err_datasheet_pct"] = np.abs(res["pred_datasheet"] - res["measured"]) / res["measured"] * 100
    is_time = res["kind"].isin(TIME_KINDS).to_numpy(dtype=bool)  # a latency; else a rate (value_from_time)
    ratio = np.where(is_time, res["pred"] / res["measured"], res["measured"] / res["pred"])  # measured / predicted speed
    keys = interval_keys(res)
    iv = np.array([_interval(profiles, r, k) for r, k in zip(res.to_dict("records"), keys)], dtype=np.float64)
    lo, hi = iv[:, 0], iv[:, 1]
    res["low"] = np.where(is_time, res["pred"] / hi, res["pred"] * lo)
    res["high"] = np.where(is_time, res["pred"] / lo, res["pred"] * hi)
    res["covered"] = (ratio >= lo) & (ratio <= hi)
    res["in_fit"] = res["source"].isin(project_sources())
    return {"results": res.loc[~refused].reset_index(drop=True), "unmapped": unmapped}


def scored(res):
    """The rows the figures count: not flagged anomalous by the data's caveats (data.ANOMALOUS), as in `planner
    accuracy`; every row stays in accuracy_data_rows.csv with its flag."""
    return res[res["anomalous"].fillna("") == ""] if "anomalous" in res else res


def _pct(x: float, width: int = 0) -> str:
    """An error in percent: one decimal, or three significant digits from 1e6 % (a value off by orders of
    magnitude, e.g. a unit typed wrong, stays one short cell)."""
    return f"{x:{width}.1f}" if abs(x) < 1e6 else f"{x:{width}.3g}"


def _cell(x) -> str:
    """A value as one Markdown table cell: whitespace (newlines) folded, the column bar replaced."""
    return " ".join(str(x).split()).replace("|", "/")


def _table(res, by: list[str]) -> str:
    head = "| " + " | ".join(by) + " | rows | median % | p90 % | datasheet median % | coverage % |"
    lines = [head, "|" + "---|" * (len(by) + 5)]
    for k, g in res.groupby(by, sort=True):
        k = k if isinstance(k, tuple) else (k,)
        e, ed = g["err_pct"], g["err_datasheet_pct"]
        lines.append("| " + " | ".join(_cell(x) for x in k) + f" | {len(g)} | {_pct(e.median())} | {_pct(e.quantile(0.9))} | "
                     f"{_pct(ed.median())} | {100 * g['covered'].mean():.0f} |")
    return "\n".join(lines)


ROW_COLUMNS = ["file", "row", "source", "in_fit", "hardware_label", "hardware", "model", "weights", "runtime",
               "metric", "regime", "batch", "prompt", "output", "tp", "served", "measured", "pred", "low", "high",
               "covered",
               "err_pct", "pred_datasheet", "err_datasheet_pct", "anomalous"]


def render(out: dict, paths) -> str:
    res, unmapped = out["results"], out["unmapped"]
    n_mapped = len(res)
    res = scored(res) if len(res) else res
    lines = ["# The committed engine profiles against " + ", ".join(f"`{source_name(p)}`" for p in paths), "",
             f"Generated by `planner accuracy --data`: {n_mapped} rows mapped ({n_mapped - len(res)} flagged "
             f"anomalous by the data's caveats and left out of the figures), {len(unmapped)} unmapped (below, "
             "with the reason). Each row is predicted by hardware_specs/runtimes/ as `planner estimate --runtime` "
             "would, with the p10-p90 range it prints (planner/accuracy/external.py; a run through a server "
             "under load, column `served`, with the range the serving commands print). Error = |predicted - "
             "measured| / measured in the row's own unit.", ""]
    if len(res):
        held = res[~res["in_fit"]]
        lines += [f"## Per regime, rows of sources the profiles were not fitted to ({len(held)})", "",
                  _table(held, ["regime"]) if len(held) else "(none: every source is in the project's data)", "",
                  f"## Per regime, every mapped row ({len(res)}; {int(res['in_fit'].sum())} of sources in the "
                  "project's data, fitted to)", "", _table(res, ["regime"]), "",
                  "## By engine and regime", "", _table(res, ["runtime", "regime"]), "",
                  "## By source", "", _table(res, ["source", "in_fit"]), ""]
    if len(unmapped):
        lines += ["## Unmapped rows", "", "| file | row | reason |", "|---|---|---|"]
        lines += [f"| {_cell(r['file'])} | {r['row']} | {_cell(r['reason'])} |"
                  for r in unmapped.to_dict("records")]
        lines.append("")
    return "\n".join(lines)


def write(out: dict, paths, out_dir, png: bool = True) -> tuple[list[str], list[str]]:
    """(files written, notes): accuracy_data.md, accuracy_data_rows.csv and, with png, accuracy_data.png
    (predicted vs measured per engine, report.chart)."""
    from .report import write_png

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files, notes = [], []
    if len(out["results"]):
        atomic_write_text(out_dir / "accuracy_data_rows.csv",
                          out["results"][ROW_COLUMNS].to_csv(index=False, float_format="%.6g"))
        files.append(str(out_dir / "accuracy_data_rows.csv"))
        if png:
            res = out["results"].assign(fitted=np.where(out["results"]["in_fit"], "source fitted to",
                                                        "source not fitted to"))
            msg = write_png(res, out_dir / "accuracy_data.png", pred="pred", shape="fitted",
                            y_title="predicted (committed profiles)",
                            title="llm-planner vs your measurements, per engine (log-log; dashed: y = x)")
            if msg:
                notes.append(msg)
            else:
                files.append(str(out_dir / "accuracy_data.png"))
    atomic_write_text(out_dir / "accuracy_data.md", render(out, paths))
    files.append(str(out_dir / "accuracy_data.md"))
    return files, notes


def regime_summary(res) -> "pd.DataFrame":
    """Per regime and fitted/not: rows, median and p90 error, coverage (the tables of render)."""
    rows = []
    for (regime, in_fit), g in scored(res).groupby(["regime", "in_fit"], sort=True):
        rows.append({"regime": regime, "source fitted to": bool(in_fit), "rows": len(g),
                     "median error %": round(g["err_pct"].median(), 1),
                     "p90 error %": round(g["err_pct"].quantile(0.9), 1),
                     "datasheet median error %": round(g["err_datasheet_pct"].median(), 1),
                     "p10-p90 coverage %": round(100 * g["covered"].mean())})
    return pd.DataFrame(rows)


def summary_lines(out: dict) -> list[str]:
    """One line per regime for the terminal: the held-out rows where any, else every row."""
    res = out["results"]
    if not len(res):
        return []
    res = scored(res)
    held = res[~res["in_fit"]]
    use, what = (held, "not fitted to") if len(held) else (res, "all in the project's data: in-sample")
    lines = []
    for regime, g in use.groupby("regime", sort=True):
        e = g["err_pct"]
        lines.append(f"{regime:15s} {len(g):5d} rows  median {_pct(e.median(), 5)}%  p90 {_pct(e.quantile(0.9), 5)}%  "
                     f"p10-p90 coverage {100 * g['covered'].mean():3.0f}%  ({what})")
    return lines
