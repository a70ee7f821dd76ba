"""``servelab compare``, ``servelab history`` and ``servelab experiment`` over stored runs.

JSON schemas: ``servelab.compare/1`` (:mod:`servelab.analysis.compare`),
``servelab.history/1`` (:mod:`servelab.analysis.history`), ``servelab.experiment/1``
(:mod:`servelab.analysis.experiment`, plus ``"experiment_id"`` when stored).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servelab.cli.output import CsvOpt, DbOpt, JsonOpt, MarkdownOpt, Table, emit, num, pick_format
from servelab.errors import RunNotFoundError, ServelabError, UsageError

if TYPE_CHECKING:  # numpy and SQLAlchemy load only when a command runs (fast --help)
    from servelab.analysis import Group
    from servelab.analysis.compare import Comparison
    from servelab.analysis.experiment import ExperimentResult
    from servelab.analysis.history import History

DEFAULT_CRITERIA = "decode >= +5% and memory not worse"

MetricOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--metric",
        "-m",
        help="Metric to include (repeatable): decode, prefill, ttft, "
        "tpot, e2e, memory, kv, power or a full name like decode_tok_s.",
    ),
]
AlphaOpt = Annotated[
    float, typer.Option("--alpha", help="Significance level of the per-request tests.")
]


def _metric_names(metrics: list[str] | None) -> list[str] | None:
    from servelab.analysis import metric_def

    return [metric_def(m).name for m in metrics] if metrics else None


# ---------------------------------------------------------------------------- compare


def _pct(rel: float | None) -> float | None:
    """A relative difference in percent, for a CSV cell (None: none, or not finite)."""
    return None if rel is None or not math.isfinite(rel) else round(rel * 100, 2)


def compare_tables(comp: Comparison) -> list[Table]:
    """The compare table: one row per metric and point, one value/Δ/verdict per group."""
    from servelab.analysis.compare import fmt_rel

    cols = ["metric", "point", f"{comp.groups[0].name}"]
    for g in comp.groups[1:]:
        cols += [g.name, f"Δ vs {comp.groups[0].name}", "verdict"]
    rows = []
    # --csv: one value per cell (the shown cells join a value and its CI, a delta and its CI)
    base = comp.groups[0].name
    csv_cols = ["metric", "unit", "point", f"{base}", f"{base} ci95 low", f"{base} ci95 high"]
    for g in comp.groups[1:]:
        csv_cols += [g.name, f"{g.name} ci95 low", f"{g.name} ci95 high",
                     f"{g.name} vs {base} (%)", f"{g.name} vs {base} ci95 low (%)",
                     f"{g.name} vs {base} ci95 high (%)", f"{g.name} verdict",
                     f"{g.name} p-value"]
    csv_rows: list[list[object]] = []
    for r in comp.rows:
        crow: list[object] = [r.label, r.unit, r.point]
        for i, c in enumerate(r.cells):
            crow += [c.value, c.ci_low, c.ci_high]
            if i:
                pct = [_pct(None if x is None else x - 1)
                       for x in (c.ratio_ci_low, c.ratio_ci_high)]
                crow += [_pct(c.rel_diff), *pct, c.verdict, c.p_value]
        csv_rows.append(crow)
        row = [f"{r.label} ({r.unit})", r.point]
        for i, c in enumerate(r.cells):
            ci = ""
            if c.ci_low is not None and c.ci_high is not None and c.n >= 2:
                ci = f" ±{num((c.ci_high - c.ci_low) / 2, 3)}"
            row.append(f"{num(c.value, 3)}{ci}")
            if i == 0:
                continue
            delta = fmt_rel(c.rel_diff)
            if c.ratio_ci_low is not None and c.ratio_ci_high is not None:
                delta += (
                    f" [{(c.ratio_ci_low - 1) * 100:+.1f}%, {(c.ratio_ci_high - 1) * 100:+.1f}%]"
                )
            verdict = c.verdict
            if c.p_value is not None:
                verdict += f" (p={c.p_value:.2g})"
            row += [delta, verdict]
        rows.append(tuple(row))
    runs = "; ".join(f"{g.name} = {', '.join(r.run_id or '' for r in g.runs)}" for g in comp.groups)
    caption = (
        f"value ± half-width of its 95% CI; Welch t-test on per-request samples, alpha "
        f"{comp.alpha}; [95% bootstrap CI of "
        f"the ratio]. Runs: {runs}"
    )
    return [Table("compare", tuple(cols), rows, caption, csv=(tuple(csv_cols), csv_rows))]


def compare_cmd(
    runs: Annotated[
        list[str] | None, typer.Argument(help="Run ids (or prefixes); the first is the baseline.")
    ] = None,
    recipe: Annotated[
        list[str] | None,
        typer.Option("--recipe", help="Latest run of this recipe or model (repeatable)."),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", help="All successful runs with this label, pooled (repeatable)."),
    ] = None,
    metric: MetricOpt = None,
    alpha: AlphaOpt = 0.05,
    db: DbOpt = None,  # the runs compared are read from it
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
) -> None:
    """Compare runs, recipes or labelled groups side by side, tested against the noise."""
    from servelab.analysis import Group, compare_groups
    from servelab.analysis.metrics import METRICS
    from servelab.pipeline.experiment import latest_runs
    from servelab.store import RunFilter, open_store

    fmt = pick_format(as_json, as_csv, as_markdown)
    groups: list[Group] = []
    with open_store(db, create=False) as store:
        for r in runs or []:
            groups.append(Group(r, (store.get_run(r),)))
        for name in recipe or []:
            found = latest_runs(store, name)
            if not found:
                raise RunNotFoundError(f"no successful run of recipe or model {name!r}")
            groups.append(Group(name, tuple(found)))
        for lab in label or []:
            found = store.list_runs(RunFilter(label=lab, status="ok"), samples=True)
            if not found:
                raise RunNotFoundError(f"no successful run with label {lab!r}")
            groups.append(Group(f"label:{lab}", tuple(found)))
    if len(groups) < 2:
        raise UsageError("give at least two runs, --recipe or --label values to compare")
    comp = compare_groups(groups, metrics=_metric_names(metric), alpha=alpha)
    names = _metric_names(metric)
    per_request = names is None or any(METRICS[n].per_sample is not None for n in names)
    if not any(r.point for r in comp.rows):  # no per-request row: say why in one sentence
        why = _nothing_in_common(groups) if per_request else None
        if why is not None or not comp.rows:
            raise ServelabError(why or "nothing to compare: no asked metric was measured "
                                "in two of them")
    emit(fmt, doc=comp.to_json_dict(), tables=compare_tables(comp))


def _nothing_in_common(groups: Sequence[Group]) -> str | None:
    """Why a comparison has no per-request row: the groups measured no point (prompt length
    and concurrency) in common (None: they did)."""
    from servelab.analysis.metrics import all_points

    measured = "; ".join(f"{g.name}: {', '.join(all_points(g.runs)) or 'no point'}"
                         for g in groups)
    shared = set(all_points(groups[0].runs))
    for g in groups[1:]:
        shared &= set(all_points(g.runs))
    if shared:
        return None
    return (f"nothing to compare: the runs measured no point in common ({measured}); "
            "compare runs benchmarked at the same prompt length and concurrency")


# ---------------------------------------------------------------------------- history


def history_tables(h: History) -> tuple[list[Table], list[str]]:
    """One table per series (dated rows, steps marked) and a finding per detected change."""
    from servelab.analysis.compare import fmt_rel

    tables = []
    notes = []
    for s in h.series:
        steps = {c.index for c in s.changes}
        rows = []
        for i, r in enumerate(s.rows):
            mark = (
                "▼ step"
                if i in steps and any(c.regression for c in s.changes if c.index == i)
                else ("▲ step" if i in steps else "")
            )
            rows.append(
                (
                    r.started_at.strftime("%Y-%m-%d %H:%M"),
                    r.run_id,
                    num(r.value, 3),
                    num(r.se, 3) if r.n >= 2 else "",
                    str(r.n),
                    mark,
                )
            )
        title = f"{s.label} ({s.unit})" + (f" at {s.point}" if s.point else "")
        caption = f"run-to-run noise {num(s.noise_tau, 3)} {s.unit}; {len(s.changes)} change(s)"
        tables.append(
            Table(title, ("started (UTC)", "run", "value", "± se", "n", ""), rows, caption)
        )
        for c in s.changes:
            kind = "REGRESSION" if c.regression else "improvement"
            changed = (
                ", ".join(
                    f"{f.name} {f.before or '-'} → {f.after or '-'}"
                    + (" (consistent)" if f.consistent else "")
                    for f in c.factors
                )
                or "no recorded factor changed"
            )
            notes.append(
                f"{kind}: {title} {num(c.before_mean, 3)} → {num(c.after_mean, 3)} "
                f"({fmt_rel(c.rel_change)}) between {c.last_good_at:%Y-%m-%d} "
                f"(run {c.last_good_run}) and {c.first_bad_at:%Y-%m-%d} (run {c.first_bad_run}); "
                f"changed: {changed}"
            )
    if not notes:
        notes.append("no change beyond the measured noise")
    return tables, notes


def history_long_table(h: History) -> Table:
    """Every series in one long table (the ``--csv`` form of ``history``)."""
    rows = []
    for s in h.series:
        steps = {c.index: c for c in s.changes}
        for i, r in enumerate(s.rows):
            c = steps.get(i)
            rows.append(
                (
                    s.metric,
                    s.point,
                    r.started_at.isoformat(),
                    r.run_id,
                    repr(r.value),
                    repr(r.se),
                    str(r.n),
                    "" if c is None else ("regression" if c.regression else "improvement"),
                )
            )
    return Table(
        "history", ("metric", "point", "started_at", "run_id", "value", "se", "n", "step"), rows
    )


def history_cmd(
    subject: Annotated[str, typer.Argument(help="Recipe name (or recipe file) or model id.")],
    metric: MetricOpt = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only runs started on/after this date (YYYY-MM-DD)."),
    ] = None,
    fail_on_regression: Annotated[
        bool,
        typer.Option(
            "--fail-on-regression", help="Exit with status 3 when a regression is detected."
        ),
    ] = False,
    db: DbOpt = None,  # the dated runs are read from it
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
) -> None:
    """Dated series per metric with noise-aware change points and what changed at each."""
    from servelab.analysis import history
    from servelab.cli.runs_cmd import _date
    from servelab.pipeline.experiment import recipe_name_from_file
    from servelab.store import RunFilter, open_store

    fmt = pick_format(as_json, as_csv, as_markdown)
    name = recipe_name_from_file(subject) or subject
    with open_store(db, create=False) as store:
        runs = store.list_runs(
            RunFilter(model_or_recipe=name, since=_date(since, "--since")), samples=True
        )
    if not runs:
        raise RunNotFoundError(f"no stored runs of recipe or model {name!r}")
    h = history(name, runs, metrics=_metric_names(metric))
    tables, notes = history_tables(h)
    if fmt == "csv":
        tables = [history_long_table(h)]
    emit(fmt, doc=h.to_json_dict(), tables=tables, notes=notes)
    if fail_on_regression and h.regressions:
        raise typer.Exit(3)


# ---------------------------------------------------------------------------- experiment


def experiment_tables(res: ExperimentResult) -> tuple[list[Table], list[str]]:
    """Deltas table, clause table, and the verdict line."""
    from servelab.analysis.experiment import fmt_pct

    deltas = Table(
        "deltas",
        ("metric", "point", res.baseline.name, res.variant.name, "Δ", "Δ%", "95% CI", "p"),
        [
            (
                f"{d.label} ({d.unit})",
                d.point,
                num(d.baseline, 3),
                num(d.variant, 3),
                num(d.diff, 3),
                fmt_pct(d.rel_diff),
                f"[{fmt_pct(d.rel_ci_low)}, {fmt_pct(d.rel_ci_high)}]"
                if d.rel_ci_low is not None
                else "single reading",
                f"{d.p_value:.2g}" if d.p_value is not None and math.isfinite(d.p_value) else "",
            )
            for d in res.deltas
        ],
    )
    clauses = Table(
        "criteria",
        ("criterion", "result", "because"),
        [(c.clause.text, c.status, c.reason) for c in res.clauses],
    )
    return [deltas, clauses], [f"verdict: {res.verdict.upper()} ({res.criteria})"]


BaselineArg = Annotated[str, typer.Argument(
    help="Baseline: a run id, or a recipe name/file or model id (its latest runs).")]
VariantArg = Annotated[str, typer.Argument(
    help="Variant: a run id, or a recipe name/file or model id (its latest runs).")]
CriteriaOpt = Annotated[str | None, typer.Option(
    "--criteria", help=f"Adoption criteria, e.g. '{DEFAULT_CRITERIA}' (the default).")]
CriteriaFileOpt = Annotated[Path | None, typer.Option(
    "--criteria-file", help="TOML file with a [criteria] table instead of --criteria.")]
LastOpt = Annotated[int, typer.Option(
    "--last", min=1, help="For a recipe/model, pool its latest N runs.")]
RunsOpt = Annotated[bool, typer.Option(
    "--runs", help="Run both recipe files now (as `servelab run` does), then compare.")]
SaveOpt = Annotated[bool, typer.Option(
    "--save/--no-save", help="Store the experiment, linked to the baseline recipe.")]
TitleOpt = Annotated[str | None, typer.Option("--title", help="Title of the experiment.")]


def experiment_cmd(
    baseline: BaselineArg,
    variant: VariantArg,
    criteria: CriteriaOpt = None,
    criteria_file: CriteriaFileOpt = None,
    last: LastOpt = 1,
    runs: RunsOpt = False,
    save: SaveOpt = True,
    title: TitleOpt = None,
    alpha: AlphaOpt = 0.05,
    db: DbOpt = None,  # both sides' runs are read from it; the experiment is stored in it
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
) -> None:
    """Deltas of VARIANT over BASELINE with CIs and a verdict against the criteria."""
    from rich.console import Console

    from servelab.analysis import criteria_from_toml, parse_criteria
    from servelab.cli.run_cmd import RunProgress
    from servelab.pipeline.experiment import record_experiment, resolve_side, run_side
    from servelab.store import open_store

    fmt = pick_format(as_json, as_csv, as_markdown)
    if criteria is not None and criteria_file is not None:
        raise UsageError("give --criteria or --criteria-file, not both")
    text = criteria_from_toml(criteria_file) if criteria_file else (criteria or DEFAULT_CRITERIA)
    parse_criteria(text)  # fail on bad criteria before touching the database
    if runs:
        for arg in (baseline, variant):
            if not Path(arg).is_file():
                raise UsageError(f"--runs needs two recipe files; {arg!r} is not a file")
    with open_store(db, create=bool(runs)) as store:  # --runs records new runs
        if runs:
            with RunProgress(Console(stderr=True, highlight=False)) as progress:
                base = run_side(store, Path(baseline), on_event=progress)
                var = run_side(store, Path(variant), on_event=progress)
        else:
            base = resolve_side(store, baseline, last)
            var = resolve_side(store, variant, last)
        res, experiment_id = record_experiment(
            store, base, var, text, title=title, alpha=alpha, save=save
        )
        doc = res.to_json_dict()
        if experiment_id is not None:
            doc["experiment_id"] = experiment_id
    tables, notes = experiment_tables(res)
    if save and fmt != "json":
        notes.append(f"stored as experiment {doc['experiment_id']}")
    emit(fmt, doc=doc, tables=tables, notes=notes)


def register(root: typer.Typer) -> None:
    """Attach compare, history and experiment to the root app."""
    root.command("compare")(compare_cmd)
    root.command("history")(history_cmd)
    root.command("experiment")(experiment_cmd)
