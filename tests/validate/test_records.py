"""The record schema and its JSON Lines I/O (validate/records.py)."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlannerError
from validate.records import (
    MatmulParams,
    Measured,
    PagedAttentionParams,
    Record,
    RecordWriter,
    Work,
    device_id_from_fingerprint,
    read_dir,
    read_records,
)

FP = {"device_type": "cpu", "cpu_model": "AMD EPYC", "cpu_count": 2, "torch_threads": 2, "llc_bytes": 32 * 2**20}


def make_record(m: int = 1, status: str = "ok", median_ms: float = 0.5) -> Record:
    params = MatmulParams(m=m, n=4096, k=4096, weight_format="bf16", act_dtype="bf16")
    if status != "ok":
        return Record(run_id="r1", created="2026-01-01T00:00:00+00:00", device_id="cpu-test-2c", fingerprint=FP,
                      params=params, status=status, message="MemoryError")
    work = Work(flops=2 * m * 4096 * 4096, weight_bytes=4096 * 4096 * 2, act_in_bytes=m * 4096 * 2,
                act_out_bytes=m * 4096 * 2)
    meas = Measured(median_ms=median_ms, p10_ms=median_ms * 0.9, p90_ms=median_ms * 1.1, min_ms=median_ms * 0.8,
                    mean_ms=median_ms, std_ms=0.01, reps=5, warmup=2, flushed=True, flush_bytes=64 * 2**20,
                    threads=2)
    sec = median_ms * 1e-3
    return Record(run_id="r1", created="2026-01-01T00:00:00+00:00", device_id="cpu-test-2c", fingerprint=FP,
                  params=params, status="ok", work=work, measured=meas, achieved_gbs=work.total_bytes / sec / 1e9,
                  achieved_tflops=work.flops / sec / 1e12)


def test_work_total_is_the_sum_of_its_parts():
    # bf16 4096 x 4096 weight at M = 1: 33,554,432 weight bytes + 8,192 in + 8,192 out = 33,570,816
    w = make_record().work
    assert w.total_bytes == 4096 * 4096 * 2 + 2 * 4096 * 2 == 33_570_816


def test_roundtrip_through_writer(tmp_path):
    path = tmp_path / "dev" / "run.jsonl"
    writer = RecordWriter(path)
    recs = [make_record(1), make_record(4), make_record(16, status="oom")]
    for i, r in enumerate(recs, 1):
        writer.append(r)
        # after every append the file on disk is complete: an interrupted sweep keeps what it finished
        assert read_records(path) == recs[:i]
    assert read_dir(tmp_path / "dev") == recs
    assert len(path.read_text().splitlines()) == 3
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp file left behind


def test_one_json_object_per_line_with_schema_version(tmp_path):
    path = tmp_path / "run.jsonl"
    RecordWriter(path).append(make_record())
    obj = json.loads(path.read_text().splitlines()[0])
    assert obj["schema_version"] == 1 and obj["params"]["kernel"] == "quant_matmul" and obj["status"] == "ok"


def _write_line(tmp_path, obj) -> str:
    p = tmp_path / "bad.jsonl"
    good = make_record().model_dump_json()
    p.write_text(good + "\n" + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    return str(p)


def test_unknown_key_names_file_line_and_field(tmp_path):
    obj = json.loads(make_record().model_dump_json())
    obj["measured"]["median_us"] = 3.0
    with pytest.raises(PlannerError, match=r"line 2: measured\.median_us"):
        read_records(_write_line(tmp_path, obj))


def test_wrong_schema_version_is_an_error(tmp_path):
    obj = json.loads(make_record().model_dump_json())
    obj["schema_version"] = 2
    with pytest.raises(PlannerError, match="line 2: schema_version must be 1"):
        read_records(_write_line(tmp_path, obj))


def test_malformed_line_is_an_error(tmp_path):
    with pytest.raises(PlannerError, match="line 2: malformed JSON"):
        read_records(_write_line(tmp_path, "{not json"))


def test_unknown_kernel_is_an_error(tmp_path):
    obj = json.loads(make_record().model_dump_json())
    obj["params"]["kernel"] = "flash_prefill"
    with pytest.raises(PlannerError, match="line 2: params"):
        read_records(_write_line(tmp_path, obj))


def test_params_validate_their_fields():
    with pytest.raises(ValueError):
        PagedAttentionParams(batch=1, context_lens=[4], num_q_heads=4, num_kv_heads=2, head_dim=64, block_size=16,
                             kv_dtype="int3", q_dtype="bf16", backend="torch")


def test_missing_records_folder_is_an_error(tmp_path):
    with pytest.raises(PlannerError, match="no such file or folder"):
        read_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PlannerError, match="no .jsonl files"):
        read_dir(tmp_path / "empty")


@pytest.mark.parametrize("fp,expected", [
    ({"device_type": "cpu", "cpu_model": "AMD EPYC", "cpu_count": 2}, "cpu-amd-epyc-2c"),
    ({"device_type": "cpu", "cpu_model": "AMD EPYC 9654 96-Core Processor", "cpu_count": 192},
     "cpu-amd-epyc-9654-192c"),
    ({"device_type": "cpu", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_count": 8},
     "cpu-intel-xeon-platinum-8480-8c"),
    # a catalog GPU maps to its catalog id (issue 12: a calibration measured as gpu-nvidia-h200 never applied to
    # h200-sxm); the lent H200 reported 143771 MiB = 140.4 GiB
    ({"device_type": "cuda", "gpu_name": "NVIDIA H200", "gpu_memory_gib": 140.4, "cpu_model": "x"}, "h200-sxm"),
    ({"device_type": "cuda", "gpu_name": "NVIDIA H200", "cpu_model": "x"}, "h200-sxm"),
    # same name, memory outside the catalog card's range: another card, not silently the catalog one
    ({"device_type": "cuda", "gpu_name": "NVIDIA H200", "gpu_memory_gib": 40.0, "cpu_model": "x"}, "gpu-nvidia-h200"),
    ({"device_type": "cuda", "gpu_name": "NVIDIA Foo 9000", "cpu_model": "x"}, "gpu-nvidia-foo-9000"),
])
def test_device_id_from_fingerprint(fp, expected):
    assert device_id_from_fingerprint(fp) == expected
