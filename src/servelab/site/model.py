"""The site's page model: plain frozen dataclasses, no I/O.

A page model holds *facts* (measured numbers with the run they came from, predictions with
their basis, observations from engine logs and checkpoint inspection). The prose on a page
(headline, key facts, troubleshooting) is generated from these facts by
:mod:`servelab.site.prose`; the renderer turns page + prose into HTML and Markdown.

Every number is one of three kinds, so that a page can always say where it came from:

- :class:`Measured`: a value measured in one run (``run_id``), optionally with a CI.
- :class:`Predicted`: a value servelab predicted, with the basis of the prediction; always
  rendered with a visible "predicted" label.
- :class:`Derived`: a value computed from measured inputs (a ratio, a difference), naming
  every run it was computed from and the formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servelab.check import Check
from servelab.predict.ledger import LedgerRow
from servelab.sizing.specsource import SpecConfig

__all__ = [
    "BuildRow",
    "ChangePoint",
    "ConcurrentRow",
    "Derived",
    "EngineObservation",
    "ExperimentMetric",
    "ExperimentPage",
    "HardwareAnswer",
    "HistoryPoint",
    "HistorySeries",
    "Measured",
    "MeasuredRow",
    "MemoryPart",
    "MemorySplit",
    "ModelIndexPage",
    "Number",
    "PlanCheck",
    "Predicted",
    "RecipePage",
    "RunPage",
    "Segment",
    "SiblingBuild",
    "Site",
    "Software",
    "SpecAcceptance",
    "Text",
    "TroubleshootingEntry",
    "Verification",
    "check_of",
]


@dataclass(frozen=True)
class Measured:
    """A value measured in one run."""

    value: float
    unit: str
    run_id: str
    ci_low: float | None = None
    ci_high: float | None = None
    samples: int | None = None


@dataclass(frozen=True)
class Predicted:
    """A value servelab predicted (never measured); ``basis`` says how, ``low``..``high`` is
    its interval (speed predictions always carry one; KV arithmetic is exact)."""

    value: float
    unit: str
    basis: str
    run_id: str | None = None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Derived:
    """A value computed from measured inputs: ``formula`` over the runs in ``run_ids``."""

    value: float
    unit: str
    formula: str
    run_ids: tuple[str, ...]


Number = Measured | Predicted | Derived
Segment = str | Measured | Predicted | Derived
Text = tuple[Segment, ...]


@dataclass(frozen=True)
class MeasuredRow:
    """One row of a measured table: a metric at a prompt length on one engine version."""

    engine_version: str
    prompt_tokens: int
    measured: Measured
    predicted: Predicted | None = None


@dataclass(frozen=True)
class PredictedLoadRow:
    """A closed-loop point as the run's plan predicted it (servelab.plan.load), drawn beside
    the measured points and labelled predicted."""

    prompt_tokens: int
    concurrency: int
    stream_tok_s: float  # per-stream decode, 1 / TPOT
    stream_low: float
    stream_high: float
    predicted: bool = True


@dataclass(frozen=True)
class ConcurrentRow:
    """A workload point with several streams at once: per-stream decode and time to first token."""

    engine_version: str
    prompt_tokens: int
    concurrency: int
    decode: Measured  # per-stream tok/s (1 / TPOT, mean over requests)
    ttft: Measured | None = None  # ms
    gpus: int = 1  # GPUs the engine spanned (TP x PP x DP from its command line)
    load: str = "closed loop"  # or the open-loop arrivals, e.g. "2 req/s Poisson"
    rate: float | None = None  # requests/s of an open-loop load

    @property
    def open_loop(self) -> bool:
        """Requests arrived on a schedule; ``concurrency`` only capped them."""
        return self.load != "closed loop"

    @property
    def per_gpu(self) -> Measured | None:
        """Output tok/s per GPU: streams x per-stream decode / GPUs (from measured values);
        ``None`` under an open-loop load, where the streams in flight varied."""
        if self.open_loop:
            return None
        d = self.decode
        scale = self.concurrency / self.gpus
        return Measured(
            d.value * scale,
            d.unit,
            d.run_id,
            None if d.ci_low is None else d.ci_low * scale,
            None if d.ci_high is None else d.ci_high * scale,
            d.samples,
        )


@dataclass(frozen=True)
class PlanCheck:
    """One planned quantity next to what the engine then reported (e.g. the KV pool): the
    :class:`~servelab.check.Check` of run ``run_id``, as page numbers."""

    check: Check
    run_id: str

    @property
    def label(self) -> str:
        """What is compared."""
        return self.check.label

    @property
    def predicted(self) -> Predicted:
        """The plan's value, labelled with its basis."""
        return Predicted(_number(self.check.predicted), self.check.unit, self.check.basis,
                         self.run_id, self.check.low, self.check.high)

    @property
    def measured(self) -> Measured:
        """What the engine reported."""
        return Measured(_number(self.check.observed), self.check.unit, self.run_id)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a page number must be a number, not {value!r}")
    return float(value)


def check_of(measured: Measured, predicted: Predicted, label: str = "") -> Check:
    """A measured page number against its prediction, as one :class:`Check`."""
    return Check(label, predicted.value, measured.value, measured.unit, predicted.basis,
                 predicted.low, predicted.high)


@dataclass(frozen=True)
class MemoryPart:
    """A slice of the checkpoint's bytes (by dtype or by tensor role)."""

    label: str
    bytes: int


@dataclass(frozen=True)
class MemorySplit:
    """The byte-accurate split of a checkpoint as ``inspect`` read it from the headers.

    ``total_bytes`` is derived from ``by_dtype`` (both splits cover the same bytes).
    """

    run_id: str
    by_dtype: tuple[MemoryPart, ...]
    by_role: tuple[MemoryPart, ...]
    tensor_count: int
    total_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_bytes", sum(p.bytes for p in self.by_dtype))


@dataclass(frozen=True)
class EngineObservation:
    """What one run's engine log said about itself."""

    run_id: str
    engine_version: str
    attention_backend: str | None = None
    moe_backend: str | None = None
    weights: Measured | None = None  # GiB, "Model loading took X GiB"
    kv_cache: Measured | None = None  # GiB available for KV cache
    kv_tokens: Measured | None = None  # "KV cache size: N tokens"
    max_concurrency: Measured | None = None  # "Maximum concurrency ...: X.XXx"
    fallback_line: str | None = None  # the log line that shows a kernel fallback
    profiling_skipped_line: str | None = None  # the log line that says profiling was skipped


@dataclass(frozen=True)
class SpecAcceptance:
    """Speculative decoding's acceptance as one run measured it: vLLM's spec-decode counters
    over the run's workload."""

    config: SpecConfig  # method and k (num_speculative_tokens)
    length: Measured  # tokens per verification step: 1 + accepted ÷ drafts
    position_rates: tuple[Measured, ...] = ()  # accepted at draft position i ÷ drafts


@dataclass(frozen=True)
class Software:
    """Software as recorded with the runs."""

    engine_name: str
    engine_versions: tuple[str, ...]
    torch: str | None = None
    driver: str | None = None
    python: str | None = None


@dataclass(frozen=True)
class Verification:
    """A dated verification row: "verified on DATE on HOST"."""

    run_id: str
    date: str  # YYYY-MM-DD
    host: str
    engine_version: str
    status: str  # "ok" or "failed"
    note: str = ""


@dataclass(frozen=True)
class HistoryPoint:
    """One measured point of a metric's history."""

    when: str  # ISO date or datetime
    value: Measured


@dataclass(frozen=True)
class ChangePoint:
    """A detected change in a metric's history: between points ``index - 1`` and ``index``.

    ``before`` / ``after`` are the levels of the segments on either side (a segment mean over
    several runs is a :class:`Derived` naming them). ``factors`` lists recorded conditions that
    differ across the step, strongest suspects first (e.g. ``"engine_version: 0.31 → 0.32"``).
    """

    index: int
    before: Measured | Derived
    after: Measured | Derived
    relative_change: Derived
    factors: tuple[str, ...] = ()


@dataclass(frozen=True)
class HistorySeries:
    """A metric's history for one recipe, with the change points detected in it."""

    metric: str  # e.g. "decode tok/s @ 2048"
    unit: str
    points: tuple[HistoryPoint, ...]
    change_points: tuple[ChangePoint, ...] = ()


@dataclass(frozen=True)
class TroubleshootingEntry:
    """A question a user hits, answered from findings; ``evidence`` quotes logs verbatim."""

    kind: str  # missing-mtp | kernel-fallback | profiling-skipped | version-drift | regression
    question: str
    answer: Text
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExperimentMetric:
    """One metric compared in an experiment."""

    name: str
    unit: str
    baseline: Measured | Derived
    candidate: Measured | Derived
    change: Derived  # relative change candidate vs baseline, in %
    significant: bool


@dataclass(frozen=True)
class ExperimentPage:
    """An experiment (A/B between two builds or settings) and its verdict."""

    slug: str
    title: str
    question: str
    verdict: str  # e.g. "adopted", "rejected", "inconclusive"
    baseline_label: str
    candidate_label: str
    baseline_recipe: str | None  # recipe slug, when the baseline is a recipe on this site
    candidate_recipe: str | None
    metrics: tuple[ExperimentMetric, ...]
    conclusion: str = ""
    clauses: tuple[tuple[str, str, str], ...] = ()  # (criterion, pass|fail|inconclusive, why)


@dataclass(frozen=True)
class SiblingBuild:
    """Another build of the same model, for comparisons on a recipe page."""

    slug: str
    build_name: str
    decode: Measured | None  # at the page's reference prompt length
    prefill: Measured | None = None


@dataclass(frozen=True)
class RecipePage:
    """Everything a recipe page shows, as facts."""

    slug: str
    model_name: str
    model_slug: str
    build_name: str
    checkpoint: str  # the model's id (repo id, synth:<arch>), never a local path
    served_model_name: str
    hardware: str
    host: str
    context_tokens: int
    software: Software
    command: tuple[str, ...]  # shareable: model by id, the recipe's port, no local paths
    key_params: tuple[tuple[str, str], ...]
    decode: tuple[MeasuredRow, ...]
    prefill: tuple[MeasuredRow, ...]
    engine: tuple[EngineObservation, ...]
    verifications: tuple[Verification, ...]
    memory: MemorySplit | None = None
    quantization: str | None = None
    mtp_declared_layers: int | None = None
    mtp_tensors: int | None = None
    history: tuple[HistorySeries, ...] = ()
    experiments: tuple[ExperimentPage, ...] = ()
    siblings: tuple[SiblingBuild, ...] = ()
    reference_prompt_tokens: int | None = None
    plan_checks: tuple[PlanCheck, ...] = ()
    concurrent: tuple[ConcurrentRow, ...] = ()
    predicted_load: tuple[PredictedLoadRow, ...] = ()  # the latest run's plan, under load
    title: str = ""  # the recipe's own title, when it has one
    description: str = ""
    port: int = 8000
    thinking_kwarg: bool = True
    model_note: str = ""  # where the model comes from (Hub repo, servelab synth, ...)
    recipe_text: str = ""  # the recipe, secrets masked and absolute paths replaced
    gpus: int = 1  # GPUs of the latest run's layout
    layout: str = ""  # e.g. "TP2 x PP1 x DP1" when more than one GPU
    acceptance: SpecAcceptance | None = None  # the latest run's, when it drafted
    finding: str = ""  # the page's first sentence: this build against the others, on its hardware
    published: tuple[tuple[str, str | None], ...] = ()  # (line, url): published for this build


@dataclass(frozen=True)
class BuildRow:
    """One build in a model's comparison index."""

    recipe_slug: str
    build_name: str
    quantization: str | None
    hardware: str
    engine_versions: tuple[str, ...]
    decode: tuple[tuple[int, Measured], ...]  # (prompt tokens, best-known measurement)
    prefill: tuple[tuple[int, Measured], ...]
    weights: Measured | None
    checkpoint_bytes: int | None
    last_verified: Verification | None
    engine: str = "vLLM"  # display name: builds of one model may run on different engines


@dataclass(frozen=True)
class HardwareAnswer:
    """Which build of a model to download on one hardware profile (``servelab choose`` over
    the model's recipes): measured where the pick's decode was measured there, predicted
    (labelled) elsewhere; the reason is one sentence in explain's terms."""

    hardware: str
    pick: str | None  # build name; None when no build fits
    pick_slug: str | None  # its recipe page
    decode: Measured | Predicted | None  # the pick's single-stream decode
    basis: str  # measured | predicted | bound | none
    reason: str
    verdicts: tuple[tuple[str, str], ...] = ()  # (build name, verdict) for every build


@dataclass(frozen=True)
class ModelIndexPage:
    """The index comparing all builds of one model."""

    slug: str
    model_name: str
    builds: tuple[BuildRow, ...]
    answers: tuple[HardwareAnswer, ...] = ()
    context_tokens: int = 0
    prompt_tokens: int = 0


@dataclass(frozen=True)
class RunPage:
    """One recorded run, so that every number on the site can link to where it came from."""

    run_id: str
    recipe_slug: str | None
    recipe_name: str
    status: str
    started: str
    host: str
    engine_version: str | None
    failure: str | None = None
    metrics: tuple[tuple[str, Measured], ...] = ()
    predictions: tuple[tuple[str, Predicted], ...] = ()
    log_excerpt: tuple[str, ...] = ()
    # This machine's side of the run: only the run page shows local paths and the port.
    command: tuple[str, ...] = ()
    checkpoint_path: str | None = None
    run_dir: str | None = None


@dataclass(frozen=True)
class Site:
    """The whole site."""

    title: str
    recipes: tuple[RecipePage, ...]
    models: tuple[ModelIndexPage, ...]
    experiments: tuple[ExperimentPage, ...]
    runs: tuple[RunPage, ...]
    ledger: tuple[LedgerRow, ...] = ()
