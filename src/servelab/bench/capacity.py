"""Capacity under an SLO: the highest request rate or concurrency that still meets it.

The search (:func:`search`) is pure over a ``measure(value) -> bool`` callback:

1. probe ``start``; double while the SLO is met (up to ``high``), halve while it is
   not (down to ``low``), which brackets the capacity between a passing ``lo`` and a
   failing ``hi``;
2. bisect (geometric midpoint for rates, integer midpoint for concurrency) until
   ``hi / lo − 1 <= tolerance`` (rates) or ``hi − lo <= 1`` (concurrency);
3. confirm ``lo`` with ``confirm`` more probes; if one of them fails, ``lo`` becomes the
   new ``hi`` and the search resumes below it.

A probe (:class:`CapacityRunner`) runs one workload point at that value, evaluates the
SLO with its 95 % confidence intervals (:mod:`servelab.bench.slo`) and adds batches
while the verdict is ``uncertain`` (up to ``max_rounds``); if it is still uncertain,
the point estimates decide and the probe is marked so.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from servelab.bench.client import BenchClient
from servelab.bench.metrics import Metrics, compute
from servelab.bench.run import BenchConfig, open_session
from servelab.bench.samples import RequestSample
from servelab.bench.slo import Slo, SloResult, evaluate
from servelab.bench.workload import Point, WorkloadRunner
from servelab.errors import UsageError

Variable = Literal["rate", "concurrency"]


@dataclass(frozen=True, slots=True)
class SearchSpec:
    """Where and how finely to search."""

    variable: Variable = "rate"
    low: float = 0.25
    high: float = 256.0
    start: float | None = None
    """First probe; default ``low`` for concurrency, 1 req/s for rate (within bounds)."""
    tolerance: float = 0.05
    """Rates: stop when the bracket is within this relative width."""
    confirm: int = 2
    max_probes: int = 40

    def __post_init__(self) -> None:
        if self.variable not in ("rate", "concurrency"):
            raise UsageError("capacity variable must be rate or concurrency")
        if not 0 < self.low < self.high:
            raise UsageError("capacity search needs 0 < low < high")
        if self.variable == "concurrency" and (self.low != int(self.low)
                                               or self.high != int(self.high)):
            raise UsageError("concurrency bounds must be integers")
        if not 0 < self.tolerance < 1:
            raise UsageError("tolerance must be a fraction between 0 and 1, e.g. 0.05")
        if self.confirm < 0 or self.max_probes < 3:
            raise UsageError("confirm must be >= 0 and max probes >= 3")

    def first(self) -> float:
        """The first value probed."""
        s = self.start if self.start is not None else (
            self.low if self.variable == "concurrency" else 1.0)
        return self._snap(min(max(s, self.low), self.high))

    def _snap(self, v: float) -> float:
        return float(round(v)) if self.variable == "concurrency" else v

    def up(self, v: float) -> float:
        """Next value when bracketing upwards."""
        return self._snap(min(v * 2, self.high))

    def down(self, v: float) -> float:
        """Next value when bracketing downwards."""
        return self._snap(max(math.floor(v / 2) if self.variable == "concurrency" else v / 2,
                              self.low))

    def narrow(self, lo: float, hi: float) -> bool:
        """The bracket is fine enough."""
        if self.variable == "concurrency":
            return hi - lo <= 1
        return hi / lo - 1 <= self.tolerance

    def mid(self, lo: float, hi: float) -> float:
        """Bisection point."""
        if self.variable == "concurrency":
            return float((int(lo) + int(hi)) // 2)
        return math.sqrt(lo * hi)


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """What the search concluded from its probes."""

    capacity: float | None
    """Highest value that met the SLO and was confirmed; None if even ``low`` failed."""
    bracket_high: float | None
    """Lowest value seen failing above the capacity; None if ``high`` passed."""
    history: tuple[tuple[float, bool, str], ...]
    """(value, met, purpose) per probe in order; purpose ``search`` or ``confirm``."""
    exhausted: bool = False
    """Stopped at ``max_probes`` before the bracket was narrow and confirmed."""


async def search(spec: SearchSpec, measure: Callable[[float, str], Awaitable[bool]]
                 ) -> SearchOutcome:
    """Run the bracket → bisect → confirm search with ``measure(value, purpose)``."""
    hist: list[tuple[float, bool, str]] = []

    async def m(v: float, purpose: str = "search") -> bool:
        ok = await measure(v, purpose)
        hist.append((v, ok, purpose))
        return ok

    async def descend(hi: float) -> tuple[float | None, float]:
        """Halve from a failing ``hi`` until a value passes (or ``low`` fails)."""
        while hi > spec.low and len(hist) < spec.max_probes:
            nv = spec.down(hi)
            if await m(nv):
                return nv, hi
            hi = nv
        return None, hi

    lo: float | None = None
    hi: float | None = None
    v = spec.first()
    if await m(v):
        lo = v
        while lo < spec.high and len(hist) < spec.max_probes:
            nv = spec.up(lo)
            if not await m(nv):
                hi = nv
                break
            lo = nv
    else:
        lo, hi = await descend(v)
    while lo is not None and len(hist) < spec.max_probes:
        if hi is not None and not spec.narrow(lo, hi):
            mid = spec.mid(lo, hi)
            if await m(mid):
                lo = mid
            else:
                hi = mid
            continue
        done = 0
        while done < spec.confirm and len(hist) < spec.max_probes:
            if not await m(lo, "confirm"):
                break
            done += 1
        if done == spec.confirm:
            return SearchOutcome(lo, hi, tuple(hist))
        if len(hist) >= spec.max_probes:
            break
        hi = lo  # a confirmation failed: the capacity lies below
        passes = [x for x, ok, _ in hist if ok and x < hi]
        if passes:
            lo = max(passes)
        else:
            lo, hi = await descend(hi)
    exhausted = len(hist) >= spec.max_probes
    return SearchOutcome(lo if not exhausted else None, hi, tuple(hist), exhausted=exhausted)


def grid(spec: SearchSpec) -> list[float]:
    """The fixed grid that resolves the same tolerance: geometric steps of ``1 + tolerance``
    from ``low`` to ``high`` (every integer for concurrency)."""
    if spec.variable == "concurrency":
        return [float(c) for c in range(int(spec.low), int(spec.high) + 1)]
    out = []
    v = spec.low
    while v <= spec.high * (1 + 1e-9):
        out.append(v)
        v *= 1 + spec.tolerance
    return out


@dataclass(frozen=True, slots=True)
class Probe:
    """One measured value."""

    value: float
    purpose: str
    slo: SloResult
    metrics: Metrics
    rounds: int
    requests: int
    """Requests sent, warm-up included."""
    decided_by_ci: bool
    """The 95 % CIs decided the verdict (else the point estimates did)."""

    @property
    def met(self) -> bool:
        """This probe counts as meeting the SLO."""
        return self.slo.verdict == "pass" or (self.slo.verdict == "uncertain" and self.slo.met)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        m = self.metrics
        return {"value": self.value, "purpose": self.purpose, "met": self.met,
                "decided_by_ci": self.decided_by_ci, "rounds": self.rounds,
                "requests": self.requests, "slo": self.slo.to_json(),
                "request_throughput": m.request_throughput,
                "output_throughput": m.output_throughput, "completed": m.completed,
                "failed": m.failed,
                "dispatch_lag_ms_p99": m.dispatch_lag_ms.p99 if m.dispatch_lag_ms else None}


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """The answer and every probe behind it (schema ``servelab.capacity/1``)."""

    base_url: str
    model: str
    slo: Slo
    spec: SearchSpec
    prompt_len: int
    output_len: int
    outcome: SearchOutcome
    probes: tuple[Probe, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def requests(self) -> int:
        """Requests the whole search sent."""
        return sum(p.requests for p in self.probes)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        o = self.outcome
        s = self.spec
        return {"schema": "servelab.capacity/1", "base_url": self.base_url,
                "model": self.model, "slo": self.slo.to_json(), "slo_label": self.slo.label,
                "variable": s.variable, "bounds": [s.low, s.high], "tolerance": s.tolerance,
                "confirm": s.confirm, "prompt_len": self.prompt_len,
                "output_len": self.output_len, "capacity": o.capacity,
                "bracket": [o.capacity, o.bracket_high], "exhausted": o.exhausted,
                "requests": self.requests, "probes": [p.to_json() for p in self.probes],
                "notes": list(self.notes)}


ProbeFn = Callable[[Probe], None]


class CapacityRunner:
    """Measures probes with one client and prompt builder (see the module docstring)."""

    def __init__(self, runner: WorkloadRunner, slo: Slo, spec: SearchSpec, *,
                 max_rounds: int = 3, on_probe: ProbeFn | None = None) -> None:
        self.runner = runner
        self.slo = slo
        self.spec = spec
        self.max_rounds = max_rounds
        self.on_probe = on_probe
        self.probes: list[Probe] = []

    def point(self, value: float) -> Point:
        """The workload point probed at ``value``."""
        w = self.runner.spec
        if self.spec.variable == "concurrency":
            return Point(w.prompt_lens[0], w.output_len, int(value), None)
        return Point(w.prompt_lens[0], w.output_len, max(w.concurrency), value)

    async def measure(self, value: float, purpose: str) -> bool:
        """Probe ``value``: batches until the SLO verdict is decided or rounds run out."""
        pt = self.point(value)
        samples: list[RequestSample] = []
        rounds = 0
        res: SloResult | None = None
        while rounds < self.max_rounds:
            rounds += 1
            pr = await self.runner.run_point(pt)
            samples += pr.samples if rounds == 1 else [s for s in pr.samples if not s.warmup]
            res = evaluate(self.slo, samples)
            if res.verdict != "uncertain":
                break
            if pr.metrics.completed == 0:
                break
        assert res is not None
        probe = Probe(value, purpose, res, compute(samples), rounds, len(samples),
                      res.verdict != "uncertain")
        self.probes.append(probe)
        if self.on_probe is not None:
            self.on_probe(probe)
        return probe.met


def unsearchable(profile: str, variable: Variable) -> str | None:
    """Why arrivals of ``profile`` cannot be searched for a capacity (``None``: they can).

    A probe judges the SLO at one request rate: a ramp sweeps the rate within the run and a
    trace replays its own arrival times and lengths, so neither has a rate to bisect.
    (Searching a concurrency is closed loop: the profile plays no part.)
    """
    if variable != "rate":
        return None
    if profile == "trace":
        return ("a trace replays its own arrival times and lengths, so there is no request "
                "rate to search (replay it with 'servelab bench --trace')")
    if profile == "ramp":
        return ("a ramp changes the request rate within the run, so a probe has no single "
                "rate to judge the SLO at (use constant, poisson or gamma; watch a ramp with "
                "'servelab bench --profile ramp')")
    return None


def run_capacities(cfg: BenchConfig, slo: Slo, spec: SearchSpec, *, max_rounds: int = 3,
                   on_probe: ProbeFn | None = None,
                   on_result: Callable[[CapacityResult], None] | None = None
                   ) -> tuple[CapacityResult, ...]:
    """One capacity search per prompt length of the workload, in order (each a fresh
    :func:`run_capacity` with the workload's other settings); ``on_result`` receives each
    length's result as soon as its search ends."""
    out: list[CapacityResult] = []
    for n in dict.fromkeys(cfg.workload.prompt_lens):
        out.append(run_capacity(replace(cfg, workload=replace(cfg.workload, prompt_lens=(n,))),
                                slo, spec, max_rounds=max_rounds, on_probe=on_probe))
        if on_result is not None:
            on_result(out[-1])
    return tuple(out)


def partial_capacity_json(done: Sequence[CapacityResult], probes: Sequence[Probe],
                          prompt_len: int | None, reason: str) -> dict[str, Any]:
    """An unfinished capacity search (schema ``servelab.capacity-partial/1``): the searches
    that ended, then the probes of the one under way (``prompt_len``) and why it stopped."""
    return {"schema": "servelab.capacity-partial/1", "partial": reason,
            "results": [r.to_json() for r in done], "prompt_len": prompt_len,
            "probes": [p.to_json() for p in probes]}


def capacities_json(results: Sequence[CapacityResult]) -> dict[str, Any]:
    """Several prompt lengths' searches (schema ``servelab.capacities/1``): a
    ``capacities`` summary row per length, and each search's full ``servelab.capacity/1``
    document under ``results``."""
    return {"schema": "servelab.capacities/1",
            "capacities": [{"prompt_len": r.prompt_len, "capacity": r.outcome.capacity,
                            "bracket": [r.outcome.capacity, r.outcome.bracket_high],
                            "exhausted": r.outcome.exhausted, "probes": len(r.probes),
                            "requests": r.requests} for r in results],
            "results": [r.to_json() for r in results]}


def run_capacity(cfg: BenchConfig, slo: Slo, spec: SearchSpec, *, max_rounds: int = 3,
                 on_probe: ProbeFn | None = None) -> CapacityResult:
    """Search the capacity of ``cfg.base_url`` for the SLO (workload: its first prompt
    length, its output length, its profile; for rates its largest concurrency caps).
    :func:`run_capacities` searches every prompt length. Raises :class:`UsageError` for a
    workload whose arrivals have no rate to search (:func:`unsearchable`)."""
    w = cfg.workload
    why = unsearchable("trace" if w.trace is not None else w.profile, spec.variable)
    if why is None and (w.depths or w.turns > 1 or w.dataset is not None):
        why = ("a probe sends fixed-length prompts; depth grids, multi-turn and dataset "
               "workloads are 'servelab bench' workloads")
    if why is not None:
        raise UsageError(f"capacity: {why}")
    if spec.variable == "rate":  # the cap is no warm-up size: a few requests warm up
        w = replace(w, request_rate=w.request_rate or 1.0, request_rates=(),
                    concurrency=(max(w.concurrency),),
                    warmup_requests=4 if w.warmup_requests is None else w.warmup_requests)
    else:
        w = replace(w, request_rate=None, request_rates=())
    w = replace(w, max_repeats=1)
    ses = open_session(replace(cfg, workload=w))

    async def go() -> tuple[SearchOutcome, list[Probe]]:
        async with BenchClient(ses.base, ses.options, timeouts=cfg.timeouts,
                               api_key=cfg.api_key) as client:
            runner = WorkloadRunner(client, ses.builder, w)
            cap = CapacityRunner(runner, slo, spec, max_rounds=max_rounds, on_probe=on_probe)
            out = await search(spec, cap.measure)
            return out, cap.probes

    try:
        outcome, probes = asyncio.run(go())
    finally:
        ses.close()
    notes = [f"prompt lengths counted by {ses.counter.source}"]
    undecided = sum(1 for p in probes if not p.decided_by_ci)
    if undecided:
        notes.append(f"{undecided} of {len(probes)} probes: the 95% CI straddled a "
                     "threshold after the last round; the point estimate decided")
    if outcome.exhausted:
        notes.append(f"stopped after {spec.max_probes} probes before the search converged")
    if outcome.capacity is None and not outcome.exhausted:
        notes.append(f"the SLO is not met even at the lowest {spec.variable} "
                     f"({spec.low:g})")
    elif outcome.bracket_high is None and outcome.capacity is not None:
        notes.append(f"the SLO is still met at the highest {spec.variable} searched "
                     f"({spec.high:g}): the capacity is at least that")
    return CapacityResult(ses.base, ses.model, slo, spec, w.prompt_lens[0], w.output_len,
                          outcome, tuple(probes), tuple(notes))
