"""Expert parallelism (EP) and data-parallel attention (DP-attention) for Mixture-of-Experts models.

A group of N devices serves one MoE model. The routed experts are split N ways (each rank holds E / N experts of
every MoE layer, as in DeepSeek-V3's deployment, arXiv:2412.19437 sec. 3.4, and SGLang's large-scale EP,
https://lmsys.org/blog/2025-05-05-large-scale-ep/). Two layouts of everything else:

  * ``ep`` (vLLM ``--enable-expert-parallel`` with tensor-parallel attention): attention, dense MLPs, shared
    experts, embedding and LM head are tensor-parallel over the N ranks (planner.serving.parallelism.split_ops);
    one engine, one batch, one KV pool whose per-token bytes split min(N, KV heads) ways (an MLA latent is
    replicated on every rank). Per layer one all-reduce after attention (and one after each dense MLP).
  * ``dp-attention`` (SGLang ``--enable-dp-attention``): every rank is its own attention data-parallel engine with
    its own batch and its own KV cache (the whole per-token KV, MLA latent included, lives on the rank that serves
    the sequence, so MLA's cache is not replicated N times); non-expert weights are replicated on every rank.

Memory per rank = routed-expert bytes / N + other weights (/ N for ``ep``, whole for ``dp-attention``) + runtime
overhead + peak activations of a max_num_batched_tokens prefill (/ N under tensor-parallel attention); the rest of
gpu_memory_utilization x usable capacity holds KV.

All-to-all per MoE layer (DeepEP dispatch and combine, https://gh.072103.xyz/deepseek-ai/DeepEP): a rank sends each
of its tokens to the ranks of its top-k experts and gets the results back. With T tokens dispatched by a rank
(its own batch under DP-attention; T / N of the shared batch under TP attention, each rank dispatching its share),
the bytes that leave the rank in each direction are

  bytes = T x k x hidden x activation bytes x (N - 1) / N                  (dispatch; combine the same)

(hidden: the width the experts read, ModelArch.expert_width: a LatentMoE dispatches its latent, Nemotron 3 Super's
1,024 of 4,096, a quarter of the bytes)

Traffic to ranks in the same node crosses the node's link, traffic to other nodes the network: with g devices per
node, a fraction (g - 1) / N goes over the node link and (N - g) / N over the network, the two in parallel:

  t_a2a = max(T k h a (g-1)/N / B_node, T k h a (N-g)/N / B_net) + latency

Load imbalance: the slowest rank sets the pace (all ranks meet at every all-to-all). `imbalance` is the ratio of the
largest to the mean number of routed tokens a rank's experts receive (max/mean tokens per expert when a rank holds
one expert; EPLB's redundant experts bring it towards 1). The busiest rank's expert GEMM flops and activations and
its received all-to-all bytes are the mean times `imbalance`; its expert weight reads are not (it holds E / N
experts either way). Default 1.3: an assumption (a moderate skew after load balancing), not a measurement; set it
from your router statistics (SGLang reports "balancedness" = mean / max, so imbalance = 1 / balancedness).

Step time: the core's operators (planner.ops.step_ops) on the rank's tokens, split the rank's way, with the
expert operator evaluated at the whole group's tokens (N T under DP-attention) and divided N ways, timed by the
core's roofline (planner.roofline.time_ops); plus the collectives above. The attention and LM-head tables of the
serving StepModel are reused unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import PlannerError
from ..memory import runtime_overhead_bytes
from ..scheduler_defaults import PLANNER_DEFAULTS
from ..units import GB

MODES = ("ep", "dp-attention")
DEFAULT_IMBALANCE = 1.3
IMBALANCE_SOURCE = ("assumed moderate skew after expert load balancing; SGLang's large-scale EP blog "
                    "(lmsys.org/blog/2025-05-05-large-scale-ep) measures balancedness = mean/max per-GPU MoE load")


def check_ep(m, mode: str, ep: int, imbalance: float = DEFAULT_IMBALANCE) -> None:
    """One-line errors for an EP layout the model cannot take."""
    if mode not in MODES:
        raise PlannerError(f"--parallel: unknown layout {mode!r}; allowed: {', '.join(MODES)}, pd")
    if not m.moe:
        raise PlannerError(f"--parallel: {mode} splits the experts of a Mixture-of-Experts model; {m.name} is dense; "
                           "allowed: MoE models (e.g. deepseek-v3, mixtral-8x7b, qwen3-30b-a3b)")
    E = m.moe.num_experts
    if not isinstance(ep, (int, np.integer)) or ep < 2 or ep > E or E % ep:
        divisors = [d for d in range(2, E + 1) if E % d == 0][:8]
        why = "at least 2 ranks split the experts" if isinstance(ep, (int, np.integer)) and ep < 2 else \
            f"{ep} ranks must divide {m.name}'s {E} experts"
        raise PlannerError(f"--ep: {why}; allowed: "
                           f"{', '.join(map(str, divisors))}{', ...' if len(divisors) == 8 else ''}")
    if mode == "ep" and m.num_attention_heads % ep:
        raise PlannerError(f"--ep: tensor-parallel attention over {ep} ranks needs {ep} to divide "
                           f"{m.name}'s {m.num_attention_heads} attention heads; allowed: dp-attention")
    if not (isinstance(imbalance, (int, float)) and np.isfinite(imbalance) and 1 <= imbalance <= ep):
        raise PlannerError(f"--expert-imbalance: max/mean routed tokens per rank must be in [1, {ep}], "
                           f"got {imbalance}")


# ---------------------------------------------------------------- memory per rank


@dataclass(frozen=True)
class EPMemory:
    mode: str
    ep: int
    fits: bool
    verdict: str
    routed_experts_gb: float      # per rank
    other_weights_gb: float       # per rank: attention, dense MLP, shared experts, router, norms, embedding, head
    activations_gb: float
    overhead_gb: float
    capacity_gb: float            # gpu_memory_utilization x usable capacity
    kv_bytes_per_token: float     # per rank, for one token of a sequence this rank's engine serves
    kv_pool_tokens: int           # per engine (dp-attention: per rank; ep: the one engine)

    @property
    def weights_gb(self) -> float:
        return self.routed_experts_gb + self.other_weights_gb

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"weights_gb": self.weights_gb}


def ep_rank_memory(m, fmt, kv_dtype: str, spec, mode: str, ep: int, max_tokens: int = 8192,
                   flash_attention: bool = True, gpu_memory_utilization: float = 0.9) -> EPMemory:
    """Memory of one rank of an EP group (module docstring)."""
    from ..memory import activation_bytes_peak
    from ..ops import kv_bytes_per_token, weight_bytes_by_group
    from .parallelism import kv_split

    check_ep(m, mode, ep)
    groups = weight_bytes_by_group(m, fmt)
    routed = groups["routed_experts"]  # at the experts' own format where the checkpoint keeps them narrower (gpt-oss)
    other = sum(groups.values()) - routed
    attn_tp = ep if mode == "ep" else 1
    if attn_tp > 1:  # norms and the router stay replicated under tensor parallelism
        other = (other - groups["norms"] - groups["router"]) / attn_tp + groups["norms"] + groups["router"]
    routed /= ep
    act = float(activation_bytes_peak(m, fmt, 1, max_tokens, 0, flash_attention)) / attn_tp
    ovh = runtime_overhead_bytes(spec, m, fmt, ep)  # NCCL / DeepEP buffers: the collective group spans the N ranks
    cap = spec.usable_capacity_gb * GB * gpu_memory_utilization
    per_tok = kv_bytes_per_token(m, kv_dtype) / (kv_split(m, attn_tp) if attn_tp > 1 else 1)
    free = cap - routed - other - act - ovh
    tokens = int(free // per_tok) if free > 0 else 0
    need = (routed + other + act + ovh) / GB
    if free <= 0:
        verdict = (f"does not fit: needs {need:.1f} GB per rank before any KV cache, of {cap / GB:.1f} GB "
                   f"({gpu_memory_utilization:g} x usable)")
    else:
        verdict = f"fits: {need:.1f} GB per rank + KV pool of {tokens:,} tokens per engine"
    return EPMemory(mode, ep, free > 0, verdict, routed / GB, other / GB, act / GB, ovh / GB, cap / GB, per_tok, tokens)


# ---------------------------------------------------------------- all-to-all


def all_to_all_bytes(tokens, experts_per_token: int, hidden: int, act_bytes: float, ep: int):
    """Bytes one rank sends (= receives, balanced) in one direction of one all-to-all:
    tokens x k x hidden x activation bytes x (N - 1) / N (DeepEP dispatch; the combine moves as many back)."""
    t = np.asarray(tokens, dtype=np.float64)
    return t * experts_per_token * hidden * act_bytes * (ep - 1) / ep


def all_to_all_time_s(tokens, experts_per_token: int, hidden: int, act_bytes: float, ep: int, node_link,
                      network_link=None, gpus_per_node: int = 8):
    """One all-to-all (dispatch or combine) of `tokens` tokens per rank over N ranks (module docstring):
    ranks in the node over `node_link`, the others over `network_link`, in parallel, plus the larger latency."""
    t = np.asarray(tokens, dtype=np.float64)
    vol = t * experts_per_token * hidden * act_bytes
    local = min(ep, gpus_per_node)
    t_node = vol * (local - 1) / ep / (node_link.collective_gbs(local) * 1e9) if local > 1 else 0.0 * vol
    lat = node_link.latency_us if local > 1 else 0.0
    if ep > gpus_per_node:
        if network_link is None:
            raise PlannerError(f"--ep: {ep} ranks span nodes of {gpus_per_node} devices, which have no network")
        t_net = vol * (ep - gpus_per_node) / ep / (network_link.per_direction_gbs * 1e9)
        lat = max(lat, network_link.latency_us)
        return np.maximum(t_node, t_net) + lat * 1e-6
    return t_node + lat * 1e-6


# ---------------------------------------------------------------- per-rank operators and step time


@dataclass(frozen=True)
class EPGroup:
    """An EP group on one kind of node: links, sizes, imbalance."""

    mode: str
    ep: int
    imbalance: float
    node_link: object
    network_link: object | None
    gpus_per_node: int

    @property
    def attn_tp(self) -> int:
        return self.ep if self.mode == "ep" else 1


def make_group(m, spec, mode: str, ep: int, imbalance: float = DEFAULT_IMBALANCE) -> EPGroup:
    from .parallelism import node_for

    check_ep(m, mode, ep, imbalance)
    node = node_for(spec)
    if ep > node.gpus_per_node and node.inter_link() is None:
        raise PlannerError(f"--ep: {ep} ranks exceed the {node.gpus_per_node} device(s) of one {node.name} node, "
                           "and its nodes have no network between them")
    return EPGroup(mode, ep, float(imbalance), node.intra_link(), node.inter_link(), node.gpus_per_node)


def rank_ops(m, fmt, kv_dtype: str, stage: str, batch, new_tokens, past, g: EPGroup, flash_attention: bool = True):
    """Per-rank operators of the busiest rank: the core's ops of this rank's tokens (tensor-split under `ep`),
    with the routed-expert op taken at the whole group's tokens, divided N ways, flops and activations times the
    imbalance."""
    from ..ops import step_ops
    from .parallelism import split_ops

    ops = split_ops(step_ops(m, fmt, kv_dtype, stage, batch, new_tokens, past, flash_attention), m, g.attn_tp)
    group_batch = np.asarray(batch, dtype=np.float64) * (g.ep if g.mode == "dp-attention" else 1)
    moe = next(o for o in step_ops(m, fmt, kv_dtype, stage, group_batch, new_tokens, past, flash_attention)
               if o.name == "moe_experts")
    moe = dataclasses.replace(moe, flops=moe.flops / g.ep * g.imbalance, weight_bytes=moe.weight_bytes / g.ep,
                              act_bytes=moe.act_bytes / g.ep * g.imbalance)
    return [moe if o.name == "moe_experts" else o for o in ops]


def comm_time_s(m, fmt, tokens, g: EPGroup):
    """Collectives of one step on a rank with `tokens` tokens: 2 all-to-alls per MoE layer (the busiest rank
    receives `imbalance` x the mean) and, under tensor-parallel attention, one all-reduce per layer plus one per
    dense-MLP layer."""
    from ..quantization import activation_bytes

    a = activation_bytes(fmt)
    T = np.asarray(tokens, dtype=np.float64)
    dispatched = T / g.ep if g.mode == "ep" else T
    t = 2 * m.num_moe_layers * g.imbalance * all_to_all_time_s(
        dispatched, m.moe.experts_per_token, m.expert_width, a, g.ep, g.node_link, g.network_link, g.gpus_per_node)
    if g.attn_tp > 1:
        link = g.node_link if g.ep <= g.gpus_per_node else g.network_link
        t = t + (m.num_layers + m.num_dense_layers) * link.allreduce_time_s(T * m.hidden_size * a, g.attn_tp)
    return t


def step_time_s(m, fmt, kv_dtype: str, dev, stage: str, batch, new_tokens, past, g: EPGroup,
                flash_attention: bool = True):
    """One forward step on the busiest rank: roofline of rank_ops + step overhead + comm_time_s."""
    from ..roofline import step_time_s as core_step, time_ops

    t = core_step(time_ops(rank_ops(m, fmt, kv_dtype, stage, batch, new_tokens, past, g, flash_attention), dev), dev)
    return t + comm_time_s(m, fmt, np.asarray(batch, dtype=np.float64) * np.asarray(new_tokens), g)


def build_step_model(m, fmt, kv_dtype: str, dev, g: EPGroup, max_tokens: int = 8192, flash_attention: bool = True):
    """The serving StepModel of one engine of the group (a DP rank, or the TP-attention engine): its attention and
    LM-head tables as StepModel builds them, its token-op table from rank_ops + comm_time_s."""
    from ..ops import ATTENTION
    from ..roofline import time_ops
    from .step_model import StepModel

    link = g.node_link if g.ep <= g.gpus_per_node else g.network_link
    base = StepModel.build(m, fmt, kv_dtype, dev, g.attn_tp, 1, link if g.attn_tp > 1 else None, None,
                           flash_attention, max_tokens)
    T = np.arange(0, max_tokens + 1, dtype=np.float64)
    Tc = np.maximum(T, 1.0)
    ops = [o for o in rank_ops(m, fmt, kv_dtype, "decode", Tc, 1, 0, g, flash_attention)
           if not (o.compute == ATTENTION or o.name.startswith("attn_")) and o.name != "lm_head"]
    tok = sum(ot.time_s for ot in time_ops(ops, dev)) + comm_time_s(m, fmt, Tc, g)
    tok = np.where(T == 0, 0.0, tok)
    return dataclasses.replace(base, token_time=tok.tolist())


# ---------------------------------------------------------------- one configuration, explained


def ep_report(m, spec, fmt, kv_dtype: str, mode: str, ep: int, imbalance: float = DEFAULT_IMBALANCE,
              batch_per_engine: int = 64, context: int = 2048, prompt: int = 2048, efficiency="auto",
              max_tokens: int = 8192, runtime: str | None = None) -> dict:
    """Memory per rank, all-to-all volume and time, and decode / prefill step times of the busiest rank, next to
    plain tensor parallelism over the same devices where that fits (runtime: the profile whose efficiency times
    the steps, ep_device). Plain numbers (GB, ms, tokens/s)."""
    from ..quantization import activation_bytes
    from .parallelism import node_for, tp_step_time_s
    from .step_model import replica_memory

    g = make_group(m, spec, mode, ep, imbalance)
    mem = ep_rank_memory(m, fmt, kv_dtype, spec, mode, ep, max_tokens)
    dev = ep_device(m, spec, fmt, efficiency, runtime)
    a = activation_bytes(fmt)
    engines = ep if mode == "dp-attention" else 1
    dispatched = batch_per_engine if mode == "dp-attention" else batch_per_engine / ep
    a2a_bytes = float(all_to_all_bytes(dispatched, m.moe.experts_per_token, m.expert_width, a, ep))
    a2a_s = float(all_to_all_time_s(dispatched, m.moe.experts_per_token, m.expert_width, a, ep, g.node_link,
                                    g.network_link, g.gpus_per_node))
    dec = float(step_time_s(m, fmt, kv_dtype, dev, "decode", batch_per_engine, 1, context, g))
    comm = float(comm_time_s(m, fmt, batch_per_engine, g))
    pre = float(step_time_s(m, fmt, kv_dtype, dev, "prefill", 1, prompt, 0, g))
    out = {
        "layout": mode, "ep": ep, "hardware": spec.id, "weights": fmt.name, "kv_dtype": kv_dtype,
        "imbalance": imbalance, "imbalance_source": IMBALANCE_SOURCE if imbalance == DEFAULT_IMBALANCE else "input",
        "engines": engines, "attention": ("data-parallel: each rank its own batch and KV" if mode == "dp-attention"
                                          else f"tensor-parallel over {ep} ranks, one batch"),
        "memory": mem.to_dict(), "fits": mem.fits, "verdict": mem.verdict,
        "batch_per_engine": batch_per_engine, "context": context,
        "all_to_all": {"tokens_dispatched_per_rank": dispatched, "bytes_per_direction_per_layer": a2a_bytes,
                       "time_ms_per_direction_per_layer": a2a_s * 1e3, "moe_layers": m.num_moe_layers,
                       "link": (g.node_link.kind if ep <= g.gpus_per_node else
                                f"{g.node_link.kind} + {g.network_link.kind}")},
        "decode_step_ms": dec * 1e3, "decode_comm_ms": comm * 1e3,
        "output_tokens_per_s": engines * batch_per_engine / dec,
        "output_tokens_per_s_per_gpu": engines * batch_per_engine / dec / ep,
        "prefill_ms": pre * 1e3, "prompt": prompt,
    }
    # plain tensor parallelism over the same devices (inside one node), for comparison
    node = node_for(spec)
    if ep <= node.gpus_per_node and m.num_attention_heads % ep == 0:
        rm = replica_memory(m, fmt, kv_dtype, spec, ep, 1, max_tokens, max_num_seqs=PLANNER_DEFAULTS.max_num_seqs)
        link = node.intra_link()
        tp_dec = float(tp_step_time_s(m, fmt, kv_dtype, dev, "decode", batch_per_engine * engines, 1, context, ep,
                                      link))
        out["tensor_parallel"] = {"tp": ep, "fits": rm.fits, "verdict": rm.verdict,
                                  "kv_pool_tokens": rm.kv_pool_tokens, "batch": batch_per_engine * engines,
                                  "decode_step_ms": tp_dec * 1e3,
                                  "output_tokens_per_s": batch_per_engine * engines / tp_dec}
    out["explanation"] = explain(out)
    return out


def explain(r: dict) -> list[str]:
    """Why this layout: plain sentences from the numbers of ep_report."""
    mem = r["memory"]
    lines = [f"{r['layout']} over {r['ep']} x {r['hardware']}: routed experts split {r['ep']} ways "
             f"({mem['routed_experts_gb']:.1f} GB per rank), other weights {mem['other_weights_gb']:.1f} GB per rank "
             f"({r['attention']}); {r['verdict']}"]
    a = r["all_to_all"]
    lines.append(f"all-to-all: {a['bytes_per_direction_per_layer'] / 1e6:,.2f} MB per direction per MoE layer "
                 f"({a['tokens_dispatched_per_rank']:g} tokens x top-k x hidden) over {a['link']}: "
                 f"{a['time_ms_per_direction_per_layer'] * 1e3:,.1f} us; x2 (dispatch + combine) x {a['moe_layers']} "
                 f"layers x imbalance {r['imbalance']:g} -> {r['decode_comm_ms']:.2f} ms of a "
                 f"{r['decode_step_ms']:.2f} ms decode step")
    tp = r.get("tensor_parallel")
    if tp is not None:
        if not tp["fits"]:
            lines.append(f"plain TP{tp['tp']} on the same devices: {tp['verdict']}")
        elif r["fits"]:
            ratio = r["output_tokens_per_s"] / tp["output_tokens_per_s"]
            lines.append(f"vs plain TP{tp['tp']} at the same total batch ({tp['batch']}): "
                         f"{r['output_tokens_per_s']:,.0f} vs {tp['output_tokens_per_s']:,.0f} output tokens/s "
                         f"({ratio:.2f}x); TP KV pool {tp['kv_pool_tokens']:,} tokens vs "
                         f"{mem['kv_pool_tokens']:,} per engine x {r['engines']}")
    return lines


def ep_device(m, spec, fmt, efficiency="auto", runtime: str | None = None):
    """The DeviceModel of one rank: the unit and efficiency `planner estimate --runtime` resolves
    (serving.engine.device_for: the runtime profile's fitted class where one is named, else the calibrated or
    default efficiencies), so an EP group's steps are timed as the tensor-parallel commands time theirs."""
    from .engine import device_for

    return device_for(m, spec, fmt, efficiency, runtime)[1]


@dataclass(frozen=True)
class EPEngine:
    """One engine of an EP group, ready for the simulator: its step model, limits, memory and group, and the unit
    and runtime profile its device was resolved with (serving.engine.device_for; for its speed interval)."""

    step_model: object
    limits: object
    memory: EPMemory
    group: EPGroup
    unit: object = None
    profile: object = None


def ep_engine(m, spec, fmt, kv_dtype: str, mode: str, ep: int, efficiency="auto", runtime: str | None = None,
              max_num_seqs: int = 256, max_num_batched_tokens: int = 8192, chunked_prefill: bool = False,
              block_size: int = 16, imbalance: float = DEFAULT_IMBALANCE, max_prompt: int = 0) -> EPEngine:
    """Step model (build_step_model on the device ep_device resolves), KV pool (ep_rank_memory) and scheduler limits of one
    engine of an EP group; with a runtime, its scheduler's step rules (scheduler_defaults.step_policy: SGLang's
    prefill steps apart, TensorRT-LLM's whole prompts and reserved outputs) and its HTTP request path, as
    serving.engine.build_engine gives a tensor-parallel engine. Raises DoesNotFit when a rank cannot hold its share
    of the weights."""
    from ..errors import DoesNotFit
    from ..runtimes import first_token_from_decode, request_path_ms
    from ..scheduler_defaults import scheduler_engine, step_policy
    from .engine import device_for
    from .simulator import EngineLimits

    g = make_group(m, spec, mode, ep, imbalance)
    mem = ep_rank_memory(m, fmt, kv_dtype, spec, mode, ep, max_num_batched_tokens)
    if not mem.fits:
        raise DoesNotFit(f"{m.name} {fmt.name} on {mode} {ep} x {spec.id}: {mem.verdict}")
    unit, dev, prof = device_for(m, spec, fmt, efficiency, runtime)  # as ep_device
    sm = build_step_model(m, fmt, kv_dtype, dev, g, max(max_num_batched_tokens, max_prompt, max_num_seqs))
    policy = step_policy(scheduler_engine("none", runtime), chunked_prefill)
    lim = EngineLimits(mem.kv_pool_tokens, max_num_seqs, max_num_batched_tokens, chunked_prefill,
                       mixed_prefill=policy.mixed_prefill, reserve_output=policy.reserve_output,
                       block_size=block_size, request_path_s=request_path_ms(runtime) / 1e3,
                       first_token_decode=first_token_from_decode(runtime))
    return EPEngine(sm, lim, mem, g, unit, prof)


def simulate_ep(m, spec, fmt, kv_dtype: str, mode: str, ep: int, workload, replicas: int = 1,
                n_requests: int = 2000, seed: int = 0, efficiency="auto", max_num_seqs: int = 256,
                max_num_batched_tokens: int = 8192, chunked_prefill: bool = False, block_size: int = 16,
                imbalance: float = DEFAULT_IMBALANCE, runtime: str | None = None, ranges: bool = True) -> dict:
    """Continuous-batching simulation of one engine of an EP deployment (r groups of N ranks; DP-attention runs
    N engines per group, requests split evenly): the same simulator as planner.serving.simulate, with the engine
    of ep_engine (runtime: the profile whose efficiency times the steps). All ranks are taken as equally loaded
    (the all-to-all keeps them in step). As serving.simulate does, the summary's 'range' holds each figure at the
    two ends of the p10-p90 speed interval that `planner estimate` would attach (serving.engine.speed_interval:
    the runtime's, else the kind defaults'; multi-GPU, under load above one running sequence), and the deployment
    its throughput ranges; None where no interval applies (calibration, datasheet) or ranges=False (the plan's
    search, which compares the central figures with the targets)."""
    from .engine import _ranges, engine_requests, slow_fast, speed_interval
    from .simulator import run_engine, summarize

    engines = replicas * (ep if mode == "dp-attention" else 1)
    reqs = engine_requests(workload, engines, n_requests, seed)
    e = ep_engine(m, spec, fmt, kv_dtype, mode, ep, efficiency, runtime, max_num_seqs, max_num_batched_tokens,
                  chunked_prefill, block_size, imbalance, int(reqs.prompt.max()))
    mem = e.memory
    s = summarize(run_engine(e.step_model, reqs, e.limits))
    iv = (speed_interval(spec, e.unit, efficiency, e.profile, max(1, round(s["mean_batch_busy"])), multi_gpu=True,
                         model=m) if ranges else None)
    s["range"] = None
    if iv is not None:
        slow, fast = slow_fast(e.step_model, iv)
        s["range"] = _ranges(summarize(run_engine(slow, reqs, e.limits)),
                             summarize(run_engine(fast, reqs, e.limits))) | {"interval": iv}
    return {"model": m.name, "hardware": spec.id, "weights": fmt.name, "kv_dtype": kv_dtype, "layout": mode,
            "runtime": runtime,
            "ep": ep, "replicas": replicas, "gpus": ep * replicas, "engines": engines, "imbalance": imbalance,
            "workload": workload.describe(), "memory": mem.to_dict(), "memory_verdict": mem.verdict,
            "engine": s, "deployment": {"gpus": ep * replicas, "engines": engines,
                                        "requests_per_s": s["requests_per_s"] * engines,
                                        "output_tokens_per_s": s["output_tokens_per_s"] * engines,
                                        "offered_requests_per_s": workload.qps,
                                        **({f"{k}_range": [v * engines for v in s["range"][k]]
                                            for k in ("requests_per_s", "output_tokens_per_s")}
                                           if s["range"] else {})}}


# ---------------------------------------------------------------- capacity plan over EP groups


def ep_sizes(m, mode: str) -> list[int]:
    """EP group sizes to try, smallest first: powers of two that divide the experts (and, for TP attention, the
    attention heads)."""
    out = []
    for n in (2, 4, 8, 16, 32, 64, 128, 256):
        try:
            check_ep(m, mode, n, 1.0)
        except PlannerError:
            continue
        out.append(n)
    return out


def plan_ep_device(m, spec, sc, mode: str, ep: int | None = None, imbalance: float = DEFAULT_IMBALANCE,
                   kv_dtype: str = "fp16", efficiency="auto", n_requests: int = 1200, seed: int = 0,
                   price: float | None = None, max_gpus: int = 1024, runtime: str | None = None) -> dict:
    """For one device: per weight format of the scenario, the smallest EP group (or `ep`) whose ranks hold the
    weights and the longest request's KV; then the fewest replicas of that group whose simulation (simulate_ep)
    meets both p95 targets (doubling, then bisection). The cheapest such configuration (fewest devices; ties: higher
    precision), with every format's outcome."""
    from ..quantization import weight_format
    from .engine import meets_slo
    from .plan import PRECISION_ORDER, _format_name
    from .workload import generate

    r = generate(sc.workload, 4000, seed)
    length_max = int((r.prompt + r.output).max())
    sizes = [ep] if ep is not None else ep_sizes(m, mode)
    tried, best = [], None
    for name in sc.formats:
        try:
            fmt, _ = _format_name(spec, name)
        except PlannerError as exc:
            tried.append({"weights": name, "status": "rejected", "reason": str(exc)})
            continue
        if any(t["weights"] == fmt.name for t in tried):
            continue
        chosen, why = None, []
        for n in sizes:
            mem = ep_rank_memory(m, fmt, kv_dtype, spec, mode, n, sc.max_num_batched_tokens)
            if not mem.fits:
                why.append(f"ep{n}: {mem.verdict}")
                continue
            if mem.kv_pool_tokens < length_max:
                why.append(f"ep{n}: KV pool of {mem.kv_pool_tokens:,} tokens per engine cannot hold the longest "
                           f"request ({length_max:,})")
                continue
            chosen = n
            break
        if chosen is None:
            tried.append({"weights": fmt.name, "status": "rejected", "reason": "; ".join(why[-2:])})
            continue
        make_group(m, spec, mode, chosen, imbalance)

        def sim(reps):
            s = simulate_ep(m, spec, fmt, kv_dtype, mode, chosen, sc.workload, reps, n_requests, seed, efficiency,
                            sc.max_num_seqs, sc.max_num_batched_tokens, sc.chunked_prefill, imbalance=imbalance,
                            runtime=runtime, ranges=False)
            ok, reason = meets_slo(s["engine"], sc.ttft_p95_ms, sc.tpot_p95_ms)
            return ok, reason, s

        reps, res, lo = 1, None, 0
        while reps * chosen <= max_gpus:
            ok, reason, s = sim(reps)
            if ok:
                res = s
                break
            lo, reps = reps, reps * 2
        if res is None:
            tried.append({"weights": fmt.name, "ep": chosen, "status": "rejected",
                          "reason": f"{reason} even with {lo} replicas of ep{chosen}"})
            continue
        hi = reps
        while hi - lo > 1:
            mid = (lo + hi) // 2
            ok, _, s = sim(mid)
            if ok:
                hi, res = mid, s
            else:
                lo = mid
        e = res["engine"]
        row = {"hardware": spec.id, "layout": mode, "weights": fmt.name, "ep": chosen, "replicas": hi,
               "gpus": hi * chosen, "status": "ok", "ttft_p95_ms": e["ttft_ms"]["p95"],
               "tpot_p95_ms": e["tpot_ms"]["p95"], "mean_running": e["mean_running"],
               "usd_per_hour": hi * chosen * price if price else None, "memory": res["memory"],
               "why_ep": why, "reason": ""}
        tried.append(row)
        rank = {n: i for i, n in enumerate(PRECISION_ORDER)}
        if best is None or (row["gpus"], rank.get(row["weights"], 99)) < (best["gpus"], rank.get(best["weights"], 99)):
            best = row
    if best is not None:
        rep = ep_report(m, spec, weight_format(best["weights"]), kv_dtype, mode, best["ep"], imbalance,
                        max(1, round(best["mean_running"] or 1)), efficiency=efficiency,
                        max_tokens=sc.max_num_batched_tokens)
        best = best | {"explanation": [f"ep{best['ep']} is the smallest group of {spec.id} that holds {m.name} "
                                       f"{best['weights']} and the longest request's KV"
                                       + (f" ({'; '.join(best['why_ep'])})" if best["why_ep"] else "")]
                       + rep["explanation"]}
    return {"hardware": spec.id, "best": best, "tried": tried}
