"""The batched step model: what one engine step costs when it holds several requests.

The same bytes and terms as the single-stream forms of :mod:`servelab.predict.form`, with
a step holding ``B`` decoding requests (request ``i`` at context ``c_i``) and prefill chunks
of ``T`` prompt tokens in all (a chunk of ``t`` tokens starting at prompt position ``s``)::

    bytes = non-routed weights                      (read once per step, whatever B)
          + routed x (1 - (1 - k/E)^(B + T))         (distinct experts the step's tokens touch)
          + sum_i KV(c_i)                            (by layer kind: full c, sliding min(c, w),
                                                      chunked min(c, chunk), MLA latent c)
          + B x state read and written               (Gated DeltaNet / Mamba2)
          + chunks: KV written (t tokens) and the KV read of the s tokens before them
    FLOPs = 2 x active params x (B - 1)              (decode-only step: the matmuls beyond the
                                                      one token the single-stream form holds)
          = 2 x active x (B + T) + attention pairs of each chunk + state updates (mixed step)

A decode-only step is the single-stream **decode** form at those bytes, with the extra FLOPs
at the prefill fit's per-FLOP rate added to the device's side; on a GPU the step is the larger
of the device's time and the host's per-step floor (vLLM overlaps them), on a CPU their sum.
On a GPU the per-layer term and the bytes overlap as a batch grows::

    device(B) = max(layers x s_per_layer + bytes(one request) x s_per_byte,
                    bytes(B) x s_per_byte) + expert_slots x s_per_expert_slot

At one request a GPU's layers are small kernels whose launch and latency (the per-layer term)
outlast what they read; the bytes that more requests add are streamed by the same kernels
within that time until they outlast it. Summed instead, the H200's stored sweep of an FP8
Qwen3-30B-A3B (benchmarks/gpu/results/run-h200-qwen3-30b-a3b-fp8.json: TPOT 4.2 ms alone,
5.1 ms at 16 streams of 512-token prompts) was predicted at 8.9 ms at 16 streams: the 3.2 ms
the fit gives 48 layers' kernels at one request do not add to the 4.5 ms that 16 requests'
distinct experts take to stream (benchmarks/RESULTS.md, "Under load").
A step with prefill chunks is the single-stream **prefill** form of a ``T``-token prompt whose
bytes and FLOPs also carry the step's decoders (eager when ``B + T`` exceeds the largest
captured CUDA graph). At ``B = 1`` and no chunk, the first is exactly the single-stream decode
prediction; a lone chunk of the whole prompt, the single-stream prefill prediction.

What the model is enters as :class:`StepCosts` (from its weights and dims, or read back from
a stored plan document), so a stored run's sweep is re-predicted without its checkpoint.
Pure: costs and fits in, seconds out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servelab.errors import InputError, UsageError
from servelab.families import MLA, ModelDims
from servelab.families.layers import CHUNKED, SLIDING
from servelab.predict.costs import (
    SOFTMAX_KINDS,
    attended_pairs,
    distinct_expert_fraction,
    kv_write_bytes,
    layer_token_bytes,
    state_traffic_bytes,
)
from servelab.predict.form import HOST_BOUND, features
from servelab.predict.levels import Fit
from servelab.predict.speed import model_expert_slots
from servelab.sizing.weights import Weights

#: On a CPU, what a step holding prompt chunks beside decoders costs: ``"prefill"``, the prefill
#: form of the whole step (pre-registered in benchmarks/prereg/load-cpu-2026-12-04: the prefill
#: fit's fixed part, a request's, charged to every such step, and the decoders' bytes at its
#: per-byte rate), or ``"decode"``, the decoders' decode step plus what the chunks add to an
#: empty prefill (benchmarks/RESULTS.md, "Under load", has both against the stored sweeps,
#: each model left out).
CPU_STEP_FIXED = "decode"

#: A chunk of a prompt in one step: (tokens already prefilled, tokens in this step).
Chunk = tuple[int, int]


@dataclass(frozen=True)
class KvCurve:
    """KV bytes one request's decode step reads at context ``c``: ``sum b x min(c, cap)``
    over layer groups (``cap`` None: the whole context)."""

    terms: tuple[tuple[int, int | None], ...]

    def read(self, context: int) -> int:
        """Bytes read at ``context`` tokens (equals
        :func:`servelab.predict.costs.kv_read_bytes`)."""
        return sum(b * (context if cap is None else min(context, cap)) for b, cap in self.terms)


def kv_curve(dims: ModelDims, kv_dtype_bytes: int) -> KvCurve:
    """The :class:`KvCurve` of ``dims`` (layers with the same bytes and cap merged)."""
    merged: dict[int | None, int] = {}
    for i in range(dims.num_layers):
        b = layer_token_bytes(dims, i, kv_dtype_bytes)
        if b == 0:
            continue
        layer = dims.attention_layer(i)
        cap = None
        if layer is not None and layer.tokens_read(1 << 40) < (1 << 40):
            cap = layer.tokens_read(1 << 40)
        merged[cap] = merged.get(cap, 0) + b
    order = sorted(merged, key=lambda cap: (cap is not None, cap or 0))
    return KvCurve(tuple((merged[cap], cap) for cap in order))


#: One attention term of a step's FLOPs: ``coefficient x attended_pairs(n, window, chunk)``.
AttentionTerm = tuple[float, int | None, int | None]


@dataclass(frozen=True)
class StepCosts:
    """What the step model reads of a model: bytes and FLOPs, no fit. Computed from the
    weights and dims (:func:`step_costs`) and stored with a plan (``load.step_costs``), so
    that a stored run is re-predicted from its plan document alone (its checkpoint path may
    not be recorded, or not reachable)."""

    fixed_bytes: int  # non-routed weights a forward pass reads however many tokens it holds
    routed_expert_bytes: int
    num_experts: int
    experts_per_token: int
    active_params: int
    active_routed_params: int
    lm_head_params: int
    num_layers: int
    linear_layers: int
    expert_slots: int
    kv: KvCurve
    kv_write_per_token: int  # KV bytes one new token writes (every attention layer)
    state_bytes: int  # one request's state read and written back per step
    state_flops_per_token: float  # 4 x state values over the GDN / Mamba layers
    attention: tuple[AttentionTerm, ...]

    def attention_flops(self, tokens: int) -> float:
        """Causal attention FLOPs over ``tokens`` tokens (equals
        :func:`servelab.predict.costs.attention_flops`)."""
        return sum(c * attended_pairs(tokens, window=w, chunk=k) for c, w, k in self.attention)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (read back by :meth:`from_dict`)."""
        d = asdict(self)
        d["kv"] = [list(t) for t in self.kv.terms]
        d["attention"] = [list(t) for t in self.attention]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepCosts:
        """Inverse of :meth:`to_dict`; a malformed document is an :class:`InputError`."""
        try:
            ints = {f: int(d[f]) for f in _INT_FIELDS}
            kv = KvCurve(tuple((int(b), None if cap is None else int(cap))
                               for b, cap in d["kv"]))
            att = tuple((float(c), None if w is None else int(w), None if k is None else int(k))
                        for c, w, k in d["attention"])
            return cls(**ints, kv=kv, state_flops_per_token=float(d["state_flops_per_token"]),
                       attention=att)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"stored step costs unreadable: {exc!r}") from None


_INT_FIELDS = ("fixed_bytes", "routed_expert_bytes", "num_experts", "experts_per_token",
               "active_params", "active_routed_params", "lm_head_params", "num_layers",
               "linear_layers", "expert_slots", "kv_write_per_token", "state_bytes")


def step_costs(weights: Weights, dims: ModelDims, kv_dtype_bytes: int,
               ssm_dtype: str = "float32") -> StepCosts:
    """The :class:`StepCosts` of a model from its weights and dims."""
    q = dims.num_attention_heads
    attention: list[AttentionTerm] = []
    for i, kind in enumerate(dims.layer_types):
        if kind == MLA and dims.mla is not None:
            m = dims.mla
            attention.append((2.0 * q * (m.qk_nope_head_dim + m.qk_rope_head_dim
                                         + m.v_head_dim), None, None))
        elif kind in SOFTMAX_KINDS:
            layer = dims.attention_layer(i)
            window = layer.window if layer is not None and kind == SLIDING else None
            chunk = layer.chunk if layer is not None and kind == CHUNKED else None
            d = (layer.head_dim + layer.v_head_dim) if layer is not None else 2 * dims.head_dim
            attention.append((2.0 * q * d, window, chunk))
    merged: dict[tuple[int | None, int | None], float] = {}
    for c, w, k in attention:
        merged[(w, k)] = merged.get((w, k), 0.0) + c
    state_flops = 0.0
    for state, layers in ((dims.linear, dims.num_gdn_layers), (dims.mamba, dims.num_mamba_layers)):
        if state is not None:
            state_flops += layers * 4.0 * state.recurrent_state_elements
    return StepCosts(
        fixed_bytes=weights.prefill_fixed_bytes,
        routed_expert_bytes=weights.routed_expert_bytes if weights.moe else 0,
        num_experts=weights.num_experts if weights.moe else 0,
        experts_per_token=weights.experts_per_token if weights.moe else 0,
        active_params=weights.active_params,
        active_routed_params=weights.active_routed_params,
        lm_head_params=weights.lm_head_params,
        num_layers=dims.num_layers,
        linear_layers=dims.num_linear_layers,
        expert_slots=model_expert_slots(dims),
        kv=kv_curve(dims, kv_dtype_bytes),
        kv_write_per_token=kv_write_bytes(dims, 1, kv_dtype_bytes),
        state_bytes=state_traffic_bytes(dims, ssm_dtype),
        state_flops_per_token=state_flops,
        attention=tuple((c, w, k) for (w, k), c in merged.items()),
    )


@dataclass(frozen=True)
class StepModel:
    """One engine step's time from the model's costs and the calibrated single-stream fits.

    ``decode`` and ``prefill``: the fits ``plan`` predicts single-stream speed with;
    ``graph_tokens``: the largest step vLLM captures a CUDA graph for (None: not known).
    """

    costs: StepCosts
    decode: Fit
    prefill: Fit
    platform: str
    graph_tokens: int | None = None
    cpu_step_fixed: str = CPU_STEP_FIXED

    def __post_init__(self) -> None:
        if self.cpu_step_fixed not in ("prefill", "decode"):
            raise UsageError("cpu_step_fixed is 'prefill' or 'decode'")
        if self.decode.kind != "decode" or self.prefill.kind != "prefill":
            raise UsageError("a step model takes a decode fit and a prefill fit")
        if self.decode.is_roofline or self.prefill.is_roofline:
            raise UsageError("a step model needs calibrated fits, not the roofline bound")

    @property
    def curve(self) -> KvCurve:
        """KV bytes one request's decode step reads, by context."""
        return self.costs.kv

    @property
    def state_bytes(self) -> int:
        """One request's state read and written back per step."""
        return self.costs.state_bytes

    @property
    def s_per_flop(self) -> tuple[float, float]:
        """(dense, routed-expert) seconds per FLOP of the prefill fit."""
        theta = self.prefill.theta
        return theta.get("s_per_flop"), theta.get("s_per_expert_flop")

    def routed_bytes(self, tokens: int) -> float:
        """Routed-expert bytes a step of ``tokens`` tokens touches (expected distinct experts
        of ``tokens`` independent top-k draws)."""
        c = self.costs
        if not c.num_experts:
            return 0.0
        return c.routed_expert_bytes * distinct_expert_fraction(
            c.num_experts, c.experts_per_token, tokens
        )

    def decode_step(self, contexts: Sequence[int]) -> float:
        """Seconds of a step that decodes one token for each request at ``contexts``."""
        b = len(contexts)
        if b == 0:
            raise UsageError("a decode step needs at least one request")
        c = self.costs
        kv = [self.curve.read(x) for x in contexts]
        nbytes = c.fixed_bytes + self.routed_bytes(b) + sum(kv) + b * self.state_bytes
        dense, expert = self.s_per_flop
        body = c.active_params - c.active_routed_params
        extra_s = 2.0 * (b - 1) * (body * dense + c.active_routed_params * expert)
        layers, slots = c.num_layers, c.expert_slots
        if self.platform in HOST_BOUND:
            # the host's work is the device's: every term adds (the single-stream form)
            s_per_byte = self.decode.theta.get("s_per_byte")
            nbytes += extra_s / s_per_byte if s_per_byte > 0 else 0.0
            row = features("decode", nbytes, layers, expert_slots=slots, platform=self.platform)
            return self.decode.seconds(row)
        th = self.decode.theta
        s_byte, s_layer = th.get("s_per_byte"), th.get("s_per_layer")
        s_slot, s_fixed = th.get("s_per_expert_slot"), th.get("s_fixed")
        one = c.fixed_bytes + self.routed_bytes(1) + kv[0] + self.state_bytes
        # A GPU's layers are small kernels at one request (their launch and latency, the
        # per-layer term, outlast what they read); the bytes more requests add stream inside
        # that time until they outlast it (OVERLAP_BATCH in the module docs).
        device = max(layers * s_layer + one * s_byte, nbytes * s_byte) + slots * s_slot
        return max(device + extra_s, s_fixed)

    def mixed_step(self, contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        """Seconds of a step holding ``chunks`` of prompts beside one decode token for each
        request at ``contexts`` (the prefill form; see module docs)."""
        if not chunks:
            return self.decode_step(contexts)
        if any(n <= 0 or s < 0 for s, n in chunks):
            raise UsageError("a prefill chunk needs a positive token count")
        c = self.costs
        b = len(contexts)
        t = sum(n for _, n in chunks)
        body = c.active_params - c.lm_head_params
        flops = 2.0 * body * (t + b) + 2.0 * c.lm_head_params * (len(chunks) + b)
        for s, n in chunks:
            flops += c.attention_flops(s + n) - c.attention_flops(s)
        flops += c.state_flops_per_token * (t + b)
        xflops = 2.0 * c.active_routed_params * (t + b)
        nbytes = (
            c.fixed_bytes
            + self.routed_bytes(t + b)
            + c.kv_write_per_token * t
            + sum(self.curve.read(s) for s, _ in chunks)
            + sum(self.curve.read(x) for x in contexts)
            + b * self.state_bytes
        )
        eager = self.graph_tokens is not None and t + b > self.graph_tokens

        def seconds(nbytes: float, flops: float, xflops: float, tokens: int) -> float:
            return self.prefill.seconds(features(
                "prefill", nbytes, c.num_layers, flops, expert_flops=xflops,
                expert_slots=c.expert_slots, platform=self.platform, eager=eager,
                linear_layers=c.linear_layers, prompt_tokens=tokens,
            ))

        if self.platform not in HOST_BOUND or self.cpu_step_fixed == "prefill" or not b:
            return seconds(nbytes, flops, xflops, t)
        # On a CPU the prefill fit's fixed part (its constant terms, and its per-byte rate on
        # the weights: a request's HTTP, scheduling and first token, fitted one prompt at a
        # time) is a request's, not a step's: the step is its decoders' decode step plus what
        # the chunks add to an empty prefill.
        decoders = (sum(self.curve.read(x) for x in contexts) + b * self.state_bytes
                    + self.routed_bytes(t + b) - self.routed_bytes(t))
        theirs = (2.0 * c.active_params + c.state_flops_per_token) * b
        added = (seconds(nbytes - decoders, flops - theirs, xflops * t / (t + b), t)
                 - seconds(c.fixed_bytes, 0.0, 0.0, 0))
        return self.decode_step(contexts) + max(added, 0.0)
