"""CPU kernel benchmark: weight-only decode matmul and paged attention vs measured bandwidth.

Not a test: prints tables, asserts nothing. Run from the repo root: ``python bench/kernels.py``.

1. Roofline probes: STREAM copy/triad bandwidth and dense GEMM throughput on this host.
2. Decode matmul at M = 1 on a 4096 x 4096 weight: fp32 and bf16 dense vs int8 (per channel) and
   int4 (g128) weight-only, each timed cold (LLC flushed before every rep -- the decode case, where
   a layer's weights were evicted by the other layers) and hot. Achieved GB/s = exact bytes moved
   (``quant_matmul.bytes_moved``) / median time.
3. Paged decode attention (torch backend) vs context length: achieved GB/s
   (``paged_attention_cost``) and its fraction of STREAM triad.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from validate.kernels.paged_attention import (  # noqa: E402
    paged_attention_cost,
    paged_decode_attention,
    quantize_kv_cache,
)
from validate.kernels.quant_matmul import QuantizedLinear, matmul_flops  # noqa: E402
from validate.timing import (  # noqa: E402
    device_fingerprint,
    gemm_peak_tflops,
    llc_bytes,
    stream_bandwidth_gbs,
    time_fn,
)

DEVICE = torch.device("cpu")


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, sep, *body])


def bench_matmul(flush: int, n: int = 4096, k: int = 4096, m: int = 1) -> None:
    w = torch.randn(n, k) / math.sqrt(k)
    cases = [
        ("fp32 dense", "fp32", torch.float32),
        ("bf16 dense", "bf16", torch.bfloat16),
        ("int8 w / bf16 act", "int8", torch.bfloat16),
        ("int4 g128 / bf16 act", "int4", torch.bfloat16),
        ("int8 w / fp32 act", "int8", torch.float32),
        ("int4 g128 / fp32 act", "int4", torch.float32),
    ]
    results = []
    for label, fmt, act in cases:
        lin = QuantizedLinear.from_float(w, fmt, act_dtype=act, group_size=128)
        x = torch.randn(m, k).to(act)
        cold = time_fn(lambda: lin(x), warmup=3, reps=25, device=DEVICE, flush_bytes=flush)
        hot = time_fn(lambda: lin(x), warmup=3, reps=50, device=DEVICE)
        results.append((label, lin.bytes_moved(m).total_bytes, cold["median_ms"], hot["median_ms"]))
    base = {label: ms for label, _, ms, _ in results}
    rows = []
    for label, nbytes, cold_ms, hot_ms in results:
        rows.append([
            label,
            f"{nbytes / 2**20:.2f}",
            f"{cold_ms:.3f}",
            f"{nbytes / (cold_ms * 1e-3) / 1e9:.1f}",
            f"{hot_ms:.3f}",
            f"{nbytes / (hot_ms * 1e-3) / 1e9:.1f}",
            f"{base['bf16 dense'] / cold_ms:.2f}x",
            f"{base['fp32 dense'] / cold_ms:.2f}x",
            f"{matmul_flops(m, n, k) / (cold_ms * 1e-3) / 1e9:.1f}",
        ])  # fmt: skip
    print(f"\nDecode matmul, M={m}, N=K={n} (y = x @ W^T); cold = LLC flushed before each rep")
    print(_table(
        ["format", "MiB moved", "cold ms", "cold GB/s", "hot ms", "hot GB/s",
         "vs bf16 (cold)", "vs fp32 (cold)", "GFLOP/s"],
        rows,
    ))  # fmt: skip


def bench_paged_attention(stream_gbs: float, flush: int) -> None:
    batch, hq, hkv, d, bs = 4, 32, 8, 128, 16  # Llama-3-8B attention shape
    rows = []
    for kv_label, kv_dtype in [("bf16", torch.bfloat16), ("fp32", torch.float32), ("int8", torch.int8)]:
        for ctx_len in [256, 1024, 4096, 16384]:
            if kv_dtype == torch.float32 and ctx_len > 4096:
                continue  # 1 GiB of KV: skip to keep the run short
            blocks_per_seq = math.ceil(ctx_len / bs)
            num_blocks = batch * blocks_per_seq
            gen = torch.Generator().manual_seed(ctx_len)
            shape = (num_blocks, bs, hkv, d)
            if kv_dtype == torch.int8:
                k, ks = quantize_kv_cache(torch.randn(shape, generator=gen), torch.int8)
                v, vs = quantize_kv_cache(torch.randn(shape, generator=gen), torch.int8)
            else:
                k = torch.randn(shape, generator=gen).to(kv_dtype)
                v = torch.randn(shape, generator=gen).to(kv_dtype)
                ks = vs = None
            table = torch.randperm(num_blocks, generator=gen).reshape(batch, blocks_per_seq).int()
            ctx = torch.full((batch,), ctx_len, dtype=torch.int32)
            q = torch.randn(batch, hq, d).to(torch.bfloat16)
            stats = time_fn(
                lambda: paged_decode_attention(q, k, v, table, ctx, k_scale=ks, v_scale=vs),
                warmup=2, reps=7, device=DEVICE, flush_bytes=flush,
            )  # fmt: skip
            cost = paged_attention_cost(
                [ctx_len] * batch, hq, hkv, d, kv_dtype, torch.bfloat16, block_size=bs
            )
            gbs = cost.total_bytes / (stats["median_ms"] * 1e-3) / 1e9
            rows.append([
                kv_label, str(ctx_len), f"{cost.kv_bytes / 2**20:.1f}",
                f"{stats['median_ms']:.2f}", f"{gbs:.1f}", f"{gbs / stream_gbs:.0%}",
            ])  # fmt: skip
    print(
        f"\nPaged decode attention (torch backend), batch={batch}, q heads={hq}, kv heads={hkv}, "
        f"head_dim={d}, block={bs}, bf16 q, cold"
    )
    print(_table(["KV", "context", "KV MiB", "ms", "GB/s", "of triad"], rows))


def main() -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    fp = device_fingerprint(DEVICE)
    print(
        f"host: {fp['cpu_model']}, {fp['cpu_count']} cores, torch threads {fp['torch_threads']}, "
        f"LLC {(fp['llc_bytes'] or 0) / 2**20:.0f} MiB, torch {fp['torch_version']}, "
        f"triton {fp['triton_version']}"
    )
    if fp["load_avg_1m"] is not None and fp["load_avg_1m"] > 0.5:
        print(
            f"WARNING: 1-min load average {fp['load_avg_1m']:.2f}: other processes share the "
            "cores, timings below are inflated and noisy"
        )
    flush = 2 * (llc_bytes() or 32 * 2**20)
    bw = stream_bandwidth_gbs(DEVICE)
    print(
        f"STREAM ({bw['array_bytes'] / 2**20:.0f} MiB arrays, STREAM byte counting): "
        f"copy {bw['copy_gbs']:.1f} GB/s, triad {bw['triad_gbs']:.1f} GB/s"
    )
    print(
        f"GEMM 2048^3: fp32 {gemm_peak_tflops(DEVICE, torch.float32, 2048) * 1e3:.0f} GFLOP/s, "
        f"bf16 {gemm_peak_tflops(DEVICE, torch.bfloat16, 2048) * 1e3:.0f} GFLOP/s"
    )
    bench_matmul(flush)
    bench_paged_attention(bw["triad_gbs"], flush)


if __name__ == "__main__":
    main()
