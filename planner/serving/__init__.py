"""Serving and fleet planning on top of the per-step cost model.

  workload.py         request rate + length distributions, CSV traces
  step_model.py       step times of mixed prefill/decode batches from the core's operators (tabulated, exact)
  simulator.py        continuous batching (Orca/vLLM), optional chunked prefill, KV blocks as tokens arrive and
                      preemption (recompute/swap): a discrete-event simulation
  engine.py           one configuration end to end: simulate(model, config, workload) -> SimulationResult;
                      offline_throughput and max_rate (the highest rate meeting TTFT/TPOT limits, <= Offline)
  static_batching.py  padded static batches (waste), latency/throughput across batch sizes and the knee
  kv_memory.py        contiguous vs paged KV, prefix sharing, attention memory with/without FlashAttention
  speculative.py      Leviathan et al. expected tokens and speed-up with step costs from the cost model
  parallelism.py      tensor/pipeline/data parallelism, interconnect, node descriptions (hardware_specs/nodes/)
  scenarios.py        presets: chat, batch, long-doc, on-device
  plan.py             the capacity plan: plan(model, scenario, ...) -> PlanResult (.table is a DataFrame)
  recommend.py        recommendations computed by comparing alternatives with the model
Results are pandas DataFrames (imported lazily) or plain dicts; nothing here prints.
"""

from .engine import ServingConfig, SimulationResult, make_config, max_rate, offline_throughput, simulate
from .kv_memory import attention_memory_table, contiguous_vs_paged, kv_capacity, prefix_sharing
from .parallelism import Link, NodeSpec, load_nodes, node_for, pipeline_bubble_fraction, tp_step_time_s
from .plan import PlanResult, plan
from .scenarios import SCENARIOS, Scenario, get_scenario
from .simulator import EngineLimits, run_engine, summarize
from .speculative import draft_candidates, expected_tokens, leviathan_speedup, speculative
from .static_batching import batching_table, padding_waste, static_batch
from .step_model import StepModel, replica_memory
from .workload import LengthDist, Requests, Workload, generate, load_trace, make_workload

__all__ = [
    "SCENARIOS", "EngineLimits", "LengthDist", "Link", "NodeSpec", "PlanResult", "Requests", "Scenario",
    "ServingConfig", "SimulationResult", "StepModel", "Workload", "attention_memory_table", "batching_table",
    "contiguous_vs_paged", "draft_candidates", "expected_tokens", "generate", "get_scenario", "kv_capacity",
    "leviathan_speedup", "load_nodes", "load_trace", "make_config", "make_workload", "max_rate", "node_for",
    "offline_throughput", "padding_waste",
    "pipeline_bubble_fraction", "plan", "prefix_sharing", "replica_memory", "run_engine", "simulate", "speculative",
    "static_batch", "summarize", "tp_step_time_s",
]
