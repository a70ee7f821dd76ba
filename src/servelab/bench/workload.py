"""Workloads: which requests to send, when, and how often to repeat them.

Default: the seed's profile — single stream at prompt lengths 512 / 2,048 / 8,192
tokens with a fixed output length, warm-up requests excluded, repeated in batches
until the 95 % CI of the headline metrics (per-request decode tok/s and TTFT) is
within ``ci_target`` of the mean, or ``max_repeats`` batches or the ``duration_s``
budget are spent. Sweeps: several prompt lengths × concurrencies; a Poisson
request-rate mode (open loop, concurrency as a cap).

The runner reports progress through an ``on_progress`` callback (the CLI draws the
progress bar); prompts are built before each batch so tokenization never overlaps a
measurement window.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servelab.bench.client import BenchClient, RequestSpec
from servelab.bench.datasets import Entry, load_dataset
from servelab.bench.metrics import Metrics, buffered, bulk_read, compute, per_request
from servelab.bench.profiles import Arrival, LoadProfile, Trace, load_trace
from servelab.bench.prompts import PromptBuilder
from servelab.bench.samples import ErrorKind, RequestSample
from servelab.bench.spec import WorkloadSpec
from servelab.bench.stats import Drift, drift
from servelab.errors import BenchError
from servelab.points import PointKey, arrival_tag

HEADLINE = ("decode_tok_s", "ttft_ms")
"""Metrics whose confidence interval decides when a point has enough samples."""

@dataclass(frozen=True, slots=True)
class Point:
    """One cell of a sweep."""

    prompt_len: int
    output_len: int
    concurrency: int
    request_rate: float | None
    depth: int = 0
    """Tokens of shared, cached context before the prompt's new tokens (depth grid)."""

    @property
    def label(self) -> str:
        """Short human label, e.g. ``prompt 2048 · out 128 · c=1``."""
        rate = f" · {self.request_rate:g} req/s" if self.request_rate else ""
        depth = f" · depth {self.depth}" if self.depth else ""
        return (f"prompt {self.prompt_len} · out {self.output_len} · c={self.concurrency}"
                f"{rate}{depth}")


@dataclass(frozen=True, slots=True)
class PointResult:
    """Samples and metrics of one point."""

    point: Point
    samples: tuple[RequestSample, ...]
    metrics: Metrics
    repeats: int
    converged: bool
    """Every headline metric's 95 % CI is within the target."""
    ci_rel: dict[str, float | None]
    drift: dict[str, Drift]
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Sent to ``on_progress`` after every finished request."""

    point: Point
    point_index: int
    points: int
    phase: str
    """``warmup`` or ``measure``."""
    done: int
    total: int | None
    sample: RequestSample | None


ProgressFn = Callable[[ProgressEvent], None]


def points(spec: WorkloadSpec, trace: Trace | None = None) -> list[Point]:
    """The sweep, depth then prompt length outermost, request rate innermost (a trace's
    rate is its mean rate)."""
    rates = (trace.mean_rate,) if trace is not None else spec.rates
    return [Point(p, spec.output_len, c, r, d)
            for d in (spec.depths or (0,)) for p in spec.prompt_lens for c in spec.concurrency
            for r in rates]


def point_key(pt: Point, spec: WorkloadSpec) -> PointKey:
    """The key ``pt`` is stored under: its rate and arrival profile when open loop, ``trace``
    for a replayed trace (whose rate is only its mean)."""
    if spec.trace is not None or spec.profile == "trace":
        return PointKey(pt.prompt_len, pt.concurrency, pt.depth, None, "trace")
    if pt.request_rate is None:
        return PointKey(pt.prompt_len, pt.concurrency, pt.depth)
    return PointKey(pt.prompt_len, pt.concurrency, pt.depth, pt.request_rate,
                    arrival_tag(spec.profile, spec.burstiness, spec.ramp_end_rate))


def _failure_note(kind: str, n: int) -> str:
    what = {
        ErrorKind.CONNECT: "could not connect",
        ErrorKind.TIMEOUT_FIRST_BYTE: "got no response before the first-byte timeout",
        ErrorKind.TIMEOUT_STALL: "stalled mid-stream past the stall timeout",
        ErrorKind.TIMEOUT_TOTAL: "ran past the request or run deadline",
        ErrorKind.DISCONNECT: "were dropped by the server mid-response",
        ErrorKind.HTTP_429: "were rate limited (HTTP 429)",
        ErrorKind.HTTP_4XX: "were rejected with an HTTP 4xx status",
        ErrorKind.HTTP_5XX: "failed with an HTTP 5xx status",
        ErrorKind.PROTOCOL: "got a malformed HTTP response",
        ErrorKind.BAD_SSE: "carried invalid JSON in the event stream",
        ErrorKind.SERVER_ERROR_EVENT: "carried an error object in the stream",
        ErrorKind.NO_CHOICES: "ended without a single token chunk",
        ErrorKind.MISSING_USAGE: "ended without usage (token counts unknown, not guessed)",
        ErrorKind.USAGE_MISMATCH: "reported usage that contradicts the stream",
    }.get(ErrorKind(kind), kind)
    return f"{n} request{'s' if n != 1 else ''} {what} [{kind}]"


def notes_for(metrics: Metrics, samples: Sequence[RequestSample]) -> tuple[str, ...]:
    """Human-readable summary of what went wrong at a point."""
    out = [_failure_note(k, n) for k, n in sorted(metrics.failures.items())]
    ra = [s.retry_after_s for s in samples if s.retry_after_s is not None]
    if ra:
        out.append(f"server asked to retry after up to {max(ra):g} s (Retry-After)")
    held = sum(1 for smp in samples if not smp.warmup and buffered(smp))
    if held:
        out.append(f"{held} completed requests arrived mostly in one chunk (server output "
                   "buffered): no per-token timing taken from them")
    bulk = sum(1 for smp in samples if not smp.warmup and not buffered(smp) and bulk_read(smp))
    if bulk:
        out.append(f"{bulk} completed requests reached the client in a few bulk reads (too "
                   "few inter-token gaps): no TPOT or decode figure taken from them")
    out.extend(f for f in (metrics.decode_flag, metrics.prefill_flag) if f is not None)
    if metrics.prompt_len_mismatches:
        out.append(f"{metrics.prompt_len_mismatches} completed requests: usage.prompt_tokens "
                   "differs from the built prompt length")
    return tuple(out)


class WorkloadRunner:
    """Runs a :class:`WorkloadSpec` with one client and one prompt builder."""

    def __init__(self, client: BenchClient, builder: PromptBuilder, spec: WorkloadSpec, *,
                 on_progress: ProgressFn | None = None,
                 on_point: Callable[[], None] | None = None) -> None:
        self.client = client
        self.on_point = on_point
        self.builder = builder
        self.spec = spec
        self.on_progress = on_progress
        self._t0 = time.perf_counter_ns()
        self._index = 0
        self._rng = random.Random(spec.seed)
        self._conv = 0
        self._shared_texts: dict[int, list[str]] = {}
        self.trace: Trace | None = load_trace(Path(spec.trace)) if spec.trace else None
        self.dataset: list[Entry] = []
        if spec.dataset is not None:
            self.dataset = list(load_dataset(Path(spec.dataset)).entries)
            random.Random(spec.seed).shuffle(self.dataset)
        self._ref_len: dict[int, int] = {}
        self.side_samples: list[RequestSample] = []
        """Requests sent outside any point (the minimal-latency probe)."""
        self.done: list[PointResult] = []
        """Points finished so far (what survives an interrupt)."""
        self.current: tuple[Point, list[RequestSample]] | None = None
        """The point being measured and its samples so far, warm-up included."""

    async def measure_min_latency(self, n: int = 5) -> float | None:
        """Minimal TTFT (ms) of ``n`` shortest one-token requests: network, HTTP, scheduling."""
        best: float | None = None
        plen = self.builder.min_len()
        for _ in range(n):
            prompt = self.builder.build(plen)
            s = await self.client.send(RequestSpec(prompt.text, prompt.target_len, 1),
                                       self._next_index(), t0_ns=self._t0, warmup=True)
            self.side_samples.append(s)
            if s.ok and s.ttft_ns is not None:
                ms = s.ttft_ns / 1e6
                best = ms if best is None else min(best, ms)
        return best

    def _next_index(self) -> int:
        self._index += 1
        return self._index

    async def run(self) -> tuple[list[PointResult], float | None]:
        """Run every point; returns the results and the minimal latency (if measured)."""
        min_lat = await self.measure_min_latency() if self.spec.subtract_min_latency else None
        results: list[PointResult] = []
        pts = points(self.spec, self.trace)
        for i, pt in enumerate(pts):
            results.append(await self.run_point(pt, i, len(pts), min_lat))
            self.done.append(results[-1])
            self.current = None
            if self.on_point is not None:
                self.on_point()
        return results, min_lat

    def _emit(self, ev: ProgressEvent) -> None:
        if self.on_progress is not None:
            self.on_progress(ev)

    async def run_point(self, pt: Point, pi: int = 0, npts: int = 1,
                        min_lat: float | None = None) -> PointResult:
        """Warm up, then measure ``pt`` in batches until the CI target or a limit is met."""
        spec = self.spec
        start = time.perf_counter_ns()
        budget_end = start + int(spec.duration_s * 1e9) if spec.duration_s else None
        deadline = budget_end + int(spec.drain_s * 1e9) if budget_end else None
        warm_n = spec.warmup_requests if spec.warmup_requests is not None else pt.concurrency
        samples: list[RequestSample] = []
        self.current = (pt, [])
        if warm_n > 0:
            samples += await self._batch(pt, warm_n, pi, npts, "warmup", None, deadline, None)
        measured: list[RequestSample] = []
        repeats = 0
        ci_rel: dict[str, float | None] = {}
        converged = False
        max_rep = spec.max_repeats if budget_end is None or spec.requests else 10_000
        n_batch = spec.batch_size(pt.concurrency)
        if self.trace is not None:
            n_batch = min(spec.requests or len(self.trace.arrivals), len(self.trace.arrivals))
        stopped = f"the most batches allowed ({max_rep}, --max-repeats)"
        while repeats < max_rep:
            if budget_end is not None and time.perf_counter_ns() >= budget_end:
                stopped = "the time budget (--duration) ran out"
                break
            repeats += 1
            measured += await self._batch(pt, n_batch, pi, npts, "measure", len(measured),
                                          deadline, budget_end)
            m = compute(measured, min_latency_ms=min_lat)
            ci_rel, converged = self._ci(m, pt)
            if converged:
                break
            if all(s.error is not None for s in measured[-n_batch:]):
                stopped = "a whole batch failed (more batches would not converge)"
                break
        samples += measured
        m = compute(samples, min_latency_ms=min_lat)
        dr: dict[str, Drift] = {}
        for key, vals in (("ttft_ms", [s.ttft_ns / 1e6 for s in measured
                                       if s.ok and s.ttft_ns is not None]),):
            d = drift(vals, min_rel=spec.ci_target)
            if d is not None:
                dr[key] = d
        dec = [v for s in measured if s.ok
               for k, v in per_request(s).items() if k == "decode_tok_s"]
        d2 = drift(dec, min_rel=spec.ci_target)
        if d2 is not None:
            dr["decode_tok_s"] = d2
        notes = list(notes_for(m, samples))
        for key, d in dr.items():
            if d.significant:
                notes.append(f"warm-up drift: {key} moved {d.rel_change:+.1%} between the first "
                             "and second half of the measured requests")
        if not converged:
            worst = {k: v for k, v in ci_rel.items() if v is None or v > spec.ci_target}
            notes.append("95% CI not within ±{:.1%} after {} batch(es): {}; stopped: {}".format(
                spec.ci_target, repeats,
                ", ".join(f"{k} ±{v:.1%}" if v is not None else f"{k} n/a"
                          for k, v in worst.items()) or "no samples", stopped))
        return PointResult(point=pt, samples=tuple(samples), metrics=m, repeats=repeats,
                           converged=converged, ci_rel=ci_rel, drift=dr, notes=tuple(notes))

    def _ci(self, m: Metrics, pt: Point) -> tuple[dict[str, float | None], bool]:
        out: dict[str, float | None] = {}
        ok = True
        for key in HEADLINE:
            if key == "decode_tok_s" and pt.output_len < 2:
                continue
            summ = getattr(m, key)
            rel = summ.ci_rel_halfwidth if summ is not None and summ.n >= 3 else None
            if rel is not None and rel == float("inf"):
                rel = None
            out[key] = rel
            if rel is None or rel > self.spec.ci_target:
                ok = False
        return out, ok

    def _profile(self, pt: Point) -> LoadProfile:
        sp = self.spec
        if self.trace is not None:
            return LoadProfile("trace", trace=self.trace)
        assert pt.request_rate is not None
        ramp_end = sp.ramp_end_rate
        if sp.profile == "ramp" and ramp_end is not None and sp.request_rate:
            ramp_end = ramp_end * pt.request_rate / sp.request_rate  # capacity search scales both
        return LoadProfile(sp.profile, pt.request_rate, sp.burstiness, ramp_end)

    def _shared(self, depth: int = 0) -> list[str]:
        """The shared system prompts (or a depth's context), built once per run so the
        warm-up fills the cache."""
        sp = self.spec
        n, groups = (depth, 1) if depth else (sp.shared_prefix_len, sp.prefix_groups)
        if n and n not in self._shared_texts:
            self._shared_texts[n] = [self.builder.build(n).text for _ in range(groups)]
        return self._shared_texts.get(n, [])

    def _conversation(self, pt: Point, arrival: Arrival | None = None) -> list[RequestSpec]:
        """One conversation's requests: a single request unless ``turns`` > 1."""
        sp = self.spec
        shared = self._shared(pt.depth)
        base = shared[self._conv % len(shared)] if shared else ""
        conv = self._conv
        self._conv += 1
        plen = arrival.prompt_len if arrival and arrival.prompt_len else pt.prompt_len
        olen = arrival.output_len if arrival and arrival.output_len else pt.output_len
        if self.dataset:
            entry = self.dataset[conv % len(self.dataset)]
            p = self.builder.fit(entry.prompt, plen if sp.dataset_lengths == "exact" else None)
            if sp.dataset_output == "reference" and not (arrival and arrival.output_len):
                olen = self._reference_len(conv % len(self.dataset), entry) or olen
            return [RequestSpec(p.text, p.target_len, olen)]
        n = pt.depth + plen
        return [RequestSpec(self.builder.extend(base, n).text, n, olen)]

    def _next_turn(self, pt: Point, prev: RequestSpec, answer: str,
                   s: RequestSample) -> RequestSpec:
        """The next turn of a conversation: the history (the previous prompt and its streamed
        answer, verbatim), then a new user message of ``prompt_len`` minus the shared prefix
        tokens.

        On the chat endpoint the history goes as alternating user / assistant messages and
        the length is counted over the whole conversation as the chat template lays it out.
        On completions the history is one text: its length is the previous prompt's plus the
        answer's tokens (as the server counted them) plus the new message's; when the answer
        re-tokenizes longer in context (or the turn failed), the history is counted instead."""
        new = pt.prompt_len - self.spec.shared_prefix_len
        if self.client.options.endpoint == "chat":
            turns = (*prev.history, (prev.prompt, answer))
            n = self.builder.conversation_len(turns) + new
            return RequestSpec(self.builder.extend("", n, turns).text, n, prev.max_tokens, turns)
        history = prev.prompt + answer
        if s.ok and s.completion_tokens is not None:
            n = prev.prompt_len + s.completion_tokens + new
            try:
                return RequestSpec(self.builder.extend(history, n).text, n, prev.max_tokens)
            except BenchError:
                pass  # the answer takes more tokens in context than it streamed
        n = self.builder.counter.count(history) + new
        return RequestSpec(self.builder.extend(history, n).text, n, prev.max_tokens)

    def _reference_len(self, i: int, entry: Entry) -> int | None:
        """Tokens of the entry's reference answer (counted once), or its ``output_len``."""
        if entry.output_len is not None:
            return entry.output_len
        if entry.reference is None:
            return None
        if i not in self._ref_len:
            self._ref_len[i] = max(1, self.builder.counter.count(entry.reference))
        return self._ref_len[i]

    async def _batch(self, pt: Point, n: int, pi: int, npts: int, phase: str,
                     done0: int | None, deadline: int | None, budget_end: int | None
                     ) -> list[RequestSample]:
        """Send ``n`` requests: closed loop at the concurrency, or on the load profile."""
        results: list[RequestSample] = []
        base = done0 or 0
        warm = phase == "warmup"
        if not self.spec.open_loop:
            convs = [self._conversation(pt) for _ in range(-(-n // self.spec.turns))]
            total = len(convs) * self.spec.turns
        else:
            arrivals = self._profile(pt).schedule(n, self._rng.randrange(2**32))
            convs = [self._conversation(pt, a) for a in arrivals]
            total = len(convs)

        def record(s: RequestSample) -> None:
            results.append(s)
            if self.current is not None:
                self.current[1].append(s)
            self._emit(ProgressEvent(pt, pi, npts, phase, base + len(results),
                                     None if budget_end else base + total, s))

        if not self.spec.open_loop:
            queue = list(reversed(convs))

            async def worker() -> None:
                while queue:
                    if budget_end is not None and time.perf_counter_ns() >= budget_end:
                        return
                    (rs,) = queue.pop()
                    for turn in range(1, self.spec.turns + 1):
                        answer: list[str] | None = [] if turn < self.spec.turns else None
                        s = await self.client.send(rs, self._next_index(), t0_ns=self._t0,
                                                   deadline_ns=deadline, warmup=warm,
                                                   answer=answer)
                        record(s)
                        await self._backoff(s, deadline)
                        if answer is None:
                            break
                        rs = self._next_turn(pt, rs, "".join(answer), s)

            await asyncio.gather(*(worker() for _ in range(min(pt.concurrency, len(convs)))))
            return results
        sem = asyncio.Semaphore(pt.concurrency)

        async def one(rs: RequestSpec, due: int) -> None:
            async with sem:
                s = await self.client.send(rs, self._next_index(), t0_ns=self._t0,
                                           deadline_ns=deadline, warmup=warm, scheduled_ns=due)
            record(s)

        tasks = []
        start = time.perf_counter_ns()
        for a, conv in zip(arrivals, convs, strict=True):
            if budget_end is not None and time.perf_counter_ns() >= budget_end:
                break
            due = start + round(a.t_s * 1e9)
            delay = (due - time.perf_counter_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(conv[0], due)))
        await asyncio.gather(*tasks)
        return results

    async def _backoff(self, s: RequestSample, deadline: int | None) -> None:
        """Honour Retry-After on 429/5xx (closed loop), within the run's deadline."""
        if s.retry_after_s is None or s.error not in (ErrorKind.HTTP_429, ErrorKind.HTTP_5XX):
            return
        pause = min(s.retry_after_s, self.spec.max_backoff_s)
        if deadline is not None:
            pause = min(pause, max(0.0, (deadline - time.perf_counter_ns()) / 1e9))
        await asyncio.sleep(pause)
