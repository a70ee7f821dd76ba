"""Run an A/B experiment over stored runs and store it, linked to the baseline's recipe."""

from __future__ import annotations

from collections.abc import Sequence

from servelab.analysis.compare import Group
from servelab.analysis.experiment import ExperimentResult, run_experiment
from servelab.store.db import Store
from servelab.store.model import ExperimentRecord, RunRecord


def group_of(runs: Sequence[RunRecord]) -> Group:
    """A comparison group named after the runs' recipe (else model, else run id)."""
    name = runs[-1].recipe_name or runs[-1].model_id or (runs[-1].run_id or "runs")
    return Group(name, tuple(runs))


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
