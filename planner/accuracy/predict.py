"""Vectorized predictions for the published rows: every row becomes a set of forward steps, every step a set of
operator costs (planner.ops, the same costs `estimate` uses), flattened into one table of op instances so that a
whole parameter set is evaluated with a few numpy reductions (the fit evaluates it thousands of times).

For one row with steps s (weight w_s) and ops o (count n_o), under an Efficiency e on a device with datasheet peak
P_class and bandwidth BW:

  time = sum_s w_s * [ sum_o n_o * ( max(F_o / (P x cf_o), B_o / BW_e) + e.kernel_overhead_us ) + e.step_overhead_ms ]
  BW_e = min(BW x e.bandwidth_fraction, SMs x e.sm_bandwidth_gbs)  (roofline.effective_bandwidth_bytes_s; no cap
         where either is 0)
  weight GEMMs:  P x cf_o = min(P' x e.compute_fraction, tdp_w x e.matmul_tflops_per_watt)
                                x R_o / (R_o + e.compute_half_rows) / dequant_factor_at(R_o)
                 (1 + e.dequant_overhead[fmt_o], x ceil(R_o / tile) / R_o where e.dequant_tile_tokens sets a tile)
                 (P' = the fp16-accumulate peak when e.fp16_accumulate, roofline.fp16_accumulate_peak)
  matmul and attention ops: P (P') x the unit's mma_sync_share when e.sync_mma (roofline.sync_mma_share)
  other ops:     P x cf_o = P x e.compute_fraction
  cf of matmul ops = e.format_compute_fraction[fmt_o] where the profile lists it
  fmt_o: the format whose kernels op o runs: its own where it is stored in one (OpCost.weight_format: gpt-oss's
         MXFP4 experts), else the row format's kernel format (quantization.WeightFormat.kernel_name)

  on a unit the regime fit applies to (regimes.gemm_regime_for: an SM count, a vendor the kernel tables measured;
  weight-only quantized formats only where e.weight_only_regime),
  weight GEMMs take (max(t_c, F / (P x kernel_fraction) / small_m_efficiency(R, tile))^p + t_m^p)^(1/p) instead
  of the max, with R / (R + half) dropped (planner.regimes.weight_gemm_time_s; constants in hardware_specs/defaults/regimes.yaml)

which is planner.roofline.time_ops + step_time_s summed the way planner.latency sums decode steps (midpoint
samples, at most 32 per row). tests/accuracy checks that this table and the planner's own path agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..architecture import load_model
from ..hardware import DATASHEET_EFFICIENCY, load_hardware
from ..ops import ATTENTION, MATMUL, step_ops
from ..quantization import dequant_overhead_for, weight_format
from ..regimes import (GROUPED_GEMM_OPS, expert_gemm_rate, kernel_library, kv_read_factor, regime_constants,
                       weight_gemm_time_s)
from ..roofline import (dequant_factor_at, device_model, effective_bandwidth_bytes_s, fp16_accumulate_peak,
                        gemm_rows, is_weight_only_quantized, kv_passes, select_unit, unit_gemm_regime)
from ..units import GB, GIB, TERA
from .decode_kernels import score_bytes_factor

DECODE_SAMPLES = 32  # as planner.latency.decode_sum_s


@dataclass(frozen=True)
class _Eff:
    """The two Efficiency fields roofline.effective_bandwidth_bytes_s reads, as per-instance arrays."""

    bandwidth_fraction: np.ndarray
    sm_bandwidth_gbs: np.ndarray


def hardware_class(spec, unit) -> str:
    """Runtime-profile class of a compute unit, from the spec alone: '<vendor>-<unit kind>' (apple-gpu,
    nvidia-gpu, amd-gpu). Carries to any device of that vendor and unit kind, measured or not."""
    return f"{spec.vendor.lower()}-{unit.kind}"


def _decode_steps(prompt: int, n: int):
    """(past, weight) of the midpoint samples of n decode steps at contexts prompt .. prompt+n-1."""
    k = min(n, DECODE_SAMPLES)
    j = np.arange(k, dtype=np.float64)
    return prompt + np.floor((j + 0.5) * n / k), np.full(k, n / k)


def queue_first_token_share(B: int, P: int) -> float:
    """Mean share of the prefill of B prompts of P tokens (sent at once, run in order at PREFILL_TOKENS_PER_STEP = T
    tokens per step) that has run when a request gets its first token: request i (1..B) ends its prompt in step
    s_i = ceil(i P / T) of k = ceil(B P / T), so the share is mean_i(s_i) / k. B P <= T: 1 (one step). B = 1: 1 (a
    lone prompt, chunked or not, is all prefilled before its first token). P = T / m (the H200 dashboard's 64 x 1024
    in steps of 8,192): (k + 1) / (2k). The rest, 1 - share, runs after the request's first token and stalls its
    decode (steps_of_row, kind tpot). Serving_rows.py documents the queue mode."""
    from .serving_rows import PREFILL_TOKENS_PER_STEP as T
    k = max(1, math.ceil(B * P / T))
    i = np.arange(1, B + 1, dtype=np.float64)
    return float(np.mean(np.ceil(i * P / T)) / k)


def closed_loop_waits(clients: int, slots: int, rounds: int) -> tuple[float, float]:
    """(mean wait, makespan), both in units of one request's service time S: `clients` threads each send `rounds`
    requests one after another to a server that runs at most `slots` at once, first come first served, every
    request taking S (LMDeploy profile_generation: B threads x 3 rounds). slots >= clients: (0, rounds). Little's
    law checks the steady state: each thread cycles through wait + S, the server completes slots / S requests per
    unit time, so wait -> S (clients / slots - 1) (tests/accuracy/test_accuracy_model.py)."""
    import heapq

    free = [0.0] * max(1, min(slots, clients))
    ready = [(0.0, i, i) for i in range(clients)]
    heapq.heapify(ready)
    done, waits, makespan, order = [0] * clients, [], 0.0, clients
    while ready:
        t, _, c = heapq.heappop(ready)
        start = max(t, heapq.heappop(free))
        waits.append(start - t)
        end = start + 1.0
        heapq.heappush(free, end)
        makespan = max(makespan, end)
        done[c] += 1
        if done[c] < rounds:
            heapq.heappush(ready, (end, order, c))
            order += 1
    return float(np.mean(waits)), makespan


def kv_concurrency(r: dict) -> int:
    """Sequences an engine with a bounded KV pool runs at once (serving_rows.py, KV capacity): min(B, floor(pool
    tokens / (P + O/2))), pool tokens = cache_tokens (a pool the engine logged, serving_rows.logged_pool), or
    min(cache_tokens, (mem_gib x 2^30 - weight bytes per GPU) / KV bytes per token per GPU) where the row records
    the memory the run took (LMDeploy); K/V heads split over min(TP, KV heads) GPUs. B where the row records no
    pool."""
    B, mem, cache = int(r["batch"]), r.get("mem_gib"), r.get("cache_tokens")
    if not cache or math.isnan(cache):  # no pool recorded (absent, 0 or NaN)
        return B
    pool_tokens = float(cache)  # the engine's own count of its pool
    if mem and not math.isnan(mem):  # capped by the memory the run took
        from ..memory import kv_seq_bytes
        from ..ops import weight_bytes
        from ..serving.parallelism import kv_split

        m, fmt, tp = load_model(r["model"]), weight_format(r["weights"]), int(r.get("tp", 1) or 1)
        kv_token = float(kv_seq_bytes(m, r["kv_dtype"], 1.0, capped=False)) / kv_split(m, tp)
        pool_tokens = min(pool_tokens, (mem * GIB - weight_bytes(m, fmt) / tp) / kv_token)
    return max(1, min(B, int(pool_tokens // (r["prompt"] + r["output"] / 2))))


def length_problem(r: dict) -> str | None:
    """Why a mapped row's lengths give steps_of_row no work to time, or None: every decode kind needs an output
    token, every prompt kind a prompt token."""
    kind, P, O = r["kind"], int(r["prompt"]), int(r["output"])
    if kind in ("decode_rate", "tpot", "throughput", "e2e") and O < 1:
        return f"a {r['metric']} row needs output_len >= 1 (got {O})"
    if kind in ("prefill_rate", "ttft") and P < 1:
        return f"a {r['metric']} row needs input_len >= 1 (got {P})"
    return None


def first_token_steps(B: int, P: int, runtime: str | None = None) -> list[tuple]:
    """Steps (stage, batch, new_tokens, past, weight) until B prompts of P tokens have their first token: the prefill
    of B x P, or, on an engine that samples it in a decode step (runtimes.first_token_from_decode: TurboMind), the
    prefill of B x (P - 1) and one decode step of B at context P - 1 (latency.first_token_from_decode_s, as steps). Either way the O - 1 later tokens take O - 1
    decode steps at contexts P .. P + O - 2."""
    from ..runtimes import first_token_from_decode
    if P >= 1 and first_token_from_decode(runtime):
        return ([("prefill", B, P - 1, 0, 1.0)] if P > 1 else []) + [("decode", B, 1, P - 1, 1.0)]
    return [("prefill", B, P, 0, 1.0)]


def steps_of_row(r: dict) -> tuple[list[tuple], float]:
    """Steps (stage, batch, new_tokens, past, weight) of one mapped row, and `work`: measured time = work / value
    for rate kinds (tokens), value / 1e3 for latency kinds in ms (work = 0 marks that case). Kinds and TTFT modes
    are documented in serving_rows.py; TP groups time every step with the per-GPU ops (build_design)."""
    kind, B, P, O = r["kind"], r["batch"], r["prompt"], r["output"]
    n = kv_concurrency(r)  # fewer than B run at once where the row's KV pool is full
    if n < B:
        return _capacity_steps(kind, B, n, P, O, int(r.get("rounds", 1) or 1), r.get("work_div", 1), r.get("runtime"))
    if kind == "decode_rate":  # tokens per second of one sequence of the B decoded together
        past, w = _decode_steps(P, O)
        return [("decode", B, 1, p, wi) for p, wi in zip(past, w)], float(O)
    if kind == "prefill_rate":
        ub, depth = r["ubatch"] or P, int(r.get("depth", 0) or 0)
        return [("prefill", 1, min(ub, depth + P - s), s, 1.0) for s in range(depth, depth + P, ub)], float(P)
    if kind == "ttft":
        mode = r.get("ttft_mode", "batch")
        if mode == "single":
            return first_token_steps(1, P, r.get("runtime")), 0.0
        share = queue_first_token_share(B, P) if mode == "queue" else 1.0
        return [(st, b, s, p, w * share if st == "prefill" else w)
                for st, b, s, p, w in first_token_steps(B, P, r.get("runtime"))], 0.0
    if kind == "tpot":
        steps = [("decode", B, 1, P + O // 2, 1.0)]
        # a median inter-token latency (itl_ms) is one decode step: the few steps a wave's prefills stall fall
        # outside the median; a mean TPOT carries them
        if r.get("ttft_mode") == "queue" and O > 1 and r.get("metric") != "itl_ms":
            after = 1.0 - queue_first_token_share(B, P)
            if after > 1e-12:
                steps.append(("prefill", B, P, 0, after / (O - 1)))
        elif r.get("ttft_mode") == "steady" and O > 1:  # a cycle's B admitted prompts, spread over its O - 1 steps
            steps.append(("prefill", B, P, 0, 1.0 / (O - 1)))
        return steps, 0.0
    if kind in ("throughput", "e2e"):
        # a static batch; a steady-state cycle does the same work (serving_rows); no prompt, no prefill step
        steps = first_token_steps(B, P, r.get("runtime")) if P > 0 else []
        if O > 1:
            past, w = _decode_steps(P, O - 1)
            steps += [("decode", B, 1, p, wi) for p, wi in zip(past, w)]
        return steps, (float(B * O) / r.get("work_div", 1) if kind == "throughput" else 0.0)
    raise ValueError(kind)


def _capacity_steps(kind: str, B: int, n: int, P: int, O: int, rounds: int, work_div: int, runtime: str | None):
    """Steps of a static-batch row where only n of the B threads run at once (closed_loop_waits): a request's service
    S = the steps to the first token of n prompts (first_token_steps: their prefill, or TurboMind's prefill of P - 1
    and a decode step) + O - 1 decode steps of n sequences. TTFT = those first-token steps + mean wait x S; TPOT =
    one decode step of n at the mean context; throughput = B x rounds x O tokens in makespan x S, i.e. B x O per
    makespan / rounds services."""
    wait, makespan = closed_loop_waits(B, n, rounds)
    first = first_token_steps(n, P, runtime)
    service = list(first)
    if O > 1:
        past, w = _decode_steps(P, O - 1)
        service += [("decode", n, 1, p, wi) for p, wi in zip(past, w)]
    if kind == "ttft":
        return first + [(st, b, s, p, w * wait) for st, b, s, p, w in service], 0.0
    if kind == "tpot":
        return [("decode", n, 1, P + O // 2, 1.0)], 0.0
    if kind == "throughput":
        k = makespan / rounds
        return [(st, b, s, p, w * k) for st, b, s, p, w in service], float(B * O) / work_div
    raise ValueError(f"{kind} rows have no KV-capacity model")


@dataclass
class Design:
    """Flat op instances of every row (index `row` into the mapped table) with their datasheet roofline inputs."""

    n_rows: int
    row: np.ndarray          # op instance -> row
    weight: np.ndarray       # step weight x op count
    flops: np.ndarray
    bytes: np.ndarray
    rows_gemm: np.ndarray    # GEMM rows R (weight GEMMs), 0 for other ops
    gemm: np.ndarray         # bool: a weight GEMM
    peak: np.ndarray         # datasheet FLOP/s of the op's class on the row's unit
    peak_acc16: np.ndarray   # the same with fp16 accumulation (roofline.fp16_accumulate_peak) for matmul ops
    bw: np.ndarray           # datasheet B/s of the row's unit
    tdp_w: np.ndarray        # board power of the row's device (0 = not published)
    fmt: np.ndarray          # per instance: the format whose kernels the op runs (fmt_o of the module docstring)
    row_ops: np.ndarray      # per row: sum of weight x count (kernel launches)
    row_steps: np.ndarray    # per row: sum of step weights (steps)
    measured_time_s: np.ndarray  # per row: the measurement as a time
    work: np.ndarray         # per row: tokens (rate metrics) or 0 (latencies)
    comm_s: np.ndarray       # per row, not fitted: tensor-parallel all-reduce time (parallelism.tp_comm_time_s) and
    #                          a served TTFT's request path (served_request_path_s)
    regime: np.ndarray       # bool: a weight GEMM on a unit the regime fit applies to (regimes.weight_gemm_time_s)
    grouped: np.ndarray      # bool: a grouped expert GEMM (regimes.GROUPED_GEMM_OPS)
    kernel_peak: np.ndarray  # FLOP/s of the padded tiles: datasheet peak x kernel_compute_fraction[dtype] (regime ops)
    kv_copy_bytes: np.ndarray  # 2 x the KV read of decode ops: moved again where the runtime copies its cache per step
    launch_s: np.ndarray     # fixed time per launch of a regime op beyond a 16-bit GEMM (roofline.DeviceModel.gemm_launch_s)
    sm: np.ndarray           # SM (CU) count of the row's unit, 0 where the spec lists none
    matmul: np.ndarray       # bool: an op of class matmul (format_compute_fraction applies)
    sync_share: np.ndarray   # the unit's mma_sync_share for tensor-core ops (matmul, attention), 1 elsewhere
    mixed: np.ndarray        # bool: a weight-only quantized GEMM the regime takes where the row's engine runs
    #                          Marlin-style mixed-input kernels (Efficiency.weight_only_regime; kernel_peak and
    #                          launch_s then hold its 16-bit regime's)
    own_wo: np.ndarray       # bool: a weight GEMM stored in a weight-only format of its own (OpCost.weight_format,
    #                          gpt-oss's mxfp4 experts under bf16): the regime only where `mixed` and the engine's flag
    width: np.ndarray        # per-device expert width of a grouped expert GEMM (OpCost.expert_width), 0 elsewhere
    kv_reread: np.ndarray    # bytes of a decode attention op's K/V passes after the first (roofline.kv_passes), which
    #                          cost Efficiency.kv_reread_share of a pass each (`bytes` holds them at 1)

    def subset(self, mask_rows: np.ndarray) -> "Design":
        """The design restricted to rows where mask_rows is True (rows renumbered 0..k-1)."""
        idx = np.flatnonzero(mask_rows)
        remap = np.full(self.n_rows, -1)
        remap[idx] = np.arange(len(idx))
        keep = mask_rows[self.row]
        return Design(len(idx), remap[self.row[keep]], self.weight[keep], self.flops[keep], self.bytes[keep],
                      self.rows_gemm[keep], self.gemm[keep], self.peak[keep], self.peak_acc16[keep], self.bw[keep],
                      self.tdp_w[keep], self.fmt[keep],
                      self.row_ops[idx], self.row_steps[idx], self.measured_time_s[idx], self.work[idx],
                      self.comm_s[idx], self.regime[keep], self.grouped[keep],
                      self.kernel_peak[keep], self.kv_copy_bytes[keep], self.launch_s[keep], self.sm[keep],
                      self.matmul[keep], self.sync_share[keep], self.mixed[keep], self.own_wo[keep],
                      self.width[keep], self.kv_reread[keep])


SERVED_MODES = ("single", "queue", "burst")  # TTFT modes of runs through an engine's HTTP server (serving_rows.py)


def served_request_path_s(r: dict) -> float:
    """The request path (runtimes.REQUEST_PATH_MS) in a row's measured time: a TTFT measured through the engine's
    HTTP server (vllm bench serve, benchmark_serving: ttft_mode single, queue or burst) holds it once; an offline
    harness's (static batches, profile_generation) and every other kind hold none."""
    if r.get("kind") != "ttft" or r.get("ttft_mode") not in SERVED_MODES:
        return 0.0
    from ..runtimes import request_path_ms
    return request_path_ms(r.get("runtime")) / 1e3


def build_design(df) -> Design:
    """Op instances for every row of the mapped table (planner.accuracy.data.load_rows)."""
    recs = df.to_dict("records")
    n = len(recs)
    steps_by_group: dict[tuple, list] = {}
    work = np.zeros(n)
    meas = np.zeros(n)
    row_steps = np.zeros(n)
    comm = np.zeros(n)  # fixed time per row, not fitted: all-reduces (below) and a served TTFT's request path
    for i, r in enumerate(recs):
        steps, wk = steps_of_row(r)
        work[i] = wk
        meas[i] = wk / r["measured"] if wk else r["measured"] / 1e3
        comm[i] = served_request_path_s(r)
        for stage, B, S, P, w in steps:
            key = (r["model"], r["weights"], r["kv_dtype"], bool(r["flash_attention"]), stage, int(r.get("tp", 1)),
                   r["hardware"] if r.get("tp", 1) > 1 else "", bool(r.get("kv_per_query_head", False)),
                   r.get("identical_sequences") in (True, 1))  # where set (a NaN from the other file is not)
            steps_by_group.setdefault(key, []).append((i, B, S, P, w))
            row_steps[i] += w
    # device inputs per row (datasheet peaks; efficiency enters only at evaluation)
    dev_peak, dev_acc, dev_bw, dev_tdp, dev_dtypes = {}, np.zeros(n), np.zeros(n), np.zeros(n), {}
    dev_sm, dev_kpeak, dev_launch = np.zeros(n, dtype=bool), np.zeros(n), np.zeros(n)
    dev_mixed = np.zeros(n, dtype=bool)  # the regime applies only under Efficiency.weight_only_regime
    dev_smc, dev_score, dev_sync = np.zeros(n), np.ones(n), np.ones(n)
    for i, r in enumerate(recs):
        spec = load_hardware(r["hardware"])
        dev_score[i] = score_bytes_factor(r.get("runtime"), spec.vendor)
        fmt = weight_format(r["weights"])
        unit = select_unit(spec, fmt, r.get("unit"))
        dev = device_model(spec, unit, fmt, DATASHEET_EFFICIENCY)
        lib = kernel_library(r.get("runtime"))  # the engine's own measured GEMM kernels (Efficiency.kernel_library)
        regime, dev_kpeak[i] = unit_gemm_regime(spec, unit, fmt, dev.dtypes[MATMUL], library=lib)
        dev_sm[i] = regime is not None
        if regime is None and is_weight_only_quantized(fmt):
            regime, dev_kpeak[i] = unit_gemm_regime(spec, unit, fmt, dev.dtypes[MATMUL], weight_only_regime=True,
                                                    library=lib)
            dev_mixed[i] = regime is not None
        dev_smc[i] = float(unit.sm_count or 0) * dev.sm_stream_scale  # the SMs the cap counts (roofline.DeviceModel)
        dev_sync[i] = unit.mma_sync_share if unit.mma_sync_share is not None else 1.0
        dev_launch[i] = regime.extra_launch_s(dev.dtypes[MATMUL]) if regime is not None else 0.0
        dev_peak[i] = {c: p * TERA for c, p in dev.peak_tflops.items()}
        dev_dtypes[i] = dev.unit_dtypes
        dev_acc[i] = fp16_accumulate_peak(spec.unit(dev.unit), dev.dtypes[MATMUL]) * TERA
        dev_bw[i] = dev.bandwidth_gbs * 1e9
        dev_tdp[i] = spec.power.tdp_w if spec.power else 0.0
    parts = {k: [] for k in ("row", "weight", "flops", "bytes", "rows_gemm", "gemm", "peak", "peak_acc16", "bw", "tdp_w",
                                     "fmt", "regime", "grouped", "kernel_peak", "kv_copy_bytes", "launch_s", "sm",
                                     "matmul", "sync_share", "mixed", "own_wo", "width", "kv_reread")}
    row_ops = np.zeros(n)
    for (model, weights, kv, flash, stage, tp, hw, per_head, same), items in steps_by_group.items():
        arr = np.array(items, dtype=np.float64)
        ri = arr[:, 0].astype(int)
        B, S, P, w = arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4]
        m, fmt = load_model(model), weight_format(weights)
        ops = step_ops(m, fmt, kv, stage, B, S, P, flash, identical_sequences=same)
        if tp > 1:
            from ..serving.parallelism import node_for, split_ops, tp_comm_time_s
            ops = split_ops(ops, m, tp)
            link = node_for(load_hardware(hw)).intra_link()
            np.add.at(comm, ri, w * tp_comm_time_s(m, fmt, B * S, tp, link))
        for op in ops:
            size = len(ri)
            flops = np.broadcast_to(np.asarray(op.flops, dtype=np.float64), (size,))
            nbytes = np.broadcast_to(np.asarray(op.bytes, dtype=np.float64), (size,))
            reread = np.zeros(size)
            if op.kv_dtype:  # per-row unit: KV conversion where the unit lacks the cache format, and the passes
                # over the cache (materialized attention; a per-query-head decode kernel): roofline.op_bytes, each
                # pass at 1 here; a decode op's passes after the first apart in kv_reread (kv_reread_share, fitted)
                conv = np.array([kv_read_factor(dev_dtypes[i], op.kv_dtype) for i in ri])
                passes = kv_passes(op, per_head)
                kv_read = np.broadcast_to(np.asarray(op.kv_read_bytes, dtype=np.float64), (size,))
                nbytes = nbytes + (conv * passes - 1.0) * kv_read
                # the passes a share of 0 would drop: a decode op's passes after the first (0 elsewhere)
                reread = conv * (passes - kv_passes(op, per_head, 0.0)) * kv_read
            if np.any(np.asarray(op.score_bytes) > 0):  # a wider or converted score matrix (roofline.op_bytes)
                sb = np.broadcast_to(np.asarray(op.score_bytes, dtype=np.float64), (size,))
                nbytes = nbytes + (dev_score[ri] - 1.0) * sb
            is_gemm = op.compute == MATMUL and np.any(np.asarray(op.weight_bytes) > 0)
            own = op.weight_format  # an op stored in a format of its own (gpt-oss's experts, roofline.time_ops)
            rows = (np.broadcast_to(gemm_rows(op, (fmt if own is None else weight_format(own)).bytes_per_weight),
                                    (size,)) if is_gemm else np.zeros(size))
            parts["row"].append(ri)
            parts["weight"].append(w * op.count)
            parts["flops"].append(flops)
            parts["bytes"].append(nbytes)
            parts["rows_gemm"].append(rows)
            parts["gemm"].append(np.full(size, is_gemm))
            parts["peak"].append(np.array([dev_peak[i][op.compute] for i in ri]))
            parts["peak_acc16"].append(dev_acc[ri] if op.compute == MATMUL else parts["peak"][-1])
            parts["bw"].append(dev_bw[ri])
            parts["tdp_w"].append(dev_tdp[ri])
            # the format whose kernels the op runs: its own (gpt-oss's MXFP4 experts), else the model format's
            # (quantization.WeightFormat.kernel_name: llama.cpp MXFP4_MOE's other tensors run Q8_0's)
            parts["fmt"].append(np.full(size, fmt.kernel_name if own is None else own, dtype=object))
            parts["regime"].append(dev_sm[ri] & is_gemm)
            parts["grouped"].append(np.full(size, op.name in GROUPED_GEMM_OPS))
            parts["kernel_peak"].append(dev_kpeak[ri] if is_gemm else np.zeros(size))
            parts["kv_copy_bytes"].append(2.0 * np.broadcast_to(np.asarray(op.kv_read_bytes, dtype=np.float64), (size,))
                                          if stage == "decode" else np.zeros(size))
            parts["launch_s"].append(dev_launch[ri] if is_gemm else np.zeros(size))
            parts["sm"].append(dev_smc[ri])
            parts["matmul"].append(np.full(size, op.compute == MATMUL))
            parts["sync_share"].append(dev_sync[ri] if op.compute in (MATMUL, ATTENTION) else np.ones(size))
            own_wo = own is not None and is_weight_only_quantized(weight_format(own))
            # an op of its own weight-only format: mixed-input where the model format's regime applies (as
            # roofline.DeviceModel.mixed_input_unit: dev_sm, or dev_mixed for a weight-only model format)
            parts["mixed"].append((dev_mixed[ri] if own is None else (dev_sm[ri] | dev_mixed[ri]) & own_wo) & is_gemm)
            parts["own_wo"].append(np.full(size, own_wo and is_gemm))
            parts["width"].append(np.full(size, float(op.expert_width)))
            parts["kv_reread"].append(reread)
            np.add.at(row_ops, ri, w * op.count)
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    return Design(n, cat["row"], cat["weight"], cat["flops"], cat["bytes"], cat["rows_gemm"], cat["gemm"].astype(bool),
                  cat["peak"], cat["peak_acc16"], cat["bw"], cat["tdp_w"], cat["fmt"], row_ops, row_steps, meas, work, comm,
                  cat["regime"].astype(bool), cat["grouped"].astype(bool),
                  cat["kernel_peak"], cat["kv_copy_bytes"], cat["launch_s"], cat["sm"],
                  cat["matmul"].astype(bool), cat["sync_share"], cat["mixed"].astype(bool), cat["own_wo"].astype(bool),
                  cat["width"], cat["kv_reread"])



def predict_time_s(d: Design, params: dict[str, np.ndarray]) -> np.ndarray:
    """Predicted time per row. params: per-row arrays bandwidth_fraction, compute_fraction, compute_half_rows,
    regime_curves (optional, 1 = Efficiency.regime_curves), weight_only_regime and weight_only_bandwidth_share
    (optional: Efficiency.weight_only_regime, and the share of bandwidth its mixed-input GEMMs reach),
    kv_reread_share (optional: Efficiency.kv_reread_share, the cost of a decode attention's extra K/V passes),
    kernel_overhead_us, step_overhead_ms, sm_bandwidth_gbs (optional, 0 = no cap), and per-instance dequant_factor
    (1 + overhead of the op's format fmt_o) and matmul_fraction (optional: format_compute_fraction of fmt_o
    for matmul ops, 0 = compute_fraction)."""
    r = d.row
    cf = params["compute_fraction"][r]
    mf = params.get("matmul_fraction")  # per instance: format_compute_fraction[fmt_o], 0 = not listed
    if mf is not None and np.any(mf > 0):
        cf = np.where(d.matmul & (mf > 0), mf, cf)  # an op in a format of its own: that format's (own_format_flops)
    curves = params.get("regime_curves", np.ones(d.n_rows))[r] > 0  # Efficiency.regime_curves per row
    mixed = params.get("weight_only_regime")  # Efficiency.weight_only_regime per row: Marlin-style kernels
    mix_on = d.mixed & (mixed[r] > 0) & curves if mixed is not None and np.any(mixed > 0) else None
    base = d.regime & ~d.own_wo  # an op in a weight-only format of its own: the regime only as mixed-input
    on = (base | mix_on if mix_on is not None else base) & curves
    half = np.where(on, 0.0, params["compute_half_rows"][r])  # the regime curve replaces R / (R + half)
    dqf = params["dequant_factor"]
    tile = params.get("dequant_tile_tokens")  # Efficiency.dequant_tile_tokens per row (roofline.dequant_factor_at)
    if tile is not None and np.any(tile > 0):
        dqf = dequant_factor_at(d.rows_gemm, dqf, tile[r])
    scale = np.where(d.gemm, d.rows_gemm / np.maximum(d.rows_gemm + half, 1e-30) / dqf, 1.0)
    unit_peak = np.where(params["fp16_accumulate"][r] > 0, d.peak_acc16, d.peak)
    sync = params.get("sync_mma")  # Efficiency.sync_mma: mma.sync kernels reach the unit's mma_sync_share
    share = np.where(sync[r] > 0, d.sync_share, 1.0) if sync is not None and np.any(sync > 0) else 1.0
    unit_peak = unit_peak * share  # the unit's rate in the op's dtype (roofline.DeviceModel.peak_tflops)
    peak = unit_peak * cf
    cap = d.tdp_w * params["matmul_tflops_per_watt"][r] * 1e12
    peak = np.where(d.gemm & (cap > 0), np.minimum(peak, np.where(cap > 0, cap, np.inf)), peak)
    # expert GEMMs compute at regimes.grouped_compute_ratio() x the dense rate, where the regime applies at
    # grouped_wide_ratio x the width term of their per-device expert width (regimes.grouped_width_efficiency; both
    # the engine's and the tiles')
    grouped_rate = np.where(d.grouped, expert_gemm_rate(d.width, unit_peak / 1e12, on), 1.0)
    comp = d.flops / (peak * scale * grouped_rate)
    nbytes = d.bytes
    reread = params.get("kv_reread_share")  # Efficiency.kv_reread_share per row (roofline.kv_passes)
    if reread is not None and np.any(reread != 1.0):
        nbytes = nbytes + (reread[r] - 1.0) * d.kv_reread
    if "kv_cache_copy" in params and np.any(params["kv_cache_copy"] > 0):  # Efficiency.kv_cache_copy (roofline.op_bytes)
        nbytes = nbytes + params["kv_cache_copy"][r] * d.kv_copy_bytes
    per_sm = params.get("sm_bandwidth_gbs")
    if per_sm is not None and np.any(per_sm > 0):  # roofline.effective_bandwidth_bytes_s, per op instance
        bw = effective_bandwidth_bytes_s(d.bw / GB, _Eff(params["bandwidth_fraction"][r], per_sm[r]), d.sm)
    else:  # no cap: the same, without the array passes
        bw = d.bw * params["bandwidth_fraction"][r]
    mem = nbytes / bw
    if mix_on is not None and "weight_only_bandwidth_share" in params:
        # mixed-input weight-only GEMMs stream at their share of the engine's bandwidth (Efficiency field)
        mem = np.where(mix_on, mem / params["weight_only_bandwidth_share"][r], mem)
    op_t = np.maximum(comp, mem)
    if np.any(on):  # regimes.weight_gemm_time_s: tile padding and the ridge roll-off
        g = regime_constants().gemm
        kshare = np.broadcast_to(share, d.flops.shape)
        for grouped in (False, True):
            sel = on & (d.grouped == grouped)
            op_t[sel] = weight_gemm_time_s(comp[sel], mem[sel], d.rows_gemm[sel], g,
                                           d.flops[sel] / (d.kernel_peak[sel] * kshare[sel] * grouped_rate[sel]),
                                           grouped)[0]
        op_t = op_t + np.where(on, d.launch_s, 0.0)  # fp8 GEMMs: the measured fixed cost (GemmRegime.extra_launch_s)
    t = np.bincount(r, weights=d.weight * op_t, minlength=d.n_rows)
    return (t + d.row_ops * params["kernel_overhead_us"] * 1e-6 + d.row_steps * params["step_overhead_ms"] * 1e-3
            + d.comm_s)


def params_for_rows(d: Design, effs: list) -> dict[str, np.ndarray]:
    """Per-row parameter arrays from one Efficiency per row (and the per-instance dequant factor)."""
    out = {k: np.array([getattr(e, k) for e in effs], dtype=np.float64)
           for k in ("bandwidth_fraction", "compute_fraction", "compute_half_rows", "kernel_overhead_us",
                     "step_overhead_ms", "fp16_accumulate", "matmul_tflops_per_watt", "regime_curves",
                     "kv_cache_copy", "sm_bandwidth_gbs", "sync_mma", "dequant_tile_tokens",
                     "weight_only_regime", "weight_only_bandwidth_share", "kv_reread_share")}
    dq_row = [e.dequant_overhead or {} for e in effs]
    out["dequant_factor"] = np.array([1.0 + dequant_overhead_for(dq_row[i], f)[0] for i, f in zip(d.row, d.fmt)])
    fcf_row = [e.format_compute_fraction or {} for e in effs]
    out["matmul_fraction"] = np.array([fcf_row[i].get(f, 0.0) for i, f in zip(d.row, d.fmt)])
    return out


def value_from_time(d: Design, t: np.ndarray) -> np.ndarray:
    """Predicted value in the row's own unit: work / time for rates, time in ms for TTFT."""
    return np.where(d.work > 0, d.work / np.maximum(t, 1e-30), t * 1e3)
