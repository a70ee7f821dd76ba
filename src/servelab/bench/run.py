"""One benchmark run end to end: resolve the model, build prompts, run, collect counters.

This is the library entry point the CLI and other areas call::

    result = run_bench(BenchConfig(base_url="http://127.0.0.1:8000", workload=WorkloadSpec()))
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from servelab import __version__
from servelab.bench import specdecode, tokencheck
from servelab.bench.client import BenchClient, ClientOptions, EndpointKind
from servelab.bench.diagnose import require_openai
from servelab.bench.metrics import compute
from servelab.bench.prompts import (
    PromptBuilder,
    ServerTokenCounter,
    TokenCounter,
    make_counter,
)
from servelab.bench.result import BenchResult
from servelab.bench.samples import RequestSample
from servelab.bench.spec import WorkloadSpec
from servelab.bench.transport import Endpoint, Timeouts
from servelab.bench.workload import (
    Point,
    PointResult,
    ProgressEvent,
    ProgressFn,
    WorkloadRunner,
    notes_for,
    points,
)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Everything a run needs besides the progress callback."""

    base_url: str
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    model: str | None = None
    """Served model name; None = the first of ``/v1/models``."""
    endpoint: EndpointKind = "completions"
    temperature: float = 0.0
    ignore_eos: bool = True
    continuous_usage: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    tokenizer: str | Path | None = None
    token_counter: Literal["auto", "server", "local"] = "auto"
    api_key: str | None = None
    scrape_metrics: bool = True


def resolve_model(base_url: str, *, api_key: str | None = None) -> str:
    """The first model id the server lists at ``/v1/models`` (BenchError naming what the
    endpoint is otherwise: :mod:`servelab.bench.diagnose`)."""
    return require_openai(base_url, model=None, api_key=api_key)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Session:
    """What every run against one server shares: its URL, model, counter and options."""

    base: str
    model: str
    counter: TokenCounter
    builder: PromptBuilder
    options: ClientOptions

    def close(self) -> None:
        """Release the token counter's connection."""
        if isinstance(self.counter, ServerTokenCounter):
            self.counter.close()


def open_session(cfg: BenchConfig) -> Session:
    """Resolve the model and pick the token counter for ``cfg``."""
    base = Endpoint.parse(cfg.base_url).base_url
    model = require_openai(base, model=cfg.model, api_key=cfg.api_key)  # what is there?
    chat = cfg.endpoint == "chat"
    counter = make_counter(cfg.token_counter, base, model, chat=chat, tokenizer=cfg.tokenizer,
                           chat_template_kwargs=cfg.chat_template_kwargs, api_key=cfg.api_key)
    builder = PromptBuilder(counter, seed=cfg.workload.seed)
    options = ClientOptions(model=model, endpoint=cfg.endpoint, temperature=cfg.temperature,
                            ignore_eos=cfg.ignore_eos, continuous_usage=cfg.continuous_usage,
                            chat_template_kwargs=cfg.chat_template_kwargs)
    return Session(base, model, counter, builder, options)


def client_info(cfg: BenchConfig) -> dict[str, Any]:
    """The client settings a result records."""
    t = cfg.timeouts
    return {
        "temperature": cfg.temperature, "ignore_eos": cfg.ignore_eos,
        "continuous_usage": cfg.continuous_usage,
        "chat_template_kwargs": cfg.chat_template_kwargs,
        "timeouts": {"first_byte_s": t.first_byte_s, "stall_s": t.stall_s,
                     "total_s": t.total_s},
    }


PartialFn = Callable[[BenchResult], None]
SNAPSHOT_S = 2.0
"""Least seconds between two partial snapshots handed to ``on_partial`` within a point."""


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_bench`; ``result`` keeps every sample completed before it
    (marked partial)."""

    def __init__(self, result: BenchResult) -> None:
        super().__init__("interrupted")
        self.result = result


def partial_point(pt: Point, samples: Sequence[RequestSample],
                  min_lat: float | None) -> PointResult:
    """The samples of a point cut short, as a point result marked partial (never converged)."""
    measured = sum(1 for s in samples if not s.warmup)
    m = compute(samples, min_latency_ms=min_lat)
    note = (f"PARTIAL: cut short after {measured} measured request(s)"
            + (f" ({len(samples) - measured} warm-up)" if len(samples) > measured else ""))
    return PointResult(point=pt, samples=tuple(samples), metrics=m, repeats=0,
                       converged=False, ci_rel={}, drift={},
                       notes=(*notes_for(m, samples), note))


def run_bench(cfg: BenchConfig, *, on_progress: ProgressFn | None = None,
              on_partial: PartialFn | None = None) -> BenchResult:
    """Run the configured workload against ``cfg.base_url`` and return the result.

    ``on_partial`` receives a snapshot (:attr:`BenchResult.partial` set) after every finished
    point and at most every :data:`SNAPSHOT_S` seconds within one, so that a caller can keep
    the result on disk as it grows. Ctrl-C raises :class:`BenchInterrupted` carrying every
    completed sample; another error hands ``on_partial`` a last snapshot, then propagates.
    """
    ses = open_session(cfg)
    base, model, counter, builder, options = (ses.base, ses.model, ses.counter, ses.builder,
                                              ses.options)
    started = _now()
    before = specdecode.scrape(base, api_key=cfg.api_key) if cfg.scrape_metrics else None

    side: list[RequestSample] = []
    state: dict[str, WorkloadRunner] = {}
    npts = len(points(cfg.workload))
    last = [time.monotonic()]

    def snapshot(reason: str) -> BenchResult:
        runner = state.get("runner")
        pts = list(runner.done) if runner is not None else []
        if runner is not None and runner.current is not None and runner.current[1]:
            pts.append(partial_point(*runner.current, None))
        return BenchResult(
            base_url=base, model=model, endpoint=cfg.endpoint, started_at=started,
            finished_at=_now(), prompt_source=counter.source, client=client_info(cfg),
            workload=cfg.workload, points=tuple(pts), min_latency_ms=None,
            server_counters=None, servelab_version=__version__,
            notes=(f"prompt lengths counted by {counter.source}",
                   f"PARTIAL: {reason}; {len(pts)} of {npts} point(s), the last one "
                   "possibly cut short"),
            partial=reason)

    def progress(ev: ProgressEvent) -> None:
        if on_progress is not None:
            on_progress(ev)
        now = time.monotonic()
        if on_partial is not None and now - last[0] >= SNAPSHOT_S:
            last[0] = now
            on_partial(snapshot("running"))

    def point_done() -> None:
        last[0] = time.monotonic()
        if on_partial is not None:
            on_partial(snapshot("running"))

    async def go() -> tuple[Any, float | None]:
        async with BenchClient(base, options, timeouts=cfg.timeouts,
                               api_key=cfg.api_key) as client:
            runner = WorkloadRunner(client, builder, cfg.workload, on_progress=progress,
                                    on_point=point_done)
            state["runner"] = runner
            out = await runner.run()
            side[:] = runner.side_samples
            return out

    try:
        points_done, min_lat = asyncio.run(go())
    except KeyboardInterrupt:
        raise BenchInterrupted(snapshot("interrupted (Ctrl-C)")) from None
    except Exception as exc:
        if on_partial is not None and "runner" in state:
            on_partial(snapshot(f"stopped by an error: {exc}"))
        raise
    finally:
        ses.close()
    points_ = points_done
    after = specdecode.scrape(base, api_key=cfg.api_key) if cfg.scrape_metrics else None
    counters = specdecode.delta(before, after) if before is not None and after is not None \
        else None
    notes: list[str] = [f"prompt lengths counted by {counter.source}"]
    if counters is not None and counters.mean_acceptance_length is not None:
        notes.append(f"speculative decoding: mean acceptance length "
                     f"{counters.mean_acceptance_length:.2f}, acceptance rate "
                     f"{counters.acceptance_rate or 0:.1%} (server /metrics)")
    if counters is not None and counters.prefix_cache_hit_rate is not None:
        notes.append(f"prefix cache: {counters.prefix_cache_hit_rate:.1%} of "
                     f"{counters.prefix_cache_queries:.0f} queried prompt tokens were cache "
                     "hits (server /metrics)")
    tc = tokencheck.check([s for pr in points_ for s in pr.samples] + side, counters)
    if tc.skipped_reason is not None and tc.ok:
        notes.append(f"token counts not cross-checked with /metrics: {tc.skipped_reason}")
    notes += [f"TOKEN MISMATCH: {p}" for p in tc.problems]
    return BenchResult(
        base_url=base, model=model, endpoint=cfg.endpoint, started_at=started,
        finished_at=_now(), prompt_source=counter.source, client=client_info(cfg),
        workload=cfg.workload, points=tuple(points_), min_latency_ms=min_lat,
        server_counters=counters, servelab_version=__version__, notes=tuple(notes),
        token_check=tc,
    )
