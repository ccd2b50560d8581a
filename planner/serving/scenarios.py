"""Scenario presets: a workload, latency targets (SLOs), candidate devices and what the plan optimizes.

  chat       interactive assistant: Poisson arrivals, prompts lognormal ~1k tokens (system prompt + history),
             outputs ~250; TTFT p95 <= 500 ms, TPOT p95 <= 50 ms (~20 tokens/s, faster than reading speed).
  batch      offline processing (summaries, extraction, evals): high rate, loose latency targets (TTFT p95 <= 60 s,
             TPOT p95 <= 200 ms); the plan minimizes cost.
  long-doc   long-document summarization: prompts 16k-32k tokens, outputs ~500; TTFT p95 <= 10 s, TPOT p95 <= 100 ms.
  on-device  one user on a laptop/phone/desktop GPU: a request every ~200 s (rarely overlapping), batch 1, prompts ~400, outputs ~200;
             TTFT p95 <= 2 s, TPOT p95 <= 100 ms; prompts processed in 2048-token chunks (llama.cpp's n_batch); devices are consumer GPUs (GeForce) and systems-on-chip, one
             device, ranked by time per output token (no cost per hour applies).
The figures are the presets' choices (typical of published serving benchmarks such as vLLM's ShareGPT runs and
MLPerf Inference's Llama-2 server scenario, TTFT 2 s / TPOT 200 ms); every one can be overridden.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import PlannerError
from .workload import LengthDist, Workload


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    workload: Workload
    ttft_p95_ms: float
    tpot_p95_ms: float
    objective: str = "cost"             # "cost" (cheapest fleet) or "latency" (fastest single device)
    devices: str = "gpu+soc"            # "gpu+soc" or "consumer" (GeForce GPUs and SoCs)
    max_num_seqs: int = 256
    single_device: bool = False         # one device, one replica, TP 1
    max_num_batched_tokens: int = 8192  # scheduler token budget per step (vLLM default; llama.cpp n_batch 2048)
    chunked_prefill: bool = False
    formats: tuple[str, ...] = field(default=("bf16", "fp8", "int8", "int4-g128"))

    def with_overrides(self, qps=None, ttft_p95_ms=None, tpot_p95_ms=None, trace=None) -> "Scenario":
        w = self.workload
        if qps is not None:
            from .workload import check_qps

            w = w.model_copy(update={"qps": check_qps(qps)})
        if trace is not None:
            update = {"trace": str(trace)}
            if qps is None:  # a trace keeps its own rate unless --qps rescales it
                from .workload import load_trace

                from .workload import MAX_QPS, MIN_QPS

                rate = float(load_trace(trace).rate_per_s)
                if not MIN_QPS <= rate <= MAX_QPS:  # e.g. every arrival at the same instant: infinite rate
                    raise PlannerError(f"--trace: its arrival rate {rate:g} req/s is outside [{MIN_QPS:g}, "
                                       f"{MAX_QPS:g}]; give --qps to set the rate")
                update["qps"] = rate
            w = w.model_copy(update=update)
        for name, v in (("--ttft-p95-ms", ttft_p95_ms), ("--tpot-p95-ms", tpot_p95_ms)):
            if v is not None and not (isinstance(v, (int, float)) and 0 < v <= 1e9):
                raise PlannerError(f"{name}: must be a finite number of milliseconds in (0, 1e9], got {v!r}")
        return replace(self, workload=w, ttft_p95_ms=ttft_p95_ms or self.ttft_p95_ms,
                       tpot_p95_ms=tpot_p95_ms or self.tpot_p95_ms)


def _ln(mean, sigma, lo, hi):
    return LengthDist(kind="lognormal", mean=mean, sigma=sigma, min=lo, max=hi)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("chat", "interactive chat",
             Workload(qps=10, prompt=_ln(1000, 0.8, 16, 8192), output=_ln(250, 0.7, 8, 2048)),
             ttft_p95_ms=500, tpot_p95_ms=50),
    Scenario("batch", "offline batch processing",
             Workload(qps=50, prompt=_ln(1500, 0.6, 32, 8192), output=_ln(400, 0.6, 16, 2048)),
             ttft_p95_ms=60_000, tpot_p95_ms=200, max_num_seqs=512),
    Scenario("long-doc", "long-document summarization",
             Workload(qps=0.5, prompt=LengthDist(kind="uniform", min=16_000, max=32_000), output=_ln(500, 0.4, 64, 2048)),
             ttft_p95_ms=10_000, tpot_p95_ms=100),
    Scenario("on-device", "one user on a local device",
             Workload(qps=0.005, prompt=_ln(400, 0.7, 8, 4096), output=_ln(200, 0.6, 8, 1024)),
             ttft_p95_ms=2000, tpot_p95_ms=100, objective="latency", devices="consumer", max_num_seqs=1,
             single_device=True, max_num_batched_tokens=2048, chunked_prefill=True, formats=("bf16", "fp8", "int8", "q8_0", "int4-g128", "q4_k_m")),
]}


def get_scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise PlannerError(f"--scenario: unknown scenario '{name}'; allowed: {', '.join(SCENARIOS)}")
    return SCENARIOS[name]
