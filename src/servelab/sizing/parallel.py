"""Per-GPU weights and the communication a parallel layout adds to decode (pure).

Weights per GPU follow vLLM's sharding (see :mod:`servelab.sizing.layout`): attention,
linear attention, dense MLP, shared experts, embedding, LM head, MTP and vision are
sharded over TP; norms, routers (and tensors servelab cannot classify) are replicated;
routed experts are split over TP x DP ranks; PP gives each stage its share of the layers,
the embedding to the first stage and the LM head (and MTP) to the last. The fullest GPU
is what must fit.

Communication per generated token (single stream, activations in the model dtype) is an
**estimate** on published link figures (:mod:`servelab.hardware.topology`), reported as its
own labelled term:

* TP: two all-reduces of ``hidden`` per layer; a ring all-reduce sends
  ``2 (n-1)/n x message`` bytes per GPU.
* PP: one point-to-point send of the hidden state and residual per stage boundary.
* EP: per MoE layer a dispatch and a combine of ``top_k`` copies of the token's hidden
  state, ``(n-1)/n`` of which leave the GPU (all-to-all over TP x DP ranks).
* Each collective also pays the link's latency, which dominates at decode's tiny messages.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from servelab.errors import UsageError
from servelab.families import ModelDims
from servelab.hardware.topology import Topology
from servelab.sizing.layout import ParallelLayout, split_layers
from servelab.sizing.weights import Weights


@dataclass(frozen=True)
class GpuWeights:
    """Resident weight bytes on each pipeline stage's GPUs; ``per_gpu`` is the fullest."""

    per_stage: tuple[int, ...]
    sharded_bytes: int
    routed_expert_bytes: int
    replicated_bytes: int

    @property
    def per_gpu(self) -> int:
        """Bytes on the fullest GPU (what has to fit)."""
        return max(self.per_stage)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {**asdict(self), "per_stage": list(self.per_stage), "per_gpu": self.per_gpu}


def weights_per_gpu(weights: Weights, num_layers: int, layout: ParallelLayout) -> GpuWeights:
    """Resident weights of one GPU of each pipeline stage under ``layout``."""
    tp = layout.tensor
    routed = weights.routed_expert_bytes
    edge = weights.embedding_bytes + weights.lm_head_bytes + weights.mtp_bytes
    edge += weights.vision_bytes
    body = max(weights.resident_bytes - routed - edge - weights.replicated_bytes, 0)
    stages = split_layers(num_layers, layout.pipeline)
    out: list[int] = []
    for i, (lo, hi) in enumerate(stages):
        share = (hi - lo) / num_layers
        b = share * (body / tp + routed / layout.moe_group + weights.replicated_bytes)
        if i == 0:
            b += (weights.embedding_bytes + weights.vision_bytes) / tp
        if i == len(stages) - 1:
            b += (weights.lm_head_bytes + weights.mtp_bytes) / tp
        out.append(int(b))
    return GpuWeights(tuple(out), body + edge, routed, weights.replicated_bytes)


@dataclass(frozen=True)
class CommTerm:
    """One kind of communication per generated token (predicted)."""

    kind: str
    link: str
    collectives: int
    bytes_per_gpu: float
    seconds: float


@dataclass(frozen=True)
class ParallelDecode:
    """Single-stream decode of one replica: memory term + labelled communication term.

    ``memory_bytes`` is what one TP rank of each stage reads per token, summed over the
    stages (they run one after another for one stream).
    """

    context_len: int
    memory_bytes: float
    memory_s: float
    comm: tuple[CommTerm, ...]
    tok_s: float
    tok_s_per_gpu: float
    predicted: bool = True

    @property
    def comm_s(self) -> float:
        """Seconds per token spent communicating (all terms)."""
        return sum(c.seconds for c in self.comm)

    def comm_label(self) -> str:
        """``TP all-reduce 0.130 ms (nvlink4); PP send/recv ...`` or ``-`` (for tables)."""
        return "; ".join(f"{c.kind} {c.seconds * 1e3:.3f} ms ({c.link})" for c in self.comm) or "-"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "context_len": self.context_len,
            "memory_bytes": self.memory_bytes,
            "memory_s": self.memory_s,
            "comm_s": self.comm_s,
            "comm": [asdict(c) for c in self.comm],
            "tok_s": self.tok_s,
            "tok_s_per_gpu": self.tok_s_per_gpu,
            "predicted": True,
        }


def _ring(n: int) -> float:
    return 2 * (n - 1) / n if n > 1 else 0.0


def comm_per_token(
    dims: ModelDims, layout: ParallelLayout, topo: Topology, *, moe: bool, top_k: int
) -> tuple[CommTerm, ...]:
    """The communication terms one decoded token costs (see module docs)."""
    act = dims.dtype_bytes
    msg = dims.hidden_size * act
    layers = dims.num_layers
    terms: list[CommTerm] = []
    tp = layout.tensor
    ep = layout.expert and layout.moe_group > 1 and moe
    if tp > 1:
        link = topo.link_for(tp)
        # Attention output + MLP output all-reduce per layer; with EP the MoE output is
        # combined by the all-to-all instead of an all-reduce.
        n = layers * (1 if ep else 2)
        nbytes = n * _ring(tp) * msg
        terms.append(
            CommTerm(
                "TP all-reduce", link.name, n, nbytes, n * link.latency_s + nbytes / link.bandwidth
            )
        )
    if layout.pipeline > 1:
        link = topo.link_for(layout.pipeline, tp)
        n = layout.pipeline - 1
        nbytes = n * 2 * msg  # hidden state + residual
        terms.append(
            CommTerm(
                "PP send/recv", link.name, n, nbytes, n * link.latency_s + nbytes / link.bandwidth
            )
        )
    if ep:
        g = layout.moe_group
        link = topo.link_for(g)
        n = 2 * layers  # dispatch + combine per MoE layer
        nbytes = n * top_k * msg * (g - 1) / g
        terms.append(
            CommTerm(
                "EP all-to-all", link.name, n, nbytes, n * link.latency_s + nbytes / link.bandwidth
            )
        )
    return tuple(terms)


def parallel_decode(
    context_len: int,
    *,
    weight_bytes: float,
    kv_bytes: float,
    state_bytes: float,
    weights: Weights,
    dims: ModelDims,
    layout: ParallelLayout,
    topo: Topology,
    bandwidth: float,
) -> ParallelDecode:
    """Decode of one replica: each stage reads its share of the one-GPU bytes at
    ``bandwidth`` (stages run one after another for one stream), plus communication.

    ``weight_bytes``/``kv_bytes``/``state_bytes`` are the single-GPU prediction's bytes per
    token at ``context_len``; routed experts are read over TP x DP ranks, everything else
    over TP (KV and state heads, too, replicated heads aside).
    """
    if bandwidth <= 0:
        raise UsageError("bandwidth must be positive")
    tp = layout.tensor
    active_routed = (
        weights.routed_expert_bytes * weights.experts_per_token / weights.num_experts
        if weights.moe
        else 0.0
    )
    rest = max(weight_bytes - active_routed, 0.0)
    kv_rep = max(1, dims.num_kv_heads // tp) * tp / max(dims.num_kv_heads, 1)
    g = layout.moe_group
    # EP: the busiest rank holds at least one of the token's top-k experts whole;
    # without EP every rank reads 1/g of each active expert.
    routed_div = min(g, max(weights.experts_per_token, 1)) if layout.expert else g
    per_rank = rest / tp + active_routed / routed_div + kv_bytes * kv_rep / tp + state_bytes / tp
    memory_s = per_rank / bandwidth
    comm = comm_per_token(
        dims, layout, topo, moe=weights.moe, top_k=max(weights.experts_per_token, 1)
    )
    total = memory_s + sum(c.seconds for c in comm)
    tok_s = 1.0 / total
    return ParallelDecode(
        context_len=context_len,
        memory_bytes=per_rank,
        memory_s=memory_s,
        comm=comm,
        tok_s=tok_s,
        tok_s_per_gpu=tok_s / layout.gpus_per_replica,
    )
