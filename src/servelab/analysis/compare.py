"""Side-by-side comparison of builds/versions on the same metrics, tested against the noise.

Each column is a *group* of runs (one run, the latest run of a recipe, or every run with a
label); the first group is the baseline. For each per-request metric at each workload point
that every group measured, the groups' pooled per-request samples are compared with
Welch's t-test (unequal variances) and a bootstrap 95 % CI on the ratio of means. A
difference counts only when p < alpha — otherwise the verdict is "no significant
difference", whatever its size. Run-wide numbers (weights GiB, KV pool tokens, power) are
single readings per run: they are shown with their difference but not tested.

JSON schema ``servelab.compare/1``::

    {"schema": "servelab.compare/1", "alpha": 0.05,
     "groups": [{"name", "run_ids": [...]}],
     "rows": [{"metric", "label", "unit", "point", "higher_is_better",
               "cells": [{"group", "value", "n", "ci_low", "ci_high", "diff", "rel_diff",
                          "ratio_ci_low", "ratio_ci_high", "p_value", "verdict"}]}]}
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servelab.analysis.metrics import METRICS, PER_REQUEST, RUN_WIDE, MetricDef, all_points
from servelab.analysis.stats import bootstrap_ratio_ci, mean_ci, welch_test
from servelab.errors import UsageError
from servelab.store.model import RunRecord

SCHEMA = "servelab.compare/1"

BASELINE = "baseline"
NO_DIFFERENCE = "no significant difference"
BETTER = "better"
WORSE = "worse"
SAME = "same"
NOT_TESTED_BETTER = "better (single reading)"
NOT_TESTED_WORSE = "worse (single reading)"
NO_SAMPLES = "not testable (no per-request samples)"
MISSING = "not measured"


@dataclass(frozen=True, slots=True)
class Group:
    """A column of the comparison: a name and the runs whose samples it pools."""

    name: str
    runs: tuple[RunRecord, ...]


@dataclass(frozen=True, slots=True)
class Cell:
    """One group's value of one metric, and how it differs from the baseline."""

    group: str
    value: float | None
    n: int
    ci_low: float | None
    ci_high: float | None
    diff: float | None
    rel_diff: float | None
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    p_value: float | None
    verdict: str


@dataclass(frozen=True, slots=True)
class Row:
    """One metric at one workload point across every group."""

    metric: str
    label: str
    unit: str
    point: str
    higher_is_better: bool
    cells: tuple[Cell, ...]


@dataclass(frozen=True, slots=True)
class Comparison:
    """The whole comparison (see the module docstring for its JSON form)."""

    groups: tuple[Group, ...]
    alpha: float
    rows: tuple[Row, ...]

    def to_json_dict(self) -> dict[str, Any]:
        """The ``servelab.compare/1`` document."""
        return {
            "schema": SCHEMA,
            "alpha": self.alpha,
            "groups": [
                {"name": g.name, "run_ids": [r.run_id for r in g.runs]} for g in self.groups
            ],
            "rows": [
                {
                    **{k: v for k, v in asdict(row).items() if k != "cells"},
                    "cells": [asdict(c) for c in row.cells],
                }
                for row in self.rows
            ],
        }

    def significant(self) -> list[tuple[Row, Cell]]:
        """Every (row, cell) whose difference from the baseline is significant."""
        return [(r, c) for r in self.rows for c in r.cells if c.verdict in (BETTER, WORSE)]


def _direction(diff: float, higher_is_better: bool) -> str:
    return BETTER if (diff > 0) == higher_is_better else WORSE


def _pooled(m: MetricDef, group: Group, point: str | None) -> list[float]:
    out: list[float] = []
    for r in group.runs:
        out.extend(m.sample_values(r, point))
    return out


def _group_value(m: MetricDef, group: Group, point: str | None) -> float | None:
    values = [v for r in group.runs if (v := m.run_value(r, point)) is not None]
    return sum(values) / len(values) if values else None


def _sample_row(m: MetricDef, groups: Sequence[Group], point: str, alpha: float) -> Row:
    base = _pooled(m, groups[0], point)
    base_value = _group_value(m, groups[0], point)
    cells = []
    for i, g in enumerate(groups):
        vals = _pooled(m, g, point)
        value = _group_value(m, g, point)
        lo = hi = None
        if len(vals) >= 2:
            value, lo, hi = mean_ci(vals)
        if i == 0:
            cells.append(
                Cell(
                    g.name,
                    value,
                    len(vals),
                    lo,
                    hi,
                    None,
                    None,
                    None,
                    None,
                    None,
                    BASELINE if value is not None else MISSING,
                )
            )
            continue
        if value is None or base_value is None:
            cells.append(
                Cell(g.name, value, len(vals), lo, hi, None, None, None, None, None, MISSING)
            )
            continue
        ref = float(sum(base) / len(base)) if base else base_value
        diff = value - ref
        rel = diff / ref if ref else None
        if len(vals) >= 2 and len(base) >= 2:
            w = welch_test(base, vals)
            _, rlo, rhi = bootstrap_ratio_ci(base, vals)
            verdict = _direction(diff, m.higher_is_better) if w.p_value < alpha else NO_DIFFERENCE
            cells.append(
                Cell(g.name, value, len(vals), lo, hi, diff, rel, rlo, rhi, w.p_value, verdict)
            )
        else:
            cells.append(
                Cell(g.name, value, len(vals), lo, hi, diff, rel, None, None, None, NO_SAMPLES)
            )
    return Row(m.name, m.label, m.unit, point, m.higher_is_better, tuple(cells))


def _scalar_row(m: MetricDef, groups: Sequence[Group]) -> Row:
    base = _group_value(m, groups[0], "")
    cells = []
    for i, g in enumerate(groups):
        value = _group_value(m, g, "")
        n = sum(1 for r in g.runs if m.run_value(r, "") is not None)
        if i == 0 or value is None or base is None:
            verdict = (BASELINE if value is not None else MISSING) if i == 0 else MISSING
            cells.append(Cell(g.name, value, n, None, None, None, None, None, None, None, verdict))
            continue
        diff = value - base
        rel = diff / base if base else None
        if diff == 0:
            verdict = SAME
        elif _direction(diff, m.higher_is_better) == BETTER:
            verdict = NOT_TESTED_BETTER
        else:
            verdict = NOT_TESTED_WORSE
        cells.append(Cell(g.name, value, n, None, None, diff, rel, None, None, None, verdict))
    return Row(m.name, m.label, m.unit, "", m.higher_is_better, tuple(cells))


def compare_groups(
    groups: Sequence[Group],
    *,
    metrics: Sequence[str] | None = None,
    alpha: float = 0.05,
) -> Comparison:
    """Compare groups of runs against the first one (see the module docstring)."""
    if len(groups) < 2:
        raise UsageError("compare needs at least two runs or groups")
    if not 0 < alpha < 1:
        raise UsageError(f"alpha must be between 0 and 1, got {alpha}")
    for g in groups:
        if not g.runs:
            raise UsageError(f"group {g.name!r} has no runs")
    names = list(metrics) if metrics else [*PER_REQUEST, *RUN_WIDE]
    defs = [METRICS[n] for n in names]
    all_runs = [r for g in groups for r in g.runs]
    points = all_points(all_runs)
    rows: list[Row] = []
    for m in defs:
        if m.per_sample is None:
            row = _scalar_row(m, groups)
            if any(c.value is not None for c in row.cells):
                rows.append(row)
            continue
        for point in points or [""]:
            row = _sample_row(m, groups, point, alpha)
            if sum(c.value is not None for c in row.cells) >= 2:
                rows.append(row)
    return Comparison(groups=tuple(groups), alpha=alpha, rows=tuple(rows))


def fmt_rel(rel: float | None) -> str:
    """``+4.2%`` style relative difference."""
    if rel is None or not math.isfinite(rel):
        return ""
    return f"{rel * 100:+.1f}%"
