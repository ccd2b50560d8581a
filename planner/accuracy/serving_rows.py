"""Published serving measurements (data/measured_serving.csv) -> planner workloads, one row per published number.

Each row either maps to a workload the planner can time or is listed with the reason it cannot (every row is
accounted for). The tables below are explicit so a reader can check each against the source labels; the data
file's own notes (data/measured_serving.md) say what each source measured.

Metrics (the value is converted to ms for latencies, tok/s for rates; `kind` says what the planner predicts):
  ttft_ms / ttft_s           kind ttft. How the first tokens were produced depends on the run (`ttft_mode`):
                             batch   static batch started together (LMDeploy profile_generation): one prefill step
                                     of B prompts of P tokens (TurboMind: of P - 1 tokens and one decode step of B,
                                     predict.first_token_steps);
                             queue   N requests sent at once to a server (dstack): the N x P prompt tokens run in
                                     order in k = ceil(N P / T) prefill steps (T = PREFILL_TOKENS_PER_STEP) and
                                     request i gets its first token when the step holding its last prompt token,
                                     s_i = ceil(i P / T), ends: mean TTFT = t(prefill N x P) x mean_i(s_i) / k
                                     (predict.queue_first_token_share; (k + 1)/(2k) when T is a multiple of P, 1 for
                                     a lone request, however many steps its prompt takes).
                                     A `vllm bench serve --request-rate inf --max-concurrency N` run with fixed
                                     lengths (random or sonnet dataset, --ignore-eos) is a sequence of such waves:
                                     the N requests start together, have the same lengths, so finish together, and
                                     the next N start together (the H200 dashboard run: 640 prompts at concurrency
                                     64 in 71.1 s = 10 waves of TTFT 0.33 s + 1,023 steps of 6.6 ms);
                             single  steady serving at a concurrency limit (vllm bench serve --max-concurrency): a new
                                     request's prompt is prefilled alone (the others only decode): t(prefill 1 x P).
                             burst   every request sent at once with no concurrency limit (vllm bench serve's default
                                     --request-rate inf; the framework label says "all prompts at once"): the engine
                                     admits what its KV pool and running limit allow and the run lasts until its
                                     longest request ends, so the serving simulator times it (bursts.py), for its
                                     mean TTFT, mean TPOT and throughput, in `planner accuracy --data` only (the fit
                                     times fixed-shape steps per row: load_serving_rows lists bursts unmapped).
  tpot_ms / tpot_s / itl_ms  kind tpot: one decode step of the batch B at the mean context P + O/2. In `queue` runs the
                             prefills that run after a request's first token stall a mean TPOT: + t(prefill N x P) x
                             (1 - mean_i(s_i) / k) / (O - 1) (vLLM 0.6 and TGI schedule waiting prefills before
                             decodes); nothing for a lone request, nor for a median ITL (itl_ms), which is one
                             decode step (the few stalled steps fall outside the median).
  e2e_latency_ms             kind e2e: one static batch, prefill of B x P then O - 1 decode steps (benchmark_latency.py).
  throughput_tok_s           kind throughput: output tokens / time of one static batch (prefill of B x P then O - 1
                             decode steps), B x O tokens. A server at a concurrency limit B in steady state does the
                             same work per cycle (B prefills and O decode steps of B sequences), so the formula
                             holds for `single` runs too. Scope from `unit`: "output tok/s total" is for the whole
                             GPU set (no division by TP). Requests sent at once with unfixed output lengths
                             (dstack: mean ~55 of at most 150 tokens) are not mapped at N > 1: the run lasts until
                             its longest request ends, and the source gives only the mean length (a 32-request TGI
                             run: 1,685 tokens in 8.09 s, where mean TTFT + 52 x mean TPOT = 6.3 s).
Data parallelism ('TP4 DP2' in hardware_detail: vllm serve --data-parallel-size 2, one endpoint): the B requests
split evenly over the replicas, so every step is one replica's at B / DP, and a throughput row, printed for the
whole GPU set, counts all replicas' tokens (work_div = 1 / DP).
  decode_tok_s_per_seq       kind decode_rate: batch-1 decode tok/s (ExLlamaV2; prompt and output not stated: a
                             128-token prompt and 128 new tokens assumed).
KV capacity (LMDeploy v0.1.0 profile_generation, lmdeploy_a100_fp16_v0.1.0; InternLM/lmdeploy @379a2d5a): B client
threads each run ROUNDS_LMDEPLOY requests one after another (benchmark/benchmark.sh: --test-round 3) against an
engine whose KV pool holds at most `cache_tokens` tokens: TurboMind's cache_max_entry_count, a block count when >= 1
(src/turbomind/models/llama/BlockManager.cc), set per model in benchmark/config/*.ini (LMDEPLOY_CACHE_BLOCKS), x
128 tokens per block (cache_block_seq_len), and never more than the row's own mem(GB) (profile_generation: the GiB
the run added on each GPU, nvml) less the weights. Blocks are taken as sequences grow, so a running sequence holds
P + O/2 tokens on average and the engine runs n = min(B, floor(pool tokens / (P + O/2))) at once; the other threads
wait (predict.closed_loop_waits). The rows record `mem_gib`, `cache_tokens` and `rounds`.
Request-throughput runs (LMDeploy profile_throughput, `steady`): N ShareGPT prompts submitted at once to an engine
that runs at most B (max_batch_size) at a time. While requests wait, B run in steady state: every finished request
is replaced, so each cycle of O decode steps admits B new prompts. TurboMind admits requests every iteration and
runs their prompt tokens in the same forward as the decode tokens (LlamaBatch.cc v0.1.0: step_length 1, mixed
mini-batches), so a cycle costs one prefill of B x P tokens and O - 1 decode steps of B, the work of one static batch
(predict.steps_of_row). The prompt and output lengths are the means the run printed (its totals,
steady_lengths): O = output tok/s / requests/s and P = (total tok/s - output tok/s) / requests/s, the output tok/s
from the row itself or from its throughput row (the `tpot_s` rows print only requests/s and the total). Kinds:
throughput = B x O tokens per cycle; tpot (the 50% column) = one decode step of B at P + O/2 plus the cycle's
prefill spread over its O - 1 steps: the mean per-token latency, an upper bound on the published median (the stalls
skew the distribution up: 75/95/99% in the notes). Not modelled, and all make the runs slower than predicted (the
throughput rows are 10-40% optimistic): the spread of the lengths (a long output stays longer in the batch, so the
running sequences hold more context than P + O/2: P + O for exponential-like outputs), the host work of admitting
requests every iteration, the ramp-up and drain of the run (B of N requests each), KV capacity (the run prints no
pool).
Offline ShareGPT runs (SGLang v0.3.0 vs vLLM 0.6.0, sglang_benchmark_vllm060_readme_2024-09: 5,000 prompts sent at
once, `steady` too): O = the printed output tok/s / req/s, P = SHAREGPT_MEAN_PROMPT (the source prints no input total;
the same bench_serving sample's mean from the maintainers' rerun), and B = the sequences the engine keeps in flight:
as many as its KV pool holds at P + O/2 tokens each under the run's memory fraction (planner.memory.max_batch), at
most vLLM 0.6's max_num_seqs 256 (offline_running).
Rows with variable lengths (ShareGPT) at a request rate are a simulator workload, not a fixed-shape step, and are
listed unmapped; so are expert-parallel multi-node runs and devices, models or formats without a catalog entry.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from ..hardware import REPO_ROOT
from .decode_kernels import decode_kernel_per_query_head
from .data import _runtime as public_runtime
from .data import planner_format, published_layout
from .labels import hardware_id, model_id

SERVING_PATH = REPO_ROOT / "data" / "measured_serving.csv"

PREFILL_TOKENS_PER_STEP = 8192  # prompt tokens per prefill step of a server (vLLM/TGI default token budget order)
SERVER_MAX_SEQS = 256          # vLLM's default max_num_seqs (and TGI's batch limit order): more requests queue in waves
ROUNDS_LMDEPLOY = 3             # benchmark/benchmark.sh (v0.1.0): profile_generation.py --test-round 3
LMDEPLOY_BLOCK_TOKENS = 128     # lmdeploy/turbomind/deploy/target_model/base.py cache_block_seq_len (v0.1.0)
LMDEPLOY_CACHE_BLOCKS = {       # benchmark/config/{llama_7b,llama_13b,llama_70b,internlm_20b}.ini cache_max_entry_count
    "llama-2-7b": 1000, "llama-2-13b": 500, "llama-2-70b": 4000, "internlm-20b": 700}
CAPACITY_SOURCES = ("lmdeploy_a100_fp16_v0.1.0",)
EXLLAMA_PROMPT = 128            # not stated by the README: assumed
EXLLAMA_OUTPUT = 128

HARDWARE_IDS = {
    "AMD Instinct MI300X": "mi300x",
    "NVIDIA H100": "h100-sxm",          # "variant not stated": the SXM part (cloud H100 with FA3) assumed
    "NVIDIA H100 80GB": "h100-sxm",     # 4 x H100 80G with TP4: SXM (NVLink) assumed
    "NVIDIA A100 80GB": "a100-80gb-sxm",
    "NVIDIA A100-80G": "a100-80gb-sxm",  # LMDeploy's "A100-80G(x8)" box: SXM assumed
    "NVIDIA A100-SXM4-80GB": "a100-80gb-sxm",  # as the vLLM perf benchmark names the GPU
    "NVIDIA A100": "a100-80gb-sxm",     # GPUStack's lab: Qwen3-32B bf16 (65.5 GB) on one, so the 80 GB part
    "NVIDIA H100 (8xH100 node)": "h100-sxm",  # the vLLM perf benchmark's '8xH100' node: SXM (NVLink) assumed
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA GeForce RTX 3090 Ti": "rtx-3090-ti",
    "NVIDIA H200": "h200-sxm",
    "NVIDIA DGX Spark (GB10)": "dgx-spark",
    "Intel Arc Pro B60": "arc-pro-b60",  # TP ranks -> cards not stated (measured_serving.md); one card per rank assumed
}
ASSUMPTIONS = {
    "NVIDIA H100": "mapped to h100-sxm (variant not stated)",
    "NVIDIA H100 80GB": "mapped to h100-sxm (TP4 over NVLink implies SXM)",
    "NVIDIA A100-80G": "mapped to a100-80gb-sxm (8-GPU box)",
    "NVIDIA H100 (8xH100 node)": "mapped to h100-sxm (an 8-GPU H100 node: SXM assumed)",
    "NVIDIA A100": ("mapped to a100-80gb-sxm (GPUStack's lab serves Qwen3-32B bf16, 65.5 GB of weights, on one: the "
                    "80 GB part; SXM as its other A100 documents state)"),
    "LLaMA-7B": "mapped to llama-2-7b (same layer shapes: 32 x 4096, MLP 11008, vocab 32000)",
    "LLaMA-13B": "mapped to llama-2-13b (same layer shapes: 40 x 5120, MLP 13824, vocab 32000)",
    "ExLlamaV2": f"prompt {EXLLAMA_PROMPT} and {EXLLAMA_OUTPUT} new tokens assumed (not stated)",
    "kv_dtype blank/auto": "the activation dtype (fp16 for fp16 weights, else bf16)",
}

MODEL_PATTERNS = (  # (regex on the source's model label, catalog id)
    (r"^Llama-3\.1-405B", "llama-3.1-405b"), (r"^Llama-3\.1-70B", "llama-3.1-70b"),
    (r"^Llama-3\.1-8B", "llama-3.1-8b"), (r"^Llama-2-70B", "llama-2-70b"), (r"^Llama-2-13B", "llama-2-13b"),
    (r"^Llama-2-7B", "llama-2-7b"), (r"^LLaMA-7B$", "llama-2-7b"), (r"^LLaMA-13B$", "llama-2-13b"),
    (r"^gpt-oss-20b", "gpt-oss-20b"), (r"^gpt-oss-120b", "gpt-oss-120b"), (r"^InternLM-20B", "internlm-20b"),
    (r"^DeepSeek-V3", "deepseek-v3"), (r"^(deepseek-ai/)?DeepSeek-R1", "deepseek-r1"), (r"^LLaMA-33B", "llama-33b"),
    (r"^OpenLLaMA-3B", "openllama-3b"),
    (r"^CodeLlama-34B", "codellama-34b"), (r"^TinyLlama-1\.1B", "tinyllama-1.1b"),
    (r"^NVIDIA-Nemotron-3-Super", "nemotron-3-super-120b"), (r"^Meta-Llama-3-70B", "llama-3-70b"),
    (r"^Mixtral-8x7B", "mixtral-8x7b"),
)
FORMAT_PATTERNS = ((r"^fp8", "fp8"), (r"^bf16$", "bf16"), (r"^fp16$", "fp16"), (r"^mxfp4", "mxfp4"),
                   (r"^nvfp4$", "nvfp4"), (r"^gptq_int4_g128", "gptq-int4"))
KV_PATTERNS = ((r"^fp8", "fp8"), (r"^bf16$", "bf16"), (r"^fp16$", "fp16"))
# (regex, case-insensitive, on the framework label; the first that matches); TabbyAPI serves ExLlamaV2
# (trtllm-serve, TensorRT-LLM's OpenAI server, before vllm: a TensorRT-LLM or SGLang server measured with `vllm bench
# serve` names both; `trtllm-bench ... throughput` and `gptManagerBenchmark --type IFB` queue the requests of their
# dataset into the in-flight batching executor, server runs too, as is Triton's TensorRT-LLM backend; gptSessionBenchmark
# rows are static batches, data.py's)
RUNTIMES = ((r"\btgi\b|text-generation-inference", "tgi"), (r"lmdeploy|turbomind", "lmdeploy"), (r"sglang", "sglang"),
            (r"trtllm-serve|trtllm-bench\b.*\bthroughput\b|gptManagerBenchmark\b.*--type IFB"
             r"|Triton TensorRT-LLM backend|tensorrtllm_backend", "trtllm"),
            (r"vllm", "vllm"), (r"exllamav2|tabbyapi", "exllamav2"), (r"deepspeed|\bmii\b|fastgen", "deepspeed-mii"))


def serving_runtime(framework) -> str | None:
    """The runtime profile id of a serving engine's framework label (RUNTIMES), or None."""
    return next((rid for p, rid in RUNTIMES if re.search(p, str(framework), re.I)), None)
METRICS = {"ttft_ms": ("ttft", 1.0), "ttft_s": ("ttft", 1e3), "tpot_ms": ("tpot", 1.0), "tpot_s": ("tpot", 1e3),
           "itl_ms": ("tpot", 1.0), "itl_mean_ms": ("tpot", 1.0), "e2e_latency_ms": ("e2e", 1.0),
           "e2e_latency_s": ("e2e", 1e3),
           "throughput_tok_s": ("throughput", 1.0), "decode_tok_s_per_seq": ("decode_rate", 1.0)}
TTFT_MODES = {  # source -> how first tokens were produced (module docstring)
    "lmdeploy_a100_fp16_v0.1.0": "batch", "lmdeploy_a100_fp16_v0.2.0": "batch",
    "rocm_vllm_devdocker_2025-01": "batch", "dstack_tgi_vs_vllm_mi300x_llama405b_2024-10": "queue",
    "rocm_vllm_devdocker_2025-07": "batch",  # benchmark_latency.py: one static batch, all B prompts prefilled together
    "vllm_perf_benchmark_buildkite_2024": "batch",  # benchmark_latency.py too (batch 8 x 32 tokens, 128 out)
    "vllm_blog_fp8_kvcache_2026-04": "single",  # lengths +-15%: the requests fall out of step, one prefill at a time
    "vllm_perf_dashboard_h200_gptoss120b_2026-02": "queue",  # fixed 1024/1024, rate inf, concurrency 64: waves
    "vllm_blog_intel_arc_pro_b60_2025-11": "queue",  # fixed lengths, --request-rate inf, --ignore-eos: waves
    "vllm_blog_dgx_spark_2026-06": "single",
    "exllamav2_readme_2023-09": "single",
    # fixed lengths (random dataset, range ratio 1 / exact lengths), --ignore-eos, closed loop at a concurrency limit:
    # the N requests start, prefill and finish together, so the runs are waves as the H200 dashboard run's
    "dstack_deepseek_r1_mi300x_vs_h200_2025-03": "queue",
    "silybench_qwen3_8b_h100sxm_vllm0.30_2026-09": "queue",
    "scicom_benchmaq_vllm_2026_01": "queue",  # 100 requests at once (--max-concurrency 100 --num-prompts 100): one wave
}


def _match(patterns, label) -> str | None:
    if not isinstance(label, str):
        return None
    return next((v for p, v in patterns if re.search(p, label)), None)


def _tp(detail: str) -> int:
    for pat in (r"TP(\d+)", r"tensor parallel (\d+)", r"^(\d+) x "):
        m = re.search(pat, str(detail))
        if m:
            return int(m.group(1))
    return 1


def _dp_attention(detail: str) -> bool:
    """Whether the row's deployment runs attention data-parallel (SGLang --enable-dp-attention, TensorRT-LLM
    enable_attention_dp): 'dp-attention' or 'DP attention' in hardware_detail."""
    return bool(re.search(r"dp-attention|\bDP attention\b", str(detail), re.I))


def _gpus(detail: str) -> int:
    """The GPU count of hardware_detail's leading 'N x', else its TP degree."""
    m = re.match(r"\s*(\d+) x ", str(detail))
    return int(m.group(1)) if m else _tp(detail)


def _pp(detail: str) -> int:
    """Pipeline stages of the row's deployment ('TP2 PP2': trtllm-bench --pp 2), else 1."""
    m = re.search(r"\bPP(\d+)\b", str(detail))
    return int(m.group(1)) if m else 1


def _dp(detail: str) -> int:
    """Data-parallel replicas behind the row's one endpoint ('TP4 DP2': vllm serve --data-parallel-size 2), else 1."""
    m = re.search(r"\bDP(\d+)\b", str(detail))
    return int(m.group(1)) if m else 1


def _generated_per_request(notes: str, n: int) -> float | None:
    m = re.search(r"(\d+) generated tokens", str(notes))
    return int(m.group(1)) / n if m else None


STEADY_RUN = "Request throughput benchmark (profile_throughput)"  # the notes of LMDeploy's request-throughput rows


def steady_lengths(notes: str, output_tok_s: float | None) -> tuple[float, float] | None:
    """(mean prompt, mean output) tokens per request of a request-throughput run from its printed totals:
    O = output tok/s / requests/s, P = (total (in+out) tok/s - output tok/s) / requests/s; None where a total is
    missing. E.g. LMDeploy v0.1.0 Llama-2-7B at max batch 64: 2562.435 / 10.275 = 249.4 and (5283.547 - 2562.435) /
    10.275 = 264.8."""
    rps = re.search(r"Requests/s ([0-9.]+)", str(notes))
    tot = re.search(r"total \(in\+out\) tok/s ([0-9.]+)", str(notes))
    if not (rps and tot and output_tok_s) or float(rps.group(1)) <= 0:
        return None
    n = float(rps.group(1))
    out = float(output_tok_s)
    return (float(tot.group(1)) - out) / n, out / n


OFFLINE_RUN = "'Offline benchmark results' table"  # the notes of the SGLang-vs-vLLM offline ShareGPT rows
# mean ShareGPT prompt of sglang.bench_serving with a Llama-3 tokenizer (the source prints no input total):
# 453,502 input tokens over 2,000 prompts in the SGLang maintainers' rerun of the same comparison
# (https://github.com/sgl-project/sglang/issues/1639, 2024-10-17; its output mean, 188.2, is within 3% of these runs'
# own 194.3)
SHAREGPT_MEAN_PROMPT = 453_502 / 2_000
OFFLINE_SETTINGS = {  # the engines' memory settings in the runs (measured_serving.md, the rows' framework column)
    "vllm": {"vllm_version": "v0", "gpu_memory_utilization": 0.9, "max_model_len": 4096},  # vLLM 0.6.0 (V0 engine)
    "sglang": {"gpu_memory_utilization": 0.88},                                            # mem_fraction_static
}


def offline_lengths(notes: str) -> tuple[float, float] | None:
    """(mean prompt, mean output) of an offline ShareGPT run (all prompts sent at once): O = output token throughput
    / request throughput, both printed (SGLang v0.3.0 on an A100, Llama-3.1-8B: 4,281.51 / 22.03 = 194.35),
    P = SHAREGPT_MEAN_PROMPT; None for other rows."""
    if OFFLINE_RUN not in str(notes):
        return None
    m = re.search(r"request throughput ([0-9.]+) req/s, output token throughput ([0-9.]+) tok/s", str(notes))
    if not m or float(m.group(1)) <= 0:
        return None
    return SHAREGPT_MEAN_PROMPT, float(m.group(2)) / float(m.group(1))


def offline_running(runtime: str, model: str, weights: str, kv: str, hardware: str, P: int, O: int, tp: int) -> int:
    """Sequences an offline run keeps in flight: as many as the engine's KV pool holds at the mean context a running
    sequence has, P + O/2 (planner.memory.max_batch under the run's settings, the cache split over the TP group), at
    most the engine's running limit (vLLM 0.6: max_num_seqs 256; SGLang sizes its running batch from the pool)."""
    from ..architecture import load_model
    from ..hardware import load_hardware
    from ..memory import EngineSettings, max_batch
    from ..quantization import weight_format
    from ..scheduler_defaults import PLANNER_DEFAULTS
    from ..serving.parallelism import kv_split

    m = load_model(model)
    n = max_batch(m, weight_format(weights), kv, P, max(1, O // 2), load_hardware(hardware), runtime,
                  EngineSettings(**OFFLINE_SETTINGS[runtime]), tp=tp, kv_ways=kv_split(m, tp))
    if runtime == "vllm":
        n = min(n, PLANNER_DEFAULTS.max_num_seqs)
    return max(1, n)


BURST_NOT_FITTED = ("a burst (every request sent at once, no concurrency limit) is timed by the serving simulator "
                    "(planner accuracy --data), not by the per-row step model the fit runs")
BURST_RUN = "all prompts at once"  # framework label of `vllm bench serve --request-rate inf` with no concurrency limit
PACED_RUN = re.compile(r"requests paced at ([0-9.]+) req/s")  # a fixed-rate run (Poisson arrivals) of fixed lengths
# Triton's TensorRT-LLM backend serves from its C++ process (gRPC / HTTP): none of the Python OpenAI frontend whose
# path runtimes.REQUEST_PATH_MS measures for trtllm-serve (40 ms); no figure of its own is measured, so none is added
TRITON_FRONTEND = re.compile(r"Triton TensorRT-LLM backend|tensorrtllm_backend")
SPECULATIVE_RUN = "speculative decoding: "  # the notes of a run with a draft model, MTP or EAGLE (its flags follow)


def logged_pool(notes, clients: int) -> dict:
    """KV capacity of a closed-loop bench-serve run whose engine logged its pool (`kv_cache_tokens=N` in the row's
    notes: vLLM's start-up "GPU KV cache size: N tokens") and that sent `num_prompts=M` requests from `clients`
    users: {"cache_tokens": N, "rounds": M / clients} (predict.kv_concurrency runs min(clients, N // (P + O/2)) at
    once; the other users wait, predict.closed_loop_waits). {} where the notes state no pool. silybench's Qwen3-8B
    bf16 on an H100: 377,024 tokens, so 8,192 + 512-token requests from 64 users run 44 at a time (planner.memory's
    vLLM pool for the same settings: 24,565 blocks of 16 = 393,040 tokens, +4.2%)."""
    pool = re.search(r"kv_cache_tokens=(\d+)", str(notes))
    sent = re.search(r"num_prompts=(\d+)", str(notes))
    if not pool:
        return {}
    return {"cache_tokens": float(pool.group(1)),
            "rounds": max(1, round(int(sent.group(1)) / clients)) if sent else 1}


def _run_key(r: dict) -> tuple:
    return (r["source_id"], r["hardware_detail"], r["model"], r["batch"])


def map_serving_row(r: dict, hw_known: set, models_known: set, run_output_tok_s: dict | None = None,
                    bursts: bool = True) -> tuple[dict | None, str | None]:
    """(mapped record, None) or (None, reason) for one row of measured_serving.csv. run_output_tok_s: output tok/s
    of each request-throughput run (_run_key -> value of its throughput row), for its other metrics; bursts=False:
    a burst is listed with BURST_NOT_FITTED."""
    src, metric = r["source_id"], r["metric"]
    # a serving engine's label, else any engine the public rows name (a user's TensorRT-LLM or llama.cpp TPOT rows)
    runtime = serving_runtime(r["framework"]) or public_runtime(r["framework"])
    hw, hw_reason = HARDWARE_IDS.get(r["hardware"]), None
    if hw is None:  # a label the table does not list: the catalog's own names (labels.py)
        hw, hw_reason = hardware_id(r["hardware"], hw_known)
    model = _match(MODEL_PATTERNS, r["model"]) or model_id(r["model"], models_known)
    # the source's label by pattern, else any format name the planner reads (EXL2 at its bitrate, llama.cpp
    # quants); a bitrate outside EXL2_BITS or an unknown name is listed below as a format without an equivalent
    wf = published_layout(model, _match(FORMAT_PATTERNS, r["weight_format"]) or planner_format(r["weight_format"]),
                          runtime)
    kv_label = r["kv_dtype"]
    kv = _match(KV_PATTERNS, kv_label) if isinstance(kv_label, str) and not kv_label.startswith("auto") else None
    if kv is None and wf is not None:
        kv = "fp16" if wf == "fp16" else "bf16"
    tp = _tp(r["hardware_detail"])
    batch = r["batch"]
    if "EP" in str(r["hardware_detail"]) and "nodes" in str(r["hardware_detail"]):
        return None, ("multi-node expert parallelism with DP attention and PD disaggregation: not a single "
                      "tensor-parallel group (planner/serving/expert_parallel.py is not part of this benchmark)")
    if _pp(r["hardware_detail"]) > 1:
        return None, ("pipeline parallelism (PP > 1 in hardware_detail): the benchmark times one tensor-parallel "
                      "group per replica (planner simulate --pp is not part of this benchmark)")
    dp_attention = _dp_attention(r["hardware_detail"])
    if dp_attention and BURST_RUN not in str(r["framework"]):
        return None, ("data-parallel attention (--enable-dp-attention): each rank runs attention for its own "
                      "requests, not one tensor-parallel group (planner/serving/expert_parallel.py times it only "
                      "for bursts, through the serving simulator)")
    if metric not in METRICS:
        return None, f"metric {metric} ({r['unit']}) is not modelled"
    if SPECULATIVE_RUN in str(r["notes"]):
        return None, ("speculative decoding (draft tokens per step and their acceptance are not recorded): "
                      "planner/serving/speculative.py is not part of this benchmark")
    steady = None
    if STEADY_RUN in str(r["notes"]) and not (isinstance(batch, float) and math.isnan(batch)):
        out = r["value"] if metric == "throughput_tok_s" else (run_output_tok_s or {}).get(_run_key(r))
        steady = steady_lengths(r["notes"], out)
        if steady is None:
            return None, "request-throughput run without the printed totals its mean lengths come from"
    offline = offline_lengths(r["notes"]) if metric == "throughput_tok_s" else None
    if steady is None and offline is None and (isinstance(batch, float) and math.isnan(batch) or (
            metric != "decode_tok_s_per_seq" and isinstance(r["input_len"], float) and math.isnan(r["input_len"]))):
        return None, ("variable prompt/output lengths (ShareGPT) at a request rate or with no fixed batch: a "
                      "simulator workload, not a fixed-shape step")
    if hw is None or hw not in hw_known:
        return None, hw_reason or f"hardware '{r['hardware']}' has no catalog id"
    if model is None or model not in models_known:
        return None, f"model '{r['model']}' has no catalog id ({model or 'no mapping'})"
    if wf is None:
        return None, f"weight format '{r['weight_format']}' has no planner equivalent"
    if runtime is None:
        return None, f"framework '{r['framework']}' has no engine"
    kind, scale = METRICS[metric]
    if offline is not None:
        steady = offline
        batch = offline_running(runtime, model, wf, kv, hw, int(round(offline[0])), int(round(offline[1])), tp)
    # DP attention: every GPU of the group is an engine of its own with B / N of the requests (the simulator times
    # one, expert_parallel.ep_engine); a data-parallel server: B / DP requests per replica
    B, dp = int(batch), (_gpus(r["hardware_detail"]) if dp_attention else _dp(r["hardware_detail"]))
    if dp < 1:
        return None, "hardware_detail: DP0 names no data-parallel replica (DP1, DP2, ... are replica counts)"
    if B % dp and not dp_attention:
        return None, f"{B} requests do not split evenly over {dp} data-parallel replicas"
    # each replica serves its share: the steps are one replica's; throughput rows count all (work_div). Attention-DP
    # ranks take the requests round-robin, and the busiest one (ceil(B / dp)) sets the pace of the all-to-alls
    B = -(-B // dp)
    paced = PACED_RUN.search(str(r["framework"]))
    burst = BURST_RUN in str(r["framework"]) or paced is not None  # both timed by the serving simulator
    if TTFT_MODES.get(src) == "queue" and B > SERVER_MAX_SEQS:
        return None, (f"{B} requests at once exceed the server's default {SERVER_MAX_SEQS} running sequences: they "
                      "run in queued waves (a simulator workload, not one fixed batch)")
    if runtime == "exllamav2":
        P, O = EXLLAMA_PROMPT, EXLLAMA_OUTPUT
    elif steady is not None:
        P, O = max(int(round(steady[0])), 1), max(int(round(steady[1])), 2)
    else:
        P = int(r["input_len"])
        O = r["output_len"]
        if isinstance(O, float) and math.isnan(O):
            if kind == "throughput" and B > 1:
                return None, ("output lengths not fixed: the throughput of requests sent at once is their tokens over "
                              "the duration of the longest request, whose length the source does not give (its mean "
                              "TTFT and TPOT rows are mapped)")
            O = _generated_per_request(r["notes"], B)
            if O is None:
                return None, "output length not stated and no generated-token total in the notes"
        O = max(int(round(O)), 1)
    if kind == "throughput" and "total" not in str(r["unit"]):
        return None, f"throughput scope '{r['unit']}' is not a whole-set total"
    extra = {}
    if burst and not bursts:
        return None, BURST_NOT_FITTED
    if burst:  # timed by the serving simulator in `planner accuracy --data` (module docstring, bursts.py)
        extra = {"lengths": "sharegpt" if re.search(r"dataset: sharegpt", str(r["notes"]), re.I) else "fixed"}
        if dp_attention:  # one attention-DP engine of a group of dp GPUs whose routed experts split dp ways
            extra |= {"parallel": "dp-attention", "ep": dp}
        if paced is not None:  # the requests arrive at that rate (bursts.burst_requests), not at once
            extra |= {"qps": float(paced.group(1)) / dp}
        if TRITON_FRONTEND.search(str(r["framework"])):
            extra |= {"request_path_ms": 0.0}
    mem = re.search(r"mem\(GB\) ([0-9.]+)", str(r["notes"])) if src in CAPACITY_SOURCES else None
    capacity = ({"mem_gib": float(mem.group(1)), "rounds": ROUNDS_LMDEPLOY,
                 "cache_tokens": LMDEPLOY_CACHE_BLOCKS[model] * LMDEPLOY_BLOCK_TOKENS}
                if mem and model in LMDEPLOY_CACHE_BLOCKS else logged_pool(r["notes"], B))
    return {
        **capacity,
        "source": src, "hardware_label": r["hardware"], "hardware": hw, "model": model, "weights": wf,
        "kv_dtype": kv, "runtime": runtime, "metric": metric, "kind": kind, "batch": B, "prompt": P, "output": O,
        "measured": float(r["value"]) * scale, "flash_attention": True, "ubatch": 0, "depth": 0, "anomalous": "",
        "tp": tp,
        **extra,
        "ttft_mode": ("steady" if steady is not None else "burst" if burst else TTFT_MODES.get(src, "single")),
        "work_div": 1 / dp,
        "kv_per_query_head": decode_kernel_per_query_head(runtime, r["framework"], src, model, P + O),
        "identical_sequences": False,  # serving benchmarks send distinct (random or dataset) prompts
    }, None


def load_serving_rows(path: str | Path = SERVING_PATH):
    """(mapped records, unmapped records with `reason`) of measured_serving.csv, `row` = 0-based file row. A burst
    is timed by the serving simulator (`planner accuracy --data`), not by the per-row step model the fit runs, so
    the fit lists it with that reason."""
    import pandas as pd

    return map_serving_rows(pd.read_csv(path), Path(path).name, bursts=False)


def map_serving_rows(raw, file_name: str, rows=None, bursts: bool = True):
    """map_serving_row over a frame in the serving schema; `rows`: the file row number of each (default 0..n-1);
    bursts=False lists bursts as unmapped (load_serving_rows)."""
    from ..architecture import list_model_ids
    from ..hardware import list_hardware_ids

    hw_known, models_known = set(list_hardware_ids()), set(list_model_ids())
    records = raw.to_dict("records")
    run_output = {_run_key(r): r["value"] for r in records
                  if r["metric"] == "throughput_tok_s" and STEADY_RUN in str(r["notes"])}
    mapped, unmapped = [], []
    for i, r in zip(rows if rows is not None else range(len(records)), records):
        rec, reason = map_serving_row(r, hw_known, models_known, run_output, bursts)
        if rec is None:
            unmapped.append({"file": file_name, "row": i, **r, "reason": reason})
        else:
            mapped.append({"file": file_name, "row": i, **rec})
    return mapped, unmapped
