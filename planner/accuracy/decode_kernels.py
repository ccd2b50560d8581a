"""Which decode attention kernel a published engine build ran: one pass over the K/V cache per K/V head (the
kernel shares K/V across the query heads of a group: FlashAttention, FlashInfer, TensorRT-LLM's XQA, the ROCm
custom paged attention) or one pass per query head (one CTA per query head: TensorRT-LLM's masked MHA, vLLM's
paged_attention v1/v2 kernels that TGI also calls). A row's answer sets Efficiency.kv_read_per_query_head for it
(planner/roofline.py op_bytes): a decode attention op then reads its cache (query heads / K/V heads) times.

Sources:
  TensorRT-LLM  XQA ("XQA optimization ... only supports a limited number of model configurations, such as the
                LLAMA2 70B model", docs/source/advanced/gpt-attention.md) ships precompiled single-token kernels
                for 8 query heads per K/V head and head size 128 or 256 only (cpp/tensorrt_llm/kernels/
                decoderMaskedMultiheadAttention/cubin/xqa_kernel_cubin.h: ..._d_128_..._nqpkv_8_...). It first
                shipped in v0.7 (the XQA blog measured v0.8a); v0.5 and v0.6.1 run masked MHA for every model.
  ROCm vLLM     vLLM 0.6.x on ROCm (vllm/attention/backends/rocm_flash_attn.py, ROCm/vllm PR #8310, 2024-09) and
  and TGI       TGI's ROCm build of the same time (server/text_generation_server/layers/attention/rocm.py) use
                the custom kernel (grid seqs x partitions x K/V heads) only for head size 64/128, at most 16 query
                heads per K/V head and max_seq_len <= 32,768; longer contexts fall back to paged_attention v1/v2.
  gpt-fast,     repeat K/V to every query head before attention (REPEAT_KV_ENGINES): gpt-fast's model.py
  HF eager      `k.repeat_interleave(self.n_head // self.n_local_heads, dim=1)` before scaled_dot_product_attention,
                transformers' eager attention `repeat_kv`; their engine profiles carry the flag too (benchmark.py).
Every other engine and build here shares K/V (no evidence otherwise): the default False.

A materialized attention (no flash attention) moves its score matrix S (pairs of query and key) between kernels;
the planner counts it at the activation width, written by QK^T, read and written by softmax, read by PV: 8 bytes
per score in 16-bit (planner/ops.py score_bytes). llama.cpp (SCORE_BYTES_FACTOR, Efficiency.score_bytes_factor):
  ggml_mul_mat always returns F32 (ggml.c), and soft_max_ext keeps F32.
  CUDA  ggml_cuda_mul_mat_batched_cublas (ggml-cuda.cu) converts src1 to F16 (to_fp16_cuda) and, at the default
        precision, runs cuBLAS into an F16 buffer that it converts back to F32 (to_fp32_cuda): QK^T writes 2 +
        reads 2 + writes 4, softmax reads 4 + writes 4, PV converts 4 -> 2 and reads 2: 24 bytes, 3.0 x.
  ROCm  the same ggml-cuda sources built with HIP (hipBLAS for cuBLAS, vendors/hip.h): the same 24 bytes, 3.0 x.
  Metal the F32 scores go into the F16 x F32 matmul kernels as they are: 4 + 8 + 4 = 16 bytes, 2.0 x.
HF transformers eager (any vendor): bf16 scores written (2), the causal mask added (2 + 2), softmax in fp32 (2 + 4),
cast back (4 + 2), read by PV (2): 20 bytes, 2.5 x.
"""

from __future__ import annotations

import re

XQA_HEADS_PER_KV = (8,)           # the precompiled XQA set (xqa_kernel_cubin.h)
XQA_HEAD_SIZES = (128, 256)
XQA_FIRST_VERSION = (0, 7)        # TensorRT-LLM release that shipped XQA
ROCM_CUSTOM_MAX_SEQ = 32768       # ROCm custom paged attention: max_seq_len <= 32768 (vLLM 0.6, TGI 2024-10)
ROCM_SOURCES = ("dstack_tgi_vs_vllm_mi300x_llama405b_2024-10",)
REPEAT_KV_ENGINES = frozenset({"gpt-fast", "hf-eager"})  # every build: the K/V repeat is in the model code
# (engine, vendor or None for every vendor) -> bytes moved per counted score byte (module docstring)
SCORE_BYTES_FACTOR = {("llamacpp", "nvidia"): 3.0, ("llamacpp", "amd"): 3.0, ("llamacpp", "apple"): 2.0,
                      ("hf-eager", None): 2.5}


def score_bytes_factor(runtime: str | None, vendor: str | None) -> float:
    """Efficiency.score_bytes_factor of an engine on a vendor's GPUs (SCORE_BYTES_FACTOR; 1 elsewhere)."""
    key = str(vendor).lower() if vendor is not None else None
    return SCORE_BYTES_FACTOR.get((str(runtime), key), SCORE_BYTES_FACTOR.get((str(runtime), None), 1.0))


def _trtllm_version(framework: str) -> tuple[int, int] | None:
    m = re.search(r"TensorRT-LLM v(\d+)\.(\d+)", str(framework))
    return (int(m.group(1)), int(m.group(2))) if m else None


def decode_kernel_per_query_head(runtime: str, framework: str, source: str, model_id: str, max_context: int) -> bool:
    """True where the row's engine build read the K/V cache once per query head in decode (module docstring)."""
    from ..architecture import load_model

    m = load_model(model_id)
    if m.mla or m.num_attention_heads == m.num_kv_heads:
        return False  # MHA: one query head per K/V head either way
    group = m.num_attention_heads // m.num_kv_heads
    if runtime in REPEAT_KV_ENGINES:
        return True
    if runtime == "trtllm":
        v = _trtllm_version(framework)
        if v is None:
            return False
        xqa = v >= XQA_FIRST_VERSION and group in XQA_HEADS_PER_KV and m.head_dim in XQA_HEAD_SIZES
        return not xqa
    if runtime in ("vllm", "tgi") and source in ROCM_SOURCES:
        custom = m.head_dim in (64, 128) and group <= 16 and max_context <= ROCM_CUSTOM_MAX_SEQ
        return not custom
    return False
