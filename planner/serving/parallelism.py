"""Tensor, pipeline and data parallelism on top of the single-device cost model, and node descriptions.

Tensor parallelism of degree t (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053): every GEMM, the attention
heads and the vocabulary (embedding, LM head) are split t ways, so each GPU runs 1/t of the flops and reads 1/t of
the weights. KV heads split t ways too, but never below one head per GPU: with g KV heads a GPU holds
max(1, g/t) of them (t > g replicates heads, as vLLM does); an MLA latent cache is replicated on every GPU.
Norms are replicated. A routed expert's intermediate dimension splits t ways too (vLLM's and SGLang's FusedMoE,
TensorRT-LLM's moe_tp without expert parallelism), so its GEMMs are 1/t as wide (OpCost.expert_width,
planner.regimes.grouped_width_efficiency). Activation traffic is taken as split t ways (the replicated input read of a column-parallel
GEMM is small next to its weight read). Per layer, two all-reduces (after attention and after the MLP; one where
the two run in parallel from the same input and add into one residual, GPT-J and Falcon) of
T x hidden x 2 bytes (T tokens in the step), each timed as a ring all-reduce (Patarasuk & Yuan 2009):

  t_allreduce = 2 (t - 1) / t x bytes / B(t) + per-collective latency

B(t), the bandwidth each GPU of a t-GPU group drives in one direction, depends on the node's topology:
  switch  NVLink through NVSwitch (DGX/HGX): every GPU reaches any other at its full per-direction bandwidth,
          whatever t: B(t) = per-direction bandwidth (H100 SXM: 900 GB/s bidirectional -> 450 GB/s).
  mesh    AMD Infinity Fabric (MI300X platform): fully connected, each GPU pair shares ONE link (MI300X:
          128 GB/s bidirectional = 64 GB/s per direction). A group of t GPUs has t - 1 links per GPU among its
          members, and RCCL spreads the all-reduce over them: B(t) = (t - 1) x per-link bandwidth
          (TP2: 64 GB/s, TP4: 192 GB/s, TP8: 448 GB/s). AMD Instinct MI300X Platform data sheet; ROCm "MI300X
          workload optimization" (xGMI links, 64 GB/s per direction each).
  bus     PCIe-only cards (GeForce, L4, L40S without NVLink): each card has one x16 link to the host's switch or
          root complex; a ring uses it in both directions at once: B(t) = the card's PCIe per-direction bandwidth
          (Gen4 x16 32 GB/s, Gen5 x16 64 GB/s). GeForce cards have no peer-to-peer over PCIe since the RTX 40
          series, so NCCL stages through host memory; the same link bounds it. A collective over PCIe drives
          PCIE_COLLECTIVE_SHARE = 0.5 of it: every card's traffic crosses the host's root complexes (and the
          socket link), so "on PCI systems, the performance you get is usually determined by the bandwidth your
          CPU and memory can deliver" (NCCL maintainer, NVIDIA/nccl#1639: 8 x RTX 5090 on PCIe 5.0 x16, 64 GB/s
          per direction, reach 28 GB/s all-reduce bus bandwidth with 8 GPUs and 35 with 4, 0.44-0.55). Checked on
          two engines: TensorRT-LLM 70B/180B TTFT on 4-8 x L40S and vLLM on Intel Arc Pro B60s (reports/
          accuracy.md); point-to-point sends (pipeline hand-offs) keep the link's bandwidth.
Between nodes (pipeline hand-offs), the network: one InfiniBand or RoCE NIC per GPU on DGX/HGX and MI300X
platforms (400 Gb/s = 50 GB/s per direction), a point-to-point send at bytes / NIC bandwidth + latency.

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
from typing import Literal

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
                         "ethernet": 25.0, "roce": 25.0, "infiniband": 25.0, "thunderbolt": 25.0, "none": 0.0}
TOPOLOGY_OF_KIND = {"nvlink": "switch", "nvlink-c2c": "switch", "infinity-fabric": "mesh", "pcie": "bus"}
PCIE_COLLECTIVE_SHARE = 0.5  # share of a card's PCIe per-direction bandwidth a collective drives (docstring)
COLLECTIVE_SHARE_OF_KIND = {"pcie": PCIE_COLLECTIVE_SHARE}
COLLECTIVE_LATENCY_SOURCE = ("order-of-magnitude small-message all-reduce times from nccl-tests all_reduce_perf: "
                             "~5-10 us NVLink/NVSwitch, tens of us over PCIe or a network")


@dataclass(frozen=True)
class Link:
    """A GPU-to-GPU path: bandwidth in one direction (GB/s, 1e9 B/s) and a fixed latency per collective (us)."""

    kind: str
    per_direction_gbs: float
    latency_us: float
    topology: str = "switch"           # switch, mesh or bus (module docstring)
    per_link_gbs: float | None = None  # mesh: one pair's link, one direction

    def group_gbs(self, degree: int) -> float:
        """B(t): per-direction bandwidth each GPU of a t-GPU group drives in a collective (module docstring)."""
        if self.topology == "mesh" and self.per_link_gbs:
            return min(self.per_direction_gbs, self.per_link_gbs * max(degree - 1, 1))
        return self.per_direction_gbs

    def collective_gbs(self, degree: int) -> float:
        """Per-direction bandwidth each GPU drives in a collective (all-reduce, all-to-all) of a t-GPU group:
        B(t) x the link kind's collective share (PCIe: PCIE_COLLECTIVE_SHARE; others 1)."""
        return self.group_gbs(degree) * COLLECTIVE_SHARE_OF_KIND.get(self.kind, 1.0)

    def allreduce_time_s(self, n_bytes, degree: int):
        """Ring all-reduce: 2 (t-1)/t x bytes / collective_gbs(t) + latency; 0 for t = 1."""
        if degree <= 1:
            return np.zeros_like(np.asarray(n_bytes, dtype=np.float64))
        if self.per_direction_gbs <= 0:
            raise PlannerError(f"tensor parallelism {degree} needs a link between devices; {self.kind} has none")
        b = np.asarray(n_bytes, dtype=np.float64)
        return 2.0 * (degree - 1) / degree * b / (self.collective_gbs(degree) * 1e9) + self.latency_us * 1e-6

    def send_time_s(self, n_bytes):
        """Point-to-point transfer (pipeline hand-off): bytes / bandwidth of one path (a mesh: one link) + latency."""
        b = np.asarray(n_bytes, dtype=np.float64)
        return b / (self.group_gbs(2) * 1e9) + self.latency_us * 1e-6


# ---------------------------------------------------------------- nodes


class _LinkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: str
    per_direction_gbs: float = Field(gt=0, le=1e5, allow_inf_nan=False, description="per GPU, one direction, GB/s")
    topology: Literal["switch", "mesh", "bus"] | None = Field(None, description="default: from the kind")
    per_link_gbs: float | None = Field(None, gt=0, le=1e5, allow_inf_nan=False,
                                       description="mesh: one GPU pair's link, one direction, GB/s")
    latency_us: float | None = Field(None, ge=0, le=1e6, allow_inf_nan=False)
    source: str = Field(min_length=3)

    def link(self) -> Link:
        return Link(self.kind, self.per_direction_gbs, self.latency_us if self.latency_us is not None
                    else COLLECTIVE_LATENCY_US.get(self.kind, 25.0),
                    self.topology or TOPOLOGY_OF_KIND.get(self.kind, "bus"), self.per_link_gbs)


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
        """The link inside the node; its allreduce_time_s applies the topology's B(t) for the group size."""
        return self.intra_node.link()

    def inter_link(self) -> Link | None:
        return None if self.inter_node is None else self.inter_node.link()


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
    bidirectional figure); Infinity Fabric is taken as a fully connected mesh of 8 (each pair one link of
    per-direction / 7); anything else (SoCs, CPUs, devices without an interconnect) is a node of one.
    """
    for n in load_nodes().values():
        if n.hardware == spec.id:
            return n
    ic = spec.interconnect
    if spec.kind == "gpu" and ic is not None and ic.kind in ("nvlink", "infinity-fabric", "pcie") and ic.bidirectional_gbs > 0:
        src = f"derived from {spec.id}'s interconnect ({ic.kind} {ic.bidirectional_gbs:g} GB/s bidirectional)"
        return NodeSpec(id=f"{spec.id}-x8", name=f"8 x {spec.name}", hardware=spec.id,
                        gpus_per_node=DEFAULT_PCIE_GPUS_PER_NODE,
                        intra_node=_LinkSpec(kind=ic.kind, per_direction_gbs=ic.per_direction_gbs, source=src,
                                             per_link_gbs=(ic.per_direction_gbs / (DEFAULT_PCIE_GPUS_PER_NODE - 1)
                                                           if ic.kind == "infinity-fabric" else None)),
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
        g = max(1.0, op.kv_group * s_kv / tp)  # query heads per K/V head on one GPU (K/V heads replicate past Hkv)
        out.append(dataclasses.replace(
            op, flops=op.flops / tp, weight_bytes=op.weight_bytes / tp, act_bytes=op.act_bytes / tp,
            score_bytes=op.score_bytes / tp,
            kv_read_bytes=op.kv_read_bytes / kv_div, kv_write_bytes=op.kv_write_bytes / kv_div,
            kv_group=g, kv_passes=g if op.kv_passes > 1 else 1.0, expert_width=op.expert_width / tp))
    return out


def tp_comm_time_s(m, fmt, tokens, tp: int, link: Link | None):
    """All-reduces of tokens x hidden x activation bytes: two per layer (after attention, after the MLP), one where
    attention and MLP run in parallel from the same input (ModelArch.parallel_attention_mlp: GPT-J, Falcon)."""
    if tp <= 1:
        return np.zeros_like(np.asarray(tokens, dtype=np.float64))
    if link is None:
        raise PlannerError(f"--tp: {tp} devices need an interconnect")
    n_bytes = np.asarray(tokens, dtype=np.float64) * m.hidden_size * activation_bytes(fmt)
    per_layer = 1 if m.parallel_attention_mlp else 2
    return per_layer * m.num_layers * link.allreduce_time_s(n_bytes, tp)


def tp_step_time_s(m, fmt, kv_dtype, dev: DeviceModel, stage: str, batch, new_tokens, past, tp: int = 1,
                   link: Link | None = None, flash_attention: bool = True, identical_sequences: bool = False):
    """One forward step on a t-way tensor-parallel group: the core's roofline on per-GPU ops + all-reduces.

    With tp = 1 this is planner.latency.prefill_time_s / decode_step_time_s exactly. identical_sequences: the batch
    is one sequence repeated (planner.ops.step_ops).
    """
    ops = split_ops(step_ops(m, fmt, kv_dtype, stage, batch, new_tokens, past, flash_attention, identical_sequences),
                    m, tp)
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
