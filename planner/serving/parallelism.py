"""Tensor, pipeline and data parallelism on top of the single-device cost model, and node descriptions.

Tensor parallelism of degree t (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053): every GEMM, the attention
heads and the vocabulary (embedding, LM head) are split t ways, so each GPU runs 1/t of the flops and reads 1/t of
the weights. KV heads split t ways too, but never below one head per GPU: with g KV heads a GPU holds
max(1, g/t) of them (t > g replicates heads, as vLLM does); an MLA latent cache is replicated on every GPU.
Norms are replicated. Activation traffic is taken as split t ways (the replicated input read of a column-parallel
GEMM is small next to its weight read). Per layer, two all-reduces (after attention and after the MLP) of
T x hidden x 2 bytes (T tokens in the step), each timed as a ring all-reduce (Patarasuk & Yuan 2009):

  t_allreduce = 2 (t - 1) / t x bytes / per-direction link bandwidth + per-collective latency

With t = 1 the operator costs are unchanged and no collective is added: the single-device estimate exactly.

Per-collective latencies (inputs, documented figures, not fitted): nccl-tests `all_reduce_perf` reports
small-message all-reduce times of the order of 5-10 us inside an NVLink/NVSwitch node and tens of microseconds
over PCIe or between nodes (InfiniBand/RoCE); we take NVLink 8 us, Infinity Fabric 10 us, PCIe 20 us, a
network hop 25 us.

Pipeline parallelism of degree p (GPipe, Huang et al. 2019, arXiv:1811.06965): p stages of L/p layers each; a batch
cut into m micro-batches takes (m + p - 1) stage-slots, so the idle (bubble) fraction is (p - 1) / (m + p - 1).
In serving, an engine keeps p micro-batches in flight (vLLM's virtual engines), so in steady state a p-stage
replica behaves as p independent engines whose step is the whole model (p stage times) plus (p - 1) activation
hand-offs over the link between stages; each holds 1/p of the replica's KV pool.

Data parallelism: r independent replicas; requests are split evenly among them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import PlannerError, pydantic_one_line
from ..hardware import SPECS_DIR, HardwareSpec
from ..io import read_yaml
from ..ops import ATTENTION, OpCost, step_ops
from ..quantization import activation_bytes
from ..roofline import DeviceModel, step_time_s, time_ops

NODES_DIR = SPECS_DIR / "nodes"

# per-collective latency by link kind (us); see the module docstring
COLLECTIVE_LATENCY_US = {"nvlink": 8.0, "nvlink-c2c": 8.0, "infinity-fabric": 10.0, "pcie": 20.0,
                         "ethernet": 25.0, "infiniband": 25.0, "thunderbolt": 25.0, "none": 0.0}
COLLECTIVE_LATENCY_SOURCE = ("order-of-magnitude small-message all-reduce times from nccl-tests all_reduce_perf: "
                             "~5-10 us NVLink/NVSwitch, tens of us over PCIe or a network")


@dataclass(frozen=True)
class Link:
    """A GPU-to-GPU path: bandwidth in one direction (GB/s, 1e9 B/s) and a fixed latency per collective (us)."""

    kind: str
    per_direction_gbs: float
    latency_us: float

    def allreduce_time_s(self, n_bytes, degree: int):
        """Ring all-reduce: 2 (t-1)/t x bytes / bandwidth + latency; 0 for t = 1."""
        if degree <= 1:
            return np.zeros_like(np.asarray(n_bytes, dtype=np.float64))
        if self.per_direction_gbs <= 0:
            raise PlannerError(f"tensor parallelism {degree} needs a link between devices; {self.kind} has none")
        b = np.asarray(n_bytes, dtype=np.float64)
        return 2.0 * (degree - 1) / degree * b / (self.per_direction_gbs * 1e9) + self.latency_us * 1e-6

    def send_time_s(self, n_bytes):
        """Point-to-point transfer (pipeline hand-off): bytes / bandwidth + latency."""
        b = np.asarray(n_bytes, dtype=np.float64)
        return b / (self.per_direction_gbs * 1e9) + self.latency_us * 1e-6


# ---------------------------------------------------------------- nodes


class _LinkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str
    per_direction_gbs: float = Field(gt=0, description="per GPU, one direction, GB/s")
    latency_us: float | None = Field(None, ge=0)
    source: str = Field(min_length=3)


class NodeSpec(BaseModel):
    """A server: `gpus_per_node` devices of one hardware id, the link inside it and the network between nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    name: str
    hardware: str
    gpus_per_node: int = Field(ge=1)
    intra_node: _LinkSpec
    inter_node: _LinkSpec | None = None
    source: str = Field(min_length=3)
    notes: str | None = None

    def intra_link(self) -> Link:
        s = self.intra_node
        return Link(s.kind, s.per_direction_gbs, s.latency_us if s.latency_us is not None
                    else COLLECTIVE_LATENCY_US.get(s.kind, 25.0))

    def inter_link(self) -> Link | None:
        s = self.inter_node
        if s is None:
            return None
        return Link(s.kind, s.per_direction_gbs, s.latency_us if s.latency_us is not None
                    else COLLECTIVE_LATENCY_US.get(s.kind, 25.0))


@lru_cache(maxsize=1)
def load_nodes() -> dict[str, NodeSpec]:
    """Every node description in hardware_specs/nodes/*.yaml, by id."""
    out = {}
    for p in sorted(Path(NODES_DIR).glob("*.yaml")):
        try:
            n = NodeSpec.model_validate(read_yaml(p))
        except ValidationError as exc:
            raise pydantic_one_line(f"node spec {p}", exc) from None
        out[n.id] = n
    return out


# A server of PCIe cards without a node file: 8 cards is the common chassis (e.g. 8x L4/L40S servers); the
# network between such servers is taken as 100 Gb/s Ethernet per node, shared by its cards.
DEFAULT_PCIE_GPUS_PER_NODE = 8
DEFAULT_NETWORK = Link("ethernet", 100 / 8 / DEFAULT_PCIE_GPUS_PER_NODE, COLLECTIVE_LATENCY_US["ethernet"])


def node_for(spec: HardwareSpec) -> NodeSpec:
    """The node file whose `hardware` is this device, else one derived from the spec's interconnect.

    Derived: a GPU with NVLink, Infinity Fabric or PCIe goes 8 to a node over that link (per direction = half the
    bidirectional figure); anything else (SoCs, CPUs, devices without an interconnect) is a node of one.
    """
    for n in load_nodes().values():
        if n.hardware == spec.id:
            return n
    ic = spec.interconnect
    if spec.kind == "gpu" and ic is not None and ic.kind in ("nvlink", "infinity-fabric", "pcie") and ic.bidirectional_gbs > 0:
        src = f"derived from {spec.id}'s interconnect ({ic.kind} {ic.bidirectional_gbs:g} GB/s bidirectional)"
        return NodeSpec(id=f"{spec.id}-x8", name=f"8 x {spec.name}", hardware=spec.id,
                        gpus_per_node=DEFAULT_PCIE_GPUS_PER_NODE,
                        intra_node=_LinkSpec(kind=ic.kind, per_direction_gbs=ic.per_direction_gbs, source=src),
                        inter_node=_LinkSpec(kind="ethernet", per_direction_gbs=DEFAULT_NETWORK.per_direction_gbs,
                                             source="assumed 100 Gb/s Ethernet per node shared by 8 devices"),
                        source=src)
    return NodeSpec(id=f"{spec.id}-x1", name=f"1 x {spec.name}", hardware=spec.id, gpus_per_node=1,
                    intra_node=_LinkSpec(kind="none", per_direction_gbs=1e-9, source="single device"),
                    inter_node=None, source="a device without a GPU-to-GPU interconnect: a node of one")


# ---------------------------------------------------------------- tensor parallelism


def kv_split(m, tp: int) -> int:
    """Ways the KV cache splits across t GPUs: min(t, KV heads); 1 for MLA (the latent is replicated)."""
    if m.mla:
        return 1
    return max(1, min(tp, m.num_kv_heads))


def check_tp(m, tp: int) -> None:
    if tp < 1:
        raise PlannerError(f"--tp: must be an integer >= 1, got {tp}")
    if m.num_attention_heads % tp:
        raise PlannerError(f"--tp: {tp} does not divide {m.name}'s {m.num_attention_heads} attention heads")


def split_ops(ops: list[OpCost], m, tp: int) -> list[OpCost]:
    """Per-GPU operator costs under tensor parallelism t (rules in the module docstring); t = 1 returns `ops`."""
    if tp == 1:
        return ops
    s_kv = kv_split(m, tp)
    out = []
    for op in ops:
        if op.name == "norms":
            out.append(op)
            continue
        kv_div = s_kv if op.compute == ATTENTION or op.name.startswith("attn_") else tp
        out.append(dataclasses.replace(
            op, flops=op.flops / tp, weight_bytes=op.weight_bytes / tp, act_bytes=op.act_bytes / tp,
            kv_read_bytes=op.kv_read_bytes / kv_div, kv_write_bytes=op.kv_write_bytes / kv_div))
    return out


def tp_comm_time_s(m, fmt, tokens, tp: int, link: Link | None):
    """Two all-reduces per layer of tokens x hidden x activation bytes."""
    if tp <= 1:
        return np.zeros_like(np.asarray(tokens, dtype=np.float64))
    if link is None:
        raise PlannerError(f"--tp: {tp} devices need an interconnect")
    n_bytes = np.asarray(tokens, dtype=np.float64) * m.hidden_size * activation_bytes(fmt)
    return 2 * m.num_layers * link.allreduce_time_s(n_bytes, tp)


def tp_step_time_s(m, fmt, kv_dtype, dev: DeviceModel, stage: str, batch, new_tokens, past, tp: int = 1,
                   link: Link | None = None, flash_attention: bool = True):
    """One forward step on a t-way tensor-parallel group: the core's roofline on per-GPU ops + all-reduces.

    With tp = 1 this is planner.latency.prefill_time_s / decode_step_time_s exactly.
    """
    ops = split_ops(step_ops(m, fmt, kv_dtype, stage, batch, new_tokens, past, flash_attention), m, tp)
    t = step_time_s(time_ops(ops, dev), dev)
    if tp > 1:
        t = t + tp_comm_time_s(m, fmt, np.asarray(batch, dtype=np.float64) * np.asarray(new_tokens), tp, link)
    return t


# ---------------------------------------------------------------- pipeline parallelism


def pipeline_bubble_fraction(stages: int, micro_batches: int) -> float:
    """GPipe idle fraction (p - 1) / (m + p - 1)."""
    if stages < 1 or micro_batches < 1:
        raise PlannerError("pipeline: stages and micro_batches must be integers >= 1")
    return (stages - 1) / (micro_batches + stages - 1)


def pipeline_batch_time_s(full_step_s: float, stages: int, micro_batches: int, handoff_s: float = 0.0) -> float:
    """Time of one batch through p stages in m micro-batches (GPipe): (m + p - 1) x (stage time of a micro-batch).

    A stage runs L/p layers on 1/m of the batch: full_step_s / (p m) when the step scales linearly (compute bound);
    hand-offs add (p - 1) transfers on the critical path.
    """
    pipeline_bubble_fraction(stages, micro_batches)
    return (micro_batches + stages - 1) * full_step_s / (stages * micro_batches) + (stages - 1) * handoff_s
