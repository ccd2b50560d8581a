"""planner/quantization.py: the llama.cpp formats' bits per weight, from their block layouts (ggml-common.h) and
from llama-quantize's published Llama-3-8B file sizes (tools/quantize/quantize.cpp QUANT_OPTIONS), derived here by
hand; and the names users and data files type."""

import pytest

from planner.accuracy.data import planner_format
from planner.errors import PlannerError
from planner.estimate import estimate
from planner.quantization import weight_format

P_LLAMA3_8B = 8_030_261_248          # Meta-Llama-3-8B parameters
P_OUT = 128_256 * 4_096              # its output tensor (untied), Q6_K under every k-quant mix
Q6K_BITS = 210 * 8 / 256             # block_q6_K: 210 bytes per 256 weights


@pytest.mark.parametrize("name,block_bytes,block", [("q4_1", 20, 32), ("q5_0", 22, 32), ("q5_1", 24, 32),
                                                    ("iq4_nl", 18, 32), ("iq4_xs", 136, 256)])
def test_single_type_formats_are_their_block_sizes(name, block_bytes, block):
    """block_q4_1 = fp16 d + fp16 m + 16 B of nibbles = 20 B / 32; block_q5_0 = d + 4 B high bits + 16 B = 22 B;
    block_q5_1 = d + m + 4 + 16 = 24 B; block_iq4_nl = d + 16 B = 18 B; block_iq4_xs = d + 2 B scales_h + 4 B
    scales_l + 128 B = 136 B / 256."""
    assert weight_format(name).bits_per_weight == pytest.approx(block_bytes * 8 / block, abs=1e-12)


@pytest.mark.parametrize("name,gib", [("q2_k", 2.96), ("q3_k_s", 3.41), ("q3_k_m", 3.74), ("q3_k_l", 4.03),
                                      ("q4_k_s", 4.37), ("q5_k_s", 5.21)])
def test_k_quant_mixes_read_llama_quantize_sizes(name, gib):
    """Body bpw = (size x 2^33 bits - Q6_K bits x P_out) / (P - P_out), to within the 0.005 GiB rounding of the
    published size (~0.006 bpw); the rule reads Q4_0 (4.34 GiB) as 4.508 and Q6_K (6.14 GiB) as 6.569, against
    their block sizes 4.5 and 6.5625."""
    body = (gib * 2 ** 33 - Q6K_BITS * P_OUT) / (P_LLAMA3_8B - P_OUT)
    assert weight_format(name).bits_per_weight == pytest.approx(body, abs=0.01)
    for known, size, exact in (("q4_0", 4.34, 4.5), ("q6_k", 6.14, 6.5625)):
        assert (size * 2 ** 33 - Q6K_BITS * P_OUT) / (P_LLAMA3_8B - P_OUT) == pytest.approx(exact, abs=0.01)


def test_llama3_8b_q3_k_m_weight_bytes_by_hand():
    """(P - P_out) x 3.82 / 8 + P_out x 6.5625 / 8 = 3,583,601,531 + 430,941,722 = 4.0145 GB; the 266,240 norm
    weights stay 16-bit (+0.4 MB), inside the 0.1% tolerance."""
    by_hand = (P_LLAMA3_8B - P_OUT) * 3.82 / 8 + P_OUT * 6.5625 / 8
    assert estimate("llama-3-8b", "rtx-4090", "q3_k_m").memory.weights_gb * 1e9 == pytest.approx(by_hand, rel=1e-3)


def test_names_users_and_data_files_type():
    assert weight_format("Q3_K").name == "q3_k_m"       # llama-quantize's alias
    assert weight_format("IQ4_XS").name == "iq4_xs"
    assert [planner_format(x) for x in ("Q5_K_M", "q6_k", "IQ4_NL", "f16", "int4_g32", "exl2_4.0bpw")] == \
        ["q5_k_m", "q6_k", "iq4_nl", "fp16", "int4-g32", "exl2-4"]
    assert planner_format("iq2_xxs") is None and planner_format(None) is None
    with pytest.raises(PlannerError, match=r"--weights: unknown format 'iq2_xxs'; allowed: .*q3_k_m.*iq4_xs"):
        weight_format("iq2_xxs")


def test_llamacpp_mxfp4_moe_is_mxfp4_experts_and_q8_0_elsewhere():
    """llama.cpp's MXFP4_MOE file type (llama-quant.cpp: "MoE tensors -> MXFP4, other tensors -> Q8_0", the output
    and token embedding too): gpt-oss-20b by hand = 19,116,933,120 expert weights x 4.25 / 8 + (579,133,440
    embedding + 637,203,456 attention + 579,133,440 LM head) x 8.5 / 8 + router 2,212,608 and norms 141,120 x 2 B
    = 12,068,265,408 B, against ggml-org's gpt-oss-20b-mxfp4.gguf of 11.27 GiB = 12.10 GB (0.3%); every tensor in
    MXFP4 with 16-bit embeddings (`mxfp4`) is 12.82 GB, 6% over. Its non-expert GEMMs run Q8_0's kernels and pay
    Q8_0's fitted dequantization cost; a dense model in MXFP4_MOE is all Q8_0, as llama-quantize writes it."""
    from planner.architecture import load_model
    from planner.ops import expert_storage_format, weight_bytes
    from planner.quantization import dequant_overhead_for, kernel_format_name

    m, f = load_model("gpt-oss-20b"), weight_format("MXFP4_MOE")
    assert (f.name, f.kernel_name, f.expert_format) == ("mxfp4_moe", "q8_0", "mxfp4")
    by_hand = 19_116_933_120 * 4.25 / 8 + (579_133_440 + 637_203_456 + 579_133_440) * 8.5 / 8 + (2_212_608 + 141_120) * 2
    assert weight_bytes(m, f) == pytest.approx(by_hand, rel=1e-12)
    assert weight_bytes(m, f) == pytest.approx(11.27 * 2**30, rel=0.005)
    assert weight_bytes(m, weight_format("mxfp4")) == pytest.approx(12.82e9, rel=0.002)
    assert expert_storage_format(m, f) == "mxfp4"
    assert kernel_format_name("mxfp4_moe") == "q8_0" and kernel_format_name("q4_k_m") == "q4_k_m"
    assert dequant_overhead_for({"q8_0": 0.5}, "mxfp4_moe") == (0.5, "q8_0")
    dense = load_model("llama-3-8b")
    assert expert_storage_format(dense, f) is None
    assert weight_bytes(dense, f) == pytest.approx(weight_bytes(dense, weight_format("q8_0")), rel=1e-12)
