"""Measuring sweeps (validate/runner.py), the measured local spec (validate/localspec.py), the CLI entry and the
GPU sweep script's logic, on the `tiny` preset (seconds on 2 cores; timings are recorded, never asserted)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

import validate.runner as runner
from planner.errors import PlannerError
from planner.hardware import parse_hardware
from validate.localspec import spec_from_records
from validate.records import MatmulParams, read_records

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("records")
    path = runner.run_sweep("tiny", out_dir=out, progress=False)
    return path, read_records(path)


def test_tiny_sweep_records_every_case(tiny_run):
    path, recs = tiny_run
    cases = runner.preset("tiny").cases
    assert [r.params for r in recs] == cases
    assert all(r.status == "ok" for r in recs), [r.message for r in recs if r.status != "ok"]
    assert path.parent.name == recs[0].device_id and path.suffix == ".jsonl"
    for r in recs:
        assert r.measured.threads == torch.get_num_threads() == len(os.sched_getaffinity(0))
        assert r.measured.flushed and r.measured.flush_bytes > 0
        assert r.measured.p10_ms <= r.measured.median_ms <= r.measured.p90_ms
        # achieved rates are exactly work / median time
        assert r.achieved_gbs == pytest.approx(r.work.total_bytes / (r.measured.median_ms * 1e-3) / 1e9)
        assert r.fingerprint["preset"] == "tiny" and "load_avg_1m" in r.fingerprint


def test_kernel_records_carry_the_planners_prediction(tiny_run):
    _, recs = tiny_run
    kernels = [r for r in recs if r.kernel not in ("stream", "gemm_peak")]
    assert kernels and all(r.prediction is not None and r.prediction.predicted_ms > 0 for r in kernels)
    assert all(r.prediction is None for r in recs if r.kernel in ("stream", "gemm_peak"))


def test_exact_work_of_a_matmul_record(tiny_run):
    """int4 g32 weights, N = K = 256, M = 4, bf16 activations: 256 * 256 / 2 = 32,768 weight bytes,
    scales and zeros 256 * (256 / 32) * 2 = 4,096 bytes each, activations 4 * 256 * 2 = 2,048 in and out,
    2 * 4 * 256 * 256 = 524,288 FLOPs."""
    _, recs = tiny_run
    r = next(r for r in recs if r.kernel == "quant_matmul" and r.params.weight_format == "int4" and r.params.m == 4)
    w = r.work
    assert (w.weight_bytes, w.scale_bytes, w.zero_bytes, w.act_in_bytes, w.act_out_bytes, w.flops) == (
        32_768, 4_096, 4_096, 2_048, 2_048, 524_288)


def test_spec_from_measured_ceilings(tiny_run):
    _, recs = tiny_run
    spec = parse_hardware(spec_from_records(recs), "test")
    triad = next(r for r in recs if r.kernel == "stream" and r.params.op == "triad")
    # the spec rounds to 0.01 GB/s (a loaded 2-core CI box measures the tiny 8 MiB triad at ~1.6 GB/s)
    assert spec.memory.bandwidth_gbs == pytest.approx(triad.achieved_gbs, abs=0.005)
    assert "STREAM triad" in spec.memory.source
    assert set(spec.units[0].peak_tflops) == {"fp32", "bf16"} and spec.kind == "cpu"


def test_spec_needs_ceilings(tiny_run):
    _, recs = tiny_run
    with pytest.raises(PlannerError, match="no STREAM triad"):
        spec_from_records([r for r in recs if r.kernel != "stream"])


def test_failures_are_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    bad = MatmulParams(m=1, n=256, k=100, weight_format="int4", act_dtype="bf16", group_size=32)  # 32 !| 100
    good = MatmulParams(m=1, n=256, k=256, weight_format="bf16", act_dtype="bf16")
    oom = MatmulParams(m=2, n=256, k=256, weight_format="bf16", act_dtype="bf16")
    orig = runner._prepare

    def fake(p, *a):
        if p == oom:
            raise MemoryError("can't allocate memory")
        return orig(p, *a)

    monkeypatch.setattr(runner, "_prepare", fake)
    recs = read_records(runner.run_sweep("tiny", out_dir=tmp_path, progress=False, cases=[bad, oom, good]))
    assert [r.status for r in recs] == ["error", "oom", "ok"]
    assert "multiple" in recs[0].message and recs[1].message.startswith("MemoryError")


def test_interrupted_sweep_keeps_what_it_finished(tmp_path, monkeypatch):
    cases = runner.preset("tiny").cases[4:8]
    orig, calls = runner._prepare, []

    def fake(p, *a):
        calls.append(p)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return orig(p, *a)

    monkeypatch.setattr(runner, "_prepare", fake)
    with pytest.raises(KeyboardInterrupt):
        runner.run_sweep("tiny", out_dir=tmp_path, progress=False, cases=cases)
    (path,) = tmp_path.glob("*/*.jsonl")
    assert [r.params for r in read_records(path)] == cases[:2]


def test_progress_bar_on_stderr(tmp_path, capsys):
    runner.run_sweep("tiny", out_dir=tmp_path, progress=True, cases=runner.preset("tiny").cases[4:6])
    err = capsys.readouterr().err
    assert "[" in err and "2/2" in err and "left" in err


def test_presets_are_well_formed():
    for name in runner.PRESETS:
        pr = runner.preset(name)
        kinds = [c.kernel for c in pr.cases]
        assert kinds[:2] == ["stream", "stream"] and "gemm_peak" in kinds, name  # ceilings first
        assert {"quant_matmul", "paged_attention", "decode_step"} <= set(kinds), name
    cuda = runner.preset("cuda")
    assert cuda.device == "cuda"
    assert {(c.weight_format, c.group_size) for c in cuda.cases if c.kernel == "quant_matmul"} >= {
        ("bf16", None), ("int8", None), ("int4", 128)}
    with pytest.raises(PlannerError, match="allowed: cpu, cpu-full, cuda, tiny"):
        runner.preset("huge")


def test_cli_run_quiet(tmp_path):
    from planner.cli import main
    assert main(["validate", "run", "--preset", "tiny", "--out", str(tmp_path), "--limit", "2", "--quiet"]) == 0
    (path,) = tmp_path.glob("*/*.jsonl")
    assert len(read_records(path)) == 4 + 2  # ceilings + 2 cases


def test_cli_bad_preset_is_one_line(capsys):
    from planner.cli import main
    assert main(["validate", "run", "--preset", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --preset: unknown preset 'nope'") and err.count("\n") == 1


def test_cuda_preset_cuts_the_largest_cases_of_every_kind_first():
    """A phase stopped at its time share keeps the small cases of every KV dtype and weight format: the cuda
    preset orders attention and decode steps by batch tokens, kinds interleaved (stable sort)."""
    cases = runner.preset("cuda").cases
    att = runner.family_cases(cases, "paged_attention")
    steps = runner.family_cases(cases, "decode_step")
    assert [p.kv_dtype for p in att[:4]] == ["bf16", "fp16", "int8", "fp8"]
    assert [p.weight_format for p in steps[:3]] == ["bf16", "int8", "int4"]
    for fam in (att, steps):
        sizes = [sum(p.context_lens) for p in fam]
        assert sizes == sorted(sizes)
    assert len(runner.family_cases(cases, "ceilings")) == 5  # STREAM copy, triad; GEMM fp32, bf16, fp16
