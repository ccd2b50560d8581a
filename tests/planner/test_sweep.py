"""The vectorized sweep computes exactly what estimate computes."""

import pytest

from planner import estimate
from planner.sweep import sweep


def test_sweep_matches_estimate():
    df = sweep(["llama-2-7b", "mixtral-8x7b", "gemma-2-9b"], ["a100-80gb-sxm", "rtx-4090", "apple-m2-ultra"],
               ["fp16", "int4-g128"], [1, 16], [100, 3000], [1, 300])
    assert len(df) == 3 * 3 * 2 * 2 * 2 * 2
    for _, r in df.sample(20, random_state=0).iterrows():
        e = estimate(r.model, r.hardware, r.weights, batch=int(r.batch), prompt=int(r.prompt), output=int(r.output))
        assert bool(r.fits) == e.memory.fits
        assert r.total_gb == pytest.approx(e.memory.total_gb, rel=1e-9)
        if e.memory.fits:
            assert r.ttft_ms == pytest.approx(e.prefill.latency_ms, rel=1e-9)
            assert r.tpot_ms == pytest.approx(e.decode.latency_ms_per_token, rel=1e-9)
            assert r.e2e_s == pytest.approx(e.end_to_end.latency_s, rel=1e-9)


def test_decode_integration_matches_step_by_step_sum():
    # the midpoint rule over 32 bins vs the brute-force sum over every one of 999 decode steps
    from planner.architecture import load_model
    from planner.efficiency import resolve_efficiency
    from planner.hardware import load_hardware
    from planner.latency import decode_step_time_s, decode_sum_s
    from planner.quantization import weight_format
    from planner.roofline import device_model, select_unit
    import numpy as np

    m, spec, f = load_model("mistral-7b"), load_hardware("l4"), weight_format("fp16")
    u = select_unit(spec, f)
    dev = device_model(spec, u, f, resolve_efficiency(spec, u, "default"))
    brute = float(np.sum(decode_step_time_s(m, f, "fp16", dev, 8, 3500 + np.arange(999))))
    assert float(decode_sum_s(m, f, "fp16", dev, 8, 3500, 1000)) == pytest.approx(brute, rel=1e-3)


def test_sweep_with_a_runtime_matches_estimate():
    # the runtime's fitted efficiency and unit (llama.cpp on a Mac: the GPU, not the Neural Engine)
    df = sweep(["llama-3.1-8b"], ["apple-m2-ultra", "rtx-4090"], ["q4_0"], [1, 4], [512], [128], runtime="llamacpp")
    assert set(df["unit"]) == {"gpu"}
    for _, r in df.iterrows():
        e = estimate(r.model, r.hardware, r.weights, batch=int(r.batch), prompt=512, output=128, runtime="llamacpp")
        assert r.tpot_ms == pytest.approx(e.decode.latency_ms_per_token, rel=1e-9)
        assert r.ttft_ms == pytest.approx(e.prefill.latency_ms, rel=1e-9)
    # a device class no published row covers runs on the kind defaults, as estimate does (RuntimeProfile.for_unit);
    # a vendor the engine does not run on gets no rows, and a grid of only such devices is a one-line error
    arc = sweep(["llama-3.1-8b"], ["arc-pro-b60"], ["fp16"], [1], [512], [128], runtime="llamacpp")
    e = estimate("llama-3.1-8b", "arc-pro-b60", "fp16", prompt=512, output=128, runtime="llamacpp")
    assert arc.iloc[0].tpot_ms == pytest.approx(e.decode.latency_ms_per_token, rel=1e-9)
    from planner.errors import PlannerError
    with pytest.raises(PlannerError, match="runtime profile"):
        sweep(["llama-3.1-8b"], ["mi300x"], ["fp16"], runtime="trtllm")


@pytest.mark.parametrize("model, prompt, output", [
    ("mistral-7b", 3990, 300),        # sliding window 4,096: the range crosses the window
    ("gemma-3-1b", 400, 700),         # 512-token local layers, 5 of 6 layers local
    ("gpt-oss-20b", 50, 200),         # 128-token windows on every other layer
    ("deepseek-v3.2", 1900, 400),     # sparse attention reads the top 2,048 keys
    ("qwen3-next-80b-a3b", 10, 500),  # DeltaNet layers: constant per step
    ("llama-2-7b", 1, 5000),          # a long generation: 4,999 steps in one closed form
])
def test_closed_form_decode_sum_equals_the_step_by_step_sum(model, prompt, output):
    # decode_sum_s sums max(C(x), M(x)) per operator in closed form; the reference adds every one of the output - 1
    # steps at past = prompt .. prompt + output - 2. Exact up to float rounding.
    from planner.architecture import load_model
    from planner.efficiency import resolve_efficiency
    from planner.hardware import load_hardware
    from planner.latency import decode_step_time_s, decode_sum_s
    from planner.quantization import weight_format
    from planner.roofline import device_model, select_unit
    import numpy as np

    m, spec, f = load_model(model), load_hardware("h100-sxm"), weight_format("bf16")
    u = select_unit(spec, f)
    dev = device_model(spec, u, f, resolve_efficiency(spec, u, "default"))
    for batch in (1, 64):
        steps = decode_step_time_s(m, f, "bf16", dev, batch, prompt + np.arange(output - 1))
        total, last = decode_sum_s(m, f, "bf16", dev, batch, prompt, output, with_last=True)
        assert float(total) == pytest.approx(float(np.sum(steps)), rel=1e-9)
        assert float(last) == pytest.approx(float(steps[-1]), rel=1e-12)


def test_string_columns_from_chunks_equal_python_strings():
    """planner.sweep._StringChunks (Arrow takes, chunks reused across parts) against names[codes] as Python strings,
    both branches (Arrow-backed and object strings): long runs of one name, many short runs, repeated names."""
    import numpy as np

    from planner.sweep import _StringChunks

    names = ["llama-2-7b", "a100-40gb-sxm", "gpu", "ü-ñ", "x"]
    rng = np.random.default_rng(0)
    for arrow in (True, False):
        sc = _StringChunks()
        sc.arrow = sc.arrow and arrow
        want = []
        for codes in (np.repeat(rng.integers(0, 5, 40), 1000), rng.integers(0, 5, 120_000)):
            sc.add("model", sc.names(names, codes))
            want += [names[c] for c in codes]
        for _ in range(2):
            sc.add("model", sc.repeat("ü-ñ", 7))
            want += ["ü-ñ"] * 7
        got = sc.column("model")
        assert got.dtype == __import__("pandas").Series(["x"]).dtype
        assert got.tolist() == want


def test_sweep_matches_estimate_with_runtime_profiles():
    """The sweep times every device at once with the same operators as estimate(): runtime profiles whose
    refinements differ by device class (regime curves, fp8 launch cost, hf-eager's per-step KV-cache copy) give the
    same numbers (rel 1e-9); so do routed experts in a format of their own (gpt-oss-20b in llama.cpp's MXFP4_MOE:
    experts at the profile's MXFP4 fraction, the other GEMMs Q8_0 with Q8_0's dequantization cost,
    roofline.DeviceModel.own_format_flops / own_format_dequant; and as published under vLLM: bf16, experts MXFP4);
    and TurboMind's first token from a decode step (runtimes.first_token_from_decode)."""
    for model, runtime, weights in (("llama-2-7b", "hf-eager", "fp16"), ("llama-2-7b", "trtllm", "fp8"),
                                    ("llama-2-7b", "vllm", "bf16"), ("gpt-oss-20b", "llamacpp", "mxfp4_moe"),
                                    ("gpt-oss-20b", "vllm", "bf16"), ("llama-2-7b", "lmdeploy", "fp16")):
        df = sweep([model], ["a100-80gb-sxm", "h100-sxm", "rtx-4090"], [weights], [1, 32], [2048], [128],
                   runtime=runtime)
        for _, r in df.iterrows():
            e = estimate(r.model, r.hardware, r.weights, batch=int(r.batch), prompt=int(r.prompt),
                         output=int(r.output), runtime=runtime)
            assert bool(r.fits) == e.memory.fits
            if e.memory.fits:
                assert r.ttft_ms == pytest.approx(e.prefill.latency_ms, rel=1e-9), (runtime, r.hardware)
                assert r.tpot_ms == pytest.approx(e.decode.latency_ms_per_token, rel=1e-9), (runtime, r.hardware)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gemma-3-1b", "gpt-oss-20b", "deepseek-v3.2", "mamba-codestral-7b"])
def test_closed_form_at_chosen_elements_equals_the_whole_grid(model):
    """The sweep sums decode's closed form only where a configuration fits, at the unit chosen there
    (DecodeClosedForm.total(at)); on the same elements it equals the sum over the whole grid bit for bit (global,
    sliding-window, sparse and SSM-only models; devices stacked as the sweep stacks them)."""
    import numpy as np

    from planner.architecture import load_model
    from planner.hardware import load_hardware
    from planner.latency import decode_closed_form
    from planner.quantization import weight_format
    from planner.sweep import _devices_for

    specs = [load_hardware(h) for h in ("h100-sxm", "apple-m2-ultra", "x86-server-cpu", "rtx-4090")]
    fmt, m = weight_format("fp16"), load_model(model)
    B = np.array([1.0, 3.0, 64.0]).reshape(3, 1, 1)
    P = np.array([1.0, 100.0, 5000.0]).reshape(1, 3, 1)
    O = np.array([1.0, 2.0, 300.0, 4096.0]).reshape(1, 1, 4)
    devs, keep, rows, sd = _devices_for(fmt, specs, None, "auto", P, O, (3, 3, 4))
    form = decode_closed_form(m, fmt, "fp16", sd, B, P, O)
    grid = form.total()
    assert grid.shape == (len(devs), 3, 3, 4)
    at = np.nonzero(np.random.default_rng(0).random(grid.shape) < 0.4)
    assert np.array_equal(form.total(at).view(np.int64), grid[at].view(np.int64))


def test_sum_max_affine_arrays_equal_floats_and_the_brute_force_sum():
    """sum_max_affine on arrays (in place, the run worked out on the pieces' shape) against its float branch, bit for
    bit, and against adding every term; runs that start, end, cover all or none of the terms, slopes of 0, k = 0."""
    import numpy as np

    from planner.latency import sum_max_affine

    rng = np.random.default_rng(1)
    shape = (400,)
    x0 = rng.choice([0.0, 1.0, 2.5, 1e-9], shape) * rng.random(shape)
    y0 = rng.choice([0.0, 1.0, 2.5, 1e-9], shape) * rng.random(shape)
    dx = rng.choice([0.0, 1.0, -1.0, 1e-3], shape) * rng.choice([0.0, 1.0, 0.5], shape)
    dy = rng.choice([0.0, 1.0, -1.0, 1e-3], shape) * rng.choice([0.0, 1.0, 0.5], shape)
    k = rng.integers(0, 300, shape).astype(float)
    got = sum_max_affine(x0, dx, y0, dy, k)
    for i in range(shape[0]):
        one = sum_max_affine(float(x0[i]), float(dx[i]), float(y0[i]), float(dy[i]), float(k[i]))
        assert np.float64(one).view(np.int64) == got[i].view(np.int64), i
        j = np.arange(k[i])
        brute = float(np.sum(np.maximum(x0[i] + j * dx[i], y0[i] + j * dy[i])))
        assert one == pytest.approx(brute, rel=1e-9, abs=1e-12)
    # broadcast pieces against step counts (the sweep's shapes), and a 0-d call
    got2 = sum_max_affine(x0[:, None], dx[:, None], y0[:, None], dy[:, None], np.array([[0.0, 5.0, 77.0]]))
    assert got2.shape == (400, 3) and got2[:, 0].tolist() == [sum_max_affine(*(float(v[i]) for v in (x0, dx, y0, dy)), 0.0)
                                                             for i in range(400)]
    assert isinstance(sum_max_affine(*(np.array(v) for v in (1.0, 0.5, 2.0, 0.1, 10.0))), np.float64)


@pytest.mark.parametrize("fmt_name, runtime", [("fp16", None), ("fp8", "trtllm"), ("bf16", "vllm"),
                                               ("int4-g128", None), ("fp16", "hf-eager")])
def test_stacked_devices_time_like_each_device_alone(fmt_name, runtime):
    """time_ops on the sweep's stacked devices (regime curves on some devices only, the fp8 launch cost, the KV-copy
    term dropped where no device copies) against time_ops on each device alone, every catalog device."""
    import numpy as np

    from planner.architecture import load_model
    from planner.hardware import list_hardware_ids, load_hardware
    from planner.ops import decode_ops, prefill_ops
    from planner.quantization import weight_format
    from planner.roofline import time_ops
    from planner.runtimes import load_runtime
    from planner.sweep import _devices_for

    specs = [load_hardware(h) for h in list_hardware_ids()]
    fmt, m = weight_format(fmt_name), load_model("mixtral-8x7b")
    B = np.array([1.0, 7.0, 300.0]).reshape(3, 1, 1)
    P = np.array([1.0, 129.0, 4000.0]).reshape(1, 3, 1)
    O = np.array([2.0, 500.0]).reshape(1, 1, 2)
    devs, _, _, sd = _devices_for(fmt, specs, load_runtime(runtime) if runtime else None, "auto", P, O, (3, 3, 2))
    assert devs
    for ops in (prefill_ops(m, fmt, "fp16", B, P), decode_ops(m, fmt, "fp16", B, P + 1)):
        stacked = time_ops(ops, sd)
        for i, d in enumerate(devs):
            for s, a in zip(stacked, time_ops(ops, d)):
                for f in ("time_s", "compute_s", "memory_s"):
                    got = np.asarray(getattr(s, f))[i, 0] if np.ndim(getattr(s, f)) == 5 else getattr(s, f)
                    want = np.broadcast_to(getattr(a, f), np.shape(got))
                    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"{d.hardware_id} {s.op.name} {f}")


def test_repeated_models_devices_and_formats_give_repeated_rows():
    # the fuzzer's case: a format and a device named twice (each gets its rows, as every other grid value does)
    df = sweep(["mistral-7b", "gemma-2-9b"], ["snapdragon-8-gen3", "snapdragon-8-gen3", "a100-40gb-sxm"],
               ["nf4", "fp8", "nf4"], [2048, 895], [512], [64, 4096, 32768])
    per = df.groupby(["model", "weights", "hardware"]).size()
    assert per[("mistral-7b", "nf4", "snapdragon-8-gen3")] == 4 * 2 * 3  # 2 formats x 2 devices x 6 configurations
    a = df[(df.model == "mistral-7b") & (df.weights == "nf4") & (df.hardware == "a100-40gb-sxm")]
    assert len(a) == 12 and a.iloc[:6][["fits", "total_gb"]].equals(a.iloc[6:][["fits", "total_gb"]].set_axis(a.index[:6]))



def test_sweep_matches_estimate_for_a_materialized_cache_read():
    """llama.cpp without flash attention at a long context: its decode attention's extra K/V passes cost each class's
    kv_reread_share (NVIDIA below 1, Apple above: hardware_specs/runtimes/llamacpp.yaml), and the sweep's stacked
    devices (sweep._StackedEfficiency) give the same TTFT and TPOT as estimate() on each device alone (rel 1e-9)."""
    from planner.runtimes import load_runtime

    shares = {c.vendor.lower(): c.efficiency.kv_reread_share for c in load_runtime("llamacpp").classes}
    assert shares["nvidia"] != 1.0 and shares["apple"] != 1.0 and shares["nvidia"] != shares["apple"]
    df = sweep(["llama-3-8b"], ["rtx-4090", "a100-80gb-sxm", "apple-m2-ultra"], ["q4_k_m"], [1, 4], [4096], [256],
               flash_attention=False, runtime="llamacpp")
    assert len(df) == 6
    for _, r in df.iterrows():
        e = estimate(r.model, r.hardware, r.weights, batch=int(r.batch), prompt=int(r.prompt), output=int(r.output),
                     flash_attention=False, runtime="llamacpp")
        assert r.ttft_ms == pytest.approx(e.prefill.latency_ms, rel=1e-9), r.hardware
        assert r.tpot_ms == pytest.approx(e.decode.latency_ms_per_token, rel=1e-9), r.hardware
