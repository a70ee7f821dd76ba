"""A/B experiments: pick each side's runs (stored, or run now), compare, store the result.

- :func:`resolve_side`: a run id / prefix, else the latest runs of a recipe (name or file)
  or model id;
- :func:`run_side`: run a recipe now through :func:`~servelab.pipeline.run.run_recipe`;
- :func:`record_experiment`: deltas and verdict, stored linked to the baseline's recipe.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from servelab.analysis.compare import Group
from servelab.analysis.experiment import ExperimentResult, run_experiment
from servelab.errors import RunNotFoundError, ServelabError
from servelab.store.db import Store
from servelab.store.model import ExperimentRecord, RunFilter, RunRecord

if TYPE_CHECKING:
    from servelab.pipeline.run import EventFn


def group_of(runs: Sequence[RunRecord]) -> Group:
    """A comparison group named after the runs' recipe (else model, else run id)."""
    name = runs[-1].recipe_name or runs[-1].model_id or (runs[-1].run_id or "runs")
    return Group(name, tuple(runs))


def recipe_name_from_file(arg: str) -> str | None:
    """The ``name`` of the recipe file ``arg`` (its stem when unnamed); None if not a file."""
    path = Path(arg)
    if path.suffix != ".toml" or not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return path.stem
    name = data.get("name")
    return name if isinstance(name, str) and name else path.stem


def latest_runs(store: Store, subject: str, count: int = 1) -> list[RunRecord]:
    """The ``count`` latest successful runs of a recipe (name or file) or model id."""
    name = recipe_name_from_file(subject) or subject
    runs = store.list_runs(
        RunFilter(model_or_recipe=name, status="ok", newest_first=True, limit=count),
        samples=True,
    )
    return list(reversed(runs))


def resolve_side(store: Store, arg: str, count: int = 1) -> Group:
    """A run id / prefix, else the latest ``count`` runs of a recipe or model."""
    try:
        return Group(arg, (store.get_run(arg),))
    except RunNotFoundError as exc:
        runs = latest_runs(store, arg, count)
        if not runs:
            raise RunNotFoundError(f"no run id, recipe or model matches {arg!r}") from exc
        return Group(arg, tuple(runs))


def run_side(store: Store, recipe_file: Path, *, on_event: EventFn | None = None) -> Group:
    """Run a recipe now through the ``servelab run`` pipeline; its stored run as a group."""
    from servelab.pipeline.run import RunOptions, run_recipe
    from servelab.serve.recipe import load_recipe

    recipe = load_recipe(recipe_file)
    outcome = run_recipe(recipe, store, RunOptions(labels=("experiment",)), on_event=on_event)
    if not outcome.ok:
        raise ServelabError(
            f"run {outcome.run_id} of {recipe_file} failed ({outcome.record.status_reason}); "
            "it is recorded, but there is no experiment without it"
        )
    return Group(recipe.name, (store.get_run(outcome.run_id),))


def record_experiment(
    store: Store,
    baseline: Group,
    variant: Group,
    criteria: str,
    *,
    title: str | None = None,
    alpha: float = 0.05,
    save: bool = True,
) -> tuple[ExperimentResult, str | None]:
    """Deltas and verdict of ``variant`` over ``baseline``; stored when ``save``.

    The stored report is the result's JSON document; the experiment is linked to the
    baseline's recipe.
    """
    result = run_experiment(baseline, variant, criteria, alpha=alpha)
    if not save:
        return result, None
    experiment_id = store.add_experiment(
        ExperimentRecord(
            target_recipe=baseline.runs[-1].recipe_name,
            baseline_run_ids=tuple(r.run_id or "" for r in baseline.runs),
            variant_run_ids=tuple(r.run_id or "" for r in variant.runs),
            criteria=criteria,
            verdict=result.verdict,
            report=result.to_json_dict(),
            title=title,
        )
    )
    return result, experiment_id
