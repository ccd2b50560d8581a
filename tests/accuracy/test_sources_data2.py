"""Sources added on branch data2: every row maps, per-source counts, and values spot-checked against the documents.

Spot checks (values as printed):
  * NVIDIA/TensorRT-LLM docs/source/performance.md @ 250d9c29 ("All data was generated using version 0.9.0"):
    'H200 GPUs (FP8)' Peak Throughput, Mixtral 8x7B, batch 1024, TP 2, 128/128 -> "5,444" out tok/s/GPU;
    'A100 GPUs (FP16)' Low Latency, Falcon 180B, TP 8, input 2048 -> "456.0" ms;
    'L40S GPUs (FP8)' Low Latency, LLaMA 70B, TP 4, input 2048 -> "673.3" ms.
  * same file @ 77d24b5f ("This data has been updated for v0.6.1, unless specified"): 'H100 GPUs (FP8)' Peak
    Throughput, LLaMA 70B, batch 480, TP 4, 128/2048 -> "1,486"; 'A100 GPUs (FP16)' Low Latency (v0.5), Falcon 180B,
    TP 8, input 2048 -> "509".
  * ROCm/vllm docs/dev-docker/README.md @ c15dc3d4 (vLLM 0.9.1), 'Latency Measurements': Llama 3.1 405B FP8 TP8,
    batch 128, 2048/2048 -> "125.471" s; Llama 3.1 70B, batch 1, 128/2048 -> "17.236" s.
  * docs/source/blogs/H200launch.md @ 1555478c: llama_13b, batch 1024, TP 1, 128/128 -> "11,819".
  * docs/source/blogs/Falcon180B-H200.md @ 3c44cb97: Llama-70B, 1 GPU, 128/128 (BS 960) -> "3,803".
"""

from __future__ import annotations

import pandas as pd
import pytest

from planner.accuracy.data import DATA_PATH, load_rows
from planner.accuracy.serving_rows import SERVING_PATH

NEW = {  # source -> (file, rows, rows with TP > 1)
    "trtllm_perf_doc_v0.9.0": ("measured_public.csv", 144, 69),
    "trtllm_perf_doc_v0.6.1": ("measured_public.csv", 57, 24),
    "trtllm_blog_h200launch_v0.5.0": ("measured_public.csv", 7, 1),
    "trtllm_blog_falcon180b_h200_v0.7a": ("measured_public.csv", 3, 0),
    "rocm_vllm_devdocker_2025-07": ("measured_serving.csv", 32, 32),
    "silybench_qwen3_8b_h100sxm_vllm0.30_2026-09": ("measured_serving.csv", 48, 0),
    "geerlingguy_beowulf17_m3ultra_single_node_2025-12": ("measured_public.csv", 9, 0),
    "geerlingguy_aibench48_m1ultra64_2026-02": ("measured_public.csv", 4, 0),
    "kyuz0_strixhalo_toolboxes_rocm_2025-2026": ("measured_public.csv", 48, 0),
    "lhl_strixhalo_testing_llamabench_2025-08": ("measured_public.csv", 16, 0),
}


@pytest.fixture(scope="module")
def rows():
    return load_rows()


def test_every_row_of_the_new_sources_maps(rows):
    mapped, unmapped = rows
    raw = pd.concat([pd.read_csv(DATA_PATH), pd.read_csv(SERVING_PATH)])
    for src, (file, n, n_tp) in NEW.items():
        assert (raw["source_id"] == src).sum() == n, src
        m = mapped[mapped["source"] == src]
        assert len(m) == n and set(m["file"]) == {file}, src
        assert (m["tp"] > 1).sum() == n_tp, src
        assert not (unmapped.get("source_id", pd.Series(dtype=str)) == src).any(), src


def test_new_rows_map_to_the_expected_workloads(rows):
    mapped, _ = rows
    trt = mapped[mapped["source"].str.startswith("trtllm_")]
    assert set(trt["runtime"]) == {"trtllm"}
    assert set(trt["kind"]) == {"throughput", "ttft"}
    thr = trt[trt["kind"] == "throughput"]
    assert (thr["work_div"] == thr["tp"]).all()  # printed per GPU
    v09 = mapped[mapped["source"] == "trtllm_perf_doc_v0.9.0"]
    assert v09.groupby("hardware").size().to_dict() == {"a100-80gb-sxm": 36, "h100-sxm": 36, "h200-sxm": 36,
                                                        "l40s": 36}
    assert (v09["model"] == "mixtral-8x7b").sum() == 24
    assert set(v09.loc[v09["hardware"] == "a100-80gb-sxm", "kv_dtype"]) <= {"fp16", "bf16"}
    rocm = mapped[mapped["source"] == "rocm_vllm_devdocker_2025-07"]
    assert set(rocm["runtime"]) == {"vllm"} and set(rocm["kind"]) == {"e2e"} and set(rocm["tp"]) == {8}
    assert set(rocm["ttft_mode"]) == {"batch"} and set(rocm["hardware"]) == {"mi300x"}
    mac = mapped[mapped["source"].str.startswith("geerlingguy_")]
    assert set(mac["runtime"]) == {"llamacpp"} and set(mac["weights"]) == {"q4_k_m"}
    assert set(mac["hardware"]) == {"apple-m3-ultra", "apple-m1-ultra"}
    # fa=1 printed for the M3 Ultra runs; the M1 Ultra table prints no fa column (llama-bench's default: off)
    assert mac.groupby("hardware")["flash_attention"].agg(set).to_dict() == {"apple-m3-ultra": {True},
                                                                            "apple-m1-ultra": {False}}
    strix = mapped[mapped["hardware"] == "ryzen-ai-max-395"]
    assert set(strix["runtime"]) == {"llamacpp"} and len(strix) == 64
    assert strix.groupby("source")["flash_attention"].sum().to_dict() == {  # -fa 1 runs; kyuz0's b6609 runs both
        "kyuz0_strixhalo_toolboxes_rocm_2025-2026": 34, "lhl_strixhalo_testing_llamabench_2025-08": 16}
    sily = mapped[mapped["source"] == "silybench_qwen3_8b_h100sxm_vllm0.30_2026-09"]
    assert set(sily["runtime"]) == {"vllm"} and set(sily["hardware"]) == {"h100-sxm"}
    assert set(sily["model"]) == {"qwen3-8b"} and set(sily["weights"]) == {"bf16", "fp8"}
    assert set(sily["kv_dtype"]) == {"bf16"}  # not set: vLLM's default, the activation dtype
    assert sily.groupby("kind").size().to_dict() == {"throughput": 24, "tpot": 24}
    assert set(sily["batch"]) == {1, 16, 64} and set(sily["ttft_mode"]) == {"queue"}


def _value(df, **kw):
    sel = df
    for k, v in kw.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, kw
    return float(sel["value"].iloc[0])


def test_spot_checked_values_match_the_documents():
    pub, srv = pd.read_csv(DATA_PATH), pd.read_csv(SERVING_PATH)
    v09 = pub[pub["source_id"] == "trtllm_perf_doc_v0.9.0"]
    assert _value(v09, hardware="NVIDIA H200", model="Mixtral-8x7B-v0.1 (MoE, ~12.9B active)", batch=1024,
                  input_len=128, output_len=128) == 5444
    assert _value(v09, hardware="NVIDIA A100 (memory variant not stated)", model="Falcon-180B", metric="ttft_ms",
                  input_len=2048) == 456.0
    assert _value(v09, hardware="NVIDIA L40S", model="Llama-2-70B", metric="ttft_ms", input_len=2048) == 673.3
    v061 = pub[pub["source_id"] == "trtllm_perf_doc_v0.6.1"]
    assert _value(v061, hardware="NVIDIA H100 80GB HBM3", model="Llama-2-70B", batch=480, output_len=2048) == 1486
    assert _value(v061, hardware="NVIDIA A100 (memory variant not stated)", model="Falcon-180B", metric="ttft_ms",
                  input_len=2048) == 509
    rocm = srv[srv["source_id"] == "rocm_vllm_devdocker_2025-07"]
    assert _value(rocm, model="Llama-3.1-405B-Instruct (amd/Llama-3.1-405B-Instruct-FP8-KV)", batch=128,
                  input_len=2048) == 125.471
    assert _value(rocm, model="Llama-3.1-70B-Instruct (amd/Llama-3.1-70B-Instruct-FP8-KV)", batch=1,
                  input_len=128) == 17.236
    assert _value(pub[pub["source_id"] == "trtllm_blog_h200launch_v0.5.0"], model="Llama-2-13B", batch=1024) == 11819
    assert _value(pub[pub["source_id"] == "trtllm_blog_falcon180b_h200_v0.7a"], batch=960) == 3803
    m3u = pub[pub["source_id"] == "geerlingguy_beowulf17_m3ultra_single_node_2025-12"]
    assert _value(m3u, model="Llama-3.3-70B-Instruct", metric="decode_tok_s_per_seq") == 14.41
    assert _value(m3u, model="Llama-3.2-3B-Instruct", input_len=512) == 3500.01
    m1u = pub[pub["source_id"] == "geerlingguy_aibench48_m1ultra64_2026-02"]
    assert _value(m1u, model="TinyLlama-1.1B (tinyllama-1.1b-1t-openorca)", metric="decode_tok_s_per_seq") == 242.56
    kyuz0 = pub[pub["source_id"] == "kyuz0_strixhalo_toolboxes_rocm_2025-2026"]
    b6609 = kyuz0[kyuz0["framework"].str.contains(r"\(6609\)") & kyuz0["notes"].str.contains("fa=0")]
    assert _value(b6609, model="LLaMA-2-7B", metric="prefill_tok_s") == 980.87  # llama-2-7b.Q4_0__rocm6_4_4.log
    assert _value(b6609, model="LLaMA-2-7B", metric="decode_tok_s_per_seq") == 49.86
    sily = srv[srv["source_id"] == "silybench_qwen3_8b_h100sxm_vllm0.30_2026-09"]
    assert _value(sily, weight_format="bf16", batch=1, input_len=1024, metric="itl_ms") == pytest.approx(6.888693,
                                                                                                         abs=1e-6)
    assert _value(sily, weight_format="fp8", batch=64, input_len=128, metric="throughput_tok_s") == pytest.approx(
        8620.67, abs=0.01)
