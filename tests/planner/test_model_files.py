"""--model file.gguf and --model folder/ (config.json + safetensors): exact weight bytes from the files' headers.
Tiny files are written here (GGUF with llama.cpp's own `gguf` package); nothing is downloaded."""

import json
import struct
import subprocess
import sys

import gguf  # llama.cpp's GGUF package, a dependency of the project (pyproject.toml)
import numpy as np
import pytest

from planner.architecture import load_model
from planner.errors import PlannerError
from planner.estimate import estimate

Q = gguf.GGMLQuantizationType

H, L, I, V = 256, 2, 512, 256


def write_gguf(path, file_type=gguf.LlamaFileType.MOSTLY_Q4_K_M):
    """A 2-layer Llama in a Q4_K / Q6_K mix with F16 embeddings and F32 norms."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(2048)
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(I)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_vocab_size(V)
    w.add_file_type(file_type)

    def q(name, rows, cols, t):
        block, size = gguf.GGML_QUANT_SIZES[t]
        w.add_tensor(name, np.zeros((rows, cols // block * size), dtype=np.uint8), raw_dtype=t)

    w.add_tensor("token_embd.weight", np.zeros((V, H), dtype=np.float16))
    for i in range(L):
        q(f"blk.{i}.attn_q.weight", H, H, Q.Q4_K)
        q(f"blk.{i}.attn_k.weight", 128, H, Q.Q4_K)
        q(f"blk.{i}.attn_v.weight", 128, H, Q.Q6_K)
        q(f"blk.{i}.attn_output.weight", H, H, Q.Q4_K)
        q(f"blk.{i}.ffn_gate.weight", I, H, Q.Q4_K)
        q(f"blk.{i}.ffn_up.weight", I, H, Q.Q4_K)
        q(f"blk.{i}.ffn_down.weight", H, I, Q.Q6_K)
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(H, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(H, dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(H, dtype=np.float32))
    q("output.weight", V, H, Q.Q6_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# by hand, from ggml's block sizes (ggml-common.h): Q4_K 144 bytes per 256 weights, Q6_K 210 per 256
Q4K, Q6K = 144 / 256, 210 / 256
LAYER = (H * H + 128 * H + H * H + 2 * I * H) * Q4K + (128 * H + H * I) * Q6K + 2 * H * 4
EXPECTED = V * H * 2 + L * LAYER + H * 4 + V * H * Q6K


def test_gguf_header_gives_architecture_and_exact_bytes(tmp_path):
    p = tmp_path / "tiny-q4_k_m.gguf"
    write_gguf(p)
    m = load_model(str(p))
    assert (m.hidden_size, m.num_layers, m.num_attention_heads, m.num_kv_heads, m.vocab_size) == (H, L, 4, 2, V)
    wf = m.weights_file
    assert wf.total_bytes == EXPECTED and wf.n_tensors == 2 + 9 * L + 1
    assert dict(wf.dtypes).keys() == {"Q4_K", "Q6_K", "F16", "F32"} and wf.format_name == "q4_k_m"
    e = estimate(m, "h100-sxm")  # no --weights: the file's own format and bytes
    assert e.weights == "q4_k_m" and e.weights_source.startswith("exact: gguf")
    assert e.memory.weights_gb * 1e9 == pytest.approx(EXPECTED)
    f = estimate(m, "h100-sxm", "fp16")  # another format: the formula, and it says why
    assert f.weights_source.startswith("formula") and "q4_k_m" in f.weights_source
    assert f.memory.weights_gb * 1e9 == pytest.approx(2 * m.total_params)


def test_gguf_unlisted_quant_mix_gets_its_mean_bits(tmp_path):
    p = tmp_path / "tiny-iq3.gguf"
    write_gguf(p, gguf.LlamaFileType.MOSTLY_IQ3_XXS)
    m = load_model(str(p))
    e = estimate(m, "rtx-4090")
    assert e.weights == "gguf-iq3_xxs" and e.memory.weights_gb * 1e9 == pytest.approx(EXPECTED)


@pytest.mark.parametrize("file_type,name", [(gguf.LlamaFileType.MOSTLY_IQ4_XS, "iq4_xs"),
                                            (gguf.LlamaFileType.MOSTLY_Q3_K_M, "q3_k_m"),
                                            (gguf.LlamaFileType.MOSTLY_Q5_K_S, "q5_k_s"),
                                            (gguf.LlamaFileType.MOSTLY_Q4_1, "q4_1")])
def test_gguf_file_type_names_the_catalog_format(tmp_path, file_type, name):
    """llama.h's llama_ftype numbers (the gguf package's LlamaFileType) of the llama.cpp formats in the catalog:
    the estimate takes the format's dequantization cost and the file's exact bytes."""
    p = tmp_path / f"tiny-{name}.gguf"
    write_gguf(p, file_type)
    e = estimate(load_model(str(p)), "rtx-4090")
    assert e.weights == name and e.weights_source.startswith("exact: gguf")
    assert e.memory.weights_gb * 1e9 == pytest.approx(EXPECTED)


def test_gguf_cli_text_and_json(tmp_path):
    p = tmp_path / "tiny.gguf"
    write_gguf(p)
    r = subprocess.run([sys.executable, "-m", "planner", "estimate", "-m", str(p), "-H", "h100-sxm", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["weights_source"].startswith("exact: gguf tiny.gguf: 21 tensors")
    r = subprocess.run([sys.executable, "-m", "planner", "estimate", "-m", str(p), "-H", "h100-sxm"],
                       capture_output=True, text=True)
    assert "weights" in r.stdout and "(exact: gguf tiny.gguf" in r.stdout


def test_bad_gguf_is_one_line(tmp_path):
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 20)
    with pytest.raises(PlannerError) as ei:
        load_model(str(p))
    assert "\n" not in str(ei.value) and "GGUF" in str(ei.value)


# ---------------------------------------------------------------- safetensors

CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
       "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 100,
       "max_position_embeddings": 512, "torch_dtype": "bfloat16"}


def tensors_of_cfg():
    h, i, v, kv = 64, 128, 100, 2 * 16
    t = {"model.embed_tokens.weight": [v, h], "lm_head.weight": [v, h], "model.norm.weight": [h],
         "model.layers.0.self_attn.q_proj.weight": [h, h], "model.layers.0.self_attn.k_proj.weight": [kv, h],
         "model.layers.0.self_attn.v_proj.weight": [kv, h], "model.layers.0.self_attn.o_proj.weight": [h, h],
         "model.layers.0.mlp.gate_proj.weight": [i, h], "model.layers.0.mlp.up_proj.weight": [i, h],
         "model.layers.0.mlp.down_proj.weight": [h, i], "model.layers.0.input_layernorm.weight": [h],
         "model.layers.0.post_attention_layernorm.weight": [h]}
    return t


def write_safetensors(path, shapes: dict, dtype="BF16", nbytes=2):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * nbytes
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * off)
    return off


def test_safetensors_folder_exact_bytes(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CFG))
    shapes = tensors_of_cfg()
    n = write_safetensors(tmp_path / "model.safetensors", shapes)
    m = load_model(str(tmp_path))
    assert m.weights_file.total_bytes == n == 2 * m.total_params  # every parameter in one bf16 file
    e = estimate(m, "h100-sxm")
    assert e.weights == "bf16" and e.weights_source.startswith("exact: safetensors model.safetensors: 12 tensors")
    assert e.memory.weights_gb * 1e9 == pytest.approx(n)
    assert estimate(m, "h100-sxm", "fp16").weights_source.startswith("exact")  # 16-bit either way
    assert estimate(m, "h100-sxm", "int4-g128").weights_source.startswith("formula")


def test_safetensors_index_total_when_shards_are_absent(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CFG))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 123_456_789}, "weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}}))
    e = estimate(load_model(str(tmp_path)), "h100-sxm")
    assert e.memory.weights_gb == pytest.approx(0.123456789) and "safetensors index" in e.weights_source


@pytest.mark.parametrize("blob, needle", [
    (b"\x01\x02", "shorter than its 8-byte header"),
    (struct.pack("<Q", 2 ** 40) + b"{}", "not plausible"),
    (struct.pack("<Q", 10) + b"[1,2]     ", "must be a JSON object"),
    (struct.pack("<Q", 39) + b'{"a": {"dtype": "BF16", "shape": [-1]}}', "needs dtype, shape and data_offsets"),
    (struct.pack("<Q", 40) + b'{"a": {"dtype": "BF16", "shape": [-1]}}', "truncated (39 of 40 bytes)"),
])
def test_bad_safetensors_header_is_one_line(tmp_path, blob, needle):
    (tmp_path / "config.json").write_text(json.dumps(CFG))
    (tmp_path / "model.safetensors").write_bytes(blob)
    with pytest.raises(PlannerError) as ei:
        load_model(str(tmp_path))
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_gguf_moe_experts_are_read_and_grouped(tmp_path):
    """A 1-layer Qwen3-MoE GGUF: 4 experts (top-2) of width 256 stored as one Q4_K tensor per projection."""
    p = tmp_path / "tiny-moe.gguf"
    w = gguf.GGUFWriter(str(p), "qwen3moe")
    for add, v in (("context_length", 4096), ("embedding_length", H), ("block_count", 1), ("feed_forward_length", 768),
                   ("attention.head_count", 4), ("attention.head_count_kv", 2), ("expert_count", 4), ("expert_used_count", 2),
                   ("expert_feed_forward_length", 256), ("vocab_size", V)):
        w.add_uint32(f"qwen3moe.{add}", v)
    w.add_uint32("qwen3moe.attention.key_length", 64)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_tensor("token_embd.weight", np.zeros((V, H), dtype=np.float16))
    block, size = gguf.GGML_QUANT_SIZES[Q.Q4_K]
    for name in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):  # [experts, rows, cols / 256 blocks]
        w.add_tensor(f"blk.0.{name}.weight", np.zeros((4, 256, H // block * size), dtype=np.uint8), raw_dtype=Q.Q4_K)
    w.add_tensor("output.weight", np.zeros((V, H), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = load_model(str(p))
    assert (m.moe.num_experts, m.moe.experts_per_token, m.moe.expert_intermediate_size, m.qk_norm) == (4, 2, 256, True)
    g = m.weights_file.bytes_by_group
    assert g["routed_experts"] == 3 * 4 * 256 * H * 144 / 256  # Q4_K: 144 bytes per 256 weights
    assert g["embedding"] == g["lm_head"] == V * H * 2


@pytest.mark.parametrize("cfg_extra, needle", [
    ({"quantization_config": {"quant_method": "weird"}}, "quant_method 'weird' is not one the planner reads"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 3}}, "bits 3 with gptq"),
    ({"torch_dtype": "float7"}, "torch_dtype 'float7' is not one the planner reads"),
])
def test_unknown_quantization_or_dtype_is_named_not_bf16(tmp_path, cfg_extra, needle):
    # a method, width or dtype the planner cannot read is an error, never silently bf16
    (tmp_path / "config.json").write_text(json.dumps({**CFG, **cfg_extra}))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 123_456_789}, "weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(PlannerError, match=needle):
        load_model(str(tmp_path))


def test_gguf_mix_the_catalog_does_not_list_pays_a_lower_bound_dequantization(tmp_path):
    """An IQ3_XXS file (gguf-iq3_xxs, its own mean bits) under llama.cpp's profile: IQ grids unpack at least
    IQ4_NL's table lookups, which contain Q4_0's nibbles (quantization.gguf_proxy): the estimate charges the
    profile's fitted q4_0 cost and says it is a lower bound; without the proxy it counted none, silently."""
    from planner.efficiency import unmeasured_dequant_warning
    from planner.hardware import load_hardware
    from planner.runtimes import load_runtime

    p = tmp_path / "tiny-iq3.gguf"
    write_gguf(p, gguf.LlamaFileType.MOSTLY_IQ3_XXS)
    e = estimate(load_model(str(p)), "rtx-4090", runtime="llamacpp")
    spec = load_hardware("rtx-4090")
    eff = load_runtime("llamacpp").for_unit(spec, spec.units[0]).efficiency
    assert e.weights == "gguf-iq3_xxs"
    assert any("charges q4_0's" in w and "lower bound" in w for w in e.warnings)
    from planner.roofline import device_model
    dev = device_model(spec, spec.units[0], load_model(str(p)).weights_file.weight_format(), eff)
    assert dev.dequant_factor == pytest.approx(1 + eff.dequant_overhead["q4_0"])
    assert unmeasured_dequant_warning(eff, "gguf-f16", "llamacpp") is None  # an unquantized file pays nothing


def test_gguf_mxfp4_moe_files_are_the_catalog_mxfp4_moe(tmp_path):
    """llama_ftype 38 (MOSTLY_MXFP4_MOE, the gpt-oss GGUFs) is the catalog's mxfp4_moe (experts MXFP4, the rest
    Q8_0, as llama-quant.cpp writes them), whose llama.cpp kernels were fitted on such files; the bytes stay the
    file's own."""
    p = tmp_path / "tiny-mxfp4.gguf"
    write_gguf(p, 38)
    e = estimate(load_model(str(p)), "rtx-4090")
    assert e.weights == "mxfp4_moe" and e.weights_source.startswith("exact: gguf")
    assert e.memory.weights_gb * 1e9 == pytest.approx(EXPECTED)
