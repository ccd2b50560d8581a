"""The measurement record: one JSON object per line in ``validate/records/<device-id>/<run-id>.jsonl``.

A record says what ran (kernel and its exact parameters), on what (device fingerprint, versions), how much work
it was (bytes and FLOPs counted exactly by the kernel modules), how long it took (median and spread over N reps,
caches flushed or not, threads) and what the planner predicted for the same work when the record was made.
Schemas are code: every model is frozen with ``extra="forbid"``; an unknown key or a wrong type is an error naming
the file, the line and the field. No torch here: records are read by ``planner validate fit|check`` too.

Units: times in ms, bytes in bytes, bandwidth in GB/s (1e9 B/s), compute in TFLOP/s (1e12 FLOP/s).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import PlannerError, pydantic_one_line
from planner.io import atomic_write_text, read_text

SCHEMA_VERSION = 1
RECORDS_DIR = Path(__file__).resolve().parent / "records"
KERNELS = ("paged_attention", "quant_matmul", "decode_step", "stream", "gemm_peak")
CEILINGS = ("stream", "gemm_peak")  # device probes: they define the spec, they are not predicted


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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

    flops: int = Field(ge=0)
    weight_bytes: int = Field(0, ge=0)
    scale_bytes: int = Field(0, ge=0, description="weight or KV scales")
    zero_bytes: int = Field(0, ge=0)
    kv_bytes: int = Field(0, ge=0)
    act_in_bytes: int = Field(0, ge=0)
    act_out_bytes: int = Field(0, ge=0)
    other_bytes: int = Field(0, ge=0, description="block tables; STREAM arrays")

    @property
    def total_bytes(self) -> int:
        return (self.weight_bytes + self.scale_bytes + self.zero_bytes + self.kv_bytes + self.act_in_bytes
                + self.act_out_bytes + self.other_bytes)


class Measured(_Frozen):
    """Timing summary (ms) over ``reps`` calls after warm-up; ``flushed``: LLC/L2 flushed before each rep."""

    median_ms: float = Field(gt=0)
    p10_ms: float = Field(gt=0)
    p90_ms: float = Field(gt=0)
    min_ms: float = Field(gt=0)
    mean_ms: float = Field(gt=0)
    std_ms: float = Field(ge=0)
    reps: int = Field(ge=1)
    warmup: int = Field(ge=0)
    flushed: bool
    flush_bytes: int = Field(ge=0)
    threads: int = Field(ge=1)


class Prediction(_Frozen):
    """The planner's time for the same work when the record was made."""

    predicted_ms: float = Field(gt=0)
    hardware_id: str
    efficiency_source: str
    bound: str


class Record(_Frozen):
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    created: str = Field(description="ISO 8601 UTC time the record was made")
    device_id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    fingerprint: dict[str, Any]
    params: Params
    status: Literal["ok", "oom", "error"]
    message: str | None = None
    work: Work | None = None
    measured: Measured | None = None
    achieved_gbs: float | None = None
    achieved_tflops: float | None = None
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


class RecordWriter:
    """Appends records to one run file; after each record the whole file is rewritten through a temp file and a
    rename (planner.io.atomic_write_text), so an interrupted sweep keeps every record it finished."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: list[Record] = []

    def append(self, record: Record) -> None:
        self.records.append(record)
        atomic_write_text(self.path, dumps(self.records))


def slug(text: str) -> str:
    """'AMD EPYC 9654 96-Core Processor' -> 'amd-epyc-9654-96-core-processor'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def device_id_from_fingerprint(fp: dict[str, Any]) -> str:
    """A hardware-spec id for the measured device: ``cpu-<model>-<cores>c`` or ``gpu-<name>``.

    CPU model strings lose marketing words ('Processor', 'n-Core'); e.g. 'AMD EPYC' with 2 cores ->
    ``cpu-amd-epyc-2c``; 'NVIDIA H200' -> ``gpu-nvidia-h200``.
    """
    if fp.get("device_type") == "cuda":
        return "gpu-" + slug(str(fp.get("gpu_name", "cuda")))
    model = re.sub(r"\b(\d+-core|processor|cpu|with .*|@.*)\b", " ", str(fp.get("cpu_model", "")), flags=re.I)
    model = re.sub(r"\((r|tm)\)", " ", model, flags=re.I)
    return f"cpu-{slug(model)}-{fp.get('cpu_count') or 1}c"
