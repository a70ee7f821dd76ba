"""Findings from stored runs: comparisons, regression detection and A/B experiments.

Pure functions over :class:`servelab.store.RunRecord` values (no database access here):

* :func:`compare_groups` — side-by-side with Welch tests on per-request samples;
* :func:`history` — dated series, change points, and the factors that changed at a step;
* :func:`run_experiment` — deltas with CIs and a verdict against declared criteria.
"""

from servelab.analysis.compare import Comparison, Group, compare_groups
from servelab.analysis.experiment import (
    ExperimentResult,
    criteria_from_toml,
    parse_criteria,
    run_experiment,
)
from servelab.analysis.history import History, Series, change_points, detect_changes, history
from servelab.analysis.metrics import METRICS, metric_def

__all__ = [
    "METRICS",
    "Comparison",
    "ExperimentResult",
    "Group",
    "History",
    "Series",
    "change_points",
    "compare_groups",
    "criteria_from_toml",
    "detect_changes",
    "history",
    "metric_def",
    "parse_criteria",
    "run_experiment",
]
