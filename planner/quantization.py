"""Number formats: weight formats with their true bits per weight (scales and zero points included), which
tensors stay in higher precision, the compute path each format takes, and KV-cache element sizes.

Effective bits per weight (bpw) = bits + scale_bits / group + zero_bits / group:
  int4 g128, fp16 scale          = 4 + 16/128          = 4.125
  int4 g128, fp16 scale, int4 zp = 4 + (16 + 4)/128    = 4.156  (GPTQ/AWQ pack 4-bit zero points)
  llama.cpp Q4_0 (32 x 4-bit + fp16 scale)     = 4 + 16/32 = 4.5   (ggml-quants.h block_q4_0)
  llama.cpp Q8_0 (32 x 8-bit + fp16 scale)     = 8 + 16/32 = 8.5   (block_q8_0)
  NF4 (64-value blocks, fp32 absmax)           = 4 + 32/64 = 4.5;  with double quantization 4.127 (QLoRA, arXiv:2305.14314)
  MXFP4 (32 x fp4 + e8m0 scale)                = 4 + 8/32  = 4.25  (OCP Microscaling spec v1.0)
  llama.cpp MXFP4_MOE: routed-expert tensors (ne[2] > 1) MXFP4, every other tensor Q8_0, the output and token
  embedding too (src/llama-quant.cpp: "MoE tensors -> MXFP4, other tensors -> Q8_0"); ggml-org's gpt-oss-20b file
  is 19.12e9 x 4.25/8 + 1.79e9 x 8.5/8 = 12.06 GB (published: 11.27 GiB = 12.10 GB)
  NVFP4 (16 x fp4 + fp8 scale)                 = 4 + 8/16  = 4.5   (NVIDIA Blackwell NVFP4; per-tensor fp32 scale ignored)
  Q4_K_M / Q5_K_M: mixed k-quants; their published effective bpw over a whole Llama-7B file are ~4.85 / ~5.69
  (llama.cpp quantize table: 7B Q4_K_M 4.08 GB ~ 4.85 bpw, Q5_K_M 4.78 GB ~ 5.69 bpw; k-quants PR #1684).
  Legacy and single-type llama.cpp formats are their block sizes (ggml-common.h): Q4_1 20 B / 32 = 5.0,
  Q5_0 22 B / 32 = 5.5, Q5_1 24 B / 32 = 6.0, IQ4_NL 18 B / 32 = 4.5, IQ4_XS 136 B / 256 = 4.25.
  The other k-quant mixes (Q2_K, Q3_K_S/M/L, Q4_K_S, Q5_K_S) take the body bpw of llama-quantize's published
  Llama-3-8B file sizes (tools/quantize/quantize.cpp QUANT_OPTIONS, GiB): body = (size x 2^33 - 6.5625 x P_out)
  / (P - P_out) with the output tensor in Q6_K (llama-quant.cpp), P = 8.03e9, P_out = 128256 x 4096 = 525.3e6.
  The same rule gives Q4_0 4.34 GiB -> 4.51 and Q6_K 6.14 GiB -> 6.57 (their block sizes 4.5 and 6.5625), so it
  reads the mixes to about 0.01 bpw: Q2_K 2.96 -> 2.93, Q3_K_S 3.41 -> 3.44, Q3_K_M 3.74 -> 3.82,
  Q3_K_L 4.03 -> 4.15, Q4_K_S 4.37 -> 4.54, Q5_K_S 5.21 -> 5.50.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from .errors import PlannerError


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bits_per_weight: float
    compute_dtypes: tuple[str, ...]  # preference order; the first the compute unit has a peak for is used
    embedding_bits: float = 16.0
    lm_head_bits: float = 16.0
    weight_only: bool = True  # activations stay 16-bit; dequantize to fp16/bf16 before the matmul
    description: str = ""
    expert_format: str | None = None  # the routed experts' own format (llama.cpp MXFP4_MOE: mxfp4), else the same
    kernel_format: str | None = None  # whose kernels the other GEMMs run (MXFP4_MOE: q8_0's), else its own

    @property
    def kernel_name(self) -> str:
        """The format whose GEMM kernels, dequantization cost and compute fraction the non-expert weights take."""
        return self.kernel_format or self.name

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / 8


_WO = ("bf16", "fp16", "fp32")  # weight-only: dequantize into a 16-bit matmul (fp32 on units without 16-bit peaks)
_WO_NPU = ("bf16", "fp16", "int8", "fp32")  # an NPU without 16-bit peaks runs int weights on its int8 engine


def _int4(group: int, zero: bool, name: str, desc: str) -> WeightFormat:
    bpw = 4 + 16 / group + (4 / group if zero else 0)
    return WeightFormat(name, bpw, _WO_NPU, description=desc)


# weight-only quantized formats whose GEMMs pay a dequantization cost an engine profile fits per format
# (Efficiency.dequant_overhead; planner/accuracy/fit.py); mxfp4 is not among them (format_compute_fraction)
DEQUANT_FITTED_FORMATS = ("q4_0", "q8_0", "q4_k_m", "q5_k_m", "q6_k", "int8", "int4-g32", "int4-g64", "int4-g128",
                          "gptq-int4", "awq-int4", "nf4", "nf4-dq", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_s",
                          "q3_k_m", "q3_k_l", "q4_k_s", "q5_k_s", "iq4_nl", "iq4_xs", "int4-g32-zp", "int4-g128-zp")

# format -> the simpler format whose dequantization work it contains (and adds to): an engine profile fitted on the
# simpler one but not on this one charges this one at least the simpler one's cost (dequant_overhead_for). Read
# from the block layouts (ggml-common.h, the int4 kernels): a K-quant unpacks 4-bit (Q4_0-like) values and adds
# packed 6-bit sub-block scales and mins, Q5_K/Q6_K/Q3_K add high bits on top of that, Q2_K packs 4-bit scale/min
# pairs per 16 weights; Q4_1 and Q5_0 add a min or a high bit to Q4_0; IQ4_NL looks its nibbles up in a 16-entry
# table, IQ4_XS adds IQ4_NL super-blocks; a smaller int4 group loads more scales; zero points add a subtraction.
# On M2 Ultra (llama.cpp PR #3084, pp512 t/s): Q4_0 1164, Q4_K_M 1028, Q5_K_M 976, Q6_K 978: the same order.
DEQUANT_SUPERSET_OF = {"q4_k_m": "q4_0", "q4_k_s": "q4_k_m", "q5_k_m": "q4_k_m", "q5_k_s": "q5_k_m",
                       "q6_k": "q5_k_m", "q3_k_m": "q4_k_m", "q3_k_s": "q3_k_m", "q3_k_l": "q3_k_m",
                       "q2_k": "q4_k_m", "q4_1": "q4_0", "q5_0": "q4_0", "q5_1": "q5_0", "iq4_nl": "q4_0",
                       "iq4_xs": "iq4_nl", "int4-g32": "int4-g64", "int4-g64": "int4-g128",
                       "int4-g128-zp": "int4-g128", "int4-g32-zp": "int4-g32", "gptq-int4": "int4-g128-zp",
                       "awq-int4": "int4-g128-zp", "nf4-dq": "nf4"}


GGUF_UNPACKED = ("f16", "bf16", "f32", "fp16", "fp32")  # gguf-<type> names that hold no quantized weights


def gguf_proxy(fmt_name: str) -> str | None:
    """The catalog format whose dequantization a GGUF quantization mix the catalog does not list contains
    (planner/model_files.py names those `gguf-<llama_ftype>`, e.g. gguf-iq3_xxs): an IQ grid / codebook type
    unpacks at least IQ4_NL's table lookups, a K-quant at least Q4_K's super-blocks (Q2_K for Q2_K_S), anything
    else (TQ ternary, Q1_0 / Q2_0) at least Q4_0's; None for a name that is not a quantized GGUF mix."""
    if not fmt_name.startswith("gguf-") or fmt_name[5:] in GGUF_UNPACKED:
        return None
    rest = fmt_name[5:]
    if rest.startswith("iq"):
        return "iq4_nl"
    if rest.startswith("q2_k"):
        return "q2_k"
    return "q4_k_m" if "_k" in rest else "q4_0"


def kernel_format_name(fmt_name: str) -> str:
    """The format whose GEMM kernels a format's (non-expert) weights run: WeightFormat.kernel_name for a catalog
    format (llama.cpp MXFP4_MOE: q8_0), the name itself for any other."""
    f = WEIGHT_FORMATS.get(fmt_name)
    return f.kernel_name if f is not None else fmt_name


def is_dequantized(fmt_name: str) -> bool:
    """Whether the format's GEMMs pay a dequantization cost an engine profile fits (DEQUANT_FITTED_FORMATS, or a
    quantized GGUF mix the catalog does not list: gguf_proxy)."""
    fmt_name = kernel_format_name(fmt_name)
    return fmt_name in DEQUANT_FITTED_FORMATS or gguf_proxy(fmt_name) is not None


def dequant_overhead_for(fitted, fmt_name: str) -> tuple[float, str | None]:
    """(dequantization overhead, the format it was fitted for) of weight format `fmt_name` under an engine
    profile's fitted Efficiency.dequant_overhead: its own where fitted, else that of the nearest format whose work
    it contains (DEQUANT_SUPERSET_OF, followed up the chain; a GGUF mix the catalog does not list starts from its
    gguf_proxy), a lower bound on its cost; (0.0, None) where no format of the chain was fitted (the estimate then
    counts no dequantization and warns). A format that runs another's kernels (kernel_format_name) takes that one's."""
    fmt_name = kernel_format_name(fmt_name)
    if fitted and fmt_name in fitted:
        return float(fitted[fmt_name]), fmt_name
    f, seen = gguf_proxy(fmt_name) or fmt_name, set()
    while f is not None and f not in seen:
        if fitted and f in fitted:
            return float(fitted[f]), f
        seen.add(f)
        f = DEQUANT_SUPERSET_OF.get(f)
    return 0.0, None


WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in [
    WeightFormat("fp32", 32, ("fp32",), 32, 32, description="IEEE fp32 everywhere"),
    WeightFormat("fp16", 16, ("fp16", "bf16", "fp32"), description="fp16 weights and activations"),
    WeightFormat("bf16", 16, ("bf16", "fp16", "fp32"), description="bf16 weights and activations"),
    WeightFormat("fp8", 8 + 32 / 4096, ("fp8", "bf16", "fp16", "fp32"), weight_only=False,
                 description="fp8 e4m3 weights and activations (w8a8-fp8), per-channel fp32 scale; fp8 tensor peak"),
    WeightFormat("int8", 8 + 16 / 4096, _WO_NPU, description="int8 weight-only, per-output-channel fp16 scale (w8a16)"),
    WeightFormat("w8a8-int8", 8 + 16 / 4096, ("int8", "bf16", "fp16", "fp32"), weight_only=False,
                 description="int8 weights and activations (SmoothQuant-style); int8 tensor peak"),
    _int4(32, False, "int4-g32", "int4 group-wise, group 32, fp16 scale"),
    _int4(64, False, "int4-g64", "int4 group-wise, group 64, fp16 scale"),
    _int4(128, False, "int4-g128", "int4 group-wise, group 128, fp16 scale"),
    _int4(32, True, "int4-g32-zp", "int4 group 32, fp16 scale + 4-bit zero point"),
    _int4(128, True, "int4-g128-zp", "int4 group 128, fp16 scale + 4-bit zero point"),
    _int4(128, True, "gptq-int4", "GPTQ 4-bit, group 128, fp16 scales, packed 4-bit zeros; embeddings/LM head fp16"),
    _int4(128, True, "awq-int4", "AWQ 4-bit, group 128, fp16 scales, packed 4-bit zeros; embeddings/LM head fp16"),
    WeightFormat("nf4", 4 + 32 / 64, _WO, description="bitsandbytes NF4, block 64, fp32 absmax"),
    WeightFormat("nf4-dq", 4 + 8 / 64 + 32 / (64 * 256), _WO, description="NF4 with double quantization (QLoRA): 4.127 bpw"),
    WeightFormat("mxfp4", 4.25, ("fp4", "bf16", "fp16", "fp32"), description="OCP MXFP4 (e8m0 scale per 32); fp4 peak on Blackwell"),
    WeightFormat("nvfp4", 4.5, ("fp4", "fp8", "bf16", "fp16", "fp32"), weight_only=False,
                 description="NVIDIA NVFP4 (fp8 scale per 16), fp4 tensor peak on Blackwell"),
    WeightFormat("q8_0", 8.5, _WO_NPU, 8.5, 8.5, description="llama.cpp Q8_0: blocks of 32 int8 + fp16 scale"),
    WeightFormat("mxfp4_moe", 8.5, _WO_NPU, 8.5, 8.5, expert_format="mxfp4", kernel_format="q8_0",
                 description="llama.cpp MXFP4_MOE (ggml-org's gpt-oss GGUFs): routed experts MXFP4, every other "
                             "tensor Q8_0"),
    WeightFormat("q4_0", 4.5, _WO_NPU, 4.5, 6.5625, description="llama.cpp Q4_0: blocks of 32 int4 + fp16 scale; output tensor Q6_K"),
    WeightFormat("q4_k_m", 4.85, _WO_NPU, 4.85, 6.5625, description="llama.cpp Q4_K_M (mixed Q4_K/Q6_K), published ~4.85 bpw"),
    WeightFormat("q5_k_m", 5.69, _WO_NPU, 5.69, 6.5625, description="llama.cpp Q5_K_M (mixed Q5_K/Q6_K), published ~5.69 bpw"),
    WeightFormat("q6_k", 6.5625, _WO_NPU, 6.5625, 6.5625, description="llama.cpp Q6_K: 6.5625 bpw"),
    WeightFormat("q4_1", 5.0, _WO_NPU, 5.0, 6.5625, description="llama.cpp Q4_1: blocks of 32 int4 + fp16 scale and min"),
    WeightFormat("q5_0", 5.5, _WO_NPU, 5.5, 6.5625, description="llama.cpp Q5_0: blocks of 32 5-bit + fp16 scale"),
    WeightFormat("q5_1", 6.0, _WO_NPU, 6.0, 6.5625, description="llama.cpp Q5_1: blocks of 32 5-bit + fp16 scale and min"),
    WeightFormat("q2_k", 2.93, _WO_NPU, 2.93, 6.5625, description="llama.cpp Q2_K (mixed Q2_K/Q3_K/Q4_K), ~2.93 bpw"),
    WeightFormat("q3_k_s", 3.44, _WO_NPU, 3.44, 6.5625, description="llama.cpp Q3_K_S (Q3_K), ~3.44 bpw"),
    WeightFormat("q3_k_m", 3.82, _WO_NPU, 3.82, 6.5625, description="llama.cpp Q3_K_M (mixed Q3_K/Q4_K/Q5_K), ~3.82 bpw"),
    WeightFormat("q3_k_l", 4.15, _WO_NPU, 4.15, 6.5625, description="llama.cpp Q3_K_L (mixed Q3_K/Q5_K), ~4.15 bpw"),
    WeightFormat("q4_k_s", 4.54, _WO_NPU, 4.54, 6.5625, description="llama.cpp Q4_K_S (mostly Q4_K), ~4.54 bpw"),
    WeightFormat("q5_k_s", 5.50, _WO_NPU, 5.50, 6.5625, description="llama.cpp Q5_K_S (Q5_K), ~5.50 bpw"),
    WeightFormat("iq4_nl", 4.5, _WO_NPU, 4.5, 6.5625, description="llama.cpp IQ4_NL: blocks of 32 non-linear 4-bit + fp16 scale"),
    WeightFormat("iq4_xs", 4.25, _WO_NPU, 4.25, 6.5625, description="llama.cpp IQ4_XS: IQ4_NL in 256-weight super-blocks, 4.25 bpw"),
]}

# Aliases users type.
_ALIASES = {"f16": "fp16", "float16": "fp16", "bfloat16": "bf16", "f32": "fp32", "float32": "fp32",
            "int4": "int4-g128", "w4a16": "int4-g128", "w8a16": "int8", "gptq": "gptq-int4", "awq": "awq-int4",
            "q4_k": "q4_k_m", "q5_k": "q5_k_m", "q3_k": "q3_k_m", "int4_g32": "int4-g32", "fp8-e4m3": "fp8",
            "mxfp4-moe": "mxfp4_moe"}

@dataclass(frozen=True)
class KVFormat:
    """A KV-cache element format with the scales it stores.

    bits: bits per element including block scales (llama.cpp q8_0: 32 x 8-bit + an fp16 scale = 8.5 bits).
    scale_bytes_per_head: bytes of scale stored per token per KV head for K and for V each (fp8 with per-token
    scales: one fp32 = 4 B), on top of `bits`; per-tensor scales are a few bytes per layer and count as 0.
    """

    name: str
    bits: float
    scale_bytes_per_head: float = 0.0
    description: str = ""


KV_FORMATS: dict[str, KVFormat] = {f.name: f for f in [
    KVFormat("fp32", 32, description="fp32"),
    KVFormat("fp16", 16, description="fp16 (vLLM kv_cache_dtype auto for fp16 models)"),
    KVFormat("bf16", 16, description="bf16"),
    KVFormat("fp8", 8, description="fp8 e4m3/e5m2, per-tensor scale (vLLM fp8, TRT-LLM FP8 KV); with MLA: FlashMLA's "
                                   "fp8 layout, 656 B per token per layer on DeepSeek-V3"),
    KVFormat("fp8-per-token", 8, 4.0, description="fp8 with one fp32 scale per token per KV head for K and V "
                                                  "(per-token-head quantization)"),
    KVFormat("int8", 8, description="int8, per-tensor scale"),
    KVFormat("int4", 4, description="int4, per-tensor scale"),
    KVFormat("q8_0", 8.5, description="llama.cpp q8_0 cache: blocks of 32 int8 + fp16 scale (ggml block_q8_0)"),
    KVFormat("q4_0", 4.5, description="llama.cpp q4_0 cache: blocks of 32 int4 + fp16 scale (ggml block_q4_0)"),
]}

# bytes per element including block scales (per-token scales depend on head_dim: see kv_bytes_per_token_layer)
KV_DTYPE_BYTES: dict[str, float] = {k: f.bits / 8 for k, f in KV_FORMATS.items()}
_KV_ALIASES = {"f16": "fp16", "auto": "fp16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8-e4m3": "fp8",
               "fp8_per_token": "fp8-per-token"}

# FlashMLA fp8 KV layout (DeepSeek-V3.2 / vLLM 'fp8_ds_mla'): the 512-value latent in fp8 with one fp32 scale per
# 128 values, the 64 RoPE values kept in bf16: 512 + 4 x 4 + 64 x 2 = 656 bytes per token per layer.
FLASHMLA_FP8_TILE = 128


# ExLlamaV2's EXL2: a variable-bitrate weight-only format (each layer quantized at a mix of 2-8 bits with group
# scales, to a target average), named by that average: exl2-4.0 or exl2_4.0bpw; bits between EXL2_BITS
EXL2_BITS = (2.0, 8.0)
EXL2_HEAD_BITS = 6.0  # exllamav2 convert.py: the LM head at -hb 6 by default; the embedding table stays fp16
_EXL2 = re.compile(r"^exl2[-_]([0-9]+(?:\.[0-9]+)?)(?:bpw)?$")


@lru_cache(maxsize=None)  # one object per bitrate: the device models are cached by identity
def exl2_format(bits: float) -> WeightFormat:
    """EXL2 at `bits` average bits per weight (scales included, as the converter's target counts them)."""
    return WeightFormat(f"exl2-{bits:g}", float(bits), _WO, 16.0, EXL2_HEAD_BITS,
                        description=f"ExLlamaV2 EXL2 at {bits:g} bits per weight on average (mixed 2-8 bit groups, "
                                    f"scales included); LM head {EXL2_HEAD_BITS:g} bits, embeddings 16")


def weight_format(name: str) -> WeightFormat:
    key = _ALIASES.get(name.lower(), name.lower())
    if key in WEIGHT_FORMATS:
        return WEIGHT_FORMATS[key]
    m = _EXL2.match(key)
    if m and EXL2_BITS[0] <= float(m.group(1)) <= EXL2_BITS[1]:
        return exl2_format(float(m.group(1)))
    raise PlannerError(f"--weights: unknown format '{name}'; allowed: {', '.join(WEIGHT_FORMATS)}, "
                       f"exl2-<bits> (ExLlamaV2, {EXL2_BITS[0]:g}-{EXL2_BITS[1]:g} bits per weight)")


def kv_dtype(name: str) -> str:
    """Normalize a KV-cache dtype name (KV_FORMATS; per-tensor scales count as 0 bytes)."""
    key = _KV_ALIASES.get(name.lower(), name.lower())
    if key not in KV_DTYPE_BYTES:
        raise PlannerError(f"--kv-dtype: unknown dtype '{name}'; allowed: {', '.join(KV_DTYPE_BYTES)}")
    return key


def kv_bytes_per_element(name: str) -> float:
    """Bytes per cached element including block scales (not per-token scales, which depend on the head size)."""
    return KV_DTYPE_BYTES[kv_dtype(name)]


def kv_bytes_per_token_layer(m, name: str) -> float:
    """Bytes one token adds to one layer's cache, scales included.

    MHA/GQA/MQA: 2 x kv_heads x (head_dim x bits / 8 + scale_bytes_per_head)
    MLA:         (kv_lora_rank + rope_dim) x bits / 8; fp8 uses FlashMLA's layout:
                 kv_lora_rank x 1 + kv_lora_rank / 128 x 4 (fp32 tile scales) + rope_dim x 2 (bf16) = 656 on DeepSeek-V3
    """
    f = KV_FORMATS[kv_dtype(name)]
    if m.mla is not None:
        r, rope = m.mla.kv_lora_rank, m.mla.qk_rope_head_dim
        if f.name.startswith("fp8"):
            return r * 1.0 + math.ceil(r / FLASHMLA_FP8_TILE) * 4.0 + rope * 2.0
        return (r + rope) * f.bits / 8
    return 2 * m.num_kv_heads * (m.head_dim * f.bits / 8 + f.scale_bytes_per_head)


def activation_bytes(fmt: WeightFormat) -> float:
    """Activations stay 16-bit for every format but fp32 (w8a8/fp8 quantize them on the fly inside the GEMM)."""
    return 4.0 if fmt.name == "fp32" else 2.0
