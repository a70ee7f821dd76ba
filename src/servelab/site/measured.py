"""What one stored run measured and what its stored plan predicted, as page values: per
point measurements with their intervals, single-stream and concurrent rows, the plan's
predictions with their basis. Pure: records in, :mod:`servelab.site.model` values out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servelab.analysis import stats
from servelab.analysis.metrics import METRICS
from servelab.errors import UsageError
from servelab.points import PointKey
from servelab.predict.levels import too_wide
from servelab.site import prose
from servelab.site.model import (
    ConcurrentRow,
    Measured,
    Predicted,
    PredictedLoadRow,
)
from servelab.sizing.document import PlanDocument, PredictedSpeed, read_plan
from servelab.sizing.layout import ParallelLayout, layout_from_argv
from servelab.store import RunRecord


def _map(v: object) -> Mapping[str, Any] | None:
    return v if isinstance(v, Mapping) else None
def mean_ci(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """Mean and 95 % Student-t interval of the mean (no bounds for a single value)."""
    mean, low, high = stats.mean_ci(values)
    return (mean, None, None) if len(values) < 2 else (mean, low, high)


def _started(run: RunRecord) -> str:
    return run.started_at.isoformat(timespec="seconds")


def _rid(run: RunRecord) -> str:
    return run.run_id or "unrecorded"


def point_values(run: RunRecord, metric: str) -> dict[PointKey, Measured]:
    """``decode_tok_s`` / ``prefill_tok_s`` of a run at each of its workload points.

    A point whose 95 % interval reaches zero is left out: it is not a measurement (bench
    withholds such a rate since issue 33; runs recorded before, or imported, may hold one,
    e.g. 55,152 tok/s [-29,989, 140,294] from a stream that arrived in bulk)."""
    out: dict[PointKey, Measured] = {}
    from_samples: set[PointKey] = set()
    for point in run.points:
        samples = run.samples_at(point)
        pid = PointKey.parse(point, (s.prompt_tokens for s in samples))
        if pid is None:
            continue
        values = METRICS[metric].sample_values(run, point)
        if values:
            mean, low, high = mean_ci(values)
            from_samples.add(pid)
            if low is None or low > 0:  # a rate whose 95% CI reaches zero is no measurement
                out[pid] = Measured(mean, "tok/s", _rid(run), low, high, len(values))
    for m in run.metrics:
        if m.name != metric or not m.point:
            continue
        pid = PointKey.parse(m.point)
        if pid is not None and pid not in from_samples and (m.ci_low is None or m.ci_low > 0):
            out[pid] = Measured(m.value, m.unit or "tok/s", _rid(run), m.ci_low, m.ci_high,
                                m.n or None)
    return out


def run_layout(run: RunRecord) -> ParallelLayout:
    """The parallel layout a run's engine command line asked for (one GPU if unreadable)."""
    try:
        return layout_from_argv(run.engine_args)
    except UsageError:
        return ParallelLayout()


def predicted_load_rows(run: RunRecord) -> tuple[PredictedLoadRow, ...]:
    """The closed-loop points the run's stored plan predicted under load (none when it
    predicted none, or said why it could not)."""
    load = _map((run.prediction or {}).get("load"))
    points = _map((load or {}).get("points"))
    rows = []
    for p in (points or {}).get("points") or ():
        stream = _map(p.get("stream_tok_s")) if isinstance(p, Mapping) else None
        if stream is None or not p.get("concurrency"):
            continue
        if any(stream.get(k) is None for k in ("value", "low", "high")) or p.get(
                "no_prediction"):
            continue  # no interval, or one over the 4x rule: not a prediction
        rows.append(PredictedLoadRow(int(p["prompt_len"]), int(p["concurrency"]),
                                     float(stream["value"]), float(stream["low"]),
                                     float(stream["high"])))
    return tuple(rows)


def concurrent_rows(runs_by_version: Mapping[str, RunRecord]) -> tuple[ConcurrentRow, ...]:
    """Points run with more than one stream, per engine version (newest run of each)."""
    rows: list[ConcurrentRow] = []
    for version, run in runs_by_version.items():
        decode = point_values(run, "decode_tok_s")
        gpus = run_layout(run).world_size
        for point in run.points:
            pid = PointKey.parse(point)
            if (pid is None or not pid.concurrency or pid.depth or pid not in decode
                    or (pid.concurrency < 2 and not pid.open_loop)):
                continue
            ttft_s = METRICS["ttft_s"].sample_values(run, point)
            ttft = None
            if ttft_s:
                mean, low, high = mean_ci([v * 1000 for v in ttft_s])
                ttft = Measured(mean, "ms", _rid(run), low, high, len(ttft_s))
            rows.append(ConcurrentRow(version, pid.prompt_tokens, pid.concurrency, decode[pid],
                                      ttft, gpus, pid.load, pid.rate))
    return tuple(sorted(rows, key=lambda r: (prose.version_key(r.engine_version),
                                             r.prompt_tokens, r.open_loop, r.concurrency,
                                             r.rate or 0.0, r.load)))


def _single_stream(points: Mapping[PointKey, Measured]) -> dict[int, Measured]:
    return {p.prompt_tokens: v for p, v in points.items()
            if p.concurrency in (1, None) and not p.depth and not p.open_loop}


# --- predictions ------------------------------------------------------------------------------


def _basis(plan: PlanDocument, point: PredictedSpeed) -> str:
    """How a prediction was made: the calibration fit's label and the roofline bound."""
    fit = plan.fit(point.kind)
    label = fit.get("label") if fit is not None else None
    roof = point.roofline_tok_s
    bound = f"; roofline bound {roof:,.0f} tok/s" if roof is not None else ""
    return f"{label or 'calibrated speed model'}{bound}"


def prediction_of(point: PredictedSpeed, plan: PlanDocument,
                  run_id: str | None) -> Predicted | None:
    """How the site shows one predicted point (value, interval, basis); ``None`` when it has
    no calibrated prediction with an interval. The one place to extend the display."""
    interval = point.interval
    if interval is None:
        return None
    value, low, high = interval
    if too_wide(low, high):
        return None  # too wide to inform anything: no prediction (one rule, predict.levels)
    return Predicted(value, "tok/s", _basis(plan, point), run_id, low, high)


def predictions(run: RunRecord) -> dict[tuple[str, int], Predicted]:
    """``{("decode"|"prefill", prompt tokens): Predicted}`` from a run's stored plan: only
    points with a calibrated prediction and its interval (a roofline alone is a bound, not a
    prediction, and is not shown as one)."""
    plan = read_plan(run.prediction)
    out: dict[tuple[str, int], Predicted] = {}
    for point in (*plan.decode, *plan.prefill):
        shown = prediction_of(point, plan, run.run_id)
        if shown is not None:
            out[(point.kind, point.tokens)] = shown
    return out


def _predicted_at(preds: Mapping[tuple[str, int], Predicted], kind: str,
                  prompt: int) -> Predicted | None:
    """The prediction for ``prompt``: exact, else the nearest within 25 %."""
    if (kind, prompt) in preds:
        return preds[(kind, prompt)]
    near = [(abs(n - prompt), p) for (k, n), p in preds.items() if k == kind]
    if near:
        dist, best = min(near, key=lambda t: t[0])
        if dist <= 0.25 * prompt:
            return best
    return None


# --- engine facts and inspect report ----------------------------------------------------------
