"""Engine steps under load from the operator model (issue 39 item 3): the batched decode
steps and the chunked-prefill mixed steps the scheduler (:mod:`servelab.predict.schedule`)
replays, each summed from the plan's operator tables (servelab's own, or AIConfigurator's
with the H200-fitted transfer: :class:`~servelab.predict.ops_source.OpsTables`) at its
shape (:func:`servelab.ops.step.step_time`: the decoders as one group at their mean
context, each prompt chunk over its prefix) and corrected as the single-stream predictions
are (:mod:`servelab.ops.calibrate`):
a decode-only step pays the engine's per-step decode overhead and is never shorter than the
host's floor; a step that starts a prompt pays the per-prompt prefill overhead (so one
request's lone whole-prompt step is exactly its single-stream prefill prediction); any other
step with chunks pays the decode overhead.

Step times are cached by shape (contexts to 64 tokens, chunk prefixes to 256): a simulation
prices thousands of steps of a few hundred shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from servelab.ops.calibrate import Corrections
from servelab.ops.costs import Costs
from servelab.ops.model import StepModel as OpsModel
from servelab.ops.step import EngineSteps, SeqGroup, StepShape, step_time
from servelab.predict.batched import Chunk, StepCosts, StepModel
from servelab.predict.levels import Fit
from servelab.predict.ops_speed import OperatorSpeed

_CTX = 64
_PREFIX = 256


StepKey = tuple[int, int, tuple[Chunk, ...]]


def step_key(contexts: Sequence[int], chunks: Sequence[Chunk]) -> StepKey:
    """The shape a step is priced and cached at: its decoders as one group at their mean
    context (to :data:`_CTX` tokens), its chunks with their prefixes to :data:`_PREFIX`."""
    b = len(contexts)
    ctx = (round(sum(contexts) / b / _CTX) * _CTX) if b else 0
    return b, ctx, tuple(sorted((s // _PREFIX * _PREFIX, n) for s, n in chunks))


@dataclass(frozen=True)
class OpsStepModel(StepModel):
    """A :class:`~servelab.predict.batched.StepModel` whose steps are the operator model's
    (``decode``/``prefill``: the operator-model fits, for their intervals and source)."""

    ops: OpsModel | None = None
    op_costs: Costs | None = field(default=None, repr=False, compare=False)
    corrections: Corrections | None = None
    isolation: bool = True  # take the fitted isolation adjustment off each call
    decode_overhead: bool = True  # add the engine's per-step overheads and host floor
    prefill_overhead: bool = True
    _memo: dict[tuple[object, ...], float] = field(default_factory=dict, repr=False,
                                                   compare=False, hash=False)

    def decode_step(self, contexts: Sequence[int]) -> float:
        return self.mixed_step(contexts, ())

    def mixed_step(self, contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        """Seconds of one step: a decode token for each request at ``contexts`` beside
        ``chunks`` (prompt start, tokens)."""
        if self.ops is None or self.op_costs is None or self.corrections is None:
            raise ValueError("an operator step model needs its operators and corrections")
        key = step_key(contexts, chunks)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        b, ctx, rounded = key
        groups = [SeqGroup(b, ctx, 1)] if b else []
        groups += [SeqGroup(1, s, n) for s, n in rounded]
        if not groups:
            return 0.0
        c = self.corrections
        frac, cap = (c.isolation_frac, c.isolation_cap_ms) if self.isolation else (0.0, 0.0)
        eng = EngineSteps(cuda_graph_max=self.graph_tokens or 512, isolation_frac=frac,
                          isolation_cap_ms=cap)
        ms = step_time(self.ops, self.op_costs, StepShape(tuple(groups)), eng).total_ms
        if not chunks:
            if self.decode_overhead:
                ms = max(ms + c.decode_ms, c.floor_ms)
        elif any(s == 0 for s, _ in chunks):
            if self.prefill_overhead:
                ms += c.prefill_ms
        elif self.decode_overhead:
            ms += c.decode_ms
        self._memo[key] = ms / 1e3
        return ms / 1e3


def operator_step_model(op: OperatorSpeed, costs: StepCosts, decode: Fit, prefill: Fit,
                        platform: str, graph_tokens: int | None) -> OpsStepModel:
    """The step model of a plan whose speed the operator model predicted (``decode`` and
    ``prefill``: its operator-model fits)."""
    if op.model is None or op.tables is None:
        raise ValueError("the operator model did not predict this plan")
    t = op.tables
    return OpsStepModel(
        costs=costs, decode=decode, prefill=prefill, platform=platform,
        graph_tokens=graph_tokens, ops=op.model, op_costs=t.costs,
        corrections=t.corrections,
        isolation=t.decode.stage != "operators" or t.prefill.stage != "operators",
        decode_overhead=t.decode.stage == "corrected",
        prefill_overhead=t.prefill.stage == "corrected")
