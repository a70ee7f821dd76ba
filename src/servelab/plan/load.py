"""Predicted serving under load: TPOT, TTFT and output tok/s at a concurrency or a request
rate, and the highest load that meets an SLO, from a plan (before anything is downloaded).

The step model (:mod:`servelab.predict.batched`) prices each engine step from the plan's
calibrated single-stream fits; the scheduler (:mod:`servelab.predict.schedule`) replays vLLM's
chunked prefill and admission over it, with the KV pool's admission limit from the plan's
pool (:func:`servelab.predict.schedule.requests_admitted`) and the step's budget and request
limit from the engine's flags or defaults.

Intervals. A simulated point's time is a sum of decode steps and steps holding prompt
chunks, each priced by a fit with its own relative half-width (leave-one-model-out, the
single-stream rule). The point's half-width is their time-weighted mean, ``(1 - f) e_decode +
f e_prefill`` with ``f`` the share of step time in steps with prompt chunks; a TTFT's, no
narrower than ``e_prefill`` (a first token waits on a prefill step: on the H200's stored sweep
the mixed width left 8 of 9 TTFTs outside). Where stored concurrency sweeps of two or more
models on the hardware measured the batched form's own held-out error
(:func:`servelab.evidence.sweeps.batched_error`), no interval is narrower than that; without
them each prediction says the batched form's error is not in it. An interval over the 4x rule
(:data:`~servelab.predict.levels.MAX_RATIO`) makes the point "no prediction". A latency's
interval is ``x (1 ± e)``; a rate's ``/ (1 ∓ e)``. SLO capacity comes with the capacities of
every step made ``1 ± e`` longer (``e`` the widest of those errors); a stored capacity of the
same checkpoint on the same hardware (:class:`MeasuredCapacity`) is shown beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from servelab.bench.slo import Slo, parse_slo
from servelab.bench.stats import percentile
from servelab.errors import UsageError
from servelab.plan.build import Plan
from servelab.predict.batched import StepCosts, StepModel, step_costs
from servelab.predict.form import HOST_BOUND
from servelab.predict.levels import MAX_RATIO, too_wide_text
from servelab.predict.ops_fitted import RooflinePrefillSteps
from servelab.predict.ops_load import operator_step_model
from servelab.predict.schedule import (
    Limits,
    Load,
    LoadStats,
    StepCost,
    Timing,
    requests_admitted,
    simulate,
    stats,
)
from servelab.sizing.startup import BatchedTokens, StartupOptions

NO_SCHEDULER = "load prediction follows vLLM's scheduler; a llama.cpp plan has none"

#: Requests simulated per closed-loop point when not given: servelab bench's default batch,
#: ``max(3, 2 x concurrency)`` (two waves of its clients).
WAVES = 2
MIN_REQUESTS = 3
#: Prompt tokens in flight (streams x prompt) from which the 2026-12-02 H200 sweep stalled.
STALL_TOKENS = 32_768
#: Requests simulated at a constant rate.
RATE_REQUESTS = 200


@dataclass(frozen=True)
class Band:
    """A predicted value with its interval."""

    value: float
    low: float
    high: float


def _latency(x: float, e: float) -> Band:
    return Band(x, max(x * (1.0 - e), 0.0), x * (1.0 + e))


def _rate(x: float, e: float) -> Band:
    return Band(x, x / (1.0 + e), x / (1.0 - e) if e < 1.0 else float("inf"))


@dataclass(frozen=True)
class BatchedError:
    """The batched form's own error on a hardware: how far stored concurrency sweeps, each
    predicted with its model left out, missed (:func:`servelab.evidence.sweeps.batched_error`).
    ``rel_error`` bounds TPOT and the rates, ``ttft_rel_error`` TTFT."""

    hardware: str
    rel_error: float
    ttft_rel_error: float
    models: int
    points: int
    basis: str


def too_wide(e: float) -> bool:
    """An interval of half-width ``e`` spans more than :data:`~servelab.predict.levels.
    MAX_RATIO` (upper over lower): no prediction."""
    return e >= 1.0 or (1.0 + e) / (1.0 - e) > MAX_RATIO


@dataclass(frozen=True)
class LoadPoint:
    """One predicted load point (every figure ``predicted``)."""

    prompt_len: int
    output_len: int
    concurrency: int | None
    rate: float | None
    requests: int
    max_admitted: int
    tpot_s: Band
    ttft_s: Band
    ttft_p99_s: Band
    stream_tok_s: Band
    output_tok_s_per_gpu: Band
    rel_error: float  # of TPOT and the rates; TTFT's is no narrower than the prefill fit's
    prefill_share: float  # of the simulated step time, steps holding prompt chunks
    queued: int  # requests that waited for admission
    predicted: bool = True
    no_prediction: bool = False  # an interval over the 4x rule: the figures are not a prediction


@dataclass(frozen=True)
class LoadPrediction:
    """Predicted load points with where their limits and intervals come from."""

    points: tuple[LoadPoint, ...]
    max_num_batched_tokens: int
    max_num_batched_tokens_source: str
    max_num_seqs: int
    max_num_seqs_source: str
    gpus: int
    source: str
    error_basis: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """JSON form; every figure carries ``predicted: true``."""
        d = asdict(self)
        d["predicted"] = True
        return d


def step_model(plan: Plan) -> StepModel:
    """The plan's :class:`StepModel`, or a UsageError saying why there is none."""
    sp = plan.speed
    if plan.pool is None:
        raise UsageError(NO_SCHEDULER)
    if plan.layout.gpus_per_replica > 1:
        raise UsageError("load prediction covers one GPU per replica so far (no -tp/-pp)")
    if sp.decode_fit is None or sp.decode_fit.is_roofline:
        raise UsageError("no calibrated decode prediction on this hardware: no load prediction")
    if sp.prefill_fit is None or sp.prefill_fit.is_roofline:
        raise UsageError("no calibrated prefill prediction on this hardware: no load prediction")
    for kind, fit in (("decode", sp.decode_fit), ("prefill", sp.prefill_fit)):
        if fit.refused:  # a step model on a fit too uncertain to print is no prediction either
            raise UsageError(f"{kind}: {fit.refused}: no load prediction")
    graphs = plan.graph_capture.max_tokens if plan.graph_capture is not None else None
    if plan.operator is not None:  # steps from the operator model (servelab.predict.ops_load)
        return operator_step_model(plan.operator, plan_step_costs(plan), sp.decode_fit,
                                   sp.prefill_fit, plan.hardware.platform, graphs)
    if plan.roofline_prefill is not None:  # prompt chunks on the fitted rooflines
        return RooflinePrefillSteps(costs=plan_step_costs(plan), decode=sp.decode_fit,
                                    prefill=sp.prefill_fit, platform=plan.hardware.platform,
                                    graph_tokens=graphs, steps=plan.roofline_prefill)
    return StepModel(
        costs=plan_step_costs(plan),
        decode=sp.decode_fit,
        prefill=sp.prefill_fit,
        platform=plan.hardware.platform,
        graph_tokens=graphs,
    )


def plan_step_costs(plan: Plan) -> StepCosts:
    """What a step of ``plan``'s model costs (its vLLM KV pool's dtypes)."""
    assert plan.pool is not None
    return step_costs(plan.weights, plan.dims, plan.pool.kv_dtype_bytes,
                      plan.pool.mamba_ssm_dtype or "float32")


def _timed(model: StepModel, scale: float = 1.0) -> tuple[StepCost, list[float]]:
    """A step-cost function that also totals (all steps, steps with chunks) seconds."""
    spent = [0.0, 0.0]

    def cost(contexts: Sequence[int], chunks: Sequence[tuple[int, int]]) -> float:
        s = model.mixed_step(contexts, chunks) * scale
        spent[0] += s
        if chunks:
            spent[1] += s
        return s

    return cost, spent


def limits_for(plan: Plan, tokens: BatchedTokens, request_tokens: int) -> Limits:
    """The scheduler's limits for requests of ``request_tokens`` tokens under ``plan``."""
    assert plan.pool is not None and plan.max_num_seqs is not None
    return Limits(tokens.value, plan.max_num_seqs.value,
                  requests_admitted(plan.pool, request_tokens))


def batched_tokens(plan: Plan, max_num_batched_tokens: int | None) -> BatchedTokens:
    """The step token budget ``plan``'s engine runs with at ``max_num_batched_tokens``
    (``None``: its default there), by the engine's own start-up rules."""
    if plan.startup_rules is None:
        raise UsageError(NO_SCHEDULER)
    opts = StartupOptions(max_num_batched_tokens=max_num_batched_tokens)
    return plan.startup_rules.max_num_batched_tokens(plan.hardware, plan.platform, plan.layout,
                                                     opts)


def requests_for(concurrency: int | None) -> int:
    """Requests a point simulates: closed-loop, servelab bench's default batch (at least
    :data:`MIN_REQUESTS`, :data:`WAVES` for each client); at a rate, :data:`RATE_REQUESTS`."""
    return max(MIN_REQUESTS, WAVES * concurrency) if concurrency else RATE_REQUESTS


def simulate_points(
    model: StepModel,
    loads: Sequence[Load],
    limits_of: Callable[[Load], Limits],
    gpus: int,
    batched: BatchedError | None = None,
) -> list[LoadPoint]:
    """Each of ``loads`` through the scheduler over ``model``, with its interval: the
    single-stream fits' half-widths mixed by the point's share of prefill steps, no narrower
    than the batched form's own held-out error where stored sweeps measured it."""
    e_d, e_p = model.decode.rel_error, model.prefill.rel_error
    if e_d is None or e_p is None:
        raise UsageError("the decode or prefill fit carries no interval: no load prediction")
    points = []
    for load in loads:
        limits = limits_of(load)
        cost, spent = _timed(model)
        timings = simulate(cost, load, limits)
        st = stats(timings, load)
        share = spent[1] / spent[0] if spent[0] > 0 else 0.0
        e = (1.0 - share) * e_d + share * e_p
        e_ttft = max(e, e_p)
        if batched is not None:  # more evidence than the single-stream widths: never narrower
            e, e_ttft = max(e, batched.rel_error), max(e_ttft, batched.ttft_rel_error)
        points.append(_point(load, limits, st, timings, e, e_ttft, share, gpus))
    return points


def predict_load(
    plan: Plan,
    loads: Sequence[Load],
    tokens: BatchedTokens,
    batched: BatchedError | None = None,
    left_out: str | None = None,
) -> LoadPrediction:
    """Predicted :class:`LoadPoint` for each of ``loads`` under ``plan`` (see module docs);
    ``batched``: the batched form's held-out error on this hardware, when stored sweeps of
    two or more models measured it; ``left_out``: what it says of the stored sweeps on this
    hardware that could not be predicted again (:func:`servelab.evidence.sweeps.
    left_out_note`), a note."""
    model = step_model(plan)
    assert plan.max_num_seqs is not None
    gpus = plan.layout.gpus_per_replica
    points = simulate_points(
        model, loads, lambda ld: limits_for(plan, tokens, ld.prompt_len + ld.output_len),
        gpus, batched)
    e_d, e_p = model.decode.rel_error, model.prefill.rel_error
    assert e_d is not None and e_p is not None
    basis = (f"decode ±{e_d * 100:.0f}% ({model.decode.error_basis}); prefill ±{e_p * 100:.0f}% "
             f"({model.prefill.error_basis}), mixed by each point's share of prefill steps")
    notes = []
    if batched is None:
        notes.append(
            "the batched form's own error is not in these intervals: they are the single-"
            "stream fits', and stored concurrency sweeps of two or more models on a hardware "
            "are needed to measure it (`servelab calibration report`)")
    else:
        basis += (f"; no narrower than the batched form's ±{batched.rel_error * 100:.0f}% "
                  f"(TTFT ±{batched.ttft_rel_error * 100:.0f}%): {batched.basis}")
    if left_out:
        notes.append(left_out)
    wide = [p for p in points if p.no_prediction]
    if wide:
        notes.append(
            f"{len(wide)} of {len(points)} points: " + too_wide_text(
                f"±{max(p.rel_error for p in wide) * 100:.0f}%") + "; their figures are "
            "shown as simulated, not predicted")
    if plan.hardware.platform not in HOST_BOUND and any(
        (ld.concurrency or 0) * ld.prompt_len >= STALL_TOKENS for ld in loads
    ):
        notes.append(
            f"{STALL_TOKENS:,} or more prompt tokens in flight: the 2026-12-02 H200 sweep "
            "(FP8 Qwen3-30B-A3B) stalled every stream once per wave there (1.4 s at 32K tokens, "
            "7.6 s at 131K), which this model does not predict (benchmarks/RESULTS.md)"
        )
    return LoadPrediction(
        points=tuple(points),
        max_num_batched_tokens=tokens.value,
        max_num_batched_tokens_source=tokens.source,
        max_num_seqs=plan.max_num_seqs.value,
        max_num_seqs_source=plan.max_num_seqs.source,
        gpus=gpus,
        source=f"batched step model over {model.decode.source}",
        error_basis=basis,
        notes=tuple(notes),
    )


def _point(load: Load, limits: Limits, st: LoadStats, timings: Sequence[Timing], e: float,
           e_ttft: float, share: float, gpus: int) -> LoadPoint:
    return LoadPoint(
        prompt_len=load.prompt_len,
        output_len=load.output_len,
        concurrency=load.concurrency,
        rate=load.rate,
        requests=load.requests,
        max_admitted=limits.max_admitted,
        tpot_s=_latency(st.tpot_mean_s, e),
        ttft_s=_latency(st.ttft_mean_s, e_ttft),
        ttft_p99_s=_latency(percentile([t.ttft for t in timings], 99), e_ttft),
        stream_tok_s=_rate(st.stream_tok_s, e),
        output_tok_s_per_gpu=_rate(st.output_tok_s / gpus, e),
        rel_error=e,
        prefill_share=share,
        queued=st.queued,
        no_prediction=too_wide(e) or too_wide(e_ttft),
    )


def meets(timings: Sequence[Timing], slo: Slo) -> bool:
    """Whether simulated requests meet every term of ``slo`` (point estimates)."""
    for term in slo.terms:
        vals = [
            (t.ttft if term.metric == "ttft" else t.tpot if term.metric == "tpot" else t.e2e)
            for t in timings
        ]
        if percentile(vals, term.percentile) * 1000.0 > term.threshold_ms:
            return False
    return True


@dataclass(frozen=True)
class CapacityPrediction:
    """The predicted highest concurrency (or rate) meeting an SLO, with the capacities at
    every step ``1 - e`` and ``1 + e`` as long."""

    slo: str
    variable: str  # "concurrency" or "rate"
    prompt_len: int
    output_len: int
    capacity: float | None  # None: not even the lowest load meets it
    low: float | None
    high: float | None
    rel_error: float
    predicted: bool = True
    no_prediction: bool = False  # steps 1 ± e long span more than the 4x rule

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def _search(ok: Callable[[float], bool], variable: str, top: float) -> float | None:
    """The largest load meeting ``ok``: integers 1..top for concurrency (bisection over the
    monotone part), a rate to 1 % by doubling then bisection."""
    if variable == "concurrency":
        if not ok(1):
            return None
        lo, hi = 1, int(top)
        if ok(hi):
            return float(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return float(lo)
    good = 0.05
    if not ok(good):
        return None
    bad = good * 2
    while ok(bad) and bad < top:
        good, bad = bad, bad * 2
    if bad >= top and ok(top):
        return top
    while bad / good > 1.01:
        mid = (good * bad) ** 0.5
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good


def predict_capacity(
    plan: Plan,
    slo: Slo,
    tokens: BatchedTokens,
    *,
    prompt_len: int,
    output_len: int,
    variable: str = "concurrency",
    max_load: float = 1024,
    batched: BatchedError | None = None,
) -> CapacityPrediction:
    """The highest load meeting ``slo`` (see :class:`CapacityPrediction`); its range is every
    step ``1 ± e`` as long, ``e`` the widest of the fits' and the batched form's errors."""
    if variable not in ("concurrency", "rate"):
        raise UsageError(f"capacity varies concurrency or rate, not {variable!r}")
    model = step_model(plan)
    limits = limits_for(plan, tokens, prompt_len + output_len)
    e_d, e_p = model.decode.rel_error, model.prefill.rel_error
    if e_d is None or e_p is None:
        raise UsageError("the decode or prefill fit carries no interval: no capacity prediction")
    e = max(e_d, e_p, *((batched.rel_error, batched.ttft_rel_error) if batched else ()))

    def capacity(scale: float) -> float | None:
        def ok(x: float) -> bool:
            if variable == "concurrency":
                load = Load(prompt_len, output_len, requests_for(int(x)), concurrency=int(x))
            else:
                load = Load(prompt_len, output_len, RATE_REQUESTS, rate=x)
            cost, _ = _timed(model, scale)
            return meets(simulate(cost, load, limits), slo)

        return _search(ok, variable, max_load)

    best = capacity(1.0)
    return CapacityPrediction(
        slo=slo.label, variable=variable, prompt_len=prompt_len, output_len=output_len,
        capacity=best, low=capacity(1.0 + e), high=capacity(max(1.0 - e, 0.05)), rel_error=e,
        no_prediction=too_wide(e),
    )


@dataclass(frozen=True)
class LoadRequest:
    """What the user asked to predict under load."""

    prompt_lens: tuple[int, ...]
    output_len: int
    concurrency: tuple[int, ...] = ()
    rates: tuple[float, ...] = ()
    requests: int | None = None
    max_num_batched_tokens: int | None = None
    slo: str | None = None

    @property
    def wanted(self) -> bool:
        """Whether any load prediction was asked for."""
        return bool(self.concurrency or self.rates or self.slo)


@dataclass(frozen=True)
class MeasuredCapacity:
    """An SLO capacity ``servelab run`` measured (a recipe's ``[capacity]``), stored with the
    run of the same checkpoint on the same hardware."""

    slo: str  # the SLO's label (parse_slo(...).label)
    variable: str
    prompt_len: int
    output_len: int
    capacity: float | None  # None: not even the lowest load met it
    run_id: str
    measured: bool = True

    def matches(self, c: CapacityPrediction) -> bool:
        """Whether ``c`` predicts this search (same SLO, variable and lengths)."""
        return (self.slo, self.variable, self.prompt_len, self.output_len) == (
            c.slo, c.variable, c.prompt_len, c.output_len)


@dataclass(frozen=True)
class LoadAnswer:
    """The load prediction and SLO capacities, or why there are none; ``measured``: stored
    capacities of this checkpoint and hardware under the same SLO, shown beside them."""

    load: LoadPrediction | None
    capacities: tuple[CapacityPrediction, ...]
    reason: str | None
    measured: tuple[MeasuredCapacity, ...] = ()

    def measured_for(self, c: CapacityPrediction) -> tuple[MeasuredCapacity, ...]:
        """The stored measurements of the search ``c`` predicts."""
        return tuple(m for m in self.measured if m.matches(c))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``predicted: true``; a measured capacity says ``measured: true``)."""
        return {
            "predicted": True,
            "points": self.load.to_dict() if self.load else None,
            "capacity": [{**c.to_dict(), "measured": [asdict(m) for m in self.measured_for(c)]}
                         for c in self.capacities],
            "measured_capacity": [asdict(m) for m in self.measured],
            "no_prediction": self.reason,
        }


def answer(plan: Plan, req: LoadRequest, batched: BatchedError | None = None,
           measured: Sequence[MeasuredCapacity] = (), left_out: str | None = None
           ) -> LoadAnswer:
    """Predict ``req`` under ``plan``; a model or hardware the batched model cannot price is
    answered with the reason instead. ``batched``: the batched form's held-out error on the
    plan's hardware; ``measured``: stored capacities of the plan's checkpoint there;
    ``left_out``: the note on stored sweeps there that are not in ``batched``."""
    slo = parse_slo(req.slo) if req.slo else None  # bad syntax is the user's error: raise
    loads = [
        Load(p, req.output_len, req.requests or requests_for(c), concurrency=c)
        for p in req.prompt_lens for c in req.concurrency
    ] + [
        Load(p, req.output_len, req.requests or requests_for(None), rate=r)
        for p in req.prompt_lens for r in req.rates
    ]
    if not loads and slo is None:
        return LoadAnswer(None, (), None, tuple(measured))
    try:
        tokens = batched_tokens(plan, req.max_num_batched_tokens)
        load = predict_load(plan, loads, tokens, batched, left_out) if loads else None
        caps = tuple(
            predict_capacity(plan, slo, tokens, prompt_len=p, output_len=req.output_len,
                             variable="rate" if req.rates and not req.concurrency
                             else "concurrency", batched=batched)
            for p in req.prompt_lens
        ) if slo is not None else ()
    except UsageError as exc:
        return LoadAnswer(None, (), str(exc), tuple(measured))
    return LoadAnswer(load, caps, None, tuple(measured))
