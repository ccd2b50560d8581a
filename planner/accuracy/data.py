"""Published measurements (data/measured_public.csv) -> planner workloads, one row per published number.

Every row either maps to a workload the planner can time (hardware id, model id, weight format, KV dtype, batch,
prompt/context, output, metric, runtime, tensor-parallel degree 1) or is listed with the reason it cannot. The
mapping tables below are explicit so a reader can check each one against the source labels; the data file's own
notes (data/measured_public.md) say what each source measured.

Metric definitions (what the planner has to predict for each row):
  decode_tok_s_per_seq  llama-bench `tg N` at depth D (input_len): N decode steps at contexts D .. D+N-1, batch 1;
                        tok/s = N / sum(step times). gpt-fast: ~5-token prompt, 100 new tokens (generate.py default).
  prefill_tok_s         llama-bench `pp N` (`pp N @ dD`: after D tokens already in the KV cache): N prompt tokens,
                        processed in micro-batches of n_ubatch tokens (the row's `n_ubatch=`, else 512), each
                        attending to the D + earlier ones; tok/s = N / sum(chunk times).
  ttft_ms               TensorRT-LLM 'Low Latency': batch 1, one output token = the prefill of input_len tokens.
  throughput_tok_s      TensorRT-LLM 'Peak Throughput', static batch B (gptSessionBenchmark): one prefill of
                        B x ISL then OSL - 1 decode steps; output tok/s per GPU = B * OSL / (prefill + decode sum)
                        / TP.
Tensor-parallel rows (TP > 1: 'Nx' in gpt-fast labels, 'TP=N' in TRT-LLM notes) are timed like
planner.serving.parallelism.tp_step_time_s (per-GPU ops + ring all-reduces over the node's link) and fitted like the
others. load_rows adds the rows of data/measured_serving.csv (planner/accuracy/serving_rows.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..hardware import REPO_ROOT
from .decode_kernels import decode_kernel_per_query_head
from .labels import hardware_id, model_id

DATA_PATH = REPO_ROOT / "data" / "measured_public.csv"

# source label -> catalog id. Apple bins: chip + GPU core count (hardware_specs/apple-*.yaml name the bins).
HARDWARE_IDS: dict[str, str] = {
    "Apple M1 (7-core GPU)": "apple-m1-7c", "Apple M1 7-Core GPU 8GB": "apple-m1-7c",
    "Apple M1 (8-core GPU)": "apple-m1",
    "Apple M1 Pro (14-core GPU)": "apple-m1-pro-14c", "Apple M1 Pro (16-core GPU)": "apple-m1-pro",
    "Apple M1 Max (24-core GPU)": "apple-m1-max-24c", "Apple M1 Max (32-core GPU)": "apple-m1-max",
    "Apple M1 Max 32-Core GPU 64GB": "apple-m1-max",
    "Apple M1 Ultra (48-core GPU)": "apple-m1-ultra-48c", "Apple M1 Ultra (64-core GPU)": "apple-m1-ultra",
    "Apple M2 (8-core GPU)": "apple-m2-8c", "Apple M2 (10-core GPU)": "apple-m2",
    "Apple M2 Pro (16-core GPU)": "apple-m2-pro-16c", "Apple M2 Pro (19-core GPU)": "apple-m2-pro",
    "Apple M2 Max (30-core GPU)": "apple-m2-max-30c", "Apple M2 Max (38-core GPU)": "apple-m2-max",
    "Apple M2 Ultra (60-core GPU)": "apple-m2-ultra-60c", "Apple M2 Ultra (76-core GPU)": "apple-m2-ultra",
    "Apple M2 Ultra 76-Core GPU 192GB": "apple-m2-ultra",
    "Apple M3 (10-core GPU)": "apple-m3",
    "Apple M3 Pro (14-core GPU)": "apple-m3-pro-14c", "Apple M3 Pro (18-core GPU)": "apple-m3-pro",
    "Apple M3 Max (30-core GPU)": "apple-m3-max-30c", "Apple M3 Max (40-core GPU)": "apple-m3-max",
    "Apple M3 Max 40-Core GPU 64GB": "apple-m3-max",
    "Apple M3 Ultra (60-core GPU)": "apple-m3-ultra-60c", "Apple M3 Ultra (80-core GPU)": "apple-m3-ultra",
    "Apple M4 (10-core GPU)": "apple-m4",
    "Apple M4 Pro (16-core GPU)": "apple-m4-pro-16c", "Apple M4 Pro (20-core GPU)": "apple-m4-pro",
    "Apple M4 Max (32-core GPU)": "apple-m4-max-32c", "Apple M4 Max (40-core GPU)": "apple-m4-max",
    "NVIDIA GeForce RTX 3070 8GB": "rtx-3070", "NVIDIA GeForce RTX 3080 10GB": "rtx-3080",
    "NVIDIA GeForce RTX 3080 Ti 12GB": "rtx-3080-ti", "NVIDIA GeForce RTX 3090 24GB": "rtx-3090",
    "NVIDIA GeForce RTX 4070 Ti 12GB": "rtx-4070-ti", "NVIDIA GeForce RTX 4080 16GB": "rtx-4080",
    "NVIDIA GeForce RTX 4090 24GB": "rtx-4090",
    "NVIDIA RTX 4000 Ada 20GB": "rtx-4000-ada", "NVIDIA RTX 5000 Ada 32GB": "rtx-5000-ada",
    "NVIDIA RTX 6000 Ada 48GB": "rtx-6000-ada", "NVIDIA RTX A6000 48GB": "rtx-a6000", "NVIDIA A40 48GB": "a40",
    "NVIDIA L40S 48GB": "l40s", "NVIDIA L40S": "l40s",
    "NVIDIA A100 PCIe 80GB": "a100-80gb-pcie", "NVIDIA A100 SXM 80GB": "a100-80gb-sxm",
    "NVIDIA H100 PCIe 80GB": "h100-pcie",
    "NVIDIA H100 80GB HBM3": "h100-sxm",  # 'H100-HBM3-80GB' in the TRT-LLM methodology text = the SXM5 part
    "NVIDIA H200": "h200-sxm",
    # TRT-LLM v0.8.0 does not name the A100 variant. The 80 GB part is implied: Llama-2-7B fp16 at batch 256 x 256
    # tokens needs 13.5 GB of weights + 34 GB of KV cache (> 40 GB); SXM is assumed (the DGX A100 NVIDIA benchmarks).
    "NVIDIA A100 (memory variant not stated)": "a100-80gb-sxm",
    # gpt-fast: power-limited to 330 W (of 400 W). Batch-1 decode is memory bound, so the power cap matters little.
    "NVIDIA A100-SXM 80GB (power-limited 330 W)": "a100-80gb-sxm",
    "AMD MI250X (1 GCD)": "mi250x-gcd",
    # llama.cpp CUDA scoreboard (discussion #15013) and benches/dgx-spark.md
    "NVIDIA RTX PRO 6000 Blackwell": "rtx-pro-6000-blackwell", "NVIDIA GeForce RTX 5090 32GB": "rtx-5090",
    "NVIDIA GeForce RTX 5080 16GB": "rtx-5080", "NVIDIA GeForce RTX 5070 Ti 16GB": "rtx-5070-ti",
    "NVIDIA GeForce RTX 5060 Ti (memory size not stated)": "rtx-5060-ti-16gb",
    "NVIDIA H100 80GB (variant not stated)": "h100-sxm", "NVIDIA A100 80GB (variant not stated)": "a100-80gb-sxm",
    "NVIDIA DGX Spark (GB10)": "dgx-spark",
    # llama.cpp pull-request benchmarks (#15451, #20586): the GPU names as the threads print them
    "NVIDIA GeForce RTX 3080 Ti": "rtx-3080-ti", "RTX 3090": "rtx-3090",
    "AMD Ryzen AI Max+ 395 (Radeon 8060S)": "ryzen-ai-max-395",  # Strix Halo: kyuz0's and lhl's llama-bench logs
}
MAPPING_ASSUMPTIONS = {  # hardware and model labels mapped by assumption (listed in the report)
    "NVIDIA A100 (memory variant not stated)": "mapped to a100-80gb-sxm (80 GB implied by the batch sizes; SXM assumed)",
    "NVIDIA A100-SXM 80GB (power-limited 330 W)": "mapped to a100-80gb-sxm at datasheet peaks (330 W cap ignored)",
    "NVIDIA RTX PRO 6000 Blackwell": "mapped to rtx-pro-6000-blackwell (Workstation / Max-Q edition not stated)",
    "NVIDIA GeForce RTX 5060 Ti (memory size not stated)": "mapped to rtx-5060-ti-16gb (the 8 GB card has the same "
                                                           "GPU and 448 GB/s; the 3.6 GiB model fits either)",
    "NVIDIA H100 80GB (variant not stated)": "mapped to h100-sxm (SXM / PCIe not stated)",
    "NVIDIA A100 80GB (variant not stated)": "mapped to a100-80gb-sxm (SXM / PCIe not stated)",
    "Qwen3-Coder-30B-A3B-Instruct (MoE, ~3.3B active)": "mapped to qwen3-30b-a3b (same layer shapes and experts)",
    "Qwen2.5-Coder-7B": "mapped to qwen2.5-7b (same layer shapes and vocabulary)",
    "not stated (FP8 table)": "KV cache dtype of TRT-LLM FP8 rows that do not state it (v0.9.0 Mixtral-8x7B, H200 "
                              "blogs v0.5.0 / v0.7a): fp8 assumed (the perf docs' FP8 build configs of that time set "
                              "FP8 KV cache next to FP8 weights: --fp8_kv_cache in v0.6.1, kv_cache_quant_algo in v0.9.0)",
    "framework labels": "matched case-insensitively (data.RUNTIMES, serving_rows.RUNTIMES); Ollama, "
                        "llama-cpp-python and KoboldCpp take the llama.cpp profile (they run llama.cpp's ggml "
                        "kernels), TabbyAPI ExLlamaV2's; labels the tables do not list resolve through labels.py",
}

MODEL_IDS: dict[str, str] = {
    "LLaMA-2-7B (llama.cpp 'LLaMA 7B v2')": "llama-2-7b", "Llama-2-7B": "llama-2-7b", "Llama-2-70B": "llama-2-70b",
    "Llama-2-13B": "llama-2-13b",  # TRT-LLM H200 launch blog 'llama_13b' ("Llama2-13B" in its title)
    "Meta-Llama-3-8B": "llama-3-8b", "Meta-Llama-3-70B": "llama-3-70b",
    "Llama-3.1-8B": "llama-3.1-8b", "Llama-3.1-70B": "llama-3.1-70b", "Llama-3.1-405B": "llama-3.1-405b",
    "GPT-J-6B": "gpt-j-6b", "Mistral-7B-v0.1": "mistral-7b", "Falcon-180B": "falcon-180b",
    "Mixtral-8x7B-v0.1 (MoE, ~12.9B active)": "mixtral-8x7b",
    "gpt-oss-20b (MoE, ~3.6B active)": "gpt-oss-20b", "gpt-oss-120b (MoE, ~5.1B active)": "gpt-oss-120b",
    "Qwen3-Coder-30B-A3B-Instruct (MoE, ~3.3B active)": "qwen3-30b-a3b", "Qwen2.5-Coder-7B": "qwen2.5-7b",
    "gemma-3-4b-it (QAT)": "gemma-3-4b",
}

PUBLISHED_BASE_FORMAT = "bf16"  # the other tensors of a checkpoint whose label names its experts' format
# engines that run their own re-quantized files rather than the published checkpoint: llama.cpp's MXFP4_MOE GGUFs
# keep the experts in MXFP4 and quantize the other tensors (Q8_0 in llama.cpp's quantizer for that file type: the
# ggml-org gpt-oss-20b GGUF's 12.1 GB = ~10.1 GB of experts at 4.25 bits + ~1.9 GB at 8.5): the planner's mxfp4_moe
OWN_FILE_ENGINES = frozenset({"llamacpp"})
# the layout of an OWN_FILE_ENGINES file whose label names the experts' format: llama.cpp's gpt-oss GGUFs are
# MXFP4_MOE files ('gpt-oss 20B MXFP4 MoE': experts MXFP4, every other tensor Q8_0; src/llama-quant.cpp)
OWN_FILE_LAYOUT = {"mxfp4": "mxfp4_moe"}


def published_layout(model: str | None, fmt: str | None, runtime: str | None = None) -> str | None:
    """The planner format of a row whose format label names the format a catalog model publishes its routed experts
    in: gpt-oss's 'mxfp4' rows of a serving engine mean the published checkpoint, experts in MXFP4 and every other
    tensor (attention, router, embeddings, LM head) in bf16 (data/measured_public.md: "the other tensors are higher
    precision"), which is the planner's 'bf16' for that model (ops.expert_bytes_per_weight keeps its experts in
    MXFP4: 5.0 GB read per gpt-oss-120b token, not the 3.6 GB of every tensor in MXFP4). Rows of OWN_FILE_ENGINES
    take the layout of their own files (OWN_FILE_LAYOUT: llama.cpp's MXFP4_MOE, the others Q8_0); every other row
    keeps its format."""
    if model is None or fmt is None:
        return fmt
    from ..architecture import load_model
    from ..errors import PlannerError
    try:
        own = load_model(model).expert_weight_format
    except PlannerError:
        return fmt
    if own is None or own != fmt:
        return fmt
    return OWN_FILE_LAYOUT.get(fmt, fmt) if runtime in OWN_FILE_ENGINES else PUBLISHED_BASE_FORMAT


def planner_format(label) -> str | None:
    """The planner's weight format for a data file's label: any name or alias the planner reads
    (planner.quantization.weight_format, case-insensitive: f16, int4_g32, Q5_K_M, IQ4_XS, exl2_4.0bpw, ...); None
    if none."""
    from ..errors import PlannerError
    from ..quantization import weight_format

    if not isinstance(label, str):
        return None
    try:
        return weight_format(label.strip()).name
    except PlannerError:
        return None


KV_DTYPES = {"f16": "fp16", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8",
             # TRT-LLM FP8 rows with no stated KV dtype (v0.9.0 Mixtral, H200 blogs): see MAPPING_ASSUMPTIONS
             "not stated (FP8 table)": "fp8"}

# runtime id (hardware_specs/runtimes/<id>.yaml) from the source's framework label
# (regex, case-insensitive, on the framework label; the first that matches). Ollama, llama-cpp-python and KoboldCpp
# run llama.cpp's ggml kernels (Ollama vendors ggml; the others bind or fork llama.cpp): the llama.cpp profile.
RUNTIMES = ((r"llama[.-]?cpp|\bollama\b|koboldcpp", "llamacpp"), (r"tensorrt-llm|\btrt-?llm\b", "trtllm"),
            (r"gpt-fast", "gpt-fast"))

# what the planner predicts for each public metric (serving_rows.py documents the kinds)
KINDS = {"decode_tok_s_per_seq": "decode_rate", "prefill_tok_s": "prefill_rate", "ttft_ms": "ttft",
         "throughput_tok_s": "throughput"}
REGIME_NAMES = ("decode_b1", "decode_batched", "prefill", "e2e")
# profile interval key (planner.runtimes.Regime) of each reporting regime
INTERVAL_KEY = {"decode_b1": "decode", "decode_batched": "throughput", "prefill": "prefill", "e2e": "throughput"}


def interval_keys(df):
    """Profile interval key of each row: INTERVAL_KEY of its regime, except that a whole-request rate (kind
    `throughput`: output tokens over the time of the whole request, its prefill included) is a `throughput` figure
    at any batch, as an end-to-end latency is: at batch 1 it is not a per-token decode time (dstack's batch-1 vLLM
    runs: 150 tokens after a 128k-token prompt whose prefill takes 98% of the time). Frames without a `kind`
    column key by regime alone."""
    import numpy as np

    kinds = df["kind"] if "kind" in df else [""] * len(df)
    return np.array(["throughput" if k == "throughput" else INTERVAL_KEY[r] for r, k in zip(df["regime"], kinds)],
                    dtype=object)


# TTFT modes of runs through a server under load (serving_rows.py): N requests sent at once (queue, burst) or kept
# queued (steady). Their figures carry the engine's admission and interleaving besides its step times, so their
# ranges are their own (the '_served' intervals, runtimes.SERVED_SUFFIX); a lone request (single) and a static batch
# (batch) time fixed-shape steps.
LOADED_TTFT_MODES = ("queue", "steady", "burst")


def served_under_load(df):
    """Per row: measured through a server under load (ttft_mode in LOADED_TTFT_MODES); all False for a frame
    without a `ttft_mode` column."""
    import numpy as np

    if "ttft_mode" not in df:
        return np.zeros(len(df), dtype=bool)
    return df["ttft_mode"].isin(LOADED_TTFT_MODES).to_numpy(dtype=bool)


def regime_of(kind: str, batch: int) -> str:
    """Reporting regime: decode at batch 1, batched decode / throughput, prefill (prefill tok/s, TTFT), end-to-end
    latency of static batches (the issue's target classes)."""
    if kind in ("prefill_rate", "ttft"):
        return "prefill"
    if kind == "e2e":
        return "e2e"
    return "decode_b1" if batch == 1 else "decode_batched"

LLAMACPP_UBATCH = 512       # llama-bench n_ubatch default, where a row's notes state no `n_ubatch=N`
# benchmark tools whose batch is one token sequence repeated, so that an MoE layer's experts are those of one sequence
# (planner.ops.step_ops identical_sequences): TensorRT-LLM's gptSessionBenchmark fills every prompt with the pad id
# (benchmarks/cpp/gptSessionBenchmark.cpp: `std::vector<int32_t> inputsHost(batchSize * maxInputLength, padId)`)
# and decodes greedily (topK 1), so all B sequences generate the same tokens.
IDENTICAL_SEQUENCE_TOOLS = ("gptSessionBenchmark",)
GPT_FAST_PROMPT = 5         # README: "prompt ~5 tokens"
GPT_FAST_OUTPUT = 100       # generate.py default max_new_tokens (the README does not state it)

# Published values the data's own caveats call anomalous (measured_public.md, xiongjiedai source): kept in every
# table, left out of fitting and listed apart in the report. Matched by (hardware, model, format, metric).
ANOMALOUS = {
    ("NVIDIA A100 SXM 80GB", "Meta-Llama-3-8B", "f16", "prefill_tok_s"):
        "A100 SXM 8B F16 pp 603-1323 tok/s (below the PCIe card and below Q4_K_M on the same GPU)",
    ("NVIDIA L40S 48GB", "Meta-Llama-3-8B", "f16", "prefill_tok_s"): "L40S 8B F16 pp lower than Q4_K_M",
    ("NVIDIA A40 48GB", "Meta-Llama-3-70B", "q4_k_m", "prefill_tok_s"): "A40 70B pp rising with prompt length",
}


def _tp(row) -> int:
    """Tensor-parallel degree: 'Nx' in the hardware label (gpt-fast) or 'TP=N' in the notes (TRT-LLM)."""
    m = re.match(r"^(\d+)x ", str(row["hardware"]))
    if m:
        return int(m.group(1))
    m = re.search(r"TP=(\d+)", str(row["notes"]))
    return int(m.group(1)) if m else 1


def _llamacpp_settings(notes: str) -> tuple[int, bool, int]:
    """(n_ubatch, flash attention, depth) of a llama-bench row from its notes: `n_ubatch=N`, `fa=0|1`, `depth=D`
    (measured_public.md). Unstated: n_ubatch 512 and no flash attention (llama-bench defaults of the May 2024 and
    Nov 2023 builds; -fa landed later and was off by default), depth 0."""
    ub = re.search(r"n_ubatch=(\d+)", notes)
    fa = re.search(r"\bfa=([01])\b", notes)
    depth = re.search(r"\bdepth=(\d+)", notes)
    return (int(ub.group(1)) if ub else LLAMACPP_UBATCH, bool(fa and fa.group(1) == "1"),
            int(depth.group(1)) if depth else 0)


def _runtime(framework) -> str | None:
    """The runtime profile id of a llama.cpp / TensorRT-LLM / gpt-fast framework label (RUNTIMES), or None."""
    return next((rid for p, rid in RUNTIMES if re.search(p, str(framework), re.I)), None)


def load_rows(path: str | Path = DATA_PATH, serving_path: str | Path | None = None):
    """(mapped, unmapped) DataFrames over measured_public.csv and measured_serving.csv (serving_rows.py). mapped has
    one row per mappable published number with the planner inputs; unmapped keeps the source columns plus `file`
    and `reason`. Their lengths add up to the files' row counts."""
    import pandas as pd

    raw = pd.read_csv(path)
    raw.insert(0, "row", range(len(raw)))
    mapped, unmapped = map_public_rows(raw, Path(path).name)
    from .serving_rows import SERVING_PATH, load_serving_rows

    m2, u2 = load_serving_rows(serving_path or SERVING_PATH)
    return rows_frame(mapped + m2), pd.DataFrame(unmapped + u2)


def rows_frame(mapped: list[dict]):
    """The mapped records as one frame with each row's regime, multi-GPU flag and served-under-load flag."""
    import pandas as pd

    df = pd.DataFrame(mapped)
    df["regime"] = [regime_of(k, b) for k, b in zip(df["kind"], df["batch"])]
    df["multi_gpu"] = df["tp"] > 1
    df["served"] = served_under_load(df)
    return df


def map_public_rows(raw, file_name: str):
    """(mapped, unmapped) records of a frame in measured_public.csv's schema with a `row` column."""
    import pandas as pd

    from ..architecture import list_model_ids
    from ..hardware import list_hardware_ids

    hw_known, models_known = set(list_hardware_ids()), set(list_model_ids())
    mapped, unmapped = [], []
    for r in raw.to_dict("records"):
        tp = _tp(r)
        hw, hw_reason = HARDWARE_IDS.get(re.sub(r"^\d+x ", "", r["hardware"])), None
        if hw is None:  # a label the table does not list: the catalog's own names (labels.py)
            hw, hw_reason = hardware_id(r["hardware"], hw_known)
        model = MODEL_IDS.get(r["model"]) or model_id(r["model"], models_known)
        runtime = _runtime(r["framework"])
        reason = None
        if hw is None or hw not in hw_known:
            reason = hw_reason or f"hardware '{r['hardware']}' has no catalog id"
        elif model is None or model not in models_known:
            reason = f"model '{r['model']}' has no catalog id"
        elif planner_format(r["weight_format"]) is None or r["kv_dtype"] not in KV_DTYPES:
            reason = f"format {r['weight_format']}/{r['kv_dtype']} has no planner equivalent"
        elif runtime is None:
            reason = f"framework '{r['framework']}' has no runtime profile"
        elif r["metric"] not in KINDS:
            reason = f"metric {r['metric']} is not modelled"
        elif r["metric"] == "throughput_tok_s" and pd.isna(r["batch"]):
            reason = "throughput row without a batch size"
        if reason:
            unmapped.append({**r, "file": file_name, "reason": reason})
            continue
        metric = r["metric"]
        batch = int(r["batch"]) if not pd.isna(r["batch"]) else 1
        if runtime == "gpt-fast":
            prompt, output = GPT_FAST_PROMPT, GPT_FAST_OUTPUT
        else:
            prompt = int(r["input_len"]) if not pd.isna(r["input_len"]) else 0
            output = int(r["output_len"]) if not pd.isna(r["output_len"]) else 0
        anomaly = ANOMALOUS.get((r["hardware"], r["model"], r["weight_format"], metric))
        ubatch, fa, depth = _llamacpp_settings(str(r["notes"])) if runtime == "llamacpp" else (0, True, 0)
        mapped.append({
            "file": file_name, "kind": KINDS[metric], "ttft_mode": "batch",
            "work_div": tp if metric == "throughput_tok_s" else 1,  # TRT-LLM prints tok/s per GPU
            "row": r["row"], "source": r["source_id"], "hardware_label": r["hardware"], "hardware": hw,
            "model": model, "weights": published_layout(model, planner_format(r["weight_format"]), runtime),
            "kv_dtype": KV_DTYPES[r["kv_dtype"]],
            "runtime": runtime, "metric": metric, "batch": batch, "prompt": prompt,
            "output": output, "measured": float(r["value"]),
            # TRT-LLM and gpt-fast use fused attention; llama-bench rows say theirs (_llamacpp_settings)
            "flash_attention": fa, "ubatch": ubatch, "depth": depth,
            "anomalous": anomaly or "", "tp": tp,
            "kv_per_query_head": decode_kernel_per_query_head(runtime, r["framework"], r["source_id"], model,
                                                              prompt + output),
            "identical_sequences": any(t in str(r["framework"]) for t in IDENTICAL_SEQUENCE_TOOLS),
        })
    return mapped, unmapped
