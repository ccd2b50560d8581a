"""Workloads: a request rate and distributions of prompt and output lengths, or a CSV trace.

Length distributions (tokens, rounded to integers, clipped to [min, max]):
  fixed      every request has `mean` tokens
  uniform    uniform on [min, max]
  lognormal  exp(N(mu, sigma^2)) with the requested mean: mu = ln(mean) - sigma^2 / 2 (so E = mean);
             sigma is the spread of ln(length) (0.5 ~ a factor 1.65 either side)
Arrivals: a Poisson process at `qps` requests per second (exponential gaps), or the trace's own times.

A trace is a CSV with a header `arrival_s,prompt_tokens,output_tokens` (arrival times in seconds, non-decreasing).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import PlannerError, pydantic_one_line

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
# hard limits (issue 15): simulated requests, trace rows and tokens per request, request rate
MAX_REQUESTS = 1_000_000
MAX_TRACE_ROWS = 1_000_000
MAX_TOKENS = 1 << 24          # 16,777,216 tokens per prompt or output: beyond any model's context
MIN_QPS, MAX_QPS = 1e-6, 1e6


def check_requests(n, flag: str = "--requests") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_REQUESTS:
        raise PlannerError(f"{flag}: must be an integer in [1, {MAX_REQUESTS:,}], got {n!r}")
    return int(n)


def check_seed(seed, flag: str = "--seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= 2**32 - 1:
        raise PlannerError(f"{flag}: must be an integer in [0, {2**32 - 1}], got {seed!r}")
    return int(seed)


def check_qps(q, flag: str = "--qps") -> float:
    if isinstance(q, bool) or not isinstance(q, (int, float, np.floating)) or not MIN_QPS <= float(q) <= MAX_QPS:
        raise PlannerError(f"{flag}: must be a finite number of requests per second in [{MIN_QPS:g}, {MAX_QPS:g}], "
                           f"got {q!r}")
    return float(q)


class LengthDist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["fixed", "uniform", "lognormal"]
    mean: float | None = Field(None, gt=0, le=MAX_TOKENS, allow_inf_nan=False)
    sigma: float = Field(0.5, ge=0, le=5, allow_inf_nan=False, description="lognormal spread of ln(length)")
    min: int = Field(1, ge=1, le=MAX_TOKENS)
    max: int = Field(131072, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _check(self):
        if self.kind in ("fixed", "lognormal") and self.mean is None:
            raise ValueError(f"{self.kind} needs a mean")
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) < min ({self.min})")
        return self

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            x = np.full(n, float(self.mean))
        elif self.kind == "uniform":
            x = rng.uniform(self.min, self.max + 1, size=n)
        else:
            mu = np.log(self.mean) - self.sigma**2 / 2
            x = rng.lognormal(mu, self.sigma, size=n)
        return np.clip(np.floor(x), self.min, self.max).astype(np.int64)

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"{self.mean:g}"
        if self.kind == "uniform":
            return f"uniform {self.min}-{self.max}"
        return f"lognormal mean {self.mean:g}, sigma {self.sigma:g} (clip {self.min}-{self.max})"


class Workload(BaseModel):
    """Traffic: requests per second and the prompt/output length distributions (or a trace file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    qps: float = Field(ge=MIN_QPS, le=MAX_QPS, allow_inf_nan=False)
    prompt: LengthDist
    output: LengthDist
    trace: str | None = Field(None, description="CSV trace; its lengths are used, arrivals rescaled to qps if given")

    def describe(self) -> str:
        if self.trace:
            return f"trace {Path(self.trace).name} at {self.qps:g} req/s"
        return f"{self.qps:g} req/s, prompt {self.prompt.describe()}, output {self.output.describe()}"


@dataclass(frozen=True)
class Requests:
    """Concrete requests, sorted by arrival: times in seconds, lengths in tokens."""

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)

    def split(self, replicas: int) -> "Requests":
        """The share of one of r replicas under round-robin routing: every r-th request."""
        if replicas <= 1:
            return self
        return Requests(self.arrival_s[::replicas], self.prompt[::replicas], self.output[::replicas])

    def at_once(self) -> "Requests":
        """The same requests all arriving at t = 0: a burst (`vllm bench serve`'s default, --request-rate inf with
        no concurrency limit) or MLPerf's Offline scenario."""
        return Requests(np.zeros(len(self)), self.prompt, self.output)

    @property
    def rate_per_s(self) -> float:
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0
        return (len(self) - 1) / span if span > 0 else float("inf")


def make_workload(qps: float, prompt: dict | LengthDist, output: dict | LengthDist, trace: str | None = None) -> Workload:
    try:
        return Workload(qps=qps, prompt=prompt, output=output, trace=trace)
    except ValidationError as exc:
        raise pydantic_one_line("workload", exc) from None


def generate(w: Workload, n: int, seed: int = 0, stride: int = 1) -> Requests:
    """n requests: Poisson arrivals at w.qps and sampled lengths; or the trace (cycled if shorter than n x stride),
    with arrival times scaled so that its mean rate is w.qps, taking every `stride`-th row (round-robin routing to
    one of `stride` engines: rows 0, stride, 2 stride, ...)."""
    check_requests(n)
    check_seed(seed)
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or not 1 <= stride <= 10**7:
        raise PlannerError(f"--replicas: engines sharing the traffic must be an integer in [1, 1e7], got {stride!r}")
    if w.trace:
        tr = load_trace(w.trace)
        span = float(tr.arrival_s[-1] - tr.arrival_s[0]) + (1.0 / tr.rate_per_s if np.isfinite(tr.rate_per_s) else 1.0)
        idx = np.arange(n, dtype=np.int64) * int(stride)
        cyc, row = np.divmod(idx, len(tr))
        arr = tr.arrival_s[row] - tr.arrival_s[0] + cyc * span
        rate = (len(tr) / span) if span > 0 else w.qps
        return Requests(arr * (rate / w.qps), tr.prompt[row], tr.output[row])
    # one random stream per field, so that the first k of n requests are the same for every n >= k
    gaps = np.random.default_rng([seed, 0]).exponential(1.0 / w.qps, size=n)
    return Requests(np.cumsum(gaps) - gaps[0], w.prompt.sample(n, np.random.default_rng([seed, 1])),
                    w.output.sample(n, np.random.default_rng([seed, 2])))


def load_trace(path: str | Path) -> Requests:
    """Read a CSV trace (header arrival_s,prompt_tokens,output_tokens); one-line errors for bad files."""
    from ..io import read_text

    p = Path(path)
    text = read_text(p, "--trace")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise PlannerError(f"--trace: {p} is empty")
    if len(lines) - 1 > MAX_TRACE_ROWS:
        raise PlannerError(f"--trace: {p} has {len(lines) - 1:,} rows; allowed: at most {MAX_TRACE_ROWS:,}")
    head = tuple(h.strip() for h in lines[0].split(","))
    if head != TRACE_COLUMNS:
        raise PlannerError(f"--trace: {p} header must be {','.join(TRACE_COLUMNS)}, got {','.join(head)}")
    rows = []
    for i, ln in enumerate(lines[1:], start=2):
        parts = ln.split(",")
        shown = ln.strip() if len(ln.strip()) <= 80 else ln.strip()[:77] + "..."
        if len(parts) != 3:
            raise PlannerError(f"--trace: {p} line {i}: expected 3 columns ({','.join(TRACE_COLUMNS)}), got "
                               f"{len(parts)}: {shown!r}")
        try:
            a, pr, o = float(parts[0]), int(parts[1]), int(parts[2])
        except ValueError:
            raise PlannerError(f"--trace: {p} line {i}: expected number,int,int, got {shown!r}") from None
        if not np.isfinite(a) or a < 0 or a > 1e9 or not 1 <= pr <= MAX_TOKENS or not 1 <= o <= MAX_TOKENS:
            raise PlannerError(f"--trace: {p} line {i}: need arrival_s >= 0 (at most 1e9), prompt_tokens >= 1, "
                               f"output_tokens >= 1 (each at most {MAX_TOKENS:,})")
        rows.append((a, pr, o))
    if not rows:
        raise PlannerError(f"--trace: {p} has a header but no requests")
    arr = np.array([r[0] for r in rows])
    if np.any(np.diff(arr) < 0):
        raise PlannerError(f"--trace: {p}: arrival_s must be non-decreasing")
    return Requests(arr, np.array([r[1] for r in rows], dtype=np.int64), np.array([r[2] for r in rows], dtype=np.int64))
