"""The measurement record: one JSON object per line in ``validate/records/<device-id>/<run-id>.jsonl``.

A record says what ran (kernel and its exact parameters), on what (device fingerprint, versions), how much work
it was (bytes and FLOPs counted exactly by the kernel modules), how long it took (median and spread over N reps,
caches flushed or not, threads) and what the planner predicted for the same work when the record was made.
Schemas are code: every model is frozen with ``extra="forbid"``; an unknown key or a wrong type is an error naming
the file, the line and the field. No torch here: records are read by ``planner validate fit|check`` too.

Units: times in ms, bytes in bytes, bandwidth in GB/s (1e9 B/s), compute in TFLOP/s (1e12 FLOP/s).

Every number is finite (``allow_inf_nan=False``) and inside a plausible range stated once here: a call takes
at most MAX_MS (1000 s; a record of ``median_ms: 1e308`` is refused), moves at most MAX_BYTES (2^53) bytes,
and no achieved rate exceeds MAX_GBS / MAX_TFLOPS. Whether a time is physically possible on the device (not
faster than its datasheet roofline) needs the spec: ``validate.calibrate.impossible_records`` checks that.

Run files: one per run, ``<UTC time>-<preset>-p<pid>-<random hex>.jsonl``; a writer creates its file
exclusively (O_EXCL) and only ever rewrites that file, so concurrent runs never overwrite each other.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import PlannerError, pydantic_one_line
from planner.hardware import ID_PATTERN
from planner.io import atomic_write_text, read_text

SCHEMA_VERSION = 1
RECORDS_DIR = Path(__file__).resolve().parent / "records"
KERNELS = ("paged_attention", "quant_matmul", "decode_step", "stream", "gemm_peak")
CEILINGS = ("stream", "gemm_peak")  # device probes: they define the spec, they are not predicted


MAX_MS = 1e6          # 1000 s for one kernel call or decode step: anything longer is not a measurement
MAX_BYTES = 2**53     # bytes of one call (9 PB): the largest integer a float holds exactly
MAX_GBS = 1e6         # 1 PB/s: 100x any memory system of 2026
MAX_TFLOPS = 1e6      # 1 EFLOP/s on one device


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# ---------------------------------------------------------------- parameters, one model per kernel


class PagedAttentionParams(_Frozen):
    """Paged-KV decode attention: one query token per sequence over ``context_lens`` cached tokens."""

    kernel: Literal["paged_attention"] = "paged_attention"
    batch: int = Field(ge=1)
    context_lens: list[int] = Field(min_length=1)
    num_q_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    block_size: int = Field(ge=1)
    kv_dtype: Literal["fp32", "bf16", "fp16", "int8", "fp8"]
    q_dtype: Literal["fp32", "bf16", "fp16"]
    backend: str


class MatmulParams(_Frozen):
    """``y[M, N] = x[M, K] @ W[N, K]^T`` with weights in ``weight_format`` (dense or weight-only int8/int4)."""

    kernel: Literal["quant_matmul"] = "quant_matmul"
    m: int = Field(ge=1)
    n: int = Field(ge=1)
    k: int = Field(ge=1)
    weight_format: Literal["fp32", "bf16", "fp16", "int8", "int4"]
    act_dtype: Literal["fp32", "bf16", "fp16"]
    group_size: int | None = Field(None, ge=1)
    fused: bool = True


class DecodeStepParams(_Frozen):
    """One decode step of a random-weight layer stack (no embedding, final norm or LM head)."""

    kernel: Literal["decode_step"] = "decode_step"
    config: str
    hidden: int = Field(ge=1)
    n_heads: int = Field(ge=1)
    n_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate: int = Field(ge=1)
    n_layers: int = Field(ge=1)
    weight_format: Literal["fp32", "bf16", "fp16", "int8", "int4"]
    dtype: Literal["fp32", "bf16", "fp16"]
    group_size: int | None = Field(None, ge=1)
    batch: int = Field(ge=1)
    context_lens: list[int] = Field(min_length=1, description="tokens per sequence including the new one")
    block_size: int = Field(ge=1)


class StreamParams(_Frozen):
    """STREAM copy or triad over fp32 arrays of ``array_bytes`` each (STREAM byte counting)."""

    kernel: Literal["stream"] = "stream"
    op: Literal["copy", "triad"]
    array_bytes: int = Field(ge=1)


class GemmPeakParams(_Frozen):
    """Square ``n x n @ n x n`` GEMM in ``dtype``: a measured compute ceiling."""

    kernel: Literal["gemm_peak"] = "gemm_peak"
    n: int = Field(ge=1)
    dtype: Literal["fp32", "bf16", "fp16", "tf32"]


Params = Annotated[
    Union[PagedAttentionParams, MatmulParams, DecodeStepParams, StreamParams, GemmPeakParams],
    Field(discriminator="kernel"),
]


# ---------------------------------------------------------------- work, timing, prediction


class Work(_Frozen):
    """Exact bytes read/written and FLOPs of one call (as counted by the kernel modules)."""

    flops: int = Field(ge=0, le=MAX_BYTES * 1000)
    weight_bytes: int = Field(0, ge=0, le=MAX_BYTES)
    scale_bytes: int = Field(0, ge=0, le=MAX_BYTES, description="weight or KV scales")
    zero_bytes: int = Field(0, ge=0, le=MAX_BYTES)
    kv_bytes: int = Field(0, ge=0, le=MAX_BYTES)
    act_in_bytes: int = Field(0, ge=0, le=MAX_BYTES)
    act_out_bytes: int = Field(0, ge=0, le=MAX_BYTES)
    other_bytes: int = Field(0, ge=0, le=MAX_BYTES, description="block tables; STREAM arrays")

    @property
    def total_bytes(self) -> int:
        return (self.weight_bytes + self.scale_bytes + self.zero_bytes + self.kv_bytes + self.act_in_bytes
                + self.act_out_bytes + self.other_bytes)


class Measured(_Frozen):
    """Timing summary (ms) over ``reps`` calls after warm-up; ``flushed``: LLC/L2 flushed before each rep.

    Optional (newer records): ``method`` (how the time was taken: ``perf_counter``, ``cuda-events`` with the host
    held ahead of the GPU), ``graph_ms`` (per-call median of a CUDA-graph replay, for calls under
    GRAPH_BELOW_MS, beside the eager events), ``spread_pct`` ((p90 - p10) / median of the reps, %) and ``rounds``
    (times the reps were repeated until the spread fell under the bound, validate/timing.py)."""

    median_ms: float = Field(gt=0, le=MAX_MS)
    p10_ms: float = Field(gt=0, le=MAX_MS)
    p90_ms: float = Field(gt=0, le=MAX_MS)
    min_ms: float = Field(gt=0, le=MAX_MS)
    mean_ms: float = Field(gt=0, le=MAX_MS)
    std_ms: float = Field(ge=0, le=MAX_MS)
    reps: int = Field(ge=1, le=10**6)
    warmup: int = Field(ge=0, le=10**6)
    flushed: bool
    flush_bytes: int = Field(ge=0, le=MAX_BYTES)
    threads: int = Field(ge=1, le=100_000)
    method: str | None = None
    graph_ms: float | None = Field(None, gt=0, le=MAX_MS)
    spread_pct: float | None = Field(None, ge=0, le=1e4)
    rounds: int | None = Field(None, ge=1, le=1000)


class Prediction(_Frozen):
    """The planner's time for the same work when the record was made."""

    predicted_ms: float = Field(gt=0, le=MAX_MS * 1e3)
    hardware_id: str
    efficiency_source: str
    bound: str


class Record(_Frozen):
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    created: str = Field(description="ISO 8601 UTC time the record was made")
    device_id: str = Field(pattern=ID_PATTERN)
    fingerprint: dict[str, Any]
    params: Params
    status: Literal["ok", "oom", "error"]
    message: str | None = None
    backend: str | None = Field(None, description="the kernel that actually ran (e.g. triton-splitkv8, "
                                "triton-w8a16, tinygemm._weight_int4pack_mm, torch); None in records before it")
    work: Work | None = None
    measured: Measured | None = None
    achieved_gbs: float | None = Field(None, ge=0, le=MAX_GBS)
    achieved_tflops: float | None = Field(None, ge=0, le=MAX_TFLOPS)
    prediction: Prediction | None = None

    @property
    def kernel(self) -> str:
        return self.params.kernel

    def key(self) -> str:
        """Stable identity of the measured configuration (kernel + params), for hold-out hashing."""
        return json.dumps(self.params.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


# ---------------------------------------------------------------- JSON Lines I/O


def read_records(path: str | Path) -> list[Record]:
    """All records of one ``.jsonl`` file; a malformed line is a one-line PlannerError naming file and line."""
    p = Path(path)
    lines = read_text(p).splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PlannerError(f"{p} line {i}: malformed JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise PlannerError(f"{p} line {i}: expected a JSON object")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise PlannerError(f"{p} line {i}: schema_version must be {SCHEMA_VERSION}, "
                               f"got {data.get('schema_version')!r}")
        try:
            out.append(Record.model_validate(data))
        except ValidationError as exc:
            raise pydantic_one_line(f"{p} line {i}", exc) from None
    return out


def read_dir(path: str | Path) -> list[Record]:
    """Every record of every ``*.jsonl`` in a folder (sorted by file name), or of one file."""
    p = Path(path)
    if p.is_file():
        return read_records(p)
    if not p.is_dir():
        raise PlannerError(f"--records: no such file or folder: {p}")
    files = sorted(p.glob("*.jsonl"))
    if not files:
        raise PlannerError(f"--records: no .jsonl files in {p}")
    return [r for f in files for r in read_records(f)]


def dumps(records: list[Record]) -> str:
    return "".join(r.model_dump_json(exclude_none=True) + "\n" for r in records)


def new_run_id(preset: str, when=None) -> str:
    """``<UTC time>-<preset>-p<pid>-<6 random hex>``: two runs started in the same second (even with the same pid,
    in two containers) get different ids."""
    import datetime as _dt

    t = when or _dt.datetime.now(_dt.timezone.utc)
    return f"{t.strftime('%Y%m%dT%H%M%SZ')}-{preset}-p{os.getpid()}-{secrets.token_hex(3)}"


class RecordWriter:
    """Appends records to one run file it owns; after each record the whole file is rewritten through a temp file
    and a rename (planner.io.atomic_write_text), so an interrupted sweep keeps every record it finished.

    The file is created exclusively (``O_CREAT | O_EXCL``) when the writer is made: if it exists -- another run's
    records -- this is an error, never an overwrite. The writer only rewrites that one file, with its own records.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            raise PlannerError(f"records: {self.path} already exists (another run's records); "
                               "a writer never rewrites records it did not produce") from None
        self.records: list[Record] = []

    def append(self, record: Record) -> None:
        self.records.append(record)
        atomic_write_text(self.path, dumps(self.records))


def slug(text: str) -> str:
    """'AMD EPYC 9654 96-Core Processor' -> 'amd-epyc-9654-96-core-processor'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


# GPU name as torch / NVML report it -> the catalog's hardware id (hardware_specs/<id>.yaml), so that records,
# the fit and its calibration land on the device the planner's users pick. The memory size tells apart the
# cards that share a name (gpu_memory_gib: torch's total_memory in GiB; the range is the catalog card's).
CATALOG_GPUS: dict[str, tuple[str, float, float]] = {
    "NVIDIA H200": ("h200-sxm", 125.0, 145.0),            # 143771 MiB = 140.4 GiB seen on the lent H200
    "NVIDIA H100 80GB HBM3": ("h100-sxm", 70.0, 82.0),
    "NVIDIA H100 PCIe": ("h100-pcie", 70.0, 82.0),
    "NVIDIA A100-SXM4-80GB": ("a100-80gb-sxm", 70.0, 82.0),
    "NVIDIA A100-SXM4-40GB": ("a100-40gb-sxm", 35.0, 41.0),
    "NVIDIA A100 80GB PCIe": ("a100-80gb-pcie", 70.0, 82.0),
    "NVIDIA L40S": ("l40s", 40.0, 48.0),
    "NVIDIA L4": ("l4", 20.0, 24.0),
    "NVIDIA GeForce RTX 4090": ("rtx-4090", 20.0, 24.5),
    "NVIDIA B200": ("b200", 170.0, 185.0),
}


def catalog_match(fp: dict[str, Any]) -> tuple[str, str] | None:
    """(catalog hardware id, how it was matched) for a GPU fingerprint, or None when the name is not in
    CATALOG_GPUS or its memory is outside the catalog card's range (then it is another card of that name)."""
    name = str(fp.get("gpu_name", ""))
    if fp.get("device_type") != "cuda" or name not in CATALOG_GPUS:
        return None
    hw, lo, hi = CATALOG_GPUS[name]
    mem = fp.get("gpu_memory_gib")
    if mem is not None and not lo <= float(mem) <= hi:
        return None
    how = f"gpu_name '{name}'" + (f", {float(mem):.1f} GiB in [{lo:g}, {hi:g}]" if mem is not None else "")
    return hw, how


def device_id_from_fingerprint(fp: dict[str, Any]) -> str:
    """A hardware-spec id for the measured device: the catalog id of a known GPU (``catalog_match``: 'NVIDIA H200'
    -> ``h200-sxm``), else ``gpu-<name>`` or ``cpu-<model>-<cores>c``.

    CPU model strings lose marketing words ('Processor', 'n-Core'); e.g. 'AMD EPYC' with 2 cores ->
    ``cpu-amd-epyc-2c``.
    """
    if fp.get("device_type") == "cuda":
        hit = catalog_match(fp)
        return hit[0] if hit else "gpu-" + slug(str(fp.get("gpu_name", "cuda")))
    model = re.sub(r"\b(\d+-core|processor|cpu|with .*|@.*)\b", " ", str(fp.get("cpu_model", "")), flags=re.I)
    model = re.sub(r"\((r|tm)\)", " ", model, flags=re.I)
    return f"cpu-{slug(model)}-{fp.get('cpu_count') or 1}c"
