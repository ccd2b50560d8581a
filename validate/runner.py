"""Measuring sweeps (`planner validate run`): kernels x shapes x dtypes x formats -> records, one JSONL per run.

A sweep first measures the device's ceilings (STREAM copy/triad over arrays far larger than the last-level cache,
a large square GEMM per dtype), turns them into the local spec (validate/localspec.py) unless the device already
has a committed spec, then times every case of its preset:

  timing   warm-up calls, then N reps timed with perf_counter (CPU; repeated until the spread is under
           timing.MAX_SPREAD_PCT, or recorded) or CUDA events with the host held ahead (GPU; calls under 50 us also
           as a CUDA-graph replay); the LLC (CPU) or L2 (GPU) is flushed before every rep by default (cold: a decode
           step's weights and KV are not in cache), median / p10 / p90 / min / std kept; N adapts to the call's
           length (``_reps``); STREAM arrays are at least 4 x the LLC
  threads  torch threads = the CPUs this process may use (pinned by OMP_PROC_BIND / OMP_PLACES from the CLI),
           recorded with every record; every record also names the backend that ran
  failures an out-of-memory configuration is recorded as ``status: oom``, any other exception as ``error`` with
           its message, and the sweep goes on; the run file is rewritten atomically after every record, so an
           interrupted sweep keeps everything it finished
  progress a one-line bar on stderr (no dependency)

Presets: ``cpu`` (default, < 3 min on a 2-core CI machine), ``cpu-full`` (``--full``: the larger grid for users),
``cuda`` (``--device cuda``: Triton paged attention, tinygemm int4, int8, bf16 baseline, decode stack, ceilings;
< 5 min on an H200) and ``tiny`` (tests). Presets are lists of parameter models (validate/records.py).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from planner.errors import PlannerError

from .records import (
    RECORDS_DIR,
    DecodeStepParams,
    GemmPeakParams,
    MatmulParams,
    Measured,
    PagedAttentionParams,
    Record,
    RecordWriter,
    StreamParams,
    Work,
    device_id_from_fingerprint,
    new_run_id,
)

MiB = 2**20


# ---------------------------------------------------------------- presets


@dataclass(frozen=True)
class Preset:
    name: str
    device: str
    cases: list
    reps: int = 7            # upper bound; long calls get fewer (at least min_reps)
    min_reps: int = 3
    warmup: int = 2
    budget_s: float = 0.6    # aim for about this much timed work per case


# Llama-3-8B attention: 32 query heads, 8 KV heads, head_dim 128 (hf.co/meta-llama/Meta-Llama-3-8B config.json)
_LLAMA_ATTN = dict(num_q_heads=32, num_kv_heads=8, head_dim=128)
# a 2-layer GQA stack of Llama-3-8B's proportions at a quarter of the width: its weights (182 MB bf16) are far
# larger than a CPU's LLC, and one step takes milliseconds on 2 cores
_SMALL_STACK = dict(config="gqa-2048-2l", hidden=2048, n_heads=16, n_kv_heads=4, head_dim=128, intermediate=5632,
                    n_layers=2)
_LLAMA_LAYER = dict(config="llama3-8b-1layer", hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128,
                    intermediate=14336, n_layers=1)
_LLAMA_4L = dict(config="llama3-8b-4layers", hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128,
                 intermediate=14336, n_layers=4)
_TINY_STACK = dict(config="tiny", hidden=256, n_heads=4, n_kv_heads=2, head_dim=64, intermediate=512, n_layers=2)


def _ceilings(stream_bytes: int, gemm_n: int, dtypes) -> list:
    return ([StreamParams(op="copy", array_bytes=stream_bytes), StreamParams(op="triad", array_bytes=stream_bytes)]
            + [GemmPeakParams(n=gemm_n, dtype=d) for d in dtypes])


def _matmuls(shapes, ms, formats) -> list:
    """formats: (weight format, activation dtype, group size)."""
    return [MatmulParams(m=m, n=n, k=k, weight_format=f, act_dtype=a, group_size=g)
            for (n, k) in shapes for (f, a, g) in formats for m in ms]


def _attention(batches, contexts, kv_dtypes, q_dtype, backend, block_size=16, heads=_LLAMA_ATTN, mixed=()) -> list:
    out = [PagedAttentionParams(batch=b, context_lens=[c] * b, kv_dtype=kv, q_dtype=q_dtype, backend=backend,
                                block_size=block_size, **heads)
           for kv in kv_dtypes for b in batches for c in contexts]
    for kv, ctxs in mixed:  # batches of different lengths (odd lengths: partial last blocks)
        out.append(PagedAttentionParams(batch=len(ctxs), context_lens=list(ctxs), kv_dtype=kv, q_dtype=q_dtype,
                                        backend=backend, block_size=block_size, **heads))
    return out


def _steps(stack, formats, batches, contexts, block_size=16) -> list:
    """formats: (weight format, dtype, group size)."""
    return [DecodeStepParams(weight_format=f, dtype=d, group_size=g, batch=b, context_lens=[c] * b,
                             block_size=block_size, **stack)
            for (f, d, g) in formats for b in batches for c in contexts]


_CPU_MM_FORMATS = [("fp32", "fp32", None), ("bf16", "bf16", None), ("int8", "bf16", None),
                   ("int4", "bf16", 32), ("int4", "bf16", 64), ("int4", "bf16", 128)]
_CPU_STEP_FORMATS = [("bf16", "bf16", None), ("fp32", "fp32", None), ("int8", "bf16", None), ("int4", "bf16", 128)]


def _by_size(cases: list) -> list:
    """Stable sort by tokens in the batch (sum of context lengths)."""
    return sorted(cases, key=lambda p: sum(p.context_lens))


def preset(name: str) -> Preset:
    if name == "cpu":
        return Preset("cpu", "cpu", [
            *_ceilings(256 * MiB, 2048, ("fp32", "bf16")),
            *_matmuls([(4096, 4096), (1024, 4096)], [1, 2, 4, 8, 16, 64], _CPU_MM_FORMATS),
            *_attention([1, 4, 16], [128, 512, 1024, 2048, 4096], ["bf16", "fp32", "int8"], "bf16", "auto",
                        mixed=[("bf16", [17, 100, 1000, 3001]), ("int8", [1, 15, 600, 2047, 4000]),
                               ("fp32", [33, 333, 1500])]),
            *_steps(_SMALL_STACK, _CPU_STEP_FORMATS, [1, 2, 4, 8, 16], [128, 512, 1024]),
        ])
    if name == "cpu-full":
        return Preset("cpu-full", "cpu", [
            *_ceilings(512 * MiB, 2048, ("fp32", "bf16")),
            *_matmuls([(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)], [1, 2, 4, 8, 16, 32, 64, 128, 256],
                      _CPU_MM_FORMATS),
            *_attention([1, 2, 4, 8, 16, 32], [16, 128, 512, 1024, 2048, 4096, 8192], ["bf16", "fp32", "int8", "fp8"],
                        "bf16", "auto",
                        mixed=[("bf16", [17, 100, 1000, 3001]), ("int8", [1, 15, 600, 2047, 4000])]),
            *_attention([1, 4, 16], [128, 1024, 4096], ["bf16"], "bf16", "auto",
                        heads=dict(num_q_heads=16, num_kv_heads=16, head_dim=128)),
            *_steps(_SMALL_STACK, _CPU_STEP_FORMATS, [1, 2, 4, 8, 16, 32], [128, 512, 1024, 2048]),
            *_steps(_LLAMA_LAYER, _CPU_STEP_FORMATS, [1, 4, 16], [128, 1024]),
        ], reps=9, budget_s=1.0)
    if name == "cuda":
        gpu_mm = [("bf16", "bf16", None), ("fp16", "fp16", None), ("int8", "bf16", None),
                  ("int4", "bf16", 32), ("int4", "bf16", 64), ("int4", "bf16", 128)]
        # attention and decode steps smallest first across dtypes / formats: a phase cut at its time share drops the
        # largest cases of every kind, never a whole KV dtype or weight format
        return Preset("cuda", "cuda", [
            *_ceilings(1024 * MiB, 8192, ("fp32", "bf16", "fp16")),
            *_matmuls([(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192)], [1, 4, 16, 64, 256], gpu_mm),
            *_by_size(_attention([1, 8, 32, 128], [512, 2048, 8192, 32768], ["bf16", "fp16", "int8", "fp8"], "bf16",
                                 "auto", mixed=[("bf16", [17, 100, 1000, 3001, 8191, 32000])])),
            *_by_size(_steps(_LLAMA_4L, [("bf16", "bf16", None), ("int8", "bf16", None), ("int4", "bf16", 128)],
                             [1, 8, 32, 64], [512, 2048])),
        ], reps=20, min_reps=10, warmup=5, budget_s=0.3)
    if name == "tiny":
        return Preset("tiny", "cpu", [
            *_ceilings(8 * MiB, 256, ("fp32", "bf16")),
            *_matmuls([(256, 256)], [1, 4], [("bf16", "bf16", None), ("int8", "bf16", None), ("int4", "bf16", 32)]),
            *_attention([2], [17, 100], ["bf16", "int8"], "bf16", "torch", block_size=8,
                        heads=dict(num_q_heads=4, num_kv_heads=2, head_dim=32)),
            *_steps(_TINY_STACK, [("bf16", "bf16", None), ("int4", "bf16", 32)], [2], [20], block_size=8),
        ], reps=2, min_reps=1, warmup=1, budget_s=0.01)
    raise PlannerError(f"--preset: unknown preset '{name}'; allowed: cpu, cpu-full, cuda, tiny")


PRESETS = ("cpu", "cpu-full", "cuda", "tiny")
# kernel families: the device flow (validate/device.py) gives each its share of the budget
FAMILIES = {"ceilings": ("stream", "gemm_peak"), "quant_matmul": ("quant_matmul",),
            "paged_attention": ("paged_attention",), "decode_step": ("decode_step",)}


def family_cases(cases: list, family: str) -> list:
    """The cases of one kernel family (FAMILIES), in preset order."""
    if family not in FAMILIES:
        raise PlannerError(f"--family: unknown family '{family}'; allowed: {', '.join(FAMILIES)}")
    return [c for c in cases if c.kernel in FAMILIES[family]]


# ---------------------------------------------------------------- progress bar


class Progress:
    """`[#####-----]  12/120  quant_matmul m=4 ...  1m05s left` on stderr, redrawn in place."""

    def __init__(self, total: int, enabled: bool = True, width: int = 24, stream=None):
        self.total, self.enabled, self.width = total, enabled, width
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.done = 0

    def update(self, done: int, label: str = "") -> None:
        self.done = done
        if not self.enabled:
            return
        frac = done / max(self.total, 1)
        fill = int(round(frac * self.width))
        el = time.perf_counter() - self.t0
        eta = el / done * (self.total - done) if done else 0.0
        line = (f"\r[{'#' * fill}{'-' * (self.width - fill)}] {done:>4}/{self.total} {label[:48]:<48} "
                f"{int(eta // 60)}m{int(eta % 60):02d}s left")
        self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            el = time.perf_counter() - self.t0
            self.stream.write(f"\r{' ' * (self.width + 90)}\r{self.done}/{self.total} cases in {el:.1f} s\n")
            self.stream.flush()


# ---------------------------------------------------------------- measuring one case


_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8", "fp8": "float8_e4m3fn",
                 "tf32": "float32"}


def _dtype(name: str):
    import torch
    return getattr(torch, _TORCH_DTYPES[name])


def _label(p) -> str:
    if p.kernel == "quant_matmul":
        g = f"g{p.group_size}" if p.group_size else ""
        return f"matmul {p.weight_format}{g} m={p.m} {p.n}x{p.k}"
    if p.kernel == "paged_attention":
        return f"attention {p.kv_dtype} b={p.batch} ctx={max(p.context_lens)}"
    if p.kernel == "decode_step":
        return f"step {p.config} {p.weight_format} b={p.batch} ctx={max(p.context_lens)}"
    if p.kernel == "stream":
        return f"stream {p.op}"
    return f"gemm {p.dtype} n={p.n}"


def flush_bytes_for(device) -> int:
    """2 x the last-level cache: the host LLC (CPU) or the GPU's L2."""
    import torch

    from .timing import llc_bytes
    if device.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 * MiB
        return 2 * int(l2)
    return 2 * (llc_bytes() or 32 * MiB)


def _stack_key(p) -> tuple:
    return (p.config, p.hidden, p.n_heads, p.n_kv_heads, p.head_dim, p.intermediate, p.n_layers,
            p.weight_format, p.dtype, p.group_size, p.block_size)


class _StackCache:
    """Decode stacks by (config, format, dtype, block size). ``need``: the most KV blocks any case of each stack asks
    for (from the whole case list), so each stack is built once per format (on the measuring device,
    build_decode_stack) instead of again whenever a larger batch x context comes. On CUDA every stack is kept (the
    cuda preset interleaves formats, smallest steps first, so that a budget cut drops the largest steps of every
    format rather than a whole format); on the CPU only the last one (host memory)."""

    def __init__(self, cases=()):
        self.stacks: dict[tuple, object] = {}
        self.need: dict[tuple, int] = {}
        for p in cases:
            if p.kernel == "decode_step":
                n = sum(math.ceil(c / p.block_size) for c in p.context_lens)
                self.need[_stack_key(p)] = max(self.need.get(_stack_key(p), 0), n)
        self.builds = 0

    def get(self, p, device, num_blocks):
        from .kernels.decode_step import DecodeStackConfig, build_decode_stack

        key = _stack_key(p)
        num_blocks = max(num_blocks, self.need.get(key, 0))
        stack = self.stacks.get(key)
        if stack is None or stack.k_caches[0].shape[0] < num_blocks:
            if device.type != "cuda" or stack is not None:
                self.stacks.pop(key, None)
                if device.type != "cuda":
                    self.stacks.clear()  # free the old one first
            cfg = DecodeStackConfig(p.hidden, p.n_heads, p.n_kv_heads, p.head_dim, p.intermediate, p.n_layers)
            fmt = "dense" if p.weight_format in ("fp32", "bf16", "fp16") else p.weight_format
            stack = build_decode_stack(cfg, fmt, _dtype(p.dtype), device, seed=0, num_blocks=num_blocks,
                                       block_size=p.block_size, group_size=p.group_size or 128)
            self.stacks[key] = stack
            self.builds += 1
        return stack


class _LinearCache:
    def __init__(self):
        self.key, self.lin = None, None

    def get(self, p, device):
        import torch

        from .kernels.quant_matmul import QuantizedLinear
        key = (p.n, p.k, p.weight_format, p.act_dtype, p.group_size)
        if key != self.key:
            self.lin = None
            gen = torch.Generator(device=device).manual_seed(p.n * 31 + p.k)  # generated where it runs: fast
            w = torch.randn(p.n, p.k, generator=gen, device=device) / math.sqrt(p.k)
            self.lin = QuantizedLinear.from_float(w, p.weight_format, act_dtype=_dtype(p.act_dtype), device=device,
                                                  group_size=p.group_size or 128)
            self.key = key
        return self.lin


def _block_table(context_lens, block_size, device, seed):
    """Each sequence owns ceil(ctx / block_size) blocks, handed out in a random order (paged, not contiguous)."""
    import torch
    per = [math.ceil(c / block_size) for c in context_lens]
    total = sum(per)
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(seed))
    table = torch.zeros((len(per), max(per)), dtype=torch.int32)
    at = 0
    for b, n in enumerate(per):
        table[b, :n] = perm[at:at + n].to(torch.int32)
        at += n
    return table.to(device), total


def _prepare(p, device, stacks: _StackCache, linears: _LinearCache) -> tuple[Callable[[], object], Work, str]:
    """The call to time, its exact work and the backend that runs it (recorded: what ran, not what was asked)."""
    import torch

    if p.kernel == "stream":
        n = p.array_bytes // 4
        a = torch.ones(n, dtype=torch.float32, device=device)
        b = torch.empty_like(a)
        if p.op == "copy":
            return (lambda: b.copy_(a)), Work(flops=0, other_bytes=2 * n * 4), "torch.copy_"
        c = torch.full_like(a, 2.0)
        return (lambda: torch.add(b, c, alpha=3.0, out=a)), Work(flops=2 * n, other_bytes=3 * n * 4), "torch.add"
    if p.kernel == "gemm_peak":
        gen = torch.Generator(device=device).manual_seed(p.n)
        x = torch.randn(p.n, p.n, generator=gen, device=device).to(_dtype(p.dtype))
        y = torch.randn(p.n, p.n, generator=gen, device=device).to(_dtype(p.dtype))
        el = _dtype(p.dtype).itemsize
        return (lambda: torch.mm(x, y)), Work(flops=2 * p.n ** 3, act_in_bytes=2 * p.n * p.n * el,
                                              act_out_bytes=p.n * p.n * el), "torch.mm"
    if p.kernel == "quant_matmul":
        from .kernels.quant_matmul import matmul_flops
        lin = linears.get(p, device)
        if p.weight_format == "int4" and not lin.use_fused:
            raise RuntimeError("no fused int4 kernel for this shape/dtype (would time dequantize + matmul)")
        x = torch.randn(p.m, p.k, generator=torch.Generator().manual_seed(p.m)).to(device, _dtype(p.act_dtype))
        bm = lin.bytes_moved(p.m)
        return (lambda: lin(x)), Work(flops=matmul_flops(p.m, p.n, p.k), weight_bytes=bm.weight_bytes,
                                      scale_bytes=bm.scale_bytes, zero_bytes=bm.zero_bytes,
                                      act_in_bytes=bm.act_in_bytes, act_out_bytes=bm.out_bytes), lin.kernel_name
    if p.kernel == "paged_attention":
        from .kernels.paged_attention import (backend_label, paged_attention_cost, paged_decode_attention,
                                              quantize_kv_cache)
        table, nblocks = _block_table(p.context_lens, p.block_size, device, seed=sum(p.context_lens))
        shape = (nblocks, p.block_size, p.num_kv_heads, p.head_dim)
        gen = torch.Generator(device=device).manual_seed(nblocks)
        kvd, qd = _dtype(p.kv_dtype), _dtype(p.q_dtype)
        if p.kv_dtype in ("int8", "fp8"):
            k, ks = quantize_kv_cache(torch.randn(shape, generator=gen, device=device), kvd)
            v, vs = quantize_kv_cache(torch.randn(shape, generator=gen, device=device), kvd)
        else:
            k = torch.randn(shape, generator=gen, dtype=kvd, device=device)
            v = torch.randn(shape, generator=gen, dtype=kvd, device=device)
            ks = vs = None
        q = torch.randn(p.batch, p.num_q_heads, p.head_dim, generator=gen, device=device).to(qd)
        ctx = torch.tensor(p.context_lens, dtype=torch.int32, device=device)
        cost = paged_attention_cost(p.context_lens, p.num_q_heads, p.num_kv_heads, p.head_dim, kvd, qd, p.block_size)

        def call():
            return paged_decode_attention(q, k, v, table, ctx, k_scale=ks, v_scale=vs, backend=p.backend)
        return call, Work(flops=cost.flops, kv_bytes=cost.kv_bytes, scale_bytes=cost.scale_bytes,
                          other_bytes=cost.block_table_bytes, act_in_bytes=cost.q_bytes, act_out_bytes=cost.out_bytes), \
            backend_label(q, k, table, p.backend)
    if p.kernel == "decode_step":
        table, nblocks = _block_table(p.context_lens, p.block_size, device, seed=sum(p.context_lens))
        stack = stacks.get(p, device, nblocks)
        dt = _dtype(p.dtype)
        x = torch.randn(p.batch, p.hidden, generator=torch.Generator().manual_seed(1)).to(device, dt)
        ctx = torch.tensor(p.context_lens, dtype=torch.int32, device=device)
        w = s = z = 0
        for lw in stack.layers:
            for lin in (lw.wqkv, lw.wo, lw.w13, lw.w2):
                bm = lin.bytes_moved(p.batch)
                w, s, z = w + bm.weight_bytes, s + bm.scale_bytes, z + bm.zero_bytes
        el = dt.itemsize
        tokens = sum(p.context_lens)
        kv = p.n_layers * 2 * tokens * p.n_kv_heads * p.head_dim * el  # read (the new token included)
        kv += p.n_layers * 2 * p.batch * p.n_kv_heads * p.head_dim * el  # the new token's K, V written
        q_dim = p.n_heads * p.head_dim
        proj = p.hidden * (q_dim + 2 * p.n_kv_heads * p.head_dim) + q_dim * p.hidden + 3 * p.hidden * p.intermediate
        flops = p.n_layers * (2 * p.batch * proj + 4 * tokens * p.n_heads * p.head_dim)
        return (lambda: stack.step(x, table, ctx)), Work(
            flops=flops, weight_bytes=w, scale_bytes=s, zero_bytes=z, kv_bytes=kv,
            act_in_bytes=p.batch * p.hidden * el, act_out_bytes=p.batch * p.hidden * el,
            other_bytes=int(table.numel()) * 4), _stack_backend(stack, x, table)
    raise PlannerError(f"unknown kernel {p.kernel}")


def _stack_backend(stack, x, table) -> str:
    """'attention <backend>; linear <kernel>' of a decode stack (its attention runs backend 'auto')."""
    from .kernels.paged_attention import backend_label
    return f"attention {backend_label(x, stack.k_caches[0], table)}; linear {stack.layers[0].wqkv.kernel_name}"


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    return name == "OutOfMemoryError" or "out of memory" in str(exc).lower() or "can't allocate" in str(exc).lower()


def _reps(fn, pr: Preset, device, sync) -> int:
    """Reps for this call: about pr.budget_s of timed work, between pr.min_reps and pr.reps."""
    t0 = time.perf_counter()
    fn()
    sync()
    dt = time.perf_counter() - t0
    return max(pr.min_reps, min(pr.reps, int(pr.budget_s / max(dt, 1e-6))))


# ---------------------------------------------------------------- the sweep


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _spec_for(device_id: str, ceiling_records: list[Record]):
    """The committed spec for this device id if there is one, else the spec of this run's ceilings."""
    from planner.hardware import load_hardware, parse_hardware, spec_paths

    from .localspec import spec_from_records
    if device_id in spec_paths():
        return load_hardware(device_id)
    try:
        return parse_hardware(spec_from_records(ceiling_records, device_id), f"measured spec {device_id}")
    except PlannerError:
        return None


def _stream_sized(cases: list, device, preset_name: str) -> list:
    """STREAM arrays at least 4 x the host LLC on CPU (the tiny test preset excepted): a smaller array is
    measured partly from cache, and the 'memory' bandwidth would be too high."""
    from .timing import llc_bytes
    llc = llc_bytes() if device.type == "cpu" and preset_name != "tiny" else None
    if not llc:
        return cases
    need = -(-4 * llc // MiB) * MiB
    return [StreamParams(op=c.op, array_bytes=need) if c.kernel == "stream" and c.array_bytes < need else c
            for c in cases]


def run_sweep(preset_name: str = "cpu", device: str | None = None, out_dir: str | Path | None = None,
              device_id: str | None = None, flush: bool = True, progress: bool | None = None,
              limit: int | None = None, cases: list | None = None, family: str | None = None,
              time_budget_s: float | None = None) -> Path:
    """Run a preset (or explicit ``cases``) and return the path of the run's JSONL file.

    ``out_dir``: records go to ``<out_dir>/<device-id>/<run-id>.jsonl`` (default validate/records/).
    ``limit``: run only the first N cases (after the ceilings) -- for quick checks.
    ``family``: only one kernel family of the preset (FAMILIES).
    ``time_budget_s``: start no case after this many seconds (the records so far are kept; the rest is listed
    as skipped on stderr) -- the device flow gives each family its share this way.
    ``progress``: draw the bar on stderr (default: when stderr is a terminal).
    CPU: torch threads = the CPUs this process may run on (``sched_getaffinity``), recorded in every record;
    ``planner validate run`` also sets OMP_PROC_BIND=close / OMP_PLACES=cores before torch starts (pinned threads).
    """
    import torch

    from .predict import predict
    from .timing import MAX_SPREAD_PCT, device_fingerprint

    t_start = time.perf_counter()
    pr = preset(preset_name)
    dev = torch.device(device or pr.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PlannerError("--device: cuda requested but torch sees no CUDA device")
    if dev.type == "cpu":
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        torch.set_num_threads(cpus)
    todo = list(cases) if cases is not None else list(pr.cases)
    if family is not None:
        todo = family_cases(todo, family)
    if limit is not None:
        ceil = [c for c in todo if c.kernel in ("stream", "gemm_peak")]
        rest = [c for c in todo if c.kernel not in ("stream", "gemm_peak")]
        todo = ceil + rest[:limit]
    todo = _stream_sized(todo, dev, pr.name)
    fp = device_fingerprint(dev)
    fp["preset"] = pr.name
    fp["omp_proc_bind"] = os.environ.get("OMP_PROC_BIND")
    dev_id = device_id or device_id_from_fingerprint(fp)
    run_id = new_run_id(pr.name + (f"-{family}" if family else ""))
    path = Path(out_dir or RECORDS_DIR) / dev_id / f"{run_id}.jsonl"
    writer = RecordWriter(path)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    flush_b = flush_bytes_for(dev) if flush else None
    bar = Progress(len(todo), sys.stderr.isatty() if progress is None else progress)
    stacks, linears = _StackCache(todo), _LinearCache()
    spec = None
    from .timing import time_fn
    try:
        for i, p in enumerate(todo):
            if time_budget_s is not None and time.perf_counter() - t_start > time_budget_s:
                print(f"budget: {time_budget_s:g} s spent; {len(todo) - i} of {len(todo)} cases not started",
                      file=sys.stderr)
                break
            bar.update(i, _label(p))
            if spec is None and p.kernel not in ("stream", "gemm_peak"):
                spec = _spec_for(dev_id, writer.records)
            base = dict(run_id=run_id, created=_now(), device_id=dev_id, fingerprint=fp, params=p)
            try:
                fn, work, backend = _prepare(p, dev, stacks, linears)
                reps = _reps(fn, pr, dev, sync)
                st = time_fn(fn, warmup=max(pr.warmup - 1, 0), reps=reps, device=dev, flush_bytes=flush_b,
                             max_spread_pct=MAX_SPREAD_PCT if dev.type == "cpu" else None)
                measured = Measured(**st, warmup=pr.warmup, threads=torch.get_num_threads())
                sec = measured.median_ms * 1e-3
                rec = Record(**base, status="ok", backend=backend, work=work, measured=measured,
                             achieved_gbs=work.total_bytes / sec / 1e9, achieved_tflops=work.flops / sec / 1e12)
                if spec is not None:
                    pred = predict([rec], spec, "auto")[0]
                    if pred is not None:
                        rec = rec.model_copy(update={"prediction": pred})
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of one configuration is recorded, sweep goes on
                status = "oom" if _is_oom(exc) else "error"
                rec = Record(**base, status=status, message=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                             if str(exc) else type(exc).__name__)
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
            writer.append(rec)
        bar.update(len(writer.records), "done")
    except KeyboardInterrupt:
        bar.close()
        print(f"interrupted: {len(writer.records)} records kept in {path}", file=sys.stderr)
        raise
    bar.close()
    if stacks.builds:
        print(f"decode stacks built: {stacks.builds} (one per format)", file=sys.stderr)
    return path
