"""``servelab calibration report``: the error ledger behind every predicted interval.

For each build in the results database (or in the shipped priors, ``--priors-only``),
servelab forgets the build, calibrates as it would for a build it has never run, and prints
measured against predicted per point (:mod:`servelab.predict.ledger`). ``--json`` prints
``{"schema": "servelab.ledger/1", "rows": [...], "summary": [...]}``, with ``load`` (the
stored concurrency sweeps, each predicted with its model left out) when the store has any. A
store of sweeps alone gets its load section: its ledger rows are empty and ``single_stream``
says, in one line, that there was no single-stream point to check.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servelab.cli.output import CsvOpt, DbOpt, JsonOpt, MarkdownOpt, Table, emit, num, pick_format
from servelab.errors import HardwareProfileError, UsageError

if TYPE_CHECKING:
    from servelab.evidence.sweeps import Replanned, Skipped, SweepRow
    from servelab.plan.load import BatchedError
    from servelab.predict.form import Sample
    from servelab.predict.holdout import Reference
    from servelab.predict.ledger import LedgerRow
    from servelab.predict.priors import PriorTable
    from servelab.store.model import RunRecord

app = typer.Typer(
    name="calibration",
    help="How well servelab predicts builds it has not run (the error ledger).",
    no_args_is_help=True,
)


def _pct(v: float | None) -> str:
    return f"{v:+.1%}" if v is not None else ""


ReportHardwareOpt = Annotated[str | None, typer.Option(
    "--hardware", "-H", help="Only runs on this hardware profile.")]
ReportPriorsOpt = Annotated[Path | None, typer.Option(
    "--priors", help="A priors table (TOML) instead of the shipped one.")]
PriorsOnlyOpt = Annotated[bool, typer.Option(
    "--priors-only", help="Ledger over the priors table itself (leave one published build out).")]
ByOpt = Annotated[str, typer.Option(
    "--by",
    help="What to leave out: 'model' (each build, the ledger), 'family' (every build of a "
    "model family at once) or 'kernel-path'.")]
ReplicaOpt = Annotated[list[str] | None, typer.Option(
    "--replica",
    help="RUN_ID=CHECKPOINT: re-plan the step costs of a stored sweep whose plan predates them "
    "from a header replica of its build (checked against the run's stored inspect report and "
    "plan; refused when it differs). Repeatable.")]


@app.command("report")
def report(
    db: DbOpt = None,
    hardware: ReportHardwareOpt = None,
    priors: ReportPriorsOpt = None,
    priors_only: PriorsOnlyOpt = False,
    by: ByOpt = "model",
    replica: ReplicaOpt = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
) -> None:
    """Leave-one-model-out: measured vs predicted for every stored build (``--by family``:
    leave-one-family-out, ``--by kernel-path``: leave-one-kernel-path-out)."""
    from servelab.predict.priors import load_priors

    if by not in ("model", "family", "kernel-path"):
        raise UsageError(f"--by must be model, family or kernel-path, got {by!r}")
    replicas = _replica_args(replica or [])
    if replicas and (by != "model" or priors_only):
        raise UsageError("--replica re-predicts stored sweeps: only with --by model and a "
                         "results database")
    from servelab.hardware.profiles import check_profile_name

    fmt = pick_format(as_json, as_csv, as_markdown)
    if hardware is not None:  # an alias or another case: the profile's own name, as stored
        with suppress(HardwareProfileError):
            hardware = check_profile_name(hardware)
    table = load_priors(priors)
    if by != "model":
        _held_out(db, hardware, priors_only, by, table, fmt)
    elif priors_only:
        rows, stored = _priors_ledger(table, hardware)
        _emit_ledger(fmt, table, rows, stored, LoadSection((), (), ()))
    else:
        _store_ledger(db, hardware, table, replicas, fmt)


def _held_out(db: str | None, hardware: str | None, priors_only: bool, by: str,
              table: PriorTable, fmt: str) -> None:
    """``--by family`` / ``--by kernel-path``: every build of a family (kernel path) held out
    at once, over the priors and the stored runs."""
    from servelab.evidence.runs import samples_from_runs
    from servelab.predict.calibration import reference_of
    from servelab.store.db import open_store
    from servelab.store.model import STATUS_OK, RunFilter

    stored_runs = []
    if not priors_only:
        with open_store(db, create=False) as store:
            stored_runs = store.list_runs(RunFilter(hardware=hardware, status=STATUS_OK))
    _held_out_view(reference_of(samples_from_runs(stored_runs), table),
                   by.replace("-", " "), hardware, table.version, fmt)


def _priors_ledger(table: PriorTable, hardware: str | None
                   ) -> tuple[list[LedgerRow], list[Sample]]:
    """``--priors-only``: the ledger over the priors table itself, each sample at its
    hardware profile's ceilings."""
    from servelab.hardware.lookup import get_profile
    from servelab.predict.calibration import Ceilings, reference_of
    from servelab.predict.ledger import ledger
    from servelab.predict.roofline import lower_bounds, roofline_coefficients
    from servelab.predict.spec import step_predictor

    stored = [s for s in table.samples if hardware is None or s.hardware == hardware]
    if not stored:
        raise UsageError(f"the priors table has no measurement on {hardware}")

    @functools.cache
    def coefficients(hw: str, compute: str) -> tuple[Ceilings, Ceilings]:
        profile = get_profile(hw)
        return roofline_coefficients(profile, compute), lower_bounds(profile, compute)

    def roof(kind: str, s: Sample) -> Sequence[float]:
        return coefficients(s.hardware, s.compute)[0][kind]

    def floor(kind: str, s: Sample) -> Sequence[float]:
        return coefficients(s.hardware, s.compute)[1][kind]

    rows = ledger(stored, [], roof, origin="shipped priors", lower=floor,
                  steps=step_predictor(stored, [], roof, floor),
                  reference=reference_of([], table))
    return list(rows), stored


def _store_ledger(db: str | None, hardware: str | None, table: PriorTable,
                  replicas: Mapping[str, str], fmt: str) -> None:
    """The ledger of the results database's runs, with its stored sweeps under load."""
    from servelab.evidence.runs import ledger_for_runs, samples_from_runs
    from servelab.evidence.sweeps import sweeps_in
    from servelab.store.db import open_store
    from servelab.store.model import STATUS_OK, RunFilter

    with open_store(db, create=False) as store:
        runs = store.list_runs(RunFilter(hardware=hardware, status=STATUS_OK))
        # a sweep's samples are its measurement (a listing leaves them out)
        runs = [store.get_run(r.run_id) if r.run_id and sweeps_in(r) else r for r in runs]
    rows = ledger_for_runs(runs, table)
    under_load = _load_section(runs, table, _replanned(runs, replicas))
    if not rows:
        nothing = ("no measured single-stream points to check"
                   + (f" on {hardware}" if hardware else ""))
        if not under_load.rows and not under_load.skipped:
            raise UsageError(f"{nothing} and no stored sweep (run `servelab run RECIPE` "
                             "first, or use --priors-only)")
        # a store of sweeps alone: its load section, the single-stream part one line
        _emit_load_only(fmt, table.version, under_load, f"single stream: {nothing}")
        return
    _emit_ledger(fmt, table, list(rows), samples_from_runs(runs), under_load)


def _emit_ledger(fmt: str, table: PriorTable, rows: Sequence[LedgerRow],
                 stored: Sequence[Sample], under_load: LoadSection) -> None:
    """The ledger's rows, its summary per hardware and kind, and the sweeps under load."""
    from servelab.predict.ledger import LedgerDocument, summarize

    summary = summarize(rows, stored)
    cells = [
        [r.hardware, r.model, r.kind, f"{r.length:,}", num(r.measured_tok_s, 1),
         num(r.predicted_tok_s, 1) or "-",
         f"{num(r.low, 1)}–{num(r.high, 1)}" if r.low is not None else "", _pct(r.error),
         {True: "yes", False: "NO", None: ""}[r.inside], r.level]
        for r in rows
    ]
    sums = [
        [s.hardware, s.kind, f"{s.predicted_points}/{s.points}",
         f"{s.median_abs_error:.1%}" if s.median_abs_error is not None else "",
         f"{s.max_abs_error:.1%}" if s.max_abs_error is not None else "",
         f"{s.inside}/{s.predicted_points}",
         f"±{s.rerun_spread:.1%}" if s.rerun_spread is not None else ""]
        for s in summary
    ]
    sources = sorted({f"{r.level}: {r.source}" for r in rows})
    doc = LedgerDocument(table.version, tuple(rows), tuple(summary)).to_dict()
    if under_load.rows or under_load.skipped:
        doc["load"] = under_load.to_dict()
    emit(
        fmt,
        doc=doc,
        tables=[
            Table(
                "leave-one-model-out: measured vs predicted (single stream)",
                ("hardware", "build", "kind", "length", "measured", "predicted", "interval",
                 "error", "inside", "level"),
                cells,
                csv=(("hardware", "build", "kind", "length_tokens", "unit", "measured",
                      "predicted", "low", "high", "error_pct", "inside", "level"),
                     [[r.hardware, r.model, r.kind, r.length, r.unit, r.measured_tok_s,
                       r.predicted_tok_s, r.low, r.high,
                       None if r.error is None else round(r.error * 100, 2), r.inside,
                       r.level] for r in rows]),
                caption="predicted as if the build had never been run; error = measured / "
                "predicted - 1"
                + ("; spec step: verification steps/s (x the run's measured acceptance "
                   "length = tok/s)" if any(r.unit != "tok/s" for r in rows) else ""),
            ),
            Table(
                "summary",
                ("hardware", "kind", "predicted", "median |error|", "max |error|", "inside",
                 "reruns"),
                sums,
                caption="reruns: how far one build's runs strayed from their mean on that "
                "hardware (no interval is narrower)",
            ),
            *under_load.tables(),
        ],
        notes=[f"priors table {table.version}", *sources, *under_load.notes()],
    )


def _emit_load_only(fmt: str, version: str, under_load: LoadSection, nothing: str) -> None:
    """The report of a store holding sweeps but no single-stream point: the ledger document
    with empty rows and summary (``single_stream`` says why), then the load section."""
    from servelab.predict.ledger import LedgerDocument

    doc = LedgerDocument(version, (), ()).to_dict()
    doc["single_stream"] = nothing
    doc["load"] = under_load.to_dict()
    emit(fmt, doc=doc, tables=under_load.tables(),
         notes=[nothing, f"priors table {version}", *under_load.notes()])


@dataclass(frozen=True)
class LoadSection:
    """The report's part under load: every stored concurrency sweep predicted with its model
    left out (:mod:`servelab.evidence.sweeps`), per hardware and metric a summary, the
    batched form's held-out error, and the sweeps that could not be predicted again."""

    rows: tuple[SweepRow, ...]
    skipped: tuple[Skipped, ...]
    errors: tuple[BatchedError, ...]

    def summary(self) -> list[dict[str, object]]:
        """Per hardware and metric: points, median and largest |error|, inside the interval."""
        out: list[dict[str, object]] = []
        for hw in sorted({r.hardware for r in self.rows}):
            mine = [r for r in self.rows if r.hardware == hw]
            for key in mine[0].metrics:
                errs = [abs(r.metrics[key].error) for r in mine]
                shown = [r.metrics[key].inside for r in mine if r.no_prediction is None]
                out.append({"hardware": hw, "metric": key, "points": len(errs),
                            "median_abs_error": statistics.median(errs),
                            "max_abs_error": max(errs), "predicted": len(shown),
                            "inside": sum(1 for x in shown if x)})
        return out

    def too_few_models(self) -> dict[str, int]:
        """Per hardware with predicted sweeps but no batched-form error: how many models
        its points at 2+ streams come from (fewer than two)."""
        measured = {e.hardware for e in self.errors}
        return {hw: len({r.model for r in self.rows if r.hardware == hw and r.concurrency > 1})
                for hw in sorted({r.hardware for r in self.rows} - measured)}

    def to_dict(self) -> dict[str, object]:
        """JSON form: ``rows``, ``summary``, ``batched_error`` (and per hardware without
        one, ``too_few_models``: its models at 2+ streams) and ``skipped``."""
        return {"rows": [r.to_dict() for r in self.rows], "summary": self.summary(),
                "batched_error": [vars(e) for e in self.errors],
                "too_few_models": self.too_few_models(),
                "skipped": [vars(s) for s in self.skipped]}

    def tables(self) -> list[Table]:
        """The per-point table and the summary (none without a predicted sweep)."""
        if not self.rows:
            return []

        def cell(r: SweepRow, key: str, scale: float, digits: int) -> str:
            m = r.metrics[key]
            return (f"{num(m.predicted * scale, digits)} / {num(m.measured * scale, digits)} / "
                    f"{_pct(m.error)}" + (" (out)" if m.inside is False else ""))

        points = [[r.hardware, r.model, f"{r.prompt_len:,}", str(r.concurrency),
                   "none" if r.no_prediction else f"±{r.rel_error:.0%}",
                   cell(r, "tpot_s", 1e3, 1), cell(r, "ttft_s", 1e3, 0),
                   cell(r, "stream_tok_s", 1, 1), cell(r, "output_tok_s_per_gpu", 1, 0)]
                  for r in self.rows]
        sums = [[str(s["hardware"]), str(s["metric"]), str(s["points"]),
                 f"{s['median_abs_error']:.1%}", f"{s['max_abs_error']:.1%}",
                 f"{s['inside']}/{s['predicted']}"] for s in self.summary()]
        return [
            Table("leave-one-model-out under load: predicted / measured / error",
                  ("hardware", "build", "prompt", "streams", "±", "TPOT ms", "TTFT ms",
                   "tok/s/stream", "tok/s/GPU"), points,
                  caption="each stored concurrency sweep re-predicted from its stored plan "
                  "with its model left out; error = measured / predicted - 1 for a rate, "
                  "predicted / measured - 1 for a latency; (out): outside the interval; "
                  "± none: no prediction (an interval over 4x), the figures simulated"),
            Table("summary under load", ("hardware", "metric", "points", "median |error|",
                                         "max |error|", "inside / predicted"), sums),
        ]

    def notes(self) -> list[str]:
        """The batched form's error per hardware and the sweeps left out, as notes."""
        out = [f"under load on {e.hardware}: ±{e.rel_error:.0%} (TTFT ±{e.ttft_rel_error:.0%})"
               f" — {e.basis}" for e in self.errors]
        for hw, n in self.too_few_models().items():
            out.append(f"under load on {hw}: no batched-form error — stored sweeps at 2+ "
                       f"streams of {n} model{'s' if n != 1 else ''} there, two needed; its "
                       "load intervals are the single-stream fits'")
        out += [f"sweep of {r.model} (run {r.run_id}): {r.replanned}"
                for r in {r.run_id: r for r in self.rows if r.replanned}.values()]
        out += [f"sweep of {s.model} (run {s.run_id}) not predicted: {s.reason}"
                for s in self.skipped]
        return out


def _load_section(runs: Sequence[RunRecord], table: PriorTable,
                  replanned: Mapping[str, Replanned]) -> LoadSection:
    from servelab.evidence.sweeps import batched_error, held_out_sweeps

    rows, skipped = held_out_sweeps(runs, table, replanned=replanned)
    errors = [e for hw in sorted({r.hardware for r in rows})
              if (e := batched_error(rows, hw)) is not None]
    return LoadSection(tuple(rows), tuple(skipped), tuple(errors))


def _replica_args(values: Sequence[str]) -> dict[str, str]:
    """``RUN_ID=CHECKPOINT`` options by run id (one checkpoint per run)."""
    out: dict[str, str] = {}
    for v in values:
        rid, sep, path = v.partition("=")
        if not sep or not rid or not path:
            raise UsageError(f"--replica must be RUN_ID=CHECKPOINT, got {v!r}")
        if rid in out:
            raise UsageError(f"--replica names run {rid} twice")
        out[rid] = path
    return out


def _replanned(runs: Sequence[RunRecord], replicas: Mapping[str, str]
               ) -> dict[str, Replanned]:
    """Each ``--replica`` run's step costs, re-planned from its checked replica."""
    if not replicas:
        return {}
    from servelab.pipeline.replan import replan_stored

    by_id = {r.run_id: r for r in runs if r.run_id}
    missing = sorted(set(replicas) - set(by_id))
    if missing:
        raise UsageError(f"--replica: no stored run {missing[0]} (among the successful runs "
                         "the report reads)")
    return {rid: replan_stored(by_id[rid], path) for rid, path in replicas.items()}


def _held_out_view(
    ref: Reference, by: str, hardware: str | None, version: str, fmt: str
) -> None:
    """Print every point predicted with its family (or kernel path) left out, and per
    hardware and kind the 90 % half-width such predictions carry."""
    hws = sorted({s.hardware for s in ref.samples if hardware is None or s.hardware == hardware})
    points = [p for hw in hws for p in ref.points(hw, by)]
    if not points:
        raise UsageError(f"no hardware with two {by} groups or more to leave out"
                         + (f" on {hardware}" if hardware else ""))
    spreads = [sp for hw in hws for kind in ("decode", "prefill")
               if (sp := ref.spread(hw, kind, by)) is not None]
    emit(
        fmt,
        doc={
            "schema": "servelab.holdout/1",
            "by": by,
            "priors_version": version,
            "rows": [p.to_dict() for p in points],
            "summary": [
                {"hardware": s.hardware, "kind": s.kind, "points": s.points, "groups": s.groups,
                 "half_width_90": s.half_width} for s in spreads
            ],
        },
        tables=[
            Table(
                f"leave-one-{by.replace(' ', '-')}-out: measured vs predicted (single stream)",
                ("hardware", "left out", "build", "kind", "length", "measured", "predicted",
                 "error"),
                [[p.hardware, p.group, p.build, p.kind, f"{p.length:,}",
                  num(p.measured_tok_s, 1), num(p.predicted_tok_s, 1) or "-", _pct(p.error)]
                 for p in points],
                caption=f"every build of the {by} left out of its hardware's calibration; "
                "error = predicted / measured - 1",
            ),
            Table(
                "summary",
                ("hardware", "kind", "groups", "points", "90 % half-width"),
                [[s.hardware, s.kind, str(s.groups), str(s.points),
                  f"±{s.half_width:.0%}" if s.half_width is not None else "too few points"]
                 for s in spreads],
                caption="the half-width a prediction carries on that hardware for a "
                f"{by} it has not seen (split-conformal 90 % of the errors above)",
            ),
        ],
        notes=[f"priors table {version}"],
    )
