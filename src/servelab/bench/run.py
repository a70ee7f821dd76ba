"""One benchmark run end to end: resolve the model, build prompts, run, collect counters.

This is the library entry point the CLI and other areas call::

    result = run_bench(BenchConfig(base_url="http://127.0.0.1:8000", workload=WorkloadSpec()))
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx

from servelab import __version__
from servelab.bench import specdecode
from servelab.bench.client import BenchClient, ClientOptions, EndpointKind
from servelab.bench.prompts import PromptBuilder, ServerTokenCounter, make_counter
from servelab.bench.result import BenchResult
from servelab.bench.transport import Endpoint, Timeouts
from servelab.bench.workload import ProgressFn, WorkloadRunner, WorkloadSpec
from servelab.errors import BenchError


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


def resolve_model(base_url: str, *, api_key: str | None = None, timeout_s: float = 30.0) -> str:
    """The first model id the server lists at ``/v1/models``."""
    url = Endpoint.parse(base_url).base_url + "/v1/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(url, timeout=timeout_s, headers=headers)
        r.raise_for_status()
        data = r.json()["data"]
        return str(data[0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(f"{url}: cannot list models ({type(exc).__name__}: {exc}); "
                         "pass --model") from exc


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def run_bench(cfg: BenchConfig, *, on_progress: ProgressFn | None = None) -> BenchResult:
    """Run the configured workload against ``cfg.base_url`` and return the result."""
    base = Endpoint.parse(cfg.base_url).base_url
    model = cfg.model or resolve_model(base, api_key=cfg.api_key)
    chat = cfg.endpoint == "chat"
    counter = make_counter(cfg.token_counter, base, model, chat=chat, tokenizer=cfg.tokenizer,
                           chat_template_kwargs=cfg.chat_template_kwargs, api_key=cfg.api_key)
    builder = PromptBuilder(counter, seed=cfg.workload.seed)
    options = ClientOptions(model=model, endpoint=cfg.endpoint, temperature=cfg.temperature,
                            ignore_eos=cfg.ignore_eos, continuous_usage=cfg.continuous_usage,
                            chat_template_kwargs=cfg.chat_template_kwargs)
    started = _now()
    before = specdecode.scrape(base, api_key=cfg.api_key) if cfg.scrape_metrics else None

    async def go() -> tuple[Any, float | None]:
        async with BenchClient(base, options, timeouts=cfg.timeouts,
                               api_key=cfg.api_key) as client:
            runner = WorkloadRunner(client, builder, cfg.workload, on_progress=on_progress)
            return await runner.run()

    try:
        points, min_lat = asyncio.run(go())
    finally:
        if isinstance(counter, ServerTokenCounter):
            counter.close()
    after = specdecode.scrape(base, api_key=cfg.api_key) if cfg.scrape_metrics else None
    counters = specdecode.delta(before, after) if before is not None and after is not None \
        else None
    notes: list[str] = [f"prompt lengths counted by {counter.source}"]
    if counters is not None and counters.mean_acceptance_length is not None:
        notes.append(f"speculative decoding: mean acceptance length "
                     f"{counters.mean_acceptance_length:.2f}, acceptance rate "
                     f"{counters.acceptance_rate or 0:.1%} (server /metrics)")
    t = cfg.timeouts
    client_info = {
        "temperature": cfg.temperature, "ignore_eos": cfg.ignore_eos,
        "continuous_usage": cfg.continuous_usage,
        "chat_template_kwargs": cfg.chat_template_kwargs,
        "timeouts": {"first_byte_s": t.first_byte_s, "stall_s": t.stall_s,
                     "total_s": t.total_s},
    }
    return BenchResult(
        base_url=base, model=model, endpoint=cfg.endpoint, started_at=started,
        finished_at=_now(), prompt_source=counter.source, client=client_info,
        workload=cfg.workload, points=tuple(points), min_latency_ms=min_lat,
        server_counters=counters, servelab_version=__version__, notes=tuple(notes),
    )
