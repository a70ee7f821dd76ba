"""One engine step's time as the sum of its operators.

A step serves groups of sequences; each group is ``count`` sequences with ``context`` tokens
already cached that add ``new_tokens`` this step (:class:`SeqGroup`). A decode step is one
group with ``new_tokens = 1``; a (chunked) prefill is one sequence adding a chunk over its
cached prefix; a loaded server's step mixes both. Every layer's operators
(:class:`~servelab.ops.model.StepModel`) are read at the step's token count from measured
tables (:class:`~servelab.ops.costs.Costs`) and summed, so decode, chunked prefill and mixed
steps come from the same sum:

* per layer: the norms (fused add + RMSNorm; Gemma 3 has four), the layer's GEMMs at all the
  step's tokens (QKV, output, MLP or shared expert, linear-attention and Mamba projections,
  the router), q/k norm, rotary embedding, the KV-cache write, the attention core (decode
  groups in one call over (batch, context); each prefill sequence over (new tokens, prefix)),
  the Gated DeltaNet or Mamba2 core, SiLU-and-mul, the router's top-k and the fused MoE
  (uniform routing: the expected number of distinct experts is said in the notes);
* once per step: the embedding lookup, the final norm, ``lm_head`` and the sampler over the
  sequences that sample, and the host's cost of issuing the step's kernels: one CUDA-graph
  replay when the engine captures the step (vLLM: decode-only steps up to the largest
  captured size), one launch per kernel otherwise (measured: eager launches vs graph
  replay of N kernels).

The device time is the operators' sum; the host's issue time overlaps it (kernels are
queued asynchronously), so the step takes the larger of the two. What the engine does
besides (scheduling, input preparation, detokenizing) is not an operator and is not in
this sum: :attr:`StepTime.notes` says so; a correction from runs adds it.

Pure: a model, costs and a shape in, a :class:`StepTime` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from servelab.errors import UsageError
from servelab.families import CHUNKED, FULL, LINEAR, MAMBA, MLA, SLIDING
from servelab.ops.costs import Costs, CostSource, Lookup, expected_experts
from servelab.ops.model import LayerOps, StepModel

#: Kernels a layer launches besides its GEMMs and cores (norms, rope, cache write, activation
#: and MoE glue), for the host's issue cost.
_GLUE_KERNELS = 6


@dataclass(frozen=True)
class SeqGroup:
    """``count`` sequences, each with ``context`` cached tokens, adding ``new_tokens``."""

    count: int
    context: int
    new_tokens: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or self.context < 0 or self.new_tokens < 1:
            raise ValueError(f"bad sequence group {self}")


@dataclass(frozen=True)
class StepShape:
    """What one engine step serves."""

    groups: tuple[SeqGroup, ...]

    @classmethod
    def decode(cls, batch: int, context: int) -> StepShape:
        """``batch`` sequences each generating one token after ``context`` tokens."""
        return cls((SeqGroup(batch, context, 1),))

    @classmethod
    def prefill(cls, tokens: int, prefix: int = 0, seqs: int = 1) -> StepShape:
        """``seqs`` prompts (or chunks) of ``tokens`` new tokens over ``prefix`` cached."""
        return cls((SeqGroup(seqs, prefix, tokens),))

    @classmethod
    def chunked_prefill(cls, length: int, budget: int) -> tuple[StepShape, ...]:
        """The steps a ``length``-token prompt takes at ``budget`` tokens a step (vLLM's
        chunked prefill): chunks of at most ``budget`` tokens, each over the prefix before
        it."""
        return tuple(cls.prefill(min(budget, length - done), done)
                     for done in range(0, length, budget))

    @property
    def tokens(self) -> int:
        """Tokens the step computes."""
        return sum(g.count * g.new_tokens for g in self.groups)

    @property
    def seqs(self) -> int:
        """Sequences that sample a token this step."""
        return sum(g.count for g in self.groups)

    @property
    def decode_only(self) -> bool:
        return all(g.new_tokens == 1 for g in self.groups)


@dataclass(frozen=True)
class EngineSteps:
    """How the engine runs steps: which are replayed from CUDA graphs."""

    name: str = "vllm"
    version: str = "0.26.0"
    cuda_graph_max: int = 512
    """Largest captured batch (vLLM: ``max_cudagraph_capture_size``, 512 by default, less
    with a small ``--max-num-seqs``); 0: eager."""
    sampling: str = "greedy"
    isolation_frac: float = 0.0
    isolation_cap_ms: float = 0.0
    """What an operator timed alone costs that the same operator inside a graph of
    back-to-back kernels does not (events, graph launch, an idle GPU's ramp, kernels'
    prologues and tails that overlap in a graph): ``min(isolation_frac * t,
    isolation_cap_ms)`` is taken off each operator call's isolated time ``t``. Both 0: the
    tables' isolated times as they are. :func:`measured_isolation` reads the pair a table
    set measured (decoder stacks in one graph against their operators alone); a pair fitted
    to profiled engine steps is a correction (benchmarks/peer_aiconfigurator.py reports
    both beside the uncorrected sum)."""


@dataclass(frozen=True)
class OpCost:
    """One operator's share of a step."""

    op: str
    count: int  # how many times the step runs it (layers, sequences)
    each_ms: float
    lookup: Lookup

    @property
    def total_ms(self) -> float:
        return self.count * self.each_ms


@dataclass(frozen=True)
class StepTime:
    """A step's predicted time with its breakdown and sources."""

    shape: StepShape
    device_ms: float
    host_ms: float
    items: tuple[OpCost, ...]
    graph: bool
    source: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_ms(self) -> float:
        """The step: device work, or the host's issuing of it when that is longer."""
        return max(self.device_ms, self.host_ms)

    @property
    def extrapolated(self) -> bool:
        return any(i.lookup.extrapolated for i in self.items)

    def by_op(self) -> dict[str, float]:
        """Milliseconds per operator name, largest first."""
        out: dict[str, float] = {}
        for i in self.items:
            out[i.op] = out.get(i.op, 0.0) + i.total_ms
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def measured_isolation(costs: Costs) -> tuple[float, float, str] | None:
    """(fraction, cap ms, source) of the isolation adjustment the first table set measured
    (its ``meta.json`` ``isolation``: benchmarks/ops/compose_check.py's decoder stacks timed
    as one graph against their operators timed alone), or None."""
    for s in costs.sets:
        iso = s.provenance.details.get("isolation")
        if isinstance(iso, dict) and "frac" in iso and "cap_ms" in iso:
            return float(iso["frac"]), float(iso["cap_ms"]), str(iso.get("source", s.key))
    return None


def _norms_per_layer(model: StepModel) -> int:
    return 4 if model.family == "gemma3" else 2


def _attn_core(costs: CostSource, layer: LayerOps, shape: StepShape
               ) -> list[tuple[str, int, Lookup]]:
    a = layer.attention
    assert a is not None
    window = a.window or a.chunk or 0
    out: list[tuple[str, int, Lookup]] = []
    dec = [g for g in shape.groups if g.new_tokens == 1]
    if dec:
        batch = sum(g.count for g in dec)
        # one call over the decode batch; its length is the batch's mean context
        ctx = round(sum(g.count * g.context for g in dec) / batch)
        out.append(("attention (decode)", 1, costs.attn_decode(
            batch, ctx, layer.num_heads, a.num_kv_heads, a.head_dim, window, a.sinks)))
    for g in shape.groups:
        if g.new_tokens > 1:
            out.append(("attention (prefill)", g.count, costs.attn_prefill(
                g.new_tokens, g.context, layer.num_heads, a.num_kv_heads, a.head_dim,
                window, a.sinks)))
    return out


def _state_dtype(model: StepModel) -> str:
    d = model.dims.mamba_ssm_dtype
    return "float32" if d in ("float32", "float") else "bfloat16"


def layer_costs(costs: CostSource, model: StepModel, layer: LayerOps, shape: StepShape
                ) -> list[tuple[str, int, Lookup]]:
    """(op, count, lookup) for one layer at ``shape``."""
    t = shape.tokens
    out: list[tuple[str, int, Lookup]] = [
        ("rms_norm", _norms_per_layer(model), costs.elementwise("rms_norm", t,
                                                                width=model.hidden)),
    ]
    for g in layer.gemms:
        fmt = "bf16" if g.role == "router" else g.fmt
        out.append((f"gemm {g.name}", 1, costs.gemm(t, g.n, g.k, fmt)))
        if g.name.endswith("gate_up_proj"):
            out.append(("silu_and_mul", 1, costs.elementwise("silu_mul", t, width=g.n // 2)))
    if layer.kind in (FULL, SLIDING, CHUNKED) and layer.attention is not None:
        a = layer.attention
        if layer.qk_norm:
            out.append(("qk_norm", 1, costs.elementwise(
                "qk_norm", t, heads=layer.num_heads + a.num_kv_heads, head_dim=a.head_dim)))
        out.append(("rotary", 1, costs.elementwise(
            "rope", t, heads=layer.num_heads + a.num_kv_heads, head_dim=a.head_dim)))
        out.append(("kv_cache_write", 1, costs.elementwise(
            "kv_write", t, heads=a.num_kv_heads, head_dim=a.head_dim)))
        out.extend(_attn_core(costs, layer, shape))
    elif layer.kind == LINEAR and layer.gdn is not None:
        gd = layer.gdn
        sd = _state_dtype(model)
        dec = sum(x.count for x in shape.groups if x.new_tokens == 1)
        if dec:
            out.append(("gated_deltanet (decode)", 1, costs.gdn(
                "generation", dec, gd.num_key_heads, gd.key_head_dim, gd.num_value_heads,
                gd.value_head_dim, gd.conv_kernel, sd)))
        for x in shape.groups:
            if x.new_tokens > 1:
                out.append(("gated_deltanet (prefill)", x.count, costs.gdn(
                    "context", x.new_tokens, gd.num_key_heads, gd.key_head_dim,
                    gd.num_value_heads, gd.value_head_dim, gd.conv_kernel, sd)))
        out.append(("gated rms_norm", 1, costs.elementwise(
            "rms_norm", t, width=gd.num_value_heads * gd.value_head_dim)))
    elif layer.kind == MAMBA and layer.mamba is not None:
        mb = layer.mamba
        dec = sum(x.count for x in shape.groups if x.new_tokens == 1)
        if dec:
            out.append(("mamba2 (decode)", 1, costs.mamba(
                "generation", dec, mb.num_heads, mb.head_dim, mb.n_groups, mb.state_size,
                mb.conv_kernel)))
        for x in shape.groups:
            if x.new_tokens > 1:
                out.append(("mamba2 (prefill)", x.count, costs.mamba(
                    "context", x.new_tokens, mb.num_heads, mb.head_dim, mb.n_groups,
                    mb.state_size, mb.conv_kernel)))
        out.append(("gated rms_norm", 1, costs.elementwise(
            "rms_norm", t, width=mb.intermediate_size)))
    elif layer.kind == MLA:
        raise UsageError("no MLA attention table: FlashMLA and the MLA prefill path are not "
                         "measured yet")
    if layer.moe is not None:
        e = layer.moe
        out.append(("router top-k", 1, costs.elementwise("router", t, experts=e.experts,
                                                          topk=e.topk)))
        out.append(("fused_moe", 1, costs.moe(t, e.experts, e.topk, e.hidden, e.inter,
                                              e.fmt)))
    return out


def kernel_count(model: StepModel) -> int:
    """Kernel launches of one step of ``model`` (GEMMs, cores, glue; the host's issue cost
    and a roofline's per-kernel fixed time count them)."""
    return _kernels(model.layers)


def _kernels(layers: Sequence[LayerOps]) -> int:
    """Kernel launches of a step (GEMMs, cores, glue), for the host's issue cost."""
    n = 0
    for layer in layers:
        n += len(layer.gemms) + _GLUE_KERNELS + (1 if layer.attention is not None else 0) + \
            (3 if layer.gdn is not None or layer.mamba is not None else 0) + \
            (4 if layer.moe is not None else 0)
    return n + 5


def step_time(model: StepModel, costs: CostSource, shape: StepShape,
              engine: EngineSteps | None = None) -> StepTime:
    """Predict one step of ``model`` at ``shape`` from measured operator costs."""
    engine = engine or EngineSteps()
    items: list[OpCost] = []
    notes: list[str] = []
    def each(lk: Lookup) -> float:
        off = min(engine.isolation_frac * lk.ms, engine.isolation_cap_ms)
        return max(lk.ms - off, 0.1 * lk.ms)

    for layer in model.layers:
        for op, count, lk in layer_costs(costs, model, layer, shape):
            items.append(OpCost(op, count, each(lk), lk))
    t, seqs = shape.tokens, shape.seqs
    lm = model.lm_head
    for op, lk in (
        ("embedding", costs.elementwise("embed", t, width=model.hidden)),
        ("final rms_norm", costs.elementwise("rms_norm", t, width=model.hidden)),
        ("gemm lm_head", costs.gemm(seqs, lm.n, lm.k, lm.fmt if lm.fmt == "fp8-block" or
                                    lm.fmt.startswith("gguf:") else "bf16")),
        ("sampler", costs.sampler(seqs, model.vocab, engine.sampling)),
    ):
        items.append(OpCost(op, 1, each(lk), lk))
    moe = next((layer.moe for layer in model.layers if layer.moe is not None), None)
    if moe is not None:
        touched = expected_experts(moe.experts, moe.topk, t)
        notes.append(f"MoE: uniform routing, {touched:.1f} of {moe.experts} experts touched "
                     f"per layer at {t} tokens (top-{moe.topk})")
    graph = shape.decode_only and 0 < seqs <= engine.cuda_graph_max
    n_kernels = _kernels(model.layers)
    host = costs.host(n_kernels, "graph" if graph else "eager")
    items_host = host.ms
    device = sum(i.total_ms for i in items)
    extrap = sorted({i.op for i in items if i.lookup.extrapolated})
    if extrap:
        notes.append("extrapolated beyond the measured range: " + ", ".join(extrap))
    scaled = sorted({i.op for i in items if i.lookup.how == "scaled"})
    if scaled:
        notes.append("scaled from a neighbouring measured shape: " + ", ".join(scaled))
    if engine.isolation_frac and engine.isolation_cap_ms:
        notes.append(f"each operator's isolated time t less min({engine.isolation_frac:.2f} t, "
                     f"{engine.isolation_cap_ms * 1e3:.1f} us): what a graph of back-to-back "
                     "kernels does not pay")
    notes.append(f"host: {'one CUDA-graph replay' if graph else 'eager launches'} of "
                 f"~{n_kernels} kernels ({items_host:.3f} ms); the engine's scheduling and "
                 "input preparation are not operators and are not included")
    return StepTime(shape, device, items_host, tuple(items), graph, costs.label,
                    tuple(notes))
