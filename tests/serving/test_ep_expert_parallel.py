"""Expert parallelism and DP-attention: memory per rank, all-to-all bytes and time, per-rank operators and
collectives, all derived by hand from DeepSeek-V3's and Mixtral's config.json and the DGX H100/H200 links."""

import json

import pytest

from planner.architecture import load_model
from planner.cli import main
from planner.errors import PlannerError
from planner.hardware import load_hardware
from planner.quantization import weight_format
from planner.serving.expert_parallel import (all_to_all_bytes, all_to_all_time_s, check_ep, comm_time_s,
                                             ep_rank_memory, ep_report, make_group, rank_ops, simulate_ep)
from planner.serving.parallelism import Link

# DeepSeek-V3 config.json: hidden 7168, 61 layers of which the first 3 are dense (first_k_dense_replace = 3),
# 256 routed experts of moe_intermediate_size 2048, 1 shared expert, 8 experts per token, MLA q_lora 1536,
# kv_lora 512, rope 64, nope 128, v 128, 128 heads, dense intermediate 18432, vocab 129280.
H, E, K, IE = 7168, 256, 8, 2048
MOE_LAYERS, DENSE_LAYERS, LAYERS = 61 - 3, 3, 61
EXPERT = 3 * H * IE                                        # gate, up, down: 44,040,192
ROUTED = MOE_LAYERS * E * EXPERT                           # 653,908,770,816
ATTN = (H * 1536 + 1536 + 1536 * 128 * 192                 # q down, q norm, q up (nope 128 + rope 64)
        + H * (512 + 64) + 512 + 512 * 128 * (128 + 128)   # kv down (+ rope k), kv norm, up to K_nope and V
        + 128 * 128 * H)                                   # o_proj  -> 187,107,328
NON_ROUTED_LINEAR = LAYERS * ATTN + DENSE_LAYERS * 3 * H * 18432 + MOE_LAYERS * EXPERT   # attention, dense, shared
ROUTER = MOE_LAYERS * H * E                                # 16-bit
NORMS = LAYERS * 2 * H + H                                 # 16-bit
EMB = 129280 * H                                           # embedding and (untied) LM head, 16-bit each


def test_hand_counts_match_the_catalog():
    b = load_model("deepseek-v3").param_breakdown()
    assert ATTN == 187_107_328
    assert b["routed_experts"] == ROUTED == 653_908_770_816
    assert b["attention"] + b["dense_mlp"] + b["shared_experts"] == NON_ROUTED_LINEAR


def test_ep8_deepseek_v3_memory_per_rank_bf16():
    """bf16 (2 bytes per weight): routed experts 653.9e9 x 2 / 8 = 163.48 GB per rank whatever the layout;
    DP-attention keeps the rest whole on every rank: 15.157e9 linear x 2 = 30.314 GB, embedding + head
    2 x 0.92668e9 x 2 = 3.707 GB, router 0.10643e9 x 2 = 0.213 GB, norms 0.0018 GB: 34.235 GB; TP attention
    splits the linear layers, embedding and head 8 ways (router and norms replicated)."""
    m, spec, fmt = load_model("deepseek-v3"), load_hardware("h200-sxm"), weight_format("bf16")
    routed_gb = ROUTED * 2 / 8 / 1e9
    other_dp_gb = (NON_ROUTED_LINEAR * 2 + 2 * EMB * 2 + ROUTER * 2 + NORMS * 2) / 1e9
    other_tp_gb = ((NON_ROUTED_LINEAR * 2 + 2 * EMB * 2) / 8 + ROUTER * 2 + NORMS * 2) / 1e9
    assert routed_gb == pytest.approx(163.477, abs=1e-3)
    assert other_dp_gb == pytest.approx(34.235, abs=1e-3)
    dp = ep_rank_memory(m, fmt, "bf16", spec, "dp-attention", 8)
    tp = ep_rank_memory(m, fmt, "bf16", spec, "ep", 8)
    assert dp.routed_experts_gb == pytest.approx(routed_gb, rel=1e-9)
    assert tp.routed_experts_gb == pytest.approx(routed_gb, rel=1e-9)
    assert dp.other_weights_gb == pytest.approx(other_dp_gb, rel=1e-9)
    assert tp.other_weights_gb == pytest.approx(other_tp_gb, rel=1e-9)
    # 197.6 GB of bf16 weights per rank cannot fit a 141 GB H200: a verdict, not an error
    assert not dp.fits and dp.verdict.startswith("does not fit") and dp.kv_pool_tokens == 0
    # KV per token: the MLA latent (512 + 64) x 2 bytes x 61 layers = 70,272 B, whole on the rank serving the
    # sequence under DP-attention, and replicated on every rank under TP attention (MLA does not split)
    assert dp.kv_bytes_per_token == tp.kv_bytes_per_token == (512 + 64) * 2 * 61 == 70_272


def test_ep8_deepseek_v3_fp8_fits_h200_not_h100():
    """fp8 (1 byte + its scales, 1.00098 bytes per weight in planner.quantization): routed experts
    653.9e9 x 1.00098 / 8 = 81.82 GB per rank plus 15.17 GB of other fp8 linear weights and 3.92 GB of 16-bit
    embedding/head/router/norms under DP-attention: 100.9 GB of weights per rank, which
    fits an H200 (141 GB) and not an 80 GB H100 at any visible capacity."""
    m, fmt = load_model("deepseek-v3"), weight_format("fp8")
    bpw = fmt.bytes_per_weight
    w_gb = (ROUTED * bpw / 8 + NON_ROUTED_LINEAR * bpw + (2 * EMB + ROUTER + NORMS) * 2) / 1e9
    assert w_gb == pytest.approx(100.9, abs=0.05)
    h200 = ep_rank_memory(m, fmt, "bf16", load_hardware("h200-sxm"), "dp-attention", 8)
    h100 = ep_rank_memory(m, fmt, "bf16", load_hardware("h100-sxm"), "dp-attention", 8)
    assert h200.weights_gb == pytest.approx(w_gb, rel=1e-9)
    assert h200.fits and h200.kv_pool_tokens > 0
    assert not h100.fits and "does not fit" in h100.verdict


def test_mixtral_ep8_holds_one_expert_per_layer_per_rank():
    """Mixtral-8x7B: 32 layers x 1 expert of 3 x 4096 x 14336 params x 2 bytes = 11.27 GB per rank."""
    r = ep_rank_memory(load_model("mixtral-8x7b"), weight_format("bf16"), "bf16", load_hardware("h100-sxm"),
                       "dp-attention", 8)
    assert r.routed_experts_gb == pytest.approx(32 * 3 * 4096 * 14336 * 2 / 1e9, rel=1e-12)
    assert r.routed_experts_gb == pytest.approx(11.274, abs=1e-3)


def test_routed_experts_keep_the_checkpoint_format_under_ep():
    """gpt-oss-120b ships its routed experts in MXFP4 (4.25 bits); planned at bf16, the experts stay MXFP4
    (ops.expert_bytes_per_weight) and only the rest is bf16. Its 36 layers x 128 experts x 3 x 2880 x 2880 params
    (gated, with bias: + 2 x 2880 + 2880 per expert) x 4.25 / 8 bytes, 8 ranks: 7.62 GB per rank, the same at bf16
    as at mxfp4; the other weights are positive and larger at bf16 (before, the routed bytes were counted at 2 bytes
    per weight and subtracted from the MXFP4 total: the non-expert weights came out at -164 GB before the split over
    ranks)."""
    m, spec = load_model("gpt-oss-120b"), load_hardware("h100-sxm")
    per_expert = 3 * 2880 * 2880 + 2 * 2880 + 2880
    routed_gb = 36 * 128 * per_expert * 4.25 / 8 / 8 / 1e9
    bf16 = ep_rank_memory(m, weight_format("bf16"), "bf16", spec, "ep", 8)
    fp4 = ep_rank_memory(m, weight_format("mxfp4"), "bf16", spec, "ep", 8)
    assert bf16.routed_experts_gb == pytest.approx(routed_gb, rel=1e-9) == fp4.routed_experts_gb
    assert bf16.other_weights_gb > fp4.other_weights_gb > 0


def test_all_to_all_bytes_and_time_inside_a_node():
    """128 tokens x top-8 x 7168 x 2 bytes x 7/8 = 12,845,056 B each way; over DGX NVLink (450 GB/s per direction,
    8 us per collective): 12,845,056 / 450e9 = 28.545 us + 8 us = 36.545 us."""
    assert float(all_to_all_bytes(128, 8, 7168, 2.0, 8)) == 12_845_056
    t = float(all_to_all_time_s(128, 8, 7168, 2.0, 8, Link("nvlink", 450, 8.0)))
    assert t == pytest.approx(12_845_056 / 450e9 + 8e-6, rel=1e-12)
    assert t * 1e6 == pytest.approx(36.545, abs=1e-3)


def test_all_to_all_time_across_two_nodes():
    """EP16 on two 8-GPU nodes: 128 x 8 x 7168 x 2 = 14,680,064 B leave each rank's hands; 7/16 of it to the
    7 other ranks of its node over NVLink (6,422,528 B / 450 GB/s = 14.27 us) and 8/16 over InfiniBand
    (7,340,032 B / 50 GB/s = 146.80 us) in parallel; the slower one plus the network latency 25 us: 171.80 us."""
    t = float(all_to_all_time_s(128, 8, 7168, 2.0, 16, Link("nvlink", 450, 8.0), Link("infiniband", 50, 25.0), 8))
    assert t * 1e6 == pytest.approx(146.80064 + 25.0, abs=1e-4)
    with pytest.raises(PlannerError, match="no network"):
        all_to_all_time_s(128, 8, 7168, 2.0, 16, Link("nvlink", 450, 8.0), None, 8)


def test_collectives_of_a_dp_attention_decode_step():
    """DP-attention EP8 on a DGX H200, 64 tokens per rank, imbalance 1.3: per MoE layer a dispatch and a combine
    of 64 x 8 x 7168 x 2 x 7/8 = 6,422,528 B (14.272 us + 8 us), the busiest rank x 1.3, 58 MoE layers:
    2 x 58 x 1.3 x 22.272 us = 3.3587 ms; no all-reduce (attention is not split)."""
    m, spec = load_model("deepseek-v3"), load_hardware("h200-sxm")
    g = make_group(m, spec, "dp-attention", 8, 1.3)
    t = float(comm_time_s(m, weight_format("bf16"), 64, g))
    assert t == pytest.approx(2 * 58 * 1.3 * (6_422_528 / 450e9 + 8e-6), rel=1e-12)
    assert t * 1e3 == pytest.approx(3.3587, abs=1e-4)


def test_busiest_rank_expert_work():
    """The expert op of the busiest rank: the group's 8 x 64 tokens x top-8 routed over 8 ranks, x 1.3:
    flops = 2 x 64 x 8 x 44,040,192 x 1.3 per MoE layer; weight reads = the rank's share of the experts the
    group's 512 tokens touch: 256 (1 - (1 - 8/256)^512) / 8 experts x 44,040,192 params x bytes/weight."""
    m, spec, fmt = load_model("deepseek-v3"), load_hardware("h200-sxm"), weight_format("bf16")
    g = make_group(m, spec, "dp-attention", 8, 1.3)
    op = next(o for o in rank_ops(m, fmt, "bf16", "decode", 64, 1, 1000, g) if o.name == "moe_experts")
    assert float(op.flops) == pytest.approx(2 * 64 * 8 * EXPERT * 1.3, rel=1e-12)
    touched = 256 * (1 - (1 - 8 / 256) ** 512)
    assert float(op.weight_bytes) == pytest.approx(touched / 8 * EXPERT * 2, rel=1e-12)
    assert op.count == 58


def test_report_and_simulation_are_consistent():
    m, spec, fmt = load_model("deepseek-v3"), load_hardware("h200-sxm"), weight_format("fp8")
    r = ep_report(m, spec, fmt, "bf16", "dp-attention", 8, batch_per_engine=32)
    assert r["fits"] and r["engines"] == 8
    assert r["output_tokens_per_s"] == pytest.approx(8 * 32 / (r["decode_step_ms"] / 1e3), rel=1e-12)
    assert 0 < r["decode_comm_ms"] < r["decode_step_ms"]
    assert any("all-to-all" in line for line in r["explanation"])
    from planner.serving import get_scenario

    s = simulate_ep(m, spec, fmt, "bf16", "dp-attention", 8, get_scenario("chat").workload.model_copy(
        update={"qps": 8.0}), n_requests=200)
    assert s["engines"] == 8 and s["gpus"] == 8
    assert s["engine"]["tpot_ms"]["p50"] > 0


def test_bad_layouts_are_one_line_errors():
    with pytest.raises(PlannerError, match="dense"):
        check_ep(load_model("llama-3.1-8b"), "ep", 8)
    with pytest.raises(PlannerError, match="--ep: 7 ranks must divide"):
        check_ep(load_model("deepseek-v3"), "dp-attention", 7)
    with pytest.raises(PlannerError, match="--expert-imbalance"):
        check_ep(load_model("deepseek-v3"), "dp-attention", 8, 0.5)
    with pytest.raises(PlannerError, match="--ep: 16 ranks must divide"):  # Mixtral has 8 experts
        check_ep(load_model("mixtral-8x7b"), "ep", 16)


def test_cli_simulate_ep_json_and_errors(capsys):
    assert main(["simulate", "-m", "deepseek-v3", "-H", "h200-sxm", "-w", "fp8", "--parallel", "dp-attention",
                 "--ep", "8", "--qps", "4", "--requests", "150", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layout"] == "dp-attention" and d["memory"]["fits"] and d["explanation"]
    # the H100 does not hold EP8 fp8 ranks: still JSON, a verdict
    assert main(["simulate", "-m", "deepseek-v3", "-H", "h100-sxm", "-w", "fp8", "--parallel", "dp-attention",
                 "--ep", "8", "--requests", "100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is False and "does not fit" in d["verdict"]
    assert main(["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--parallel", "ep", "--ep", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --parallel:")
    assert main(["simulate", "-m", "deepseek-v3", "-H", "h200-sxm", "--parallel", "ep", "--ep", "6"]) == 2
    assert capsys.readouterr().err.startswith("error: --ep:")


def test_cli_plan_dp_attention_explains(capsys):
    assert main(["plan", "-m", "mixtral-8x7b", "-H", "h100-sxm", "--qps", "2", "--requests", "100",
                 "--parallel", "dp-attention", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    dev = d["devices"][0]
    assert d["parallel"] == "dp-attention" and dev["hardware"] == "h100-sxm"
    assert dev["best"] is not None and dev["best"]["gpus"] == dev["best"]["ep"] * dev["best"]["replicas"]
    assert dev["best"]["ttft_p95_ms"] <= d["slo"]["ttft_p95_ms"]
    assert any("smallest group" in line for line in dev["explanation"])
    assert dev["aggregated"] is not None


@pytest.mark.parametrize("mode", ["dp-attention", "ep"])
def test_simulator_step_model_is_the_direct_step_time(mode):
    """The tabulated StepModel the simulator runs equals the direct per-rank roofline + collectives (one fact,
    one function): decode steps at several batches and contexts, and a prefill."""
    from planner.efficiency import resolve_efficiency
    from planner.roofline import device_model, select_unit
    from planner.serving.expert_parallel import build_step_model, step_time_s

    m, spec, fmt = load_model("deepseek-v3"), load_hardware("h200-sxm"), weight_format("fp8")
    u = select_unit(spec, fmt)
    dev = device_model(spec, u, fmt, resolve_efficiency(spec, u, "default"))
    g = make_group(m, spec, mode, 8, 1.3)
    sm = build_step_model(m, fmt, "bf16", dev, g, 4096)
    for b, ctx in ((1, 100), (32, 2000), (200, 1500)):
        assert sm.decode_time(b, b * ctx) == pytest.approx(
            float(step_time_s(m, fmt, "bf16", dev, "decode", b, 1, ctx, g)), rel=1e-9)
    assert sm.prefill_time([3000]) == pytest.approx(float(step_time_s(m, fmt, "bf16", dev, "prefill", 1, 3000, 0, g)),
                                                    rel=1e-9)


def test_a_named_runtime_times_the_ep_ranks_with_its_profile():
    """ep_device resolves a rank's device as `planner estimate --runtime` does (serving.engine.device_for): with
    --runtime sglang the rank runs the SGLang profile's fitted efficiency on the H100's class, so a decode step's
    token-op time equals the core roofline of the same per-rank operators on that device; and ep_engine takes
    SGLang's scheduler rules (its prefill steps apart from the decodes) and its measured HTTP request path."""
    from planner.roofline import time_ops
    from planner.runtimes import load_runtime, request_path_ms
    from planner.serving.expert_parallel import comm_time_s, ep_device, ep_engine, make_group, rank_ops

    m, spec, fmt = load_model("qwen3-30b-a3b"), load_hardware("h100-sxm"), weight_format("fp8")
    dev = ep_device(m, spec, fmt, runtime="sglang")
    from planner.efficiency import resolve_efficiency
    want_eff = resolve_efficiency(spec, spec.unit("gpu"), "auto", load_runtime("sglang"))  # estimate's own call
    assert dev.efficiency == want_eff and "sglang" in want_eff.source
    assert ep_device(m, spec, fmt).efficiency != dev.efficiency  # no runtime: the kind defaults, as before
    e = ep_engine(m, spec, fmt, "fp8", "dp-attention", 8, runtime="sglang", max_num_batched_tokens=2048)
    g = make_group(m, spec, "dp-attention", 8)
    ops = [o for o in rank_ops(m, fmt, "fp8", "decode", 64.0, 1, 0, g)
           if not (o.compute == "attention" or o.name.startswith("attn_")) and o.name != "lm_head"]
    want = sum(ot.time_s for ot in time_ops(ops, dev)) + float(comm_time_s(m, fmt, 64.0, g))
    assert e.step_model.token_time[64] == pytest.approx(want, rel=1e-9)
    assert e.limits.mixed_prefill is False and e.limits.request_path_s == pytest.approx(request_path_ms("sglang") / 1e3)
    plain = ep_engine(m, spec, fmt, "fp8", "dp-attention", 8, max_num_batched_tokens=2048)
    assert plain.limits.request_path_s == 0.0 and plain.limits.mixed_prefill is False  # chunked off: V0 rule


def test_cli_simulate_dp_attention_with_a_runtime_and_pd_refuses_one(capsys):
    assert main(["simulate", "-m", "qwen3-30b-a3b", "-H", "h100-sxm", "-w", "fp8", "--parallel", "dp-attention",
                 "--ep", "8", "--runtime", "sglang", "--qps", "4", "--requests", "120", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["runtime"] == "sglang" and d["layout"] == "dp-attention" and d["engine"]["tpot_ms"]["p50"] > 0
    assert main(["simulate", "-m", "qwen3-30b-a3b", "-H", "h100-sxm", "--parallel", "pd", "--runtime", "sglang"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --runtime: --parallel pd")
    assert main(["simulate", "-m", "qwen3-30b-a3b", "-H", "h100-sxm", "--parallel", "ep", "--runtime", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: --runtime")


def test_ep_simulation_carries_the_ranges_the_tp_simulation_does():
    """simulate_ep attaches estimate's p10-p90 speed interval as serving.simulate does: every figure re-simulated
    with the step model at the interval's slow and fast ends (serving.engine.slow_fast), the central figure between
    them, and the deployment's throughput range = the engine's x the engines; the datasheet roofline carries none."""
    from planner.runtimes import load_runtime
    from planner.serving import get_scenario
    from planner.serving.engine import speed_interval

    m, spec, fmt = load_model("qwen3-30b-a3b"), load_hardware("h100-sxm"), weight_format("fp8")
    w = get_scenario("chat").workload.model_copy(update={"qps": 4.0})
    s = simulate_ep(m, spec, fmt, "fp8", "dp-attention", 8, w, n_requests=150, runtime="sglang")
    e, d = s["engine"], s["deployment"]
    lo, hi = e["range"]["tpot_ms_p95"]
    assert lo <= e["tpot_ms"]["p95"] <= hi and lo < hi
    assert d["output_tokens_per_s_range"] == [v * 8 for v in e["range"]["output_tokens_per_s"]]
    iv = speed_interval(spec, spec.unit("gpu"), "auto", load_runtime("sglang"),
                        max(1, round(e["mean_batch_busy"])), multi_gpu=True, model=m)
    assert (e["range"]["interval"]["p10"], e["range"]["interval"]["p90"]) == (iv["p10"], iv["p90"])
    assert simulate_ep(m, spec, fmt, "fp8", "dp-attention", 8, w, n_requests=100,
                       efficiency="datasheet")["engine"]["range"] is None
