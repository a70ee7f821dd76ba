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

Pure: weights, dims and fits in, seconds out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from servelab.errors import UsageError
from servelab.families import ModelDims
from servelab.plan.costs import (
    attention_flops,
    distinct_expert_fraction,
    kv_write_bytes,
    layer_token_bytes,
    state_traffic_bytes,
)
from servelab.plan.weights import Weights
from servelab.predict.form import HOST_BOUND, features
from servelab.predict.levels import Fit
from servelab.predict.speed import model_expert_slots

#: A chunk of a prompt in one step: (tokens already prefilled, tokens in this step).
Chunk = tuple[int, int]


@dataclass(frozen=True)
class KvCurve:
    """KV bytes one request's decode step reads at context ``c``: ``sum b x min(c, cap)``
    over layer groups (``cap`` None: the whole context)."""

    terms: tuple[tuple[int, int | None], ...]

    def read(self, context: int) -> int:
        """Bytes read at ``context`` tokens (equals :func:`servelab.plan.costs.kv_read_bytes`)."""
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


@dataclass(frozen=True)
class StepModel:
    """One engine step's time from the model's costs and the calibrated single-stream fits.

    ``decode`` and ``prefill``: the fits ``plan`` predicts single-stream speed with;
    ``graph_tokens``: the largest step vLLM captures a CUDA graph for (None: not known).
    """

    weights: Weights
    dims: ModelDims
    decode: Fit
    prefill: Fit
    platform: str
    kv_dtype_bytes: int
    ssm_dtype: str = "float32"
    graph_tokens: int | None = None
    curve: KvCurve = field(init=False)
    state_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        if self.decode.kind != "decode" or self.prefill.kind != "prefill":
            raise UsageError("a step model takes a decode fit and a prefill fit")
        if self.decode.is_roofline or self.prefill.is_roofline:
            raise UsageError("a step model needs calibrated fits, not the roofline bound")
        object.__setattr__(self, "curve", kv_curve(self.dims, self.kv_dtype_bytes))
        object.__setattr__(self, "state_bytes", state_traffic_bytes(self.dims, self.ssm_dtype))

    @property
    def s_per_flop(self) -> tuple[float, float]:
        """(dense, routed-expert) seconds per FLOP of the prefill fit."""
        theta = self.prefill.theta
        return theta.get("s_per_flop"), theta.get("s_per_expert_flop")

    def routed_bytes(self, tokens: int) -> float:
        """Routed-expert bytes a step of ``tokens`` tokens touches (expected distinct experts
        of ``tokens`` independent top-k draws)."""
        w = self.weights
        if not w.moe:
            return 0.0
        return w.routed_expert_bytes * distinct_expert_fraction(
            w.num_experts, w.experts_per_token, tokens
        )

    def decode_step(self, contexts: Sequence[int]) -> float:
        """Seconds of a step that decodes one token for each request at ``contexts``."""
        b = len(contexts)
        if b == 0:
            raise UsageError("a decode step needs at least one request")
        w = self.weights
        kv = [self.curve.read(c) for c in contexts]
        nbytes = w.prefill_fixed_bytes + self.routed_bytes(b) + sum(kv) + b * self.state_bytes
        dense, expert = self.s_per_flop
        body = w.active_params - w.active_routed_params
        extra_s = 2.0 * (b - 1) * (body * dense + w.active_routed_params * expert)
        layers, slots = self.dims.num_layers, model_expert_slots(self.dims)
        if self.platform in HOST_BOUND:
            # the host's work is the device's: every term adds (the single-stream form)
            s_per_byte = self.decode.theta.get("s_per_byte")
            nbytes += extra_s / s_per_byte if s_per_byte > 0 else 0.0
            row = features("decode", nbytes, layers, expert_slots=slots, platform=self.platform)
            return self.decode.seconds(row)
        th = self.decode.theta
        s_byte, s_layer = th.get("s_per_byte"), th.get("s_per_layer")
        s_slot, s_fixed = th.get("s_per_expert_slot"), th.get("s_fixed")
        one = w.prefill_fixed_bytes + self.routed_bytes(1) + kv[0] + self.state_bytes
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
        w, dims = self.weights, self.dims
        b = len(contexts)
        t = sum(n for _, n in chunks)
        body = w.active_params - w.lm_head_params
        flops = 2.0 * body * (t + b) + 2.0 * w.lm_head_params * (len(chunks) + b)
        for s, n in chunks:
            flops += attention_flops(dims, s + n) - attention_flops(dims, s)
        for state, layers in ((dims.linear, dims.num_gdn_layers),
                              (dims.mamba, dims.num_mamba_layers)):
            if state is not None:
                flops += layers * 4.0 * (t + b) * state.recurrent_state_elements
        xflops = 2.0 * w.active_routed_params * (t + b)
        nbytes = (
            w.prefill_fixed_bytes
            + self.routed_bytes(t + b)
            + kv_write_bytes(dims, t, self.kv_dtype_bytes)
            + sum(self.curve.read(s) for s, _ in chunks)
            + sum(self.curve.read(c) for c in contexts)
            + b * self.state_bytes
        )
        eager = self.graph_tokens is not None and t + b > self.graph_tokens
        row = features(
            "prefill", nbytes, dims.num_layers, flops, expert_flops=xflops,
            expert_slots=model_expert_slots(dims), platform=self.platform, eager=eager,
            linear_layers=dims.num_linear_layers, prompt_tokens=t,
        )
        return self.prefill.seconds(row)
