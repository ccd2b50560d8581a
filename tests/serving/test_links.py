"""Tensor-parallel links per topology against ring all-reduce times derived by hand from the datasheets."""

import pytest

from planner.architecture import load_model
from planner.hardware import load_hardware
from planner.quantization import weight_format
from planner.serving import node_for
from planner.serving.parallelism import tp_comm_time_s

# one all-reduce of a long prompt's activations: 8192 tokens x hidden 8192 (Llama-3.1-70B) x 2 bytes (bf16)
B = 8192 * 8192 * 2


def _ar(hw, t):
    return float(node_for(load_hardware(hw)).intra_link().allreduce_time_s(B, t))


def test_mi300x_mesh_uses_one_link_per_peer():
    # AMD MI300X platform: each GPU pair shares one 64 GB/s-per-direction link; a TP group of t uses t - 1 of them.
    # ring all-reduce 2 (t-1)/t x bytes / ((t-1) x 64 GB/s) + 10 us
    assert _ar("mi300x", 2) == pytest.approx(1 * B / 64e9 + 10e-6, rel=1e-12)         # 2.107 ms
    assert _ar("mi300x", 4) == pytest.approx(1.5 * B / 192e9 + 10e-6, rel=1e-12)
    assert _ar("mi300x", 8) == pytest.approx(1.75 * B / 448e9 + 10e-6, rel=1e-12)
    # the old rule (448 GB/s at every degree) made TP2 7x too fast on the bandwidth term
    assert (_ar("mi300x", 2) - 10e-6) / (B / 448e9) == pytest.approx(7.0, rel=1e-12)


def test_nvswitch_all_to_all_full_bandwidth_at_every_degree():
    # DGX H100: NVLink 4 through NVSwitch, 450 GB/s per direction whatever the group size; 8 us per collective
    assert _ar("h100-sxm", 2) == pytest.approx(B / 450e9 + 8e-6, rel=1e-12)
    assert _ar("h100-sxm", 8) == pytest.approx(1.75 * B / 450e9 + 8e-6, rel=1e-12)


def test_geforce_pcie_bus():
    # RTX 4090: PCIe Gen4 x16 only (no NVLink), 64 GB/s bidirectional -> 32 GB/s per direction; a collective
    # drives half of it (NVIDIA/nccl#1639: PCIe all-reduce bus bandwidth 0.44-0.55 of the link): 16 GB/s; 20 us
    node = node_for(load_hardware("rtx-4090"))
    assert node.intra_link().topology == "bus"
    assert _ar("rtx-4090", 2) == pytest.approx(B / 16e9 + 20e-6, rel=1e-12)       # 8.41 ms
    assert _ar("rtx-4090", 8) == pytest.approx(1.75 * B / 16e9 + 20e-6, rel=1e-12)
    # a point-to-point send (pipeline hand-off) keeps the link's 32 GB/s
    assert float(node.intra_link().send_time_s(B)) == pytest.approx(B / 32e9 + 20e-6, rel=1e-12)


def test_between_nodes_over_the_nic():
    # DGX H100 to DGX H100: one 400 Gb/s ConnectX-7 per GPU = 50 GB/s; a pipeline hand-off of 8192 x 8192 x 2 B
    link = node_for(load_hardware("h100-sxm")).inter_link()
    assert link.kind == "infiniband"
    assert float(link.send_time_s(B)) == pytest.approx(B / 50e9 + 25e-6, rel=1e-12)
    roce = node_for(load_hardware("mi300x")).inter_link()
    assert (roce.kind, roce.per_direction_gbs) == ("roce", 50)


def test_tp2_prompt_comm_on_mi300x_in_the_step():
    # two all-reduces per layer x 80 layers for Llama-3.1-70B's 8192-token prompt at TP2 on MI300X
    m = load_model("llama-3.1-70b")
    link = node_for(load_hardware("mi300x")).intra_link()
    t = float(tp_comm_time_s(m, weight_format("bf16"), 8192, 2, link))
    assert t == pytest.approx(160 * (B / 64e9 + 10e-6), rel=1e-12)   # 337 ms


def test_gaudi3_mesh_and_tpu_torus_nodes():
    # Gaudi 3 baseboard: 3 x 200 GbE to each of 7 peers = 75 GB/s per direction per pair, mesh; RoCE 25 us.
    # ring all-reduce at t = 2 uses one pair: 1 x B / 75 GB/s + 25 us; at t = 8 all 7 pairs: 1.75 x B / 525 GB/s
    assert _ar("gaudi-3", 2) == pytest.approx(B / 75e9 + 25e-6, rel=1e-12)
    assert _ar("gaudi-3", 8) == pytest.approx(1.75 * B / 525e9 + 25e-6, rel=1e-12)
    # TPU v6e-8: 800 GB/s bidirectional ICI per chip -> 400 GB/s per direction, as a ring at full rate; 10 us
    assert node_for(load_hardware("tpu-v6e")).gpus_per_node == 8
    assert _ar("tpu-v6e", 8) == pytest.approx(1.75 * B / 400e9 + 10e-6, rel=1e-12)


def test_parallel_attention_mlp_shares_one_all_reduce_per_layer():
    # Falcon-180B (parallel_attn, new decoder) and GPT-J add attention and MLP outputs into one residual: one
    # all-reduce per layer. Falcon-180B 2048-token prompt at TP8 on DGX H100: 80 x (1.75 x 2048 x 14848 x 2 B /
    # 450 GB/s + 8 us); Llama-2-70B keeps two per layer: 160 x (1.75 x 2048 x 8192 x 2 B / 450 GB/s + 8 us)
    link = node_for(load_hardware("h100-sxm")).intra_link()
    falcon, llama = load_model("falcon-180b"), load_model("llama-2-70b")
    assert falcon.parallel_attention_mlp and load_model("gpt-j-6b").parallel_attention_mlp
    assert not llama.parallel_attention_mlp
    fmt = weight_format("fp16")
    assert float(tp_comm_time_s(falcon, fmt, 2048, 8, link)) == pytest.approx(
        80 * (1.75 * 2048 * 14848 * 2 / 450e9 + 8e-6), rel=1e-12)
    assert float(tp_comm_time_s(llama, fmt, 2048, 8, link)) == pytest.approx(
        160 * (1.75 * 2048 * 8192 * 2 / 450e9 + 8e-6), rel=1e-12)


def test_falcon_config_parallel_flag_follows_transformers():
    # transformers' FalconConfig: parallel_attn defaults to true; new_decoder_architecture is parallel whatever it says
    from planner.architecture import from_hf_config
    base = {"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
            "vocab_size": 100}
    assert from_hf_config(base, name="f").parallel_attention_mlp
    assert not from_hf_config({**base, "parallel_attn": False}, name="f").parallel_attention_mlp
    assert from_hf_config({**base, "parallel_attn": False, "new_decoder_architecture": True, "num_kv_heads": 2},
                          name="f").parallel_attention_mlp
