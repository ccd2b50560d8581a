"""The facts the issue lists, each derived by hand here from published specs, with a stated tolerance."""

import pytest

from planner import estimate
from planner.architecture import load_model
from planner.ops import decode_ops, kv_bytes_per_sequence, kv_bytes_per_token, totals, weight_bytes
from planner.quantization import weight_format

GIB = 2**30


def test_llama2_13b_fp16_decode_reads_26_gb_per_token():
    # Llama-2-13B: 13,015,864,320 params x 2 bytes = 26.03 GB; decode reads every weight once except the embedding
    # table (one row per token): (13,015,864,320 - 32000 x 5120) x 2 = 25.70 GB. "~26 GB": within 2%.
    e = estimate("llama-2-13b", "a100-80gb-sxm", batch=1, prompt=1, output=2)
    expected = (13_015_864_320 - 32000 * 5120) * 2
    assert e.decode.weight_bytes_per_step == pytest.approx(expected, rel=1e-6)
    assert e.decode.weight_bytes_per_step == pytest.approx(26e9, rel=0.02)


def test_llama2_7b_weights_and_a100_decode_floor():
    e = estimate("llama-2-7b", "a100-40gb-sxm", efficiency="datasheet", batch=1, prompt=1, output=2)
    # 6,738,415,616 params x 2 bytes = 13.48 GB ("~13.5 GB")
    assert e.memory.weights_gb == pytest.approx(6_738_415_616 * 2 / 1e9, rel=1e-6)
    assert e.memory.weights_gb == pytest.approx(13.5, rel=0.01)
    # floor: all weights / 1555 GB/s = 8.67 ms ("~8.7 ms"); decode skips the embedding table (0.26 GB), so the
    # tightest floor is (13.48 - 0.26) GB / 1555 GB/s = 8.50 ms. The prediction sits at or above it, within 3% of 8.7.
    floor_ms = (6_738_415_616 - 32000 * 4096) * 2 / 1555e9 * 1e3
    assert e.decode.latency_ms_per_token >= floor_ms
    assert e.decode.latency_ms_per_token == pytest.approx(8.7, rel=0.03)
    # with the default (sub-peak) efficiencies it is slower still
    assert estimate("llama-2-7b", "a100-40gb-sxm", prompt=1, output=2).decode.latency_ms_per_token > 8.7


def test_llama2_7b_kv_cache():
    m = load_model("llama-2-7b")
    # 2 (K and V) x 32 layers x 4096 hidden x 2 bytes = 524,288 bytes per token
    assert kv_bytes_per_token(m, "fp16") == 2 * 32 * 4096 * 2 == 524_288
    # 2048 tokens = 1 GiB exactly
    assert kv_bytes_per_sequence(m, "fp16", 2048) == GIB
    # ten users at 2048 tokens: 10 GiB = 10.74 GB ("~10.7 GB"); batch 10, prompt 2047 + output 1 = 2048 tokens each
    e = estimate("llama-2-7b", "a100-80gb-sxm", batch=10, prompt=2047, output=1)
    assert e.memory.kv_cache_gb == pytest.approx(10 * GIB / 1e9, rel=1e-9)
    assert e.memory.kv_cache_gb == pytest.approx(10.7, rel=0.01)


def test_4b_bf16_model_on_dgx_spark_bandwidth_utilization():
    # A 4B-parameter bf16 model at 29.5 tok/s moves 4e9 x 2 x 29.5 = 236 GB/s = 86% of DGX Spark's 273 GB/s.
    # Qwen3-4B (4.02B, tied embeddings: the LM head reads the embedding matrix) reads 8.04 GB per decode step.
    e = estimate("qwen3-4b", "dgx-spark", weights="bf16", batch=1, prompt=1, output=2, efficiency="datasheet")
    bytes_per_token = e.decode.weight_bytes_per_step
    assert bytes_per_token == pytest.approx(8.0e9, rel=0.01)
    moved_gbs = bytes_per_token * 29.5 / 1e9
    assert moved_gbs == pytest.approx(236, rel=0.01)
    assert moved_gbs / 273 == pytest.approx(0.86, abs=0.01)
    # and the datasheet roofline bound on that device is 273 / 8.04 = 33.9 tok/s: the measured 29.5 is below it
    assert e.decode.tokens_per_s_per_sequence == pytest.approx(273e9 / bytes_per_token, rel=0.01)


def test_quantization_cuts_weight_bytes():
    m = load_model("llama-2-7b")
    fp16, int8, int4 = (weight_bytes(m, weight_format(f)) for f in ("fp16", "int8", "int4-g128"))
    emb = 2 * 32000 * 4096 * 2  # embedding + LM head stay fp16
    # linear weights: int8 per-channel = 8 + 16/4096 bits; int4 g128 = 4 + 16/128 = 4.125 bits
    assert (int8 - emb) / (fp16 - emb) == pytest.approx((8 + 16 / 4096) / 16, rel=1e-3)
    assert (int4 - emb) / (fp16 - emb) == pytest.approx(4.125 / 16, rel=1e-3)
    assert 0.5 <= int8 / fp16 <= 0.53 and 0.25 < int4 / fp16 <= 0.30
    # decode time falls accordingly while memory bound (datasheet roofline, batch 1)
    t = {f: estimate("llama-2-7b", "a100-40gb-sxm", f, batch=1, prompt=16, output=2,
                     efficiency="datasheet").decode.latency_ms_per_token for f in ("fp16", "int8", "int4-g128")}
    assert t["int8"] / t["fp16"] == pytest.approx(int8 / fp16, rel=0.05)
    assert t["int4-g128"] / t["fp16"] == pytest.approx(int4 / fp16, rel=0.08)


def test_bounds_and_ridge_on_a100():
    # A100 fp16: 312 TFLOP/s / 1555 GB/s = 200.6 FLOP/byte
    e = estimate("llama-2-7b", "a100-40gb-sxm", batch=1, prompt=2048, output=2, efficiency="datasheet")
    assert e.roofline.ridge_flop_per_byte == pytest.approx(312e12 / 1555e9, rel=1e-9)
    assert e.decode.bound == "memory"
    assert e.prefill.bound == "compute"
    # an fp16 weight GEMM over B tokens does 2*B*K*N flops on 2*K*N bytes: intensity ~ B FLOP/byte, so the MLP turns
    # compute bound between batch 128 (intensity < 200) and 256 (> 200)
    def mlp(batch):
        e = estimate("llama-2-7b", "a100-80gb-sxm", batch=batch, prompt=1, output=2, efficiency="datasheet")
        return next(o for o in e.decode.ops if o.name == "mlp")
    assert mlp(128).bound == "memory" and mlp(128).intensity_flop_per_byte < 200
    assert mlp(256).bound == "compute" and mlp(256).intensity_flop_per_byte > 200


def test_decode_reads_kv_once_lm_head_and_gqa():
    m = load_model("llama-3.1-8b")
    ops = decode_ops(m, weight_format("fp16"), "fp16", 4, 1000)
    t = totals(ops)
    # KV read per step = batch x context x (2 x 8 KV heads x 128 x 2 bytes x 32 layers) -- once, not twice, and with
    # KV heads (8), not attention heads (32)
    assert float(t["kv_read_bytes"]) == 4 * 1000 * 2 * 8 * 128 * 2 * 32
    lm = next(o for o in decode_ops(load_model("llama-2-7b"), weight_format("fp16"), "fp16", 1, 10) if o.name == "lm_head")
    assert lm.weight_bytes == 32000 * 4096 * 2 == 262_144_000  # the LM head's 262 MB weight read


def test_weight_only_quantization_keeps_activations_and_kv():
    a = estimate("llama-2-7b", "a100-80gb-sxm", "fp16", batch=8, prompt=512, output=64)
    b = estimate("llama-2-7b", "a100-80gb-sxm", "int4-g128", batch=8, prompt=512, output=64)
    assert a.memory.kv_cache_gb == b.memory.kv_cache_gb and a.memory.activations_gb == b.memory.activations_gb
    assert b.roofline.dtypes["matmul"] in ("fp16", "bf16")  # dequantized into a 16-bit GEMM, not int4 peaks
    assert estimate("llama-2-7b", "h100-sxm", "fp8").roofline.dtypes["matmul"] == "fp8"


def test_does_not_fit_prints_no_latency():
    e = estimate("llama-3.1-405b", "a100-40gb-sxm")
    assert not e.memory.fits and e.memory.verdict.startswith("does not fit: needs")
    assert e.decode.latency_ms_per_token is None and e.prefill.latency_ms is None and e.end_to_end.latency_s is None


def test_moe_decode_reads_expected_distinct_experts():
    # Mixtral: E=8, k=2. Batch 1 touches 2 experts; batch 4 touches 8 (1 - (6/8)^4) = 5.47 experts on average
    m = load_model("mixtral-8x7b")
    expert_bytes = 3 * 4096 * 14336 * 2
    for batch, experts in ((1, 2.0), (4, 8 * (1 - (6 / 8) ** 4))):
        op = next(o for o in decode_ops(m, weight_format("fp16"), "fp16", batch, 10) if o.name == "moe_experts")
        assert float(op.weight_bytes) == pytest.approx(experts * expert_bytes, rel=1e-9)


def test_mla_and_sliding_window_kv():
    # DeepSeek-V3: (512 + 64) x 61 layers x 2 bytes = 70,272 bytes per token
    assert kv_bytes_per_token(load_model("deepseek-v3"), "fp16") == 576 * 61 * 2
    # Mistral 7B's 4096-token window caps the cache: 8192 tokens cost the same as 4096
    m = load_model("mistral-7b")
    assert kv_bytes_per_sequence(m, "fp16", 8192) == kv_bytes_per_sequence(m, "fp16", 4096) == 4096 * 32 * 2 * 8 * 128 * 2


def test_flash_attention_off_adds_quadratic_scores():
    on = estimate("llama-2-7b", "a100-80gb-sxm", batch=2, prompt=4000, output=1)
    off = estimate("llama-2-7b", "a100-80gb-sxm", batch=2, prompt=4000, output=1, flash_attention=False)
    # scores + probabilities: 2 x batch x heads x prompt^2 x 2 bytes = 4.10 GB, one layer live at a time. The peak
    # moves from the MLP live set, T*(2h + 3I)*2 = 8000 x 41,216 x 2 = 0.659 GB, to the attention live set plus the
    # scores, T*(2h + q + 2kv + o)*2 + 4.10 GB = 8000 x 24,576 x 2 + 4.10 GB = 4.489 GB (T = 8000 tokens)
    scores = 2 * 2 * 32 * 4000 * 4000 * 2
    assert on.memory.activations_gb * 1e9 == pytest.approx(8000 * 41216 * 2 + 2 * 32000 * 4, rel=1e-9)
    assert off.memory.activations_gb * 1e9 == pytest.approx(8000 * 24576 * 2 + scores + 2 * 32000 * 4, rel=1e-9)


def test_soc_unit_selection_npu_prefill_and_bandwidth_bound_decode():
    # Snapdragon 8 Gen 3: the Hexagon NPU (45 int8 TOPS, third-party figure in the spec) runs int4 weights on its
    # int8 engine, while fp16 weights run on the Adreno GPU (5.55 fp16 TFLOPS). Decode is bandwidth bound on either.
    e = estimate("llama-3.1-8b", "snapdragon-8-gen3", "int4-g128", prompt=1024, output=16, efficiency="datasheet")
    assert e.roofline.unit == "hexagon" and e.roofline.dtypes["matmul"] == "int8"
    assert e.prefill.bound == "compute" and e.decode.bound == "memory"
    # decode floor: non-embedding int4 weights + fp16 LM head + KV at 76.8 GB/s
    assert e.decode.latency_ms_per_token >= e.decode.weight_bytes_per_step / 76.8e9 * 1e3
    g = estimate("llama-3.1-8b", "snapdragon-8-gen3", "fp16", prompt=128, output=16)
    assert g.roofline.unit == "gpu"
    assert estimate("llama-3.1-8b", "snapdragon-8-gen3", "int4-g128", unit="cpu").roofline.unit == "cpu"


def test_default_unit_is_the_fastest_for_the_request():
    # Per parameter: 2 x prompt / (peak x compute_fraction) + output x bytes/weight / (bandwidth x bw_fraction),
    # kind defaults gpu (0.7, 0.8), npu (0.4, 0.6). M2 Max fp16, 512 + 128 tokens: GPU 13.6 TFLOP/s vs ANE 15.8:
    #   GPU 1024 / 9.52e12 + 256 / 320e9 = 0.91 ns;  ANE 1024 / 6.32e12 + 256 / 240e9 = 1.23 ns  -> GPU
    from planner.hardware import load_hardware
    from planner.roofline import select_unit, unit_request_proxy_s

    spec, f = load_hardware("apple-m2-max"), weight_format("fp16")
    gpu = spec.unit("gpu")
    assert unit_request_proxy_s(spec, gpu, f, 512, 128) == pytest.approx(
        2 * 512 / (gpu.peak_tflops["fp16"] * 1e12 * 0.7) + 128 * 2 / (400e9 * 0.8))
    assert select_unit(spec, f, None, 512, 128).name == "gpu"
    # a phone: the NPU's int8 peak wins a long prompt, the GPU's higher achievable bandwidth a long generation
    phone, i4 = load_hardware("snapdragon-8-gen3"), weight_format("int4-g128")
    assert select_unit(phone, i4, None, 4096, 16).name == "hexagon"
    assert select_unit(phone, i4, None, 16, 1024).name == "gpu"


def test_tensor_parallel_estimate():
    # Llama-2-7B on 2 x H100 (NVLink): each device holds half the weights (6.74e9 x 2 B / 2) and half the KV
    # (32 KV heads split 2 ways); the decode step adds two ring all-reduces per layer of batch x 4096 x 2 bytes.
    from planner.hardware import load_hardware
    from planner.serving.parallelism import node_for, tp_step_time_s

    one = estimate("llama-2-7b", "h100-sxm", batch=4, prompt=1000, output=2)
    two = estimate("llama-2-7b", "h100-sxm", batch=4, prompt=1000, output=2, tp=2)
    assert two.tp == 2 and two.memory.devices == 2
    assert two.memory.weights_gb == pytest.approx(6_738_415_616 * 2 / 2 / 1e9)
    assert two.memory.kv_cache_gb == pytest.approx(one.memory.kv_cache_gb / 2)
    # every device has its own runtime: CUDA context 0.8 GB + CUDA-graph pool (a 512-token decode pass, MLP live
    # set 512 x (2 x 4096 + 3 x 11008 / t) x 2 B) + NCCL 0.45 GB under TP (planner.memory.runtime_overhead_bytes)
    assert one.memory.overhead_gb * 1e9 == pytest.approx(0.8e9 + 512 * (2 * 4096 + 3 * 11008) * 2)
    assert two.memory.overhead_gb * 1e9 == pytest.approx(0.8e9 + 512 * (2 * 4096 + 3 * 11008 / 2) * 2 + 0.45e9)
    # the first decode step is the parallelism module's per-GPU roofline + all-reduces, exactly
    spec = load_hardware("h100-sxm")
    from planner.efficiency import resolve_efficiency
    from planner.roofline import device_model, select_unit
    f = weight_format("fp16")
    u = select_unit(spec, f)
    dev = device_model(spec, u, f, resolve_efficiency(spec, u, "auto"))
    link = node_for(spec).intra_link()
    t = float(tp_step_time_s(load_model("llama-2-7b"), f, "fp16", dev, "decode", 4, 1, 1000, 2, link))
    assert two.decode.latency_ms_first == pytest.approx(t * 1e3, rel=1e-9)
    # faster than one device, but not twice: the LM head, norms and the all-reduces do not shrink 2x
    assert one.decode.latency_ms_per_token / 2 < two.decode.latency_ms_per_token < one.decode.latency_ms_per_token
    # an MLA latent is replicated on every device (DeepSeek-V3, 8 x H200 in fp8: 671e9 B / 8 = 84 GB each fits)
    ds = estimate("deepseek-v3", "h200-sxm", "fp8", tp=8)
    assert ds.memory.fits and ds.memory.kv_cache_gb == pytest.approx(640 * 576 * 61 * 2 / 1e9)


@pytest.mark.parametrize("kw, needle", [({"tp": 3}, "does not divide"), ({"tp": 16}, "exceeds the 8 device"),
                                        ({"tp": 0}, "--tp")])
def test_tensor_parallel_bad_degrees(kw, needle):
    from planner.errors import PlannerError
    with pytest.raises(PlannerError, match=needle):
        estimate("llama-2-7b", "h100-sxm", **kw)


def test_identical_sequences_touch_one_sequences_experts():
    """Mixtral-8x7B decode at batch 32 (8 experts, top-2, 32 layers of 3 x 4096 x 14336 = 176,160,768 parameters per
    expert). Independent sequences touch E (1 - (1 - k/E)^B) = 8 (1 - 0.75^32) = 7.99920 experts per layer; a batch
    of one sequence repeated (TensorRT-LLM's gptSessionBenchmark: every prompt the pad id, greedy decoding) touches
    k = 2, so the expert op reads 2 x 176,160,768 x 2 B = 704,643,072 B per layer at fp16, not 2,818,289,000. The
    FLOPs (2 x 32 tokens x 2 experts x 176,160,768) are the same either way."""
    from planner.ops import step_ops

    m, f = load_model("mixtral-8x7b"), weight_format("fp16")
    ep = 3 * 4096 * 14336
    indep = next(o for o in step_ops(m, f, "fp16", "decode", 32, 1, 2048) if o.name == "moe_experts")
    same = next(o for o in step_ops(m, f, "fp16", "decode", 32, 1, 2048, identical_sequences=True)
                if o.name == "moe_experts")
    assert float(indep.weight_bytes) == pytest.approx(8 * (1 - 0.75 ** 32) * ep * 2, rel=1e-12)
    assert float(same.weight_bytes) == pytest.approx(2 * ep * 2, rel=1e-12) == 704_643_072
    assert float(same.flops) == float(indep.flops) == pytest.approx(2 * 32 * 2 * ep)
    # a prefill of one repeated 128-token prompt routes 128 distinct positions, not 32 x 128 tokens
    p_same = next(o for o in step_ops(m, f, "fp16", "prefill", 32, 128, 0, identical_sequences=True)
                  if o.name == "moe_experts")
    assert float(p_same.weight_bytes) == pytest.approx(8 * (1 - 0.75 ** 128) * ep * 2, rel=1e-12)
