"""Fit the regime constants of planner/regimes.py to kernel timings measured on real GPUs.

Source: NVIDIA aiconfigurator (`aiconfigurator-core` on PyPI, Apache-2.0, https://github.com/ai-dynamo/aiconfigurator),
files `aiconfigurator_core/systems/data/<system>/{gemm,moe}/trtllm/<version>/{gemm,moe}_perf.parquet`: one row per
kernel with its shape, dtype and measured latency in ms. The package is read at fit time only (optional extra
`kernels`, or an unpacked wheel via --kernels-root); the planner's runtime reads the committed result,
hardware_specs/defaults/regimes.yaml.

Model of one kernel (system s, dtype d; P = our spec's dense peak of d, BW = our spec's bandwidth), the one the
planner applies (planner.regimes.weight_gemm_time_s):

  t_c  = flops / (P x f_sd x tile_padding_efficiency(R, tile_m))  R = GEMM rows (M; tokens per expert for MoE)
  t_m  = bytes / (BW x b_sd)
  t    = (t_c^p + t_m^p)^(1/p) + t0_sd                              regimes.ridge_rolloff_time

  dense GEMM (gemm_perf): flops = 2 M N K, bytes = b_in (M K + K N) + 2 M N (inputs at the dtype, bf16 out)
  MoE (moe_perf, balanced routing, no EP, moe_tp = t in 1..32, gated SwiGLU experts, T tokens, E experts, top-k,
  hidden h, inter I; each GPU holds w = I / t of every expert):
      touched = E (1 - (1 - k/E)^T) (planner.ops.expected_distinct_experts), R = T k / touched,
      flops = 2 T k 3 h w, bytes = b_in touched 3 h w + 4 T h,
      and the compute rate x grouped_width_efficiency(w, P / 1e12; kappa) = w / (w + kappa P / 1e12)
      (planner.regimes: a fixed time per tile that a narrower expert does less work in)

Shared constants (what the planner uses): tile_m and the ridge sharpness p from the dense tables, the grouped
tile_m and kappa from the MoE tables at that p; each chosen on a grid by the median |log error| over all rows. Per table
(nuisance, reported for provenance, not used at run time): f_sd (kernel share of the tensor peak), b_sd (share of
the bandwidth), t0_sd (launch latency), fitted in log space by Levenberg-Marquardt (numpy only). For information
the fit also reports the dense model with wave quantization over the SMs (regimes.wave_efficiency with tile_n), which
the planner cannot apply: an OpCost carries no N (fused projections).

Native FP4: the nvfp4 tables (NVFP4 weights and activations, 0.5625 B per value with its block scales; B200, GB200,
GB300, RTX PRO 6000: FP4_SYSTEMS) are fitted at the tile_m and p the bf16 / fp8 tables chose, f and t0 per table;
their median is kernel_compute_fraction['fp4'] and launch_us['fp4'] (and each engine library's, below). They stay
out of the shape fit, so adding them moved none of the bf16 / fp8 constants.

Engine kernel libraries: the same dense GEMM tables measured through vLLM and SGLang (gemm/<engine>/<version>/, the
newest version per system, LIBRARY_BACKENDS) are fitted with the shared tile_m and p of the TensorRT-LLM tables, f_sd
and t0_sd per table; the median over the GPUs per dtype is that engine's GemmLibrary (regimes.GemmRegime.libraries),
which an engine profile names in Efficiency.kernel_library.

Decode attention (attention/trtllm/<version>/generation_attention_perf.parquet; full attention, head_dim 128,
heads <= 8 x kv_heads, context >= MIN_CONTEXT): t = bytes / (BW x b x decode_attention_efficiency(batch, kv_heads,
context, SMs; split_kv_chunk, ctas_per_sm)) + t0, bytes = batch x kv_heads x context x 128 x 2 x kv bytes (+ query
and output); chunk (0 = no split-KV) and CTAs per SM on a grid, b and t0 per table. Reported with the no-split-KV and
plain-bandwidth fits: the planner keeps the plain bandwidth model for decode attention where the split-KV fit does
no better.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import PlannerError
from ..hardware import load_hardware
from ..ops import expected_distinct_experts
from ..regimes import (decode_attention_efficiency, grouped_width_efficiency, ridge_rolloff_time,
                       tile_padding_efficiency, wave_efficiency)

PACKAGE = "aiconfigurator-core"
# aiconfigurator system -> our spec id (systems whose spec lists an SM count)
SYSTEMS = {"a100_sxm": "a100-80gb-sxm", "h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200",
           "l40s": "l40s", "rtx_pro_6000_server": "rtx-pro-6000-blackwell"}
# systems whose nvfp4 tables join the native FP4 fit only (FP4_DTYPES): every Blackwell part aiconfigurator measured
# with a spec that lists an SM count (B300's does not); their bf16 / fp8 tables stay out of the shared shape and the
# bf16 / fp8 fractions, which the systems above fix
FP4_SYSTEMS = {**SYSTEMS, "gb200": "gb200-b200", "gb300": "gb300"}
SPEC_OF = FP4_SYSTEMS  # every system a fit reads (SYSTEMS is part of it)
DTYPES = {"bfloat16": ("bf16", 2.0), "fp8": ("fp8", 1.0)}   # table dtype -> (spec peak dtype, input bytes)
# Native FP4 GEMMs (NVFP4 weights and activations on Blackwell: 4-bit values + one fp8 scale per 16, 0.5625 B each),
# fitted at the shape the DTYPES tables chose (tile_m, p), as the engine libraries are: f and t0 per table
FP4_DTYPES = {"nvfp4": ("fp4", 0.5 + 1 / 16)}
ALL_DTYPES = {**DTYPES, **FP4_DTYPES}
BACKEND = "trtllm"
VERSIONS = ("1.3.0rc20", "1.0.0")                           # first present per system (A100: 1.0.0 only)
SHAPES = (1024, 2048, 4096, 8192, 16384)                   # dense N and K kept (LLM layer sizes)
MOE_KERNEL = "moe_torch_flow_cutlass"                       # gated (SwiGLU) experts
TILE_M_GRID = (8, 16, 32, 64, 128, 256)
KAPPA_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25, 1.5)  # expert width per TFLOP/s (MoE)
MOE_TP = (1, 2, 4, 8, 16, 32)                               # moe_tp_size values kept (no expert parallelism)
TILE_N_GRID = (32, 64, 128, 256)
P_GRID = (1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0)


def package_root() -> Path:
    """The installed aiconfigurator_core package folder (optional extra `kernels`)."""
    try:
        import aiconfigurator_core  # noqa: F401 (fit time only)
    except ImportError as exc:
        raise PlannerError("--fit-kernels: needs the optional extra: pip install 'llm-planner[kernels]' "
                           f"({PACKAGE}), or --kernels-root DIR of an unpacked wheel") from exc
    return Path(aiconfigurator_core.__file__).resolve().parent


def package_version(root: Path) -> str:
    meta = next(root.parent.glob("aiconfigurator_core-*.dist-info/METADATA"), None)
    if meta is not None:
        return next((ln.split(":", 1)[1].strip() for ln in meta.read_text().splitlines()
                     if ln.startswith("Version:")), "unknown")
    from importlib.metadata import version
    return version(PACKAGE)


LIBRARY_BACKENDS = ("vllm", "sglang")  # engines whose own GEMM tables give them a GemmLibrary


def _version_key(v: str) -> tuple:
    """Sort key of a version folder name: numeric parts as numbers (0.5.14 after 0.5.6.post2)."""
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.\-]|post|rc", v) if x != "")


def library_table_files(root: Path, backend: str, systems: dict = SYSTEMS) -> dict[str, Path]:
    """{system: systems/data/<system>/gemm/<backend>/<newest version>/gemm_perf.parquet} for the given systems."""
    out = {}
    for system in systems:
        base = root / "systems" / "data" / system / "gemm" / backend
        found = (sorted((d for d in base.iterdir() if (d / "gemm_perf.parquet").exists()),
                        key=lambda d: _version_key(d.name)) if base.is_dir() else [])
        if found:
            out[system] = found[-1] / "gemm_perf.parquet"
    return out


def fit_library(files: dict[str, Path], tile_m: int, p: float, fp4_files: dict[str, Path] | None = None) -> dict:
    """One engine's GemmLibrary: per dense table (system, dtype) f and t0 with the shared tile_m and p, then the
    median over the systems per dtype (fp16 = bf16); with the per-table fits for provenance. bf16 / fp8 tables from
    `files` (SYSTEMS), nvfp4 tables from `fp4_files` (FP4_SYSTEMS; default `files`)."""
    per_table = {**fit_at_shape(tables(load_gemm_rows(files)), tile_m, p),
                 **fit_at_shape(tables(load_gemm_rows(fp4_files or files, FP4_DTYPES)), tile_m, p)}
    frac, launch = _medians_per_dtype(per_table)
    return {"kernel_compute_fraction": frac, "launch_us": launch}, per_table


def fit_at_shape(tbs: list, tile_m: int, p: float) -> dict:
    """{'system/table dtype': f, b, t0 and the fit's median |log error|} of each table at a fixed tile_m and p."""
    per_table = {}
    for tb in tbs:
        f, b, t0, r = _fit_table(tb, tile_m, 0, p)
        per_table[f"{tb.system}/{tb.dtype}"] = {"rows": int(len(tb.t_s)), "compute_fraction": round(f, 4),
                                                "bandwidth_fraction": round(b, 4), "launch_us": round(t0 * 1e6, 3),
                                                "median_abs_log_error": round(float(np.median(np.abs(r))), 4)}
    return per_table


def _medians_per_dtype(per_table: dict) -> tuple[dict, dict]:
    """({dtype: median compute_fraction}, {dtype: median launch_us}) over the tables {'system/table dtype': fit} of a
    kernel library (the GPUs measured), fp16 taking bf16's (the same tensor rate)."""
    fracs, launches = {}, {}
    for key, v in per_table.items():
        d = ALL_DTYPES[key.split("/")[1]][0]
        fracs.setdefault(d, []).append(v["compute_fraction"])
        launches.setdefault(d, []).append(v["launch_us"])
    frac = {d: round(float(np.median(v)), 4) for d, v in sorted(fracs.items())}
    launch = {d: round(float(np.median(v)), 3) for d, v in sorted(launches.items())}
    if "bf16" in frac:
        frac["fp16"], launch["fp16"] = frac["bf16"], launch["bf16"]
    return frac, launch


def table_files(root: Path, kind: str, name: str | None = None, systems: dict = SYSTEMS) -> dict[str, Path]:
    """{system: systems/data/<system>/<kind>/trtllm/<version>/<name or kind_perf.parquet>}, first version of
    VERSIONS."""
    out = {}
    for system in systems:
        for v in VERSIONS:
            path = root / "systems" / "data" / system / kind / BACKEND / v / (name or f"{kind}_perf.parquet")
            if path.exists():
                out[system] = path
                break
    return out


def _read(path: Path):
    import pandas as pd
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def load_gemm_rows(files: dict[str, Path], dtypes: dict = DTYPES):
    """One DataFrame: system, dtype, rows (M), n, flops, bytes, latency_ms (table dtypes in `dtypes`, N and K in
    SHAPES); None where no file has a table of those dtypes."""
    import pandas as pd
    parts = []
    for system, path in files.items():
        d = _read(path)
        d = d[d["gemm_dtype"].isin(list(dtypes)) & d["n"].isin(SHAPES) & d["k"].isin(SHAPES)]
        if d.empty:
            continue
        m, n, k = (d[c].astype(float) for c in ("m", "n", "k"))
        b_in = d["gemm_dtype"].map(lambda x: ALL_DTYPES[x][1])
        parts.append(pd.DataFrame({"system": system, "dtype": d["gemm_dtype"], "rows": m, "n": n,
                                   "flops": 2 * m * n * k, "bytes": b_in * (m * k + k * n) + 2 * m * n,
                                   "latency_ms": d["latency"]}))
    return pd.concat(parts, ignore_index=True) if parts else None


def load_moe_rows(files: dict[str, Path], tps: tuple[int, ...] = MOE_TP):
    """One DataFrame as load_gemm_rows for the MoE tables (balanced routing, moe_ep = 1, moe_tp in `tps`,
    MOE_KERNEL); rows = tokens per touched expert, n = 0 (no wave term), width = the per-GPU expert width I / tp."""
    import pandas as pd
    parts = []
    for system, path in files.items():
        d = _read(path)
        d = d[(d["distribution"] == "balanced") & d["moe_tp_size"].isin(list(tps)) & (d["moe_ep_size"] == 1)
              & (d["kernel_source"] == MOE_KERNEL) & d["moe_dtype"].isin(list(DTYPES))]
        if d.empty:
            continue
        t, h, inter, k, e, tp = (d[c].astype(float).to_numpy() for c in
                                 ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"))
        w = inter / tp
        touched = np.array([float(expected_distinct_experts(int(ei), int(ki), ti)) for ei, ki, ti in zip(e, k, t)])
        b_in = d["moe_dtype"].map(lambda x: DTYPES[x][1]).to_numpy()
        parts.append(pd.DataFrame({"system": system, "dtype": d["moe_dtype"].to_numpy(), "rows": t * k / touched,
                                   "n": 0.0, "flops": 2 * t * k * 3 * h * w,
                                   "bytes": b_in * touched * 3 * h * w + 4 * t * h, "width": w,
                                   "latency_ms": d["latency"].to_numpy()}))
    return pd.concat(parts, ignore_index=True)


@dataclass
class Table:
    """One (system, dtype) table as arrays, with our spec's peak (FLOP/s), bandwidth (B/s) and SM count."""

    system: str
    dtype: str
    rows: np.ndarray
    n: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    t_s: np.ndarray
    peak: float
    bw: float
    sms: int
    width: np.ndarray | None = None  # MoE: per-GPU expert width (grouped_width_efficiency); None for dense GEMMs


def tables(df) -> list[Table]:
    out = []
    if df is None:
        return out
    for (system, dtype), g in df.groupby(["system", "dtype"], sort=True):
        spec = load_hardware(SPEC_OF[system])
        unit = spec.units[0]
        peak_dtype = ALL_DTYPES[dtype][0]
        if peak_dtype not in unit.peak_tflops or unit.sm_count is None:
            continue
        col = {c: g[c].to_numpy(dtype=np.float64) for c in ("rows", "n", "flops", "bytes", "latency_ms")}
        width = g["width"].to_numpy(dtype=np.float64) if "width" in g else None
        out.append(Table(system, dtype, col["rows"], col["n"], col["flops"], col["bytes"], col["latency_ms"] * 1e-3,
                         unit.peak_tflops[peak_dtype] * 1e12, spec.memory.bandwidth_gbs * 1e9, unit.sm_count, width))
    return out


def kernel_time_s(tb: Table, f: float, b: float, t0_s: float, tile_m: int, tile_n: int, p: float,
                  kappa: float = 0.0) -> np.ndarray:
    """The module docstring's model; tile_n > 0 adds wave quantization (regimes.wave_efficiency), kappa > 0 the
    expert-width term of a MoE table (regimes.grouped_width_efficiency)."""
    eff = tile_padding_efficiency(tb.rows, tile_m)
    if tile_n:
        eff = eff * wave_efficiency(tb.rows, tb.n, tb.sms, tile_m, tile_n)
    if kappa and tb.width is not None:
        eff = eff * grouped_width_efficiency(tb.width, tb.peak / 1e12, kappa)
    return ridge_rolloff_time(tb.flops / (tb.peak * f * eff), tb.bytes / (tb.bw * b), p) + t0_s


def _levenberg_marquardt(res, x0: np.ndarray, iters: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """(x, residuals) minimising sum res(x)^2: Levenberg-Marquardt with a forward-difference Jacobian."""
    x, lam = np.asarray(x0, dtype=np.float64), 1e-2
    r = res(x)
    for _ in range(iters):
        jac = np.stack([(res(x + e) - r) / 1e-6 for e in np.eye(len(x)) * 1e-6], axis=1)
        g, h = jac.T @ r, jac.T @ jac
        step = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g)
        r_new = res(x + step)
        if r_new @ r_new < r @ r:
            done = r @ r - r_new @ r_new < 1e-9 * (r @ r)
            x, r, lam = x + step, r_new, lam / 3
            if done:
                break
        else:
            lam *= 5
            if lam > 1e8:
                break
    return x, r


def _fit_table(tb: Table, tile_m: int, tile_n: int, p: float, kappa: float = 0.0):
    """(f, b, t0_s, log residuals): Levenberg-Marquardt on log(pred / measured), x = (logit f, logit b, log t0)."""
    def unpack(x):
        x = np.clip(x, -30.0, 30.0)
        return 1 / (1 + np.exp(-x[0])), 1 / (1 + np.exp(-x[1])), np.exp(x[2])

    x, r = _levenberg_marquardt(lambda x: np.log(kernel_time_s(tb, *unpack(x), tile_m, tile_n, p, kappa) / tb.t_s),
                                np.array([1.4, 1.4, np.log(3e-6)]))  # f = b = 0.8, t0 = 3 us
    f, b, t0 = unpack(x)
    return float(f), float(b), float(t0), r


def fit_shape(tbs: list[Table], grid: list[tuple]) -> dict:
    """The grid point (tile_m, tile_n, p[, kappa]) with the lowest median |log error| over all rows of all tables,
    each table with its own (f, b, t0); with the residual summary and the per-table nuisance fits."""
    best = None
    for point in grid:
        tile_m, tile_n, p, kappa = (tuple(point) + (0.0,))[:4]
        fits = [_fit_table(tb, tile_m, tile_n, p, kappa) for tb in tbs]
        err = np.abs(np.concatenate([r for *_, r in fits]))
        if best is None or np.median(err) < best[0]:
            best = (float(np.median(err)), (tile_m, tile_n, p, kappa), fits, err)
    score, (tile_m, tile_n, p, kappa), fits, err = best
    return {"tile_m": int(tile_m), "tile_n": int(tile_n), "ridge_sharpness": float(p),
            **({"grouped_width_per_tflops": float(kappa)} if any(len(g) > 3 for g in grid) else {}),
            "rows": int(len(err)),
            "median_abs_log_error": round(score, 4), "p90_abs_log_error": round(float(np.quantile(err, 0.9)), 4),
            "tables": {f"{tb.system}/{tb.dtype}": {
                "rows": int(len(tb.t_s)), "compute_fraction": round(fc, 4), "bandwidth_fraction": round(bf, 4),
                "launch_us": round(t0 * 1e6, 3), "median_abs_log_error": round(float(np.median(np.abs(r))), 4)}
                for tb, (fc, bf, t0, r) in zip(tbs, fits)}}


def _summary(res: dict) -> dict:
    return {k: res[k] for k in ("rows", "median_abs_log_error", "p90_abs_log_error")}


def fit_all(gemm_tbs: list[Table], moe_tbs: list[Table], moe_tp1_tbs: list[Table] | None = None) -> dict:
    """Dense: tile_m and p (the planner's model); the plain roofline (max(), no tiles) and the wave variant for
    comparison. MoE ("moe"): the grouped tile_m at the dense p from the whole-expert tables (moe_tp 1: the
    tokens-per-expert dimension; moe_tp1_tbs, default moe_tbs); then ("moe_width") the expert-width kappa at that
    tile over every moe_tp (the width dimension), and for comparison the same rows without the width term (kappa 0).
    Tile and kappa fitted at once leave the tile unidentified (median |log error| 0.117 at 8 rows, 0.124 at 64: the
    per-table launch time takes up the difference)."""
    dense = fit_shape(gemm_tbs, [(tm, 0, p) for tm in TILE_M_GRID for p in P_GRID])
    p = dense["ridge_sharpness"]
    plain = fit_shape(gemm_tbs, [(1, 0, 64.0)])
    wave = fit_shape(gemm_tbs, [(tm, tn, p) for tm in TILE_M_GRID for tn in TILE_N_GRID])
    out = {"gemm": dense, "gemm_plain_roofline": _summary(plain),
           "gemm_with_waves": {"tile_m": wave["tile_m"], "tile_n": wave["tile_n"], **_summary(wave)}}
    if moe_tbs:
        out["moe"] = fit_shape(moe_tp1_tbs or moe_tbs, [(tm, 0, p) for tm in TILE_M_GRID])
        tile = out["moe"]["tile_m"]
        out["moe_width"] = fit_shape(moe_tbs, [(tile, 0, p, kp) for kp in KAPPA_GRID])
        out["moe_width_without_width"] = _summary(fit_shape(moe_tbs, [(tile, 0, p, 0.0)]))
        out["moe_plain_roofline"] = _summary(fit_shape(moe_tbs, [(1, 0, 64.0)]))
    return out


# ---------------------------------------------------------------- decode attention (split-KV occupancy)
ATTENTION_TABLE = "generation_attention_perf.parquet"
KV_DTYPES = {"bfloat16": 2.0, "fp8": 1.0}
CHUNK_GRID = (0, 32, 64, 128, 256, 512, 1024, 2048, 4096)   # 0 = no split-KV
CTAS_PER_SM_GRID = (1, 2, 4, 8)
MIN_CONTEXT = 256   # shorter contexts are launch- and per-sequence-bound, not a regime the planner's KV read models


@dataclass
class AttentionTable:
    """Decode attention of one (system, KV dtype): one query per sequence reads batch x kv_heads x context
    x head_dim x 2 (K and V) cached elements."""

    system: str
    kv_dtype: str
    batch: np.ndarray
    kv_heads: np.ndarray
    context: np.ndarray
    bytes: np.ndarray
    t_s: np.ndarray
    bw: float
    sms: int


def load_attention_tables(files: dict[str, Path]) -> list[AttentionTable]:
    """Full-attention (window 0), beam 1, head_dim 128 decode rows; context = isl + step tokens; bytes = the KV
    read plus the query and output in bf16."""
    out = []
    for system, path in files.items():
        d = _read(path)
        d = d[(d["window_size"] == 0) & (d["beam_width"] == 1) & (d["head_dim"] == 128)
              & d["kv_cache_dtype"].isin(list(KV_DTYPES)) & (d["isl"] + d["step"] >= MIN_CONTEXT)
              & (d["num_heads"] <= 8 * d["num_key_value_heads"])]
        spec = load_hardware(SPEC_OF[system])
        if spec.units[0].sm_count is None:
            continue
        for kv, g in d.groupby("kv_cache_dtype", sort=True):
            b, hq, hkv, ctx = (g[c].to_numpy(dtype=np.float64) for c in
                               ("batch_size", "num_heads", "num_key_value_heads", "step"))
            ctx = ctx + g["isl"].to_numpy(dtype=np.float64)
            nbytes = b * hkv * ctx * 128 * 2 * KV_DTYPES[kv] + b * hq * 128 * 2 * 2
            out.append(AttentionTable(system, kv, b, hkv, ctx, nbytes, g["latency"].to_numpy(dtype=np.float64) * 1e-3,
                                      spec.memory.bandwidth_gbs * 1e9, spec.units[0].sm_count))
    return out


def attention_time_s(tb: AttentionTable, b: float, t0_s: float, chunk: int, ctas_per_sm: float) -> np.ndarray:
    """bytes / (BW x b x decode_attention_efficiency(batch, kv_heads, context, SMs; chunk, ctas_per_sm)) + t0."""
    eff = decode_attention_efficiency(tb.batch, tb.kv_heads, tb.context, tb.sms, split_kv=chunk > 0,
                                      chunk=max(chunk, 1), ctas_per_sm=ctas_per_sm)
    return tb.bytes / (tb.bw * b * eff) + t0_s


# GPUs whose published runs the engine profiles' per-SM bandwidth caps (Efficiency.sm_bandwidth_gbs) were fitted
# on, among the systems with decode-attention tables: the reference of sm_streaming (no Blackwell data-centre part has
# a published run in data/measured_*.csv; tests/accuracy/test_kernel_tables.py checks the list against the data)
STREAMING_REFERENCE_SYSTEMS = ("a100_sxm", "h100_sxm", "h200_sxm", "l40s", "rtx_pro_6000_server")
STREAMING_KV_DTYPE = "bfloat16"


def attention_streaming(tbs: list[AttentionTable], chunk: int, ctas_per_sm: float) -> dict:
    """Per-SM streaming rate of NVIDIA's decode-attention kernels on each GPU: the bf16 table's bandwidth share b,
    fitted at the (chunk, CTAs per SM) the attention fit chose, x the spec's bandwidth / its SMs (GB/s per SM):
    {spec id: GB/s per SM}, and the reference, the largest rate among STREAMING_REFERENCE_SYSTEMS (module docstring
    of planner/regimes.py, sm_streaming_scale)."""
    rates, ref = {}, 0.0
    for tb in tbs:
        if tb.kv_dtype != STREAMING_KV_DTYPE:
            continue
        b, _, _ = _fit_attention_table(tb, chunk, ctas_per_sm)
        rate = round(float(b * tb.bw / tb.sms / 1e9), 2)
        rates[SPEC_OF[tb.system]] = rate
        if tb.system in STREAMING_REFERENCE_SYSTEMS:
            ref = max(ref, rate)
    return {"gbs_per_sm": dict(sorted(rates.items())), "reference_gbs_per_sm": ref,
            "reference_systems": [SPEC_OF[s] for s in STREAMING_REFERENCE_SYSTEMS]}


def _fit_attention_table(tb: AttentionTable, chunk: int, occ: float):
    """(b, t0_s, log residuals) of one decode-attention table at a (split-KV chunk, CTAs per SM): Levenberg-Marquardt
    in log space, x = (logit b, log t0)."""
    def unpack(x):
        x = np.clip(x, -30.0, 30.0)
        return 1 / (1 + np.exp(-x[0])), np.exp(x[1])
    x, r = _levenberg_marquardt(lambda x: np.log(attention_time_s(tb, *unpack(x), chunk, occ) / tb.t_s),
                                np.array([1.4, np.log(5e-6)]))
    return (*unpack(x), r)


def fit_attention(tbs: list[AttentionTable]) -> dict:
    """Grid over (split-KV chunk, CTAs per SM); per table (b, t0) by Levenberg-Marquardt in log space. Also the
    plain bandwidth roofline (efficiency 1) for comparison."""
    def score(chunk, occ):
        fits = [_fit_attention_table(tb, chunk, occ) for tb in tbs]
        return np.abs(np.concatenate([r for *_, r in fits])), fits

    best = min(((chunk, occ) for chunk in CHUNK_GRID for occ in CTAS_PER_SM_GRID),
               key=lambda co: float(np.median(score(*co)[0])))
    err, fits = score(*best)
    no_split = min((score(0, occ)[0] for occ in CTAS_PER_SM_GRID), key=np.median)
    plain, _ = score(0, 1e-9)  # ctas_per_sm -> 0: efficiency 1 everywhere
    return {"split_kv_chunk": int(best[0]), "ctas_per_sm": float(best[1]), "rows": int(len(err)),
            "median_abs_log_error": round(float(np.median(err)), 4),
            "p90_abs_log_error": round(float(np.quantile(err, 0.9)), 4),
            "no_split_kv_median_abs_log_error": round(float(np.median(no_split)), 4),
            "plain_roofline_median_abs_log_error": round(float(np.median(plain)), 4),
            "tables": {f"{tb.system}/{tb.kv_dtype}": {"rows": int(len(tb.t_s)), "bandwidth_fraction": round(float(b), 4),
                                                      "launch_us": round(float(t0) * 1e6, 3),
                                                      "median_abs_log_error": round(float(np.median(np.abs(r))), 4)}
                       for tb, (b, t0, r) in zip(tbs, fits)}}


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def grouped_compute_ratio(res: dict) -> float | None:
    """Share of a dense GEMM's compute rate that the grouped expert GEMM of the same GPU and dtype reaches: the
    median over the tables measured both ways of f_moe / f_dense (each table's fitted compute_fraction, whole
    experts: moe_tp 1), or None without MoE tables. E.g. h100_sxm bf16: 0.6371 / 0.814 = 0.78. Routing, the
    gather/scatter of tokens to their experts and the irregular per-expert tiles cost compute time that tile padding
    alone does not explain."""
    moe = res.get("moe", {}).get("tables", {})
    dense = res["gemm"]["tables"]
    ratios = [v["compute_fraction"] / dense[k]["compute_fraction"] for k, v in moe.items()
              if k in dense and dense[k]["compute_fraction"] > 0 and v["compute_fraction"] > 0]
    return round(float(np.median(ratios)), 4) if ratios else None


WIDE_RATIO_DTYPE = "bfloat16"  # the dtype grouped_wide_ratio compares in (below)


def grouped_wide_ratio(res: dict) -> float | None:
    """The same share for an expert GEMM of unbounded width: the MoE f of the width fit ("moe_width", every moe_tp,
    the compute rate x grouped_width_efficiency) over the dense f, the median over the WIDE_RATIO_DTYPE tables; None
    without it. E.g. h100_sxm bf16: 0.8067 / 0.814 = 0.99. Compared in bf16 only: the dense fp8 tables' f (0.49-0.59:
    per-tensor activation scaling in each GEMM) is the fp8 cost the engines' own fp8 fractions already carry, so an
    fp8 ratio (1.2-2.0) would count it twice."""
    moe = res.get("moe_width", {}).get("tables", {})
    dense = res["gemm"]["tables"]
    ratios = [v["compute_fraction"] / dense[k]["compute_fraction"] for k, v in moe.items()
              if k.endswith("/" + WIDE_RATIO_DTYPE) and k in dense and dense[k]["compute_fraction"] > 0
              and v["compute_fraction"] > 0]
    return round(float(np.median(ratios)), 4) if ratios else None


def fit_regimes_document(gemm_files: dict[str, Path], moe_files: dict[str, Path], attention_files: dict[str, Path],
                         version: str, root: Path | None = None,
                         library_files: dict[str, dict[str, Path]] | None = None,
                         fp4_files: dict[str, Path] | None = None,
                         library_fp4_files: dict[str, dict[str, Path]] | None = None,
                         streaming_files: dict[str, Path] | None = None) -> dict:
    """The regimes.yaml document: fitted constants with their provenance (library_files: engine -> its dense GEMM
    tables per system, fitted into GemmRegime.libraries; fp4_files, library_fp4_files: the same over FP4_SYSTEMS,
    whose nvfp4 tables give the native FP4 fractions; default the SYSTEMS files)."""
    res = fit_all(tables(load_gemm_rows(gemm_files)), tables(load_moe_rows(moe_files)) if moe_files else [],
                  tables(load_moe_rows(moe_files, (1,))) if moe_files else [])
    att = fit_attention(load_attention_tables(attention_files)) if attention_files else None
    if att is not None:
        res["decode_attention"] = att
    # per-SM streaming rate of the decode-attention kernels per GPU (FP4_SYSTEMS' tables: the Blackwell parts too),
    # at the attention fit's shape: regimes.sm_streaming_scale
    streaming = (attention_streaming(load_attention_tables(streaming_files or attention_files), att["split_kv_chunk"],
                                     att["ctas_per_sm"]) if att is not None else None)

    def files(fs):
        return {s: {"path": str(p.relative_to(root)) if root else p.name, "sha256": sha256(p), "spec": SPEC_OF[s]}
                for s, p in fs.items()}

    # native FP4 tables at the shape the bf16 / fp8 tables chose (FP4_DTYPES)
    fp4 = fit_at_shape(tables(load_gemm_rows(fp4_files or gemm_files, FP4_DTYPES)), res["gemm"]["tile_m"],
                       res["gemm"]["ridge_sharpness"])
    if fp4:
        res["gemm_fp4"] = {"tables": fp4}
    # the kernel library's share of the peak per dtype: median over the GPUs of each table's f (fp16 = bf16 rate)
    # and its fixed time per launch (t0), likewise
    kernel_fraction, launch_us = _medians_per_dtype({**res["gemm"]["tables"], **fp4})
    libraries, library_fits = {}, {}
    for engine, fs in sorted((library_files or {}).items()):
        if fs:
            libraries[engine], library_fits[engine] = fit_library(fs, res["gemm"]["tile_m"],
                                                                  res["gemm"]["ridge_sharpness"],
                                                                  (library_fp4_files or {}).get(engine))
    if library_fits:
        res["libraries"] = library_fits
    grouped_ratio, wide_ratio = grouped_compute_ratio(res), grouped_wide_ratio(res)
    vendors = sorted({load_hardware(SYSTEMS[s]).vendor.lower() for s in gemm_files})
    doc = {"gemm": {"tile_m": res["gemm"]["tile_m"], "ridge_sharpness": res["gemm"]["ridge_sharpness"],
                    "grouped_tile_m": res["moe"]["tile_m"] if "moe" in res else res["gemm"]["tile_m"],
                    "kernel_compute_fraction": kernel_fraction, "vendors": vendors, "launch_us": launch_us,
                    **({"grouped_compute_ratio": grouped_ratio} if grouped_ratio is not None else {}),
                    **({"grouped_wide_ratio": wide_ratio,
                        "grouped_width_per_tflops": res["moe_width"]["grouped_width_per_tflops"]}
                       if wide_ratio is not None else {}),
                    **({"libraries": libraries} if libraries else {})},
           **({"decode_attention": {"split_kv_chunk": att["split_kv_chunk"], "ctas_per_sm": att["ctas_per_sm"]}}
              if att is not None else {}),
           **({"sm_streaming": streaming} if streaming else {}),
           "provenance": {
               "source": f"NVIDIA aiconfigurator, PyPI {PACKAGE}=={version} (Apache-2.0; "
                         "https://github.com/ai-dynamo/aiconfigurator): kernel timings measured on the GPUs named",
               "gemm_files": files(gemm_files), "moe_files": files(moe_files),
               **({"gemm_fp4_files": files({k: v for k, v in fp4_files.items() if k not in gemm_files})}
                  if fp4_files else {}),
               "attention_files": files(attention_files),
               **({"streaming_attention_files": files({k: v for k, v in streaming_files.items()
                                                       if k not in attention_files})} if streaming_files else {}),
               **({"library_files": {e: files(fs) for e, fs in sorted(library_files.items()) if fs}}
                  if library_files else {}),
               **({"library_fp4_files": {e: files({k: v for k, v in fs.items() if k not in (library_files or {})
                                                   .get(e, {})}) for e, fs in sorted(library_fp4_files.items()) if fs}}
                  if library_fp4_files else {}),
               "selection": f"backend {BACKEND}; dtypes {sorted(DTYPES)} (the shape), {sorted(FP4_DTYPES)} at that "
                            f"shape over {sorted(FP4_SYSTEMS)}; dense N and K in {list(SHAPES)}, every M; "
                            f"MoE {MOE_KERNEL}, balanced routing, moe_ep = 1, moe_tp in {list(MOE_TP)}; decode "
                            "attention: window 0, "
                            f"head_dim 128, heads <= 8 x kv_heads, context >= {MIN_CONTEXT}; engine kernel "
                            f"libraries {list(LIBRARY_BACKENDS)}: their dense GEMM tables (newest version per system), "
                            "shared tile_m and p",
               "model": "t = ((flops / (P f tile_padding_efficiency(R, tile_m)))^p + (bytes / (BW b))^p)^(1/p) + t0; "
                        "grouped_tile_m from the moe_tp 1 tables; then over every moe_tp the MoE compute rate x "
                        "w / (w + kappa P / 1e12), w = inter / moe_tp; tile_m, p (dense), grouped_tile_m and kappa "
                        "(MoE) shared, f, b, t0 per table "
                        "(planner/accuracy/kernel_tables.py); decode attention: t = bytes / (BW b "
                        "decode_attention_efficiency(batch, kv_heads, context, SMs; chunk, ctas_per_sm)) + t0",
               "grid": {"tile_m": list(TILE_M_GRID), "ridge_sharpness": list(P_GRID),
                        "grouped_width_per_tflops": list(KAPPA_GRID),
                        "split_kv_chunk": list(CHUNK_GRID), "ctas_per_sm": list(CTAS_PER_SM_GRID)},
               "fit": res,
               "fitted": _dt.date.today().isoformat(),
               "command": "python -m planner accuracy --fit-kernels [--kernels-root DIR]",
           }}
    return doc


def write_regimes(kernels_root: str | Path | None = None) -> tuple[Path, dict]:
    """Fit on the installed package (or an unpacked aiconfigurator_core folder) and write regimes.yaml atomically."""
    from ..io import atomic_write_yaml
    from ..regimes import RegimeConstants, regime_constants, regimes_path
    root = Path(kernels_root).resolve() if kernels_root else package_root()
    gemm, moe = table_files(root, "gemm"), table_files(root, "moe")
    if not gemm:
        raise PlannerError(f"--kernels-root: no systems/data/<system>/gemm/{BACKEND}/<version>/gemm_perf.parquet "
                         f"under {root}")
    att = table_files(root, "attention", ATTENTION_TABLE)
    libs = {b: library_table_files(root, b) for b in LIBRARY_BACKENDS}
    libs_fp4 = {b: library_table_files(root, b, FP4_SYSTEMS) for b in LIBRARY_BACKENDS}
    doc = fit_regimes_document(gemm, moe, att, package_version(root), root.parent, libs,
                               table_files(root, "gemm", systems=FP4_SYSTEMS), libs_fp4,
                               table_files(root, "attention", ATTENTION_TABLE, systems=FP4_SYSTEMS))
    RegimeConstants.model_validate(doc)
    path = regimes_path()
    atomic_write_yaml(path, doc)
    regime_constants.cache_clear()
    return path, doc
