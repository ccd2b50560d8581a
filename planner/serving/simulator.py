"""Continuous (iteration-level) batching: a discrete-event simulation of one serving engine.

The scheduler follows Orca (Yu et al., OSDI 2022) and vLLM (Kwon et al., SOSP 2023): requests join and leave the
running batch at step boundaries.
  * Paged KV allocated as tokens arrive (vLLM's BlockSpaceManager / KVCacheManager; SGLang's token pool): a
    request is admitted when the pool has blocks for its prompt, ceil(prompt / block_size), keeping a watermark of
    `watermark` x the pool free (vLLM V0's default 1%, which keeps a just-admitted sequence from being preempted at
    once). It never reserves for an output length it cannot know. A decode step appends one token to every running
    sequence; a sequence whose cached length is a multiple of block_size takes a new block for it.
  * Preemption: when a step needs more blocks than are free, the latest-admitted sequence is preempted, repeatedly
    until the step fits (vLLM V0 `_preempt` on `running.pop()`, V1 `self.running.pop()`):
      recompute (vLLM's default, the only mode of V1): its blocks are freed and it goes back to the front of the
        queue; readmitted, it prefills its prompt plus the tokens it already generated, then decodes the rest;
      swap (vLLM V0 `preemption_mode="swap"`): its blocks are copied to host memory over the host link
        (bytes / `swap_gbs`), and copied back (the same time) when the pool has room for them; swapped sequences
        are resumed before any new request is admitted (V0's running > swapped > waiting order).
    A request whose whole length, prompt + output - 1 cached tokens, exceeds the pool is rejected: it could never
    complete even alone.
  * Without chunked prefill (vLLM's prefill-first policy): when requests can be admitted, the step is a prefill of
    as many queued prompts as fit in `max_num_batched_tokens` (at least one); otherwise a decode step of every
    running sequence. The first output token comes out of the prefill step.
  * First token from a decode step (TurboMind; EngineLimits.first_token_decode, runtimes.FIRST_TOKEN_FROM_DECODE):
    a prefill (whole or in pieces, under any policy above) runs all of a prompt's tokens but the last; the
    sequence then joins the decode steps with P - 1 cached tokens, and its first token comes out of the first decode
    step it runs in, so its O tokens take O decode steps (a 1-token prompt goes straight to decoding). A recompute
    after preemption works the same way.
  * With chunked prefill (Sarathi-Serve, Agrawal et al., OSDI 2024; vLLM V1): each step carries one token of
    every running sequence plus prompt pieces filling the rest of the `max_num_batched_tokens` budget. A prompt's
    blocks are taken when it is admitted (V1 takes them chunk by chunk; the pool needed by the end is the same).
  * Chunked prefill that does not mix (SGLang's default; `mixed_prefill=False`): prompt pieces of up to
    `max_num_batched_tokens` (its chunked_prefill_size) run as steps of their own, before any decode step, while
    a prompt is part done or a queued one can be admitted (scheduler.get_next_batch_to_run: "Run prefill first if
    possible"; mixing is its --enable-mixed-chunk, off by default). The running sequences wait: under load their
    TPOT carries every prefill admitted during their lifetime.
  * Whole prompts beside the decodes (TensorRT-LLM's in-flight batching without context chunking;
    `chunked_prefill=False, mixed_prefill=True`): a step carries one token of every running sequence and as many
    whole queued prompts as fit in the rest of the budget (at least one where no prompt runs yet).
  * Reserved outputs (TensorRT-LLM's GUARANTEED_NO_EVICT capacity policy, its default; `reserve_output=True`): a
    request is admitted only when the pool holds its blocks to the last token (prompt + output - 1), counting
    what the running requests still need; so no request is ever preempted. A request's max_tokens is its output
    length here, as `vllm bench serve` sets it.
Step times come from StepModel (the core cost model). Between scheduling events (an arrival that can be admitted,
a completion, the step at which the free blocks run out) the running set is fixed, so runs of decode steps are
advanced at once with their exact total time: that is what makes 100,000 requests take seconds. Blocks are counted
with a histogram of the running sequences' lengths modulo block_size, so a run of k steps takes O(block_size).
Fast paths, each checked against its definition in tests/serving/test_fast_paths.py: the run time of k steps
comes from coefficients worked out once per (batch, context) (StepModel.decode_run), so finding the run that reaches
the next arrival (steps_to_reach) costs three or four evaluations; a run's blocks, when they surely fit, are one
slice sum (blocks_for_run); one whole prompt's prefill time is remembered per step model.

Metrics (vLLM benchmark_serving definitions): TTFT = first token - arrival (+ the engine's HTTP request path,
planner/runtimes.py REQUEST_PATH_MS, where the engine has one); TPOT = (finish - first token) / (output - 1);
end-to-end = finish - arrival (+ the same path); queueing = first admission - arrival. A preempted request keeps its
first-token time; the stall and the recompute (or swap) show in its TPOT and end-to-end time. Percentiles leave
out the first `warmup_fraction` of requests (the empty-system start). ITL (inter-token latency, as `vllm bench
serve` reports it: every gap between two consecutive tokens of a request, all requests pooled) is recorded per decode
step: its end minus each sequence's previous token (the previous decode step's end, or the first token of a
sequence that joined since), so a prompt-only step (SGLang's, or whole prompts first) lengthens the gap of every
sequence that waited through it; a run of k decode steps adds its k - 1 later gaps at its mean step time. Over all
steps (a step is no one request's: the warm-up is not left out); the gaps of a request add up to its finish - first
token, so the token-weighted mean ITL is total decode time / tokens, while TPOT averages per request.
Mean running sequences: the time-average over the whole span (first arrival to last completion) of the sequences
holding KV (admitted, not finished, not preempted), each step weighted by its duration, prefill steps included:
by construction it is Little's law, L = lambda x W, with W the time each request spends running.
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
PREEMPTION_MODES = ("recompute", "swap")
VLLM_WATERMARK = 0.01  # vLLM V0 SchedulerConfig/BlockSpaceManager watermark: 1% of the GPU blocks kept free

# request states
_WAITING, _PREFILLING, _DECODING, _SWAPPED, _DONE = range(5)


@dataclass(frozen=True)
class EngineLimits:
    """Scheduler settings (vLLM names). kv_pool_tokens: KV capacity of the engine in tokens.

    preemption: 'recompute' or 'swap'; swap moves kv_bytes_per_token (per device of the engine) x cached tokens
    over the host link at swap_gbs (GB/s, one direction) each way."""

    kv_pool_tokens: int
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = False
    block_size: int = 16
    preemption: str = "recompute"
    watermark: float = VLLM_WATERMARK
    kv_bytes_per_token: float = 0.0
    swap_gbs: float = 0.0
    request_path_s: float = 0.0  # the engine's HTTP request path (runtimes.REQUEST_PATH_MS): in TTFT and end-to-end
    mixed_prefill: bool | None = None  # a step carries the running decodes beside prompt work; None: = chunked_prefill
    reserve_output: bool = False       # admission reserves the whole output's blocks (module docstring)
    first_token_decode: bool = False   # the first token comes from a decode step (runtimes.FIRST_TOKEN_FROM_DECODE)

    @property
    def mixes(self) -> bool:
        """Whether a step with prompt work also carries every running sequence's decode token (None: vLLM's rule,
        V1 mixes its chunks, V0 prefills whole prompts alone)."""
        return self.chunked_prefill if self.mixed_prefill is None else bool(self.mixed_prefill)

    def check(self):
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise PlannerError(f"--{name.replace('_', '-')}: must be an integer >= 1, got {v!r}")
        if not isinstance(self.kv_pool_tokens, (int, np.integer)) or self.kv_pool_tokens < 0:
            raise PlannerError(f"kv_pool_tokens: must be an integer >= 0, got {self.kv_pool_tokens!r}")
        if self.preemption not in PREEMPTION_MODES:
            raise PlannerError(f"--preemption: unknown mode {self.preemption!r}; allowed: {', '.join(PREEMPTION_MODES)}")
        if not (isinstance(self.watermark, (int, float)) and 0 <= self.watermark < 1):
            raise PlannerError(f"watermark: must be a fraction in [0, 1), got {self.watermark!r}")
        if self.preemption == "swap" and not (self.swap_gbs > 0 and math.isfinite(self.swap_gbs)
                                              and self.kv_bytes_per_token > 0):
            raise PlannerError("--preemption: swap needs a host link bandwidth > 0 and the KV bytes per token")


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
    batch_time_sum: float    # integral over time of the running sequences (sequence-seconds)
    max_running: int
    preempted: np.ndarray | None = None      # preemptions per request
    running_s: np.ndarray | None = None      # time each request held KV (admitted, not preempted)
    recomputed_tokens: int = 0
    swapped_bytes: float = 0.0
    preemption: str = "recompute"
    request_path_s: float = 0.0  # EngineLimits.request_path_s: summarize adds it to TTFT and end-to-end
    itl_s: np.ndarray | None = None   # inter-token gaps (s) the decoding sequences saw, with their counts (itl_n):
    itl_n: np.ndarray | None = None   # the ITL distribution (run_engine, summarize)

    @property
    def preemptions(self) -> int:
        return int(self.preempted.sum()) if self.preempted is not None else 0


def steps_to_reach(run_time, gap: float, kmax: int) -> tuple[int, dict]:
    """Smallest k >= 1 with run_time(k) = decode_run_time(k) >= gap (k <= kmax), and the run times evaluated
    on the way ({k: seconds}). The starting guess fits k t0 + s k (k - 1) / 2 through t0 = the first step's time
    (run_time.step0_s where the step model gives it, else run_time(1)) and run_time(kmax) (exact for quadratic run
    times); the walk that follows makes the answer exact."""
    seen = {kmax: run_time(kmax)}
    if seen[kmax] <= gap:
        return kmax, seen
    if kmax == 1:
        return 1, seen
    t0 = getattr(run_time, "step0_s", None) or run_time(1)
    s = 2 * (seen[kmax] - kmax * t0) / (kmax * (kmax - 1))
    if s > 1e-15:
        # k t0 + s k (k - 1) / 2 = gap
        a2, a1 = s / 2, t0 - s / 2
        k = math.ceil((-a1 + math.sqrt(a1 * a1 + 4 * a2 * gap)) / (2 * a2))
    else:
        k = math.ceil(gap / t0) if t0 > 0 else kmax
    k = min(max(k, 1), kmax)
    while k > 1:
        v = seen.get(k - 1)
        if v is None:
            v = seen[k - 1] = run_time(k - 1)
        if v < gap:
            break
        k -= 1
    while k < kmax:
        v = seen.get(k)
        if v is None:
            v = seen[k] = run_time(k)
        if v >= gap:
            break
        k += 1
    return k, seen


def blocks_for_run(cnt: list[int], bs: int, D: int, b: int, free: int, kmax: int) -> tuple[int, int]:
    """Largest k <= kmax decode steps of the b running sequences whose new blocks fit in `free` blocks, and the
    blocks they take. cnt[r]: decoding sequences whose cached length is base + D with base % bs == r; step j
    (decode counter D + j) gives a new block to those at residue (-(D + j)) % bs. After make_room at least
    step 0 fits."""
    if b == 0:
        return kmax, 0
    cyc = min(kmax // bs, free // b)   # every block_size steps each sequence takes exactly one block
    k, f = cyc * bs, free - cyc * b
    if f >= b:
        # the last r < block_size steps fall on r distinct residues, whose sequences number <= b <= f:
        # all fit; they take the blocks of the sequences at residues (-D - j) % bs, j < r
        r = kmax - k
        if r <= 0:
            return kmax, free - f
        s0 = (-D) % bs
        lo = s0 - r + 1
        part = sum(cnt[lo:s0 + 1]) if lo >= 0 else sum(cnt[:s0 + 1]) + sum(cnt[bs + lo:])
        return kmax, free - f + part
    while k < kmax:
        a = cnt[(-(D + k)) % bs]
        if a > f:
            break
        f -= a
        k += 1
    return k, free - f


def run_engine(sm: StepModel, reqs: Requests, lim: EngineLimits) -> EngineTrace:
    """Simulate one engine serving `reqs`; returns per-request timestamps (rules in the module docstring)."""
    lim.check()
    n = len(reqs)
    arr = reqs.arrival_s.tolist()
    P0 = [int(x) for x in reqs.prompt]
    O0 = [int(x) for x in reqs.output]
    bs = lim.block_size
    total = lim.kv_pool_tokens // bs
    wm = int(lim.watermark * total)
    swap = lim.preemption == "swap"
    block_s = bs * lim.kv_bytes_per_token / (lim.swap_gbs * 1e9) if swap else 0.0
    block_bytes = bs * lim.kv_bytes_per_token
    nan = math.nan
    admit, first, finish = [nan] * n, [nan] * n, [nan] * n
    lag = 1 if lim.first_token_decode else 0   # prompt tokens left to a decode step (the last one, or none)
    pending: dict[int, int] = {}   # first token due at the end of the next decode step: request -> its generation
    pre = list(P0)          # tokens the next prefill processes (after a recompute: prompt + generated so far)
    rem = list(O0)          # tokens still to produce
    whole = [-(-(p + o - 1) // bs) for p, o in zip(P0, O0)]   # blocks at the last token
    state = [_WAITING] * n
    base = [0] * n          # decoding: cached length = base + D
    gen = [0] * n           # heap entries of an earlier generation are stale
    held = [0] * n          # blocks of a prefilling or swapped request
    cached = [0] * n        # swapped: cached length
    npre = [0] * n
    fin_at = [0] * n        # decoding: decode counter at which its last token comes out
    run_s = [0.0] * n
    seg = [0.0] * n         # start of the current running segment
    cnt = [0] * bs          # decoding sequences by base mod block_size
    active: dict[int, None] = {}   # admitted and holding blocks, in admission order
    max_seqs, budget_tokens, chunked = lim.max_num_seqs, lim.max_num_batched_tokens, lim.chunked_prefill
    mixed, reserve = lim.mixes, lim.reserve_output
    piecewise = chunked or mixed   # steps built within the token budget (every policy but whole-prompt prefill steps)
    # blocks a request still takes after its prompt's, to its last token: what reserve_output holds back for it
    future = [w - -(-p // bs) for w, p in zip(whole, P0)] if reserve else [0] * n

    free = total
    now, nxt, D = 0.0, 0, 0
    waiting: deque[int] = deque()
    swapped: deque[int] = deque()
    prefilling: deque[list[int]] = deque()   # [request, prompt tokens done]
    heap: list[tuple[int, int, int]] = []    # (decode counter at which it finishes, request, generation)
    b, sum_base = 0, 0
    owed = 0                # reserve_output: blocks the admitted requests are still owed (held back from admission)
    steps, busy, bsum, maxrun = 0, 0.0, 0.0, 0
    recomputed, swapped_bytes = 0, 0.0
    # inter-token latency: a decode step gives every decoding sequence a token; its gap is the step's end minus that
    # sequence's previous token: the previous decode step's end for the sequences that ran in it (any prompt-only
    # step, swap or preemption stall in between included), its first token for one that joined since (`joined`).
    # A run of k decode steps adds k - 1 gaps of its mean step time (its steps differ only by the context their b
    # sequences add). Gap values and how many tokens saw each.
    itl_s, itl_n = [], []
    joined: list[float] = []   # first-token times of the sequences that began decoding since the last decode step
    last_end = math.nan        # end of the last decode step

    def start_decoding(i: int, length: int, to_go: int) -> None:
        """Request i holds `length` cached tokens and decodes `to_go` more tokens from now on."""
        nonlocal b, sum_base
        state[i] = _DECODING
        base[i] = length - D
        sum_base += base[i]
        cnt[base[i] % bs] += 1
        b += 1
        gen[i] += 1
        fin_at[i] = D + to_go
        heapq.heappush(heap, (D + to_go, i, gen[i]))

    def stop_decoding(i: int) -> int:
        """Remove a decoding request from the batch; returns its cached length (its blocks are not freed here)."""
        nonlocal b, sum_base
        b -= 1
        sum_base -= base[i]
        cnt[base[i] % bs] -= 1
        gen[i] += 1
        del active[i]
        run_s[i] += now - seg[i]
        return base[i] + D

    def admit_one(i: int) -> None:
        nonlocal free, owed
        free -= -(-pre[i] // bs)
        held[i] = -(-pre[i] // bs)
        owed += future[i]
        if math.isnan(admit[i]):
            admit[i] = now
        active[i] = None
        seg[i] = now

    def prompt_done(i: int) -> None:
        """Request i's prefill is done: a token is out now; it decodes the rest (or finishes). Where the first token
        comes from a decode step (lag 1), the prefill ran pre - 1 tokens: it decodes every token still to produce,
        the first due at the end of its first decode step (`pending`)."""
        nonlocal free
        if lag:
            length = pre[i] - 1
            free += held[i] - -(-length // bs)   # the decode step takes the last prompt token's block, if new
            held[i] = 0
            start_decoding(i, length, rem[i])
            if math.isnan(first[i]):
                pending[i] = gen[i]
            return
        if math.isnan(first[i]):
            first[i] = now
        rem[i] -= 1
        if rem[i] > 0:
            joined.append(now)   # its token now; its first gap ends at the next decode step
        if rem[i] <= 0:
            finish[i] = now
            state[i] = _DONE
            free += held[i]
            del active[i]
            run_s[i] += now - seg[i]
        else:
            start_decoding(i, pre[i], rem[i])
        held[i] = 0

    def complete(until: int) -> None:
        """Decoding requests whose last token came out by decode counter `until`."""
        nonlocal free
        while heap and heap[0][0] <= until:
            _, i, g = heapq.heappop(heap)
            if g != gen[i]:
                continue
            length = stop_decoding(i)
            free += -(-length // bs)
            finish[i] = now
            state[i] = _DONE

    def preempt_latest() -> float:
        """Preempt the latest-admitted request; returns the swap-out time it costs."""
        nonlocal free, recomputed, swapped_bytes
        v = next(reversed(active))
        npre[v] += 1
        if state[v] == _PREFILLING:   # a prompt in pieces: start it again later
            for it in reversed(prefilling):
                if it[0] == v:
                    prefilling.remove(it)
                    break
            del active[v]
            run_s[v] += now - seg[v]
            free += held[v]
            held[v] = 0
            state[v] = _WAITING
            waiting.appendleft(v)
            return 0.0
        to_go = fin_at[v] - D
        length = stop_decoding(v)
        blocks = -(-length // bs)
        free += blocks
        if swap:
            held[v], cached[v], rem[v] = blocks, length, to_go
            state[v] = _SWAPPED
            swapped.append(v)
            swapped_bytes += blocks * block_bytes
            return blocks * block_s
        recomputed += length
        pre[v], rem[v] = length + 1, to_go   # prefill prompt + every token generated so far
        state[v] = _WAITING
        waiting.appendleft(v)
        return 0.0

    def make_room() -> float:
        """Preempt until the next decode step's new blocks fit; returns swap-out time."""
        t = 0.0
        while b and cnt[(-D) % bs] > free:
            t += preempt_latest()
        return t

    def fits(i: int) -> bool:
        """Request i's prompt blocks (and, reserving outputs, the rest to its last token) fit beside the watermark
        and what the admitted requests are owed."""
        return -(-pre[i] // bs) + future[i] <= free - wm - owed

    def advance(dt: float, resident: int) -> None:
        nonlocal now, busy, bsum
        now += dt
        busy += dt
        bsum += resident * dt

    def gaps(t_end: float, decoding: int, pend: int) -> None:
        """A decode step ending at t_end gave `decoding` sequences a token; `pend` of them their first (no gap)."""
        nonlocal last_end
        old_n = decoding - pend - len(joined)
        if old_n > 0 and last_end == last_end:
            itl_s.append(t_end - last_end)
            itl_n.append(old_n)
        if joined:
            for t in joined:
                itl_s.append(t_end - t)
                itl_n.append(1)
            joined.clear()
        last_end = t_end

    def firsts_out(t: float) -> None:
        """A decode step ended at t: the pending first tokens of the sequences that ran in it come out."""
        for i, g in pending.items():
            if gen[i] == g and state[i] == _DECODING:
                first[i] = t
        pending.clear()

    while True:
        while nxt < n and arr[nxt] <= now:
            if whole[nxt] > total - wm:
                state[nxt] = _DONE  # can never complete, even alone: rejected (times stay NaN)
            else:
                waiting.append(nxt)
            nxt += 1
        # swapped sequences come back first (vLLM V0: running > swapped > waiting)
        while swapped and b + len(prefilling) < max_seqs and held[swapped[0]] <= free - wm:
            i = swapped.popleft()
            free -= held[i]
            active[i] = None
            seg[i] = now
            advance(held[i] * block_s, b + len(prefilling) + 1)   # the copy back stalls the engine
            held[i] = 0
            start_decoding(i, cached[i], rem[i])
            if lag and math.isnan(first[i]):
                pending[i] = gen[i]
        can_admit = (not swapped and bool(waiting) and b + len(prefilling) < max_seqs and fits(waiting[0]))

        if not piecewise and can_admit:
            batch, tokens = [], 0
            while waiting and b + len(batch) < max_seqs:
                i = waiting[0]
                if not fits(i) or (batch and tokens + pre[i] - lag > budget_tokens):
                    break
                waiting.popleft()
                batch.append(i)
                tokens += pre[i] - lag
                admit_one(i)
                state[i] = _PREFILLING
            work = [pre[i] - lag for i in batch if pre[i] > lag]
            if work:
                dt = sm.prefill_time(work)
                now += dt   # advance(dt, b + len(batch)), inlined
                busy += dt
                bsum += (b + len(batch)) * dt
                steps += 1
            for i in batch:
                prompt_done(i)
            maxrun = max(maxrun, b)
            continue

        if piecewise and (prefilling or can_admit):
            a = 0
            if mixed and b:
                wait = make_room()
                if wait:
                    advance(wait, b + len(prefilling))
                a = cnt[(-D) % bs]
                free -= a
            db = b if mixed else 0   # running sequences whose decode token rides in this step
            room = budget_tokens - db
            pieces_n, pieces_p, ready = [], [], []
            for item in prefilling:
                if room <= 0:
                    break
                i, done = item
                take = min(pre[i] - lag - done, room)
                pieces_n.append(take)
                pieces_p.append(done)
                room -= take
            while (room > 0 and waiting and not swapped and b + len(prefilling) < max_seqs
                   and fits(waiting[0])):
                if not chunked and pre[waiting[0]] - lag > room and pieces_n:
                    break   # a whole prompt waits for a step with room for it
                i = waiting.popleft()
                admit_one(i)
                if pre[i] <= lag:   # nothing to prefill: it decodes from the step after this one
                    state[i] = _PREFILLING
                    ready.append(i)
                    continue
                state[i] = _PREFILLING
                item = [i, 0]
                prefilling.append(item)
                take = min(pre[i] - lag, room) if chunked else pre[i] - lag
                pieces_n.append(take)
                pieces_p.append(0)
                room -= take
            if pieces_n:
                k_items = list(prefilling)[:len(pieces_n)]
                completing = [it for it, nn, pp in zip(k_items, pieces_n, pieces_p) if pp + nn >= pre[it[0]] - lag]
                feats_d = sm.decode_features(b, sum_base + b * D) if db else None
                dt = sm.step_time(db + sum(pieces_n), db + len(completing), feats_d,
                                  sm.prefill_features(pieces_n, pieces_p))
                advance(dt, b + len(prefilling))
                steps += 1
                if db:
                    gaps(now, db, len(pending))
                owed -= min(a, owed)
                for it, nn in zip(k_items, pieces_n):
                    it[1] += nn
                if db:
                    D += 1
                    if pending:
                        firsts_out(now)
                    complete(D)
                for it in completing:
                    prefilling.remove(it)
                    prompt_done(it[0])
                for i in ready:
                    prompt_done(i)
                maxrun = max(maxrun, b + len(prefilling))
                continue
            free += a  # no prompt piece to run: the decode branch takes this step
            for i in ready:
                prompt_done(i)

        if b > 0:
            if cnt[(-D) % bs] > free:   # make_room has work to do
                wait = make_room()
                if wait:
                    advance(wait, b + len(prefilling))
            if b > 0:
                while heap and heap[0][2] != gen[heap[0][1]]:
                    heapq.heappop(heap)
                k = heap[0][0] - D
                run_time = sm.decode_run(b, sum_base + b * D)
                seen = None
                if piecewise and prefilling:
                    k = 1
                elif not waiting and not swapped and nxt < n:
                    k, seen = steps_to_reach(run_time, arr[nxt] - now, k)
                k, taken = blocks_for_run(cnt, bs, D, b, free, k)
                free -= taken
                owed -= min(taken, owed)
                dt = seen[k] if seen and k in seen else run_time(k)
                npend = len(pending)
                if pending:   # their first decode step is the run's first
                    firsts_out(now + (dt if k == 1 else seen[1] if seen and 1 in seen else run_time(1)))
                gaps(now + dt / k, b, npend)   # the run's first step ...
                if k > 1:   # ... and the k - 1 after it
                    itl_s.append(dt / k)
                    itl_n.append(b * (k - 1))
                    last_end = now + dt
                now += dt   # advance(dt, b), inlined
                busy += dt
                bsum += b * dt
                D += k
                steps += k
                if heap[0][0] <= D:
                    complete(D)
                continue

        if nxt < n:
            now = max(now, arr[nxt])
            continue
        break

    return EngineTrace(reqs.arrival_s, np.array(admit), np.array(first), np.array(finish), reqs.prompt, reqs.output,
                       steps, busy, bsum, maxrun, np.array(npre, dtype=np.int64), np.array(run_s), recomputed,
                       swapped_bytes, lim.preemption, lim.request_path_s, np.array(itl_s), np.array(itl_n))


_QUANTILES = tuple(q / 100 for q in PERCENTILES)   # np.percentile's np.true_divide(q, 100): the same quotients


def percentiles(x: np.ndarray) -> list[float]:
    """np.percentile(x, PERCENTILES) of a non-empty finite array, its default method ('linear', Hyndman & Fan
    type 7: the order statistics at (n - 1) q interpolated) with numpy's float operations in numpy's order (its
    _lerp: a + (b - a) t, or b - (b - a) (1 - t) where t >= 0.5), so the same values bit for bit
    (tests/serving/test_plan_fast_paths.py), without numpy's per-call overhead (about 0.1 ms, four per summary)."""
    n = len(x)
    a = np.sort(x)
    out = []
    for q in _QUANTILES:
        v = (n - 1) * q
        if v >= n - 1:
            out.append(float(a[-1]))
            continue
        lo = math.floor(v)
        t = v - lo
        lo_v, hi_v = float(a[lo]), float(a[lo + 1])
        d = hi_v - lo_v
        out.append(hi_v - d * (1 - t) if t >= 0.5 else lo_v + d * t)
    return out


def _pct(x: np.ndarray, scale: float) -> dict[str, float | None]:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {f"p{q}": None for q in PERCENTILES} | {"mean": None}
    return {f"p{q}": val * scale for q, val in zip(PERCENTILES, percentiles(x))} | {"mean": float(np.mean(x) * scale)}


def _weighted_pct(x: np.ndarray | None, w: np.ndarray | None, scale: float) -> dict[str, float | None]:
    """Percentiles (the first value whose cumulative count reaches q% of all: a weighted median for p50) and mean of
    values x counted w times each."""
    if x is None or len(x) == 0 or float(np.sum(w)) <= 0:
        return {f"p{q}": None for q in PERCENTILES} | {"mean": None}
    o = np.argsort(x, kind="stable")
    xs, c = x[o], np.cumsum(w[o], dtype=np.float64)
    tot = c[-1]
    out = {f"p{q}": float(xs[min(int(np.searchsorted(c, q / 100 * tot)), len(xs) - 1)]) * scale for q in PERCENTILES}
    return out | {"mean": float(np.dot(x, w) / tot) * scale}


def summarize(tr: EngineTrace, warmup_fraction: float = 0.1) -> dict:
    """Latency percentiles (ms for TTFT/TPOT/queueing, s for end-to-end), throughput, occupancy and preemptions.

    mean_running = (integral of running sequences over time) / span (Little's law L = lambda W, module docstring);
    mean_batch_busy = the same integral / busy time (the mean batch while the engine works)."""
    n = len(tr.arrival_s)
    keep = np.arange(n) >= int(n * warmup_fraction)
    done = np.isfinite(tr.finish_s)
    rejected = int(np.sum(~done))
    k = keep & done
    # a served request's first token also crosses the engine's HTTP request path (EngineLimits.request_path_s), which
    # runs beside the GPU's steps: it lengthens TTFT and end-to-end, not TPOT, not the engine's throughput
    ttft = tr.first_s - tr.arrival_s + tr.request_path_s
    multi = tr.output > 1
    tpot = np.where(multi, (tr.finish_s - tr.first_s) / np.maximum(tr.output - 1, 1), np.nan)
    e2e = tr.finish_s - tr.arrival_s + tr.request_path_s
    queue = tr.admit_s - tr.arrival_s
    span = float(np.nanmax(tr.finish_s) - tr.arrival_s[0]) if done.any() else 0.0
    out_tokens = float(np.sum(tr.output[done]))
    pre = tr.preempted if tr.preempted is not None else np.zeros(n, dtype=np.int64)
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
        # every decode step of the run (warm-up included: a step is not one request's): the gaps between a
        # sequence's consecutive tokens, as `vllm bench serve` reports ITL
        "itl_ms": _weighted_pct(tr.itl_s, tr.itl_n, 1e3),
        "mean_running": tr.batch_time_sum / span if span > 0 else 0.0,
        "mean_batch_busy": tr.batch_time_sum / tr.busy_s if tr.busy_s > 0 else 0.0,
        "max_running": tr.max_running,
        "busy_fraction": min(1.0, tr.busy_s / span) if span > 0 else 0.0,
        "steps": tr.steps,
        "preemption_mode": tr.preemption,
        "preemptions": int(pre.sum()),
        "preempted_requests": int(np.sum(pre > 0)),
        "preempted_fraction": float(np.mean(pre[k] > 0)) if k.any() else 0.0,
        "recomputed_tokens": int(tr.recomputed_tokens),
        "swapped_gb": float(tr.swapped_bytes) / 1e9,
    }
