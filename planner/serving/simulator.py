"""Continuous (iteration-level) batching: a discrete-event simulation of one serving engine.

The scheduler follows Orca (Yu et al., OSDI 2022) and vLLM (Kwon et al., SOSP 2023): requests join and leave the
running batch at step boundaries.
  * Admission: the head of the FIFO queue is admitted when the batch has fewer than `max_num_seqs` sequences and
    the paged KV pool has blocks for its whole length, ceil((prompt + output) / block_size) blocks (reserved at
    admission and freed at completion: vLLM's paged allocation without preemption). A request longer than the
    whole pool is rejected.
  * Without chunked prefill (vLLM's prefill-first policy): when requests can be admitted, the step is a prefill of
    as many queued prompts as fit in `max_num_batched_tokens` (at least one); otherwise a decode step of every
    running sequence. The first output token comes out of the prefill step.
  * With chunked prefill (Sarathi-Serve, Agrawal et al., OSDI 2024; vLLM V1): each step carries one token of
    every running sequence plus prompt pieces filling the rest of the `max_num_batched_tokens` budget.
Step times come from StepModel (the core cost model). Between scheduling events (an arrival that can be admitted,
a completion) the running set is fixed, so runs of decode steps are advanced at once with their exact total time:
that is what makes 100,000 requests take seconds.

Metrics (vLLM benchmark_serving definitions): TTFT = first token - arrival; TPOT = (finish - first token) /
(output - 1); end-to-end = finish - arrival; queueing = admission - arrival. Percentiles leave out the first
`warmup_fraction` of requests (the empty-system start).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import PlannerError
from .step_model import StepModel
from .workload import Requests

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class EngineLimits:
    """Scheduler settings (vLLM names). kv_pool_tokens: KV capacity of the engine in tokens."""

    kv_pool_tokens: int
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = False
    block_size: int = 16

    def check(self):
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise PlannerError(f"--{name.replace('_', '-')}: must be an integer >= 1, got {v!r}")


@dataclass
class EngineTrace:
    """Per-request times (seconds; NaN for rejected requests) and engine counters."""

    arrival_s: np.ndarray
    admit_s: np.ndarray
    first_s: np.ndarray
    finish_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    steps: int
    busy_s: float
    batch_time_sum: float    # sum over steps of (running sequences x step time)
    max_running: int


def run_engine(sm: StepModel, reqs: Requests, lim: EngineLimits) -> EngineTrace:
    """Simulate one engine serving `reqs`; returns per-request timestamps."""
    lim.check()
    n = len(reqs)
    arr = reqs.arrival_s.tolist()
    P = [int(x) for x in reqs.prompt]
    O = [int(x) for x in reqs.output]
    bs = lim.block_size
    need = [-(-(p + o) // bs) for p, o in zip(P, O)]
    total_blocks = lim.kv_pool_tokens // bs
    free = total_blocks
    nan = math.nan
    admit, first, finish = [nan] * n, [nan] * n, [nan] * n
    base = [0] * n
    max_seqs, budget_tokens, chunked = lim.max_num_seqs, lim.max_num_batched_tokens, lim.chunked_prefill

    now, nxt, D = 0.0, 0, 0
    waiting: deque[int] = deque()
    prefilling: deque[list[int]] = deque()   # [request, prompt tokens done]
    heap: list[tuple[int, int]] = []        # (decode counter at which it finishes, request)
    b, sum_base = 0, 0
    steps, busy, bsum, maxrun = 0, 0.0, 0.0, 0

    def steps_to_reach(gap: float, kmax: int) -> int:
        """Smallest k >= 1 with decode_run_time(k) >= gap (k <= kmax)."""
        C = sum_base + b * D
        if sm.decode_run_time(b, C, kmax) <= gap:
            return kmax
        t0 = sm.decode_time(b, C)
        t1 = sm.decode_time(b, C + b * (kmax - 1))
        s = (t1 - t0) / max(kmax - 1, 1)
        if s > 1e-15:
            # k t0 + s k (k - 1) / 2 = gap
            a2, a1 = s / 2, t0 - s / 2
            k = math.ceil((-a1 + math.sqrt(a1 * a1 + 4 * a2 * gap)) / (2 * a2))
        else:
            k = math.ceil(gap / t0)
        k = min(max(k, 1), kmax)
        while k > 1 and sm.decode_run_time(b, C, k - 1) >= gap:
            k -= 1
        while k < kmax and sm.decode_run_time(b, C, k) < gap:
            k += 1
        return k

    def prompt_done(i: int) -> None:
        """Request i's prompt is in the cache: its first token is out now; it decodes the rest (or finishes)."""
        nonlocal free, sum_base, b
        first[i] = now
        if O[i] <= 1:
            finish[i] = now
            free += need[i]
        else:
            heapq.heappush(heap, (D + O[i] - 1, i))
            base[i] = P[i] - D
            sum_base += base[i]
            b += 1

    while True:
        while nxt < n and arr[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        while waiting and need[waiting[0]] > total_blocks:
            waiting.popleft()  # can never fit: rejected (times stay NaN)
        can_admit = bool(waiting) and b + len(prefilling) < max_seqs and need[waiting[0]] <= free

        if not chunked and can_admit:
            batch, tokens = [], 0
            while waiting and b + len(batch) < max_seqs:
                i = waiting[0]
                if need[i] > free or (batch and tokens + P[i] > budget_tokens):
                    break
                waiting.popleft()
                batch.append(i)
                tokens += P[i]
                free -= need[i]
            dt = sm.prefill_time([P[i] for i in batch])
            for i in batch:
                admit[i] = now
            now += dt
            steps += 1
            busy += dt
            for i in batch:
                prompt_done(i)
            maxrun = max(maxrun, b)
            continue

        if chunked and (prefilling or can_admit):
            room = budget_tokens - b
            pieces_n, pieces_p = [], []
            for item in prefilling:
                if room <= 0:
                    break
                i, done = item
                take = min(P[i] - done, room)
                pieces_n.append(take)
                pieces_p.append(done)
                room -= take
            while room > 0 and waiting and b + len(prefilling) < max_seqs and need[waiting[0]] <= free:
                i = waiting.popleft()
                free -= need[i]
                admit[i] = now
                item = [i, 0]
                prefilling.append(item)
                take = min(P[i], room)
                pieces_n.append(take)
                pieces_p.append(0)
                room -= take
            if pieces_n:
                k_items = list(prefilling)[:len(pieces_n)]
                completing = [it for it, nn, pp in zip(k_items, pieces_n, pieces_p) if pp + nn >= P[it[0]]]
                feats_d = sm.decode_features(b, sum_base + b * D) if b else None
                dt = sm.step_time(b + sum(pieces_n), b + len(completing), feats_d,
                                  sm.prefill_features(pieces_n, pieces_p))
                now += dt
                steps += 1
                busy += dt
                bsum += b * dt
                for it, nn in zip(k_items, pieces_n):
                    it[1] += nn
                if b:
                    D += 1
                    while heap and heap[0][0] <= D:
                        _, i = heapq.heappop(heap)
                        finish[i] = now
                        free += need[i]
                        b -= 1
                        sum_base -= base[i]
                for it in completing:
                    prefilling.remove(it)
                    prompt_done(it[0])
                maxrun = max(maxrun, b + len(prefilling))
                continue

        if b > 0:
            k = heap[0][0] - D
            if chunked and prefilling:
                k = 1
            elif not waiting and nxt < n:
                k = steps_to_reach(arr[nxt] - now, k)
            C = sum_base + b * D
            dt = sm.decode_run_time(b, C, k)
            now += dt
            D += k
            steps += k
            busy += dt
            bsum += b * dt
            while heap and heap[0][0] <= D:
                _, i = heapq.heappop(heap)
                finish[i] = now
                free += need[i]
                b -= 1
                sum_base -= base[i]
            continue

        if nxt < n:
            now = max(now, arr[nxt])
            continue
        break

    return EngineTrace(reqs.arrival_s, np.array(admit), np.array(first), np.array(finish), reqs.prompt, reqs.output,
                       steps, busy, bsum, maxrun)


def _pct(x: np.ndarray, scale: float) -> dict[str, float | None]:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {f"p{q}": None for q in PERCENTILES} | {"mean": None}
    v = np.percentile(x, PERCENTILES) * scale
    return {f"p{q}": float(val) for q, val in zip(PERCENTILES, v)} | {"mean": float(np.mean(x) * scale)}


def summarize(tr: EngineTrace, warmup_fraction: float = 0.1) -> dict:
    """Latency percentiles (ms for TTFT/TPOT/queueing, s for end-to-end), throughput and occupancy."""
    n = len(tr.arrival_s)
    keep = np.arange(n) >= int(n * warmup_fraction)
    done = np.isfinite(tr.finish_s)
    rejected = int(np.sum(~done))
    k = keep & done
    ttft = tr.first_s - tr.arrival_s
    multi = tr.output > 1
    tpot = np.where(multi, (tr.finish_s - tr.first_s) / np.maximum(tr.output - 1, 1), np.nan)
    e2e = tr.finish_s - tr.arrival_s
    queue = tr.admit_s - tr.arrival_s
    span = float(np.nanmax(tr.finish_s) - tr.arrival_s[0]) if done.any() else 0.0
    out_tokens = float(np.sum(tr.output[done]))
    return {
        "requests": n, "completed": int(done.sum()), "rejected": rejected,
        "duration_s": span,
        "requests_per_s": done.sum() / span if span > 0 else 0.0,
        "output_tokens_per_s": out_tokens / span if span > 0 else 0.0,
        "offered_requests_per_s": (n - 1) / float(tr.arrival_s[-1] - tr.arrival_s[0]) if n > 1 and tr.arrival_s[-1] > tr.arrival_s[0] else None,
        "ttft_ms": _pct(ttft[k], 1e3),
        "tpot_ms": _pct(tpot[k & multi], 1e3),
        "e2e_s": _pct(e2e[k], 1.0),
        "queue_ms": _pct(queue[k], 1e3),
        "mean_running": tr.batch_time_sum / tr.busy_s if tr.busy_s > 0 else 0.0,
        "max_running": tr.max_running,
        "busy_fraction": tr.busy_s / span if span > 0 else 0.0,
        "steps": tr.steps,
    }
