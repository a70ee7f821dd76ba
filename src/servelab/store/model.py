"""What one recorded run is: plain frozen dataclasses, no I/O.

A :class:`RunRecord` is what every other part of servelab hands to the store. Its scalar
fields are the ones history/compare/experiment query on (they become typed columns); the
sub-documents (checkpoint inspect report, hardware profile and probe, engine log facts,
workload, prediction, ...) are JSON-able dicts produced elsewhere and stored as JSON.
The store never imports the producers of those documents.

Units: times in seconds, sizes in GiB, rates in tokens per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from servelab.errors import InputError

JSON = dict[str, Any]

STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUSES = (STATUS_OK, STATUS_FAILED)

#: Schema name written into every export file.
EXPORT_SCHEMA = "servelab.runs/1"


@dataclass(frozen=True, slots=True)
class Sample:
    """One benchmark request as measured by the client.

    ``point`` names the workload point the request belongs to (e.g. ``"p2048-c1"``), so that
    one run can hold several prompt lengths / concurrencies. ``error`` is ``None`` for a
    request that completed; failed requests are kept too (their timings may be ``None``).
    """

    point: str
    index: int
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_mean_s: float | None = None
    itl_p50_s: float | None = None
    itl_p99_s: float | None = None
    itl_max_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the request completed."""
        return self.error is None

    @property
    def decode_tok_s(self) -> float | None:
        """Single-stream decode speed of this request, ``1 / TPOT``."""
        if self.tpot_s is None or self.tpot_s <= 0 or self.error is not None:
            return None
        return 1.0 / self.tpot_s

    @property
    def prefill_tok_s(self) -> float | None:
        """Prompt tokens over TTFT (includes network and queueing time)."""
        if (
            self.ttft_s is None
            or self.ttft_s <= 0
            or self.prompt_tokens is None
            or self.error is not None
        ):
            return None
        return self.prompt_tokens / self.ttft_s


@dataclass(frozen=True, slots=True)
class Metric:
    """A computed metric of a run at one workload point, with its confidence interval.

    ``point`` is ``""`` for run-wide metrics (weights GiB, KV pool tokens). ``n`` is the number
    of samples the value was computed from (0 when it was read, not measured per request).
    """

    name: str
    value: float
    point: str = ""
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    unit: str = ""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """Everything servelab keeps about one serving + benchmark run.

    ``run_id`` is assigned by :meth:`servelab.store.Store.add_run` when left ``None``.
    Headline scalars (``decode_tok_s`` ... ``kv_pool_tokens``) are the run's summary numbers
    for tables and series; the full picture is in ``metrics`` and ``samples``.
    """

    started_at: datetime
    status: str = STATUS_OK
    status_reason: str | None = None
    finished_at: datetime | None = None
    run_id: str | None = None
    # recipe
    recipe_name: str | None = None
    recipe_text: str | None = None
    recipe_hash: str | None = None
    # checkpoint identity
    model_id: str | None = None
    checkpoint_revision: str | None = None
    checkpoint_path: str | None = None
    checkpoint_header_hash: str | None = None
    # where it ran
    hardware: str | None = None
    host: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    # engine
    engine_name: str | None = None
    engine_version: str | None = None
    engine_args: tuple[str, ...] = ()
    # headline numbers
    decode_tok_s: float | None = None
    prefill_tok_s: float | None = None
    weights_gib: float | None = None
    kv_pool_tokens: int | None = None
    power_w: float | None = None
    # sub-documents (JSON-able dicts produced by other packages)
    checkpoint_report: JSON | None = None
    hardware_profile: JSON | None = None
    hardware_probe: JSON | None = None
    engine_facts: JSON | None = None
    workload: JSON | None = None
    prediction: JSON | None = None
    extra: JSON | None = None
    log_tail: str | None = None
    labels: tuple[str, ...] = ()
    metrics: tuple[Metric, ...] = ()
    samples: tuple[Sample, ...] = field(default=(), repr=False)
    created_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise InputError(f"run status must be one of {STATUSES}, not {self.status!r}")
        if self.started_at.tzinfo is None:
            raise InputError("RunRecord.started_at must be timezone-aware")
        for name in ("decode_tok_s", "prefill_tok_s", "weights_gib", "power_w"):
            v = getattr(self, name)
            if v is not None and not math.isfinite(v):
                raise InputError(f"RunRecord.{name} must be finite, got {v!r}")

    def metric(self, name: str, point: str = "") -> Metric | None:
        """The recorded metric ``name`` at ``point``, or ``None``."""
        for m in self.metrics:
            if m.name == name and m.point == point:
                return m
        return None

    def samples_at(self, point: str | None = None) -> tuple[Sample, ...]:
        """Samples of one workload point (all points when ``point`` is ``None``)."""
        if point is None:
            return self.samples
        return tuple(s for s in self.samples if s.point == point)

    @property
    def points(self) -> tuple[str, ...]:
        """Workload points that have samples, in first-seen order."""
        seen: dict[str, None] = {}
        for s in self.samples:
            seen.setdefault(s.point, None)
        return tuple(seen)

    @property
    def factors(self) -> dict[str, str | None]:
        """The recorded conditions a result depends on (used to explain changes)."""
        return {
            "engine_name": self.engine_name,
            "engine_version": self.engine_version,
            "engine_args": " ".join(self.engine_args) if self.engine_args else None,
            "driver": self.driver,
            "cuda": self.cuda,
            "torch": self.torch,
            "checkpoint_revision": self.checkpoint_revision,
            "checkpoint_header_hash": self.checkpoint_header_hash,
            "hardware": self.hardware,
            "host": self.host,
            "recipe_hash": self.recipe_hash,
        }


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Criteria for :meth:`servelab.store.Store.list_runs`; ``None`` fields do not filter.

    ``model_or_recipe`` matches either the recipe name or the model id. ``label`` requires the
    run to carry that label. ``since``/``until`` bound ``started_at`` (inclusive).
    """

    recipe_name: str | None = None
    model_id: str | None = None
    model_or_recipe: str | None = None
    label: str | None = None
    status: str | None = None
    host: str | None = None
    hardware: str | None = None
    engine_version: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int | None = None
    newest_first: bool = False


@dataclass(frozen=True, slots=True)
class ExperimentRecord:
    """A stored A/B experiment: which runs, which criteria, what verdict, linked to a recipe."""

    target_recipe: str | None
    baseline_run_ids: tuple[str, ...]
    variant_run_ids: tuple[str, ...]
    criteria: str
    verdict: str
    report: JSON
    experiment_id: str | None = None
    created_at: datetime | None = None
    title: str | None = None


def utcnow() -> datetime:
    """Current time, timezone-aware UTC, whole microseconds."""
    return datetime.now(UTC)


def sample_field_names() -> tuple[str, ...]:
    """Names of :class:`Sample` fields, in declaration order."""
    return tuple(f.name for f in fields(Sample))
