"""planner/accuracy/labels.py: catalog ids for hardware and model labels that data.py's tables do not list, and
no guess where a label does not say which variant it is."""

import pytest

from planner.accuracy.labels import hardware_id, model_id
from planner.architecture import list_model_ids
from planner.hardware import list_hardware_ids

HW = set(list_hardware_ids())
MODELS = set(list_model_ids())


@pytest.mark.parametrize("label,expected", [
    ("NVIDIA GeForce RTX 4090 24GB", "rtx-4090"),
    ("RTX 3080 Ti", "rtx-3080-ti"),                 # the most specific id, not rtx-3080
    ("NVIDIA GeForce RTX 3080", "rtx-3080"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),       # SXM4 reads as sxm
    ("8x NVIDIA H200 SXM", "h200-sxm"),              # the count is the row's parallelism
    ("AMD Instinct MI300X", "mi300x"),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000-blackwell"),
    ("Apple M2 Max (30-core GPU)", "apple-m2-max-30c"),
    ("Apple M2 Max (38-core GPU)", "apple-m2-max"),
    ("Apple M3 Max (16-core CPU, 40-core GPU)", "apple-m3-max"),
    ("Apple M1 (8-core GPU)", "apple-m1"),
    ("Apple A18 Pro", "apple-a18-pro"),
    ("Tesla T4", "t4"), ("NVIDIA Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    # names that stand for one device: nvidia-smi's H100 SXM5 name, the GB10 chip, the Strix Halo GPU
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA GB10", "dgx-spark"), ("ASUS Ascent GX10 (NVIDIA GB10)", "dgx-spark"),
    ("AMD Radeon 8060S", "ryzen-ai-max-395"), ("AMD Ryzen AI Max+ 395", "ryzen-ai-max-395"),
    # session 43's cards: the plain RX 9070 beside the XT, the B300's CUDA device name
    ("NVIDIA GeForce RTX 5070", "rtx-5070"), ("AMD Radeon RX 9070", "rx-9070"), ("AMD Radeon RX 9070 XT", "rx-9070-xt"),
    ("NVIDIA B300 SXM6 AC", "b300"), ("Intel Arc B570", "arc-b570"), ("Apple M5", "apple-m5"),
    ("NVIDIA GeForce RTX 4060", "rtx-4060"), ("NVIDIA GeForce GTX 1080 Ti", "gtx-1080-ti"),
    ("AMD Radeon 890M", "ryzen-ai-9-hx-370"), ("Intel Gaudi 2", "gaudi-2"), ("NVIDIA A100-PCIE-40GB", "a100-40gb-pcie"),
])
def test_labels_resolve_to_the_catalog_id(label, expected):
    assert hardware_id(label, HW) == (expected, None)


@pytest.mark.parametrize("label,needle", [
    ("A100 80GB", "which of a100-80gb-pcie, a100-80gb-sxm"),
    ("H100", "which of h100-nvl, h100-pcie, h100-sxm"),
    ("RTX 3060", "which of rtx-3060-12gb, rtx-3060-8gb"),
    ("NVIDIA GeForce RTX 4060 Ti", "which of rtx-4060-ti-16gb, rtx-4060-ti-8gb"),   # not the plain rtx-4060
    ("NVIDIA GeForce RTX 5060 Ti", "which of rtx-5060-ti-16gb, rtx-5060-ti-8gb"),
    ("Apple M2 Max", "does not state the GPU core count of apple-m2-max"),
    ("Apple M2 Max (34-core GPU)", "no catalog bin of apple-m2-max has 34 GPU cores"),
    ("Cerebras WSE-3", "has no catalog id"),
    ("", "no hardware label"),
])
def test_labels_that_do_not_say_which_variant_are_not_guessed(label, needle):
    hw, reason = hardware_id(label, HW)
    assert hw is None and needle in reason


@pytest.mark.parametrize("label,expected", [
    ("Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
    ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"), ("gemma-3-27b-it", "gemma-3-27b"),
    ("Llama-3.3-70B-Instruct-FP8", "llama-3.3-70b"), ("Qwen/Qwen2.5-14B-Instruct", "qwen2.5-14b"),
    ("meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b"),
    ("Mistral-7B-Instruct-v0.3", None),   # v0.3's vocabulary is not the catalog's mistral-7b (v0.1)
    ("Mistral-7B-Instruct-v0.1", "mistral-7b"),  # the catalog entry is v0.1's config.json
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ("Llama 3.1 8B", "llama-3.1-8b"),     # spaces as hyphens
    ("Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"), ("Qwen3-235B-A22B-Thinking-2507", "qwen3-235b-a22b"),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "qwen2.5-7b"),
    # the Hugging Face repo a catalog entry's config.json comes from (its `source`) names that entry, not a guess
    ("Mistral-Small-24B-Instruct-2501", "mistral-small-3-24b"), ("microsoft/Phi-3-mini-4k-instruct", "phi-3-mini"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"),
    ("Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick"),
    # derivatives that kept the base's shapes (labels.DERIVATIVES: the model card names the base)
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "llama-3.3-70b"), ("DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b"),
    ("Qwen2.5-Coder-32B-Instruct", "qwen2.5-32b"), ("DeepSeek-V3-0324", "deepseek-v3"),
    ("Qwen3-Coder-30B-A3B-Instruct", "qwen3-30b-a3b"),
    ("Mistral-Small-24B", "mistral-small-3-24b"),  # the repo's name, its release tag aside (as Qwen3's -2507)
    ("gemma-2-27b-it", "gemma-2-27b"), ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mixtral-8x22b"),
    ("Mixtral-8x14B-Instruct", None), ("gemma-2-13b-it", None),  # no repo or entry of that name: no guess
    ("Llama-3.1-13B", None), (None, None),
])
def test_model_labels_match_exactly_apart_from_tuning_suffixes(label, expected):
    assert model_id(label, MODELS) == expected


@pytest.mark.parametrize("framework,public,serving", [
    ("llama.cpp (Metal backend, llama-bench, -ngl 99)", "llamacpp", None),
    ("Ollama 0.5.7", "llamacpp", None), ("llama-cpp-python 0.3.2", "llamacpp", None),
    ("TRT-LLM 0.17 trtllm-bench", "trtllm", None), ("TensorRT-LLM v0.9.0 (gptSessionBenchmark)", "trtllm", None),
    ("vllm 0.11.0", None, "vllm"), ("text-generation-inference 3.0", None, "tgi"), ("TabbyAPI", None, "exllamav2"),
    ("SGLang v0.3.0 server", None, "sglang"), ("MLX-LM 0.20", None, None), ("DeepSpeed-MII", None, "deepspeed-mii"),
    ("DeepSpeed-FastGen (MII 0.2.3)", None, "deepspeed-mii"),
    # TensorRT-LLM's OpenAI server measured with vLLM's client: the server's rows (serving_rows.py)
    ("TensorRT-LLM v1.2.0rc1; serve: trtllm-serve Qwen/Qwen3-8B; bench: vllm bench serve", "trtllm", "trtllm"),
])
def test_framework_labels_name_the_engine_whose_kernels_ran(framework, public, serving):
    from planner.accuracy.data import _runtime
    from planner.accuracy.serving_rows import serving_runtime

    assert (_runtime(framework), serving_runtime(framework)) == (public, serving)


def test_a_variant_token_the_match_lacks_is_not_dropped():
    """'RTX 4060 Ti' holds every token of rtx-4060, but its 'ti' belongs to the Ti cards only: the label names one of
    them (which memory size it does not say), never the plain 4060; a token no finer id carries ('10GB' of an RTX
    3080 label) changes nothing."""
    known = {"rtx-4060", "rtx-4060-ti-8gb", "rtx-4060-ti-16gb", "rtx-3080", "rtx-3080-ti"}
    hw, reason = hardware_id("NVIDIA GeForce RTX 4060 Ti", known)
    assert hw is None and "which of rtx-4060-ti-16gb, rtx-4060-ti-8gb" in reason
    assert hardware_id("NVIDIA GeForce RTX 4060 Ti 8GB", known) == ("rtx-4060-ti-8gb", None)
    assert hardware_id("NVIDIA GeForce RTX 4060", known) == ("rtx-4060", None)
    assert hardware_id("NVIDIA GeForce RTX 3080 10GB", known) == ("rtx-3080", None)
    assert hardware_id("RTX 3080 Ti", known) == ("rtx-3080-ti", None)
