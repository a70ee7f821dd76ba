"""A/B experiments: deltas of a variant against a baseline with CIs, and a verdict.

Deltas: decode and prefill (per-request samples: relative difference of means with a
bootstrap 95 % CI and Welch's p-value), memory footprint (weights GiB from the engine log),
KV pool tokens, and power (W) when a probe recorded it. Run-wide numbers are single
readings: their delta has no CI.

Criteria grammar (case-insensitive; ``adopt if`` prefix optional; clauses joined by ``and``
or commas)::

    criteria := ["adopt" "if"] clause (("and" | ",") clause)*
    clause   := METRIC OP AMOUNT          e.g. decode >= +5%   ttft <= -10%   power < 200
              | METRIC "not worse"        memory not worse
              | METRIC "better"           prefill better
    OP       := ">=" | ">" | "<=" | "<"
    AMOUNT   := signed number, "%" for a relative change, else an absolute delta in the
                metric's unit
    METRIC   := decode | prefill | ttft | tpot | e2e | memory (= weights) | kv | power
                | any full metric name (decode_tok_s, weights_gib, ...)

The same criteria as a TOML table (``--criteria-file``)::

    [criteria]
    decode = ">= +5%"
    memory = "not worse"

Each clause is *pass*, *fail* or *inconclusive*. With a CI the whole interval must satisfy a
threshold to pass and the whole interval must violate it to fail; without a CI (single
readings) the point value decides. ``not worse`` passes unless the variant is significantly
worse (p < alpha; for single readings: any change for the worse) and ``better`` needs a
significant (or, for readings, any) improvement. Verdict: **adopt** when every clause
passes, **reject** when any fails, else **inconclusive**.

JSON schema ``servelab.experiment/1``::

    {"schema": "servelab.experiment/1", "baseline": {"name", "run_ids"},
     "variant": {"name", "run_ids"}, "criteria": str, "verdict": "adopt|reject|inconclusive",
     "deltas": [{"metric", "label", "unit", "point", "baseline", "variant", "diff",
                 "rel_diff", "rel_ci_low", "rel_ci_high", "p_value", "n_baseline",
                 "n_variant"}],
     "clauses": [{"text", "metric", "kind", "op", "amount", "relative", "status", "reason"}]}
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servelab.analysis.compare import Group
from servelab.analysis.metrics import METRICS, MetricDef, all_points, metric_def
from servelab.analysis.stats import bootstrap_ratio_ci, welch_test
from servelab.errors import InputError, UsageError

SCHEMA = "servelab.experiment/1"
ADOPT, REJECT, INCONCLUSIVE = "adopt", "reject", "inconclusive"
PASS, FAIL = "pass", "fail"

EXPERIMENT_METRICS = ("decode_tok_s", "prefill_tok_s", "weights_gib", "kv_pool_tokens", "power_w")


@dataclass(frozen=True, slots=True)
class Clause:
    """One parsed criterion."""

    text: str
    metric: str
    kind: str  # "threshold" | "not_worse" | "better"
    op: str | None = None
    amount: float | None = None
    relative: bool = False


@dataclass(frozen=True, slots=True)
class Delta:
    """Variant minus baseline for one metric at one point."""

    metric: str
    label: str
    unit: str
    point: str
    baseline: float | None
    variant: float | None
    diff: float | None
    rel_diff: float | None
    rel_ci_low: float | None
    rel_ci_high: float | None
    p_value: float | None
    n_baseline: int
    n_variant: int


@dataclass(frozen=True, slots=True)
class ClauseResult:
    """How one clause came out, and why."""

    clause: Clause
    status: str
    reason: str


@dataclass(frozen=True, slots=True)
class ExperimentResult:
    """Deltas, clause results and the verdict."""

    baseline: Group
    variant: Group
    criteria: str
    deltas: tuple[Delta, ...]
    clauses: tuple[ClauseResult, ...]
    verdict: str
    alpha: float

    def to_json_dict(self) -> dict[str, Any]:
        """The ``servelab.experiment/1`` document."""
        return {
            "schema": SCHEMA,
            "baseline": {
                "name": self.baseline.name,
                "run_ids": [r.run_id for r in self.baseline.runs],
            },
            "variant": {
                "name": self.variant.name,
                "run_ids": [r.run_id for r in self.variant.runs],
            },
            "criteria": self.criteria,
            "alpha": self.alpha,
            "verdict": self.verdict,
            "deltas": [asdict(d) for d in self.deltas],
            "clauses": [
                {**asdict(c.clause), "status": c.status, "reason": c.reason} for c in self.clauses
            ],
        }


# ---------------------------------------------------------------------------- parsing

_CLAUSE_RE = re.compile(
    r"^(?P<metric>[a-z_][a-z0-9_]*)\s*"
    r"(?:(?P<op>>=|<=|>|<)\s*(?P<num>[+-]?\d+(?:\.\d+)?)\s*(?P<pct>%)?"
    r"|(?P<nw>not\s+worse)|(?P<better>better))$",
    re.IGNORECASE,
)


def parse_criteria(text: str) -> tuple[Clause, ...]:
    """Parse criteria in the grammar of the module docstring; UsageError names the bad part."""
    body = text.strip()
    body = re.sub(r"(?i)^adopt\s+if\s+", "", body)
    if not body:
        raise UsageError("empty criteria")
    parts = [p.strip() for p in re.split(r"(?i)\s+and\s+|,", body)]
    out = []
    for part in parts:
        if not part:
            raise UsageError(f"empty clause in criteria {text!r}")
        m = _CLAUSE_RE.match(part)
        if m is None:
            raise UsageError(
                f"cannot parse criterion {part!r} (expected e.g. 'decode >= +5%' or "
                "'memory not worse')"
            )
        metric = metric_def(m.group("metric")).name
        if m.group("op"):
            out.append(
                Clause(
                    part,
                    metric,
                    "threshold",
                    m.group("op"),
                    float(m.group("num")),
                    bool(m.group("pct")),
                )
            )
        elif m.group("nw"):
            out.append(Clause(part, metric, "not_worse"))
        else:
            out.append(Clause(part, metric, "better"))
    return tuple(out)


def criteria_from_toml(path: Path) -> str:
    """Criteria text from a TOML file's ``[criteria]`` table (``metric = "clause rest"``)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError("no such file", path=path) from exc
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"not a TOML file: {exc}", path=path) from exc
    table = data.get("criteria")
    if not isinstance(table, dict) or not table:
        raise InputError("no [criteria] table", path=path)
    clauses = []
    for key, value in table.items():
        if not isinstance(value, str):
            raise InputError(f"criteria.{key} must be a string like '>= +5%'", path=path)
        clauses.append(f"{key} {value.strip()}")
    text = " and ".join(clauses)
    parse_criteria(text)  # validate now, naming the file
    return text


# ---------------------------------------------------------------------------- deltas


def _pooled(m: MetricDef, g: Group, point: str | None) -> list[float]:
    out: list[float] = []
    for r in g.runs:
        out.extend(m.sample_values(r, point))
    return out


def _mean_value(m: MetricDef, g: Group, point: str | None) -> tuple[float | None, int]:
    vals = [v for r in g.runs if (v := m.run_value(r, point)) is not None]
    return (sum(vals) / len(vals), len(vals)) if vals else (None, 0)


def compute_deltas(
    baseline: Group, variant: Group, metrics: Sequence[str] = EXPERIMENT_METRICS
) -> tuple[Delta, ...]:
    """Deltas for every requested metric both sides measured."""
    runs = [*baseline.runs, *variant.runs]
    points = all_points(runs)
    out = []
    for name in metrics:
        m = METRICS[name]
        for point in (points or [""]) if m.per_sample is not None else [""]:
            a = _pooled(m, baseline, point)
            b = _pooled(m, variant, point)
            if len(a) >= 2 and len(b) >= 2:
                ratio, lo, hi = bootstrap_ratio_ci(a, b)
                w = welch_test(a, b)
                out.append(
                    Delta(
                        name,
                        m.label,
                        m.unit,
                        point,
                        w.mean_a,
                        w.mean_b,
                        w.diff,
                        ratio - 1.0,
                        lo - 1.0,
                        hi - 1.0,
                        w.p_value,
                        len(a),
                        len(b),
                    )
                )
                continue
            va, na = _mean_value(m, baseline, point or None)
            vb, nb = _mean_value(m, variant, point or None)
            if va is None or vb is None:
                continue
            diff = vb - va
            rel = diff / va if va else None
            out.append(
                Delta(name, m.label, m.unit, point, va, vb, diff, rel, None, None, None, na, nb)
            )
    return tuple(out)


# ---------------------------------------------------------------------------- verdict


def _holds(op: str, x: float, limit: float) -> bool:
    return {">=": x >= limit, ">": x > limit, "<=": x <= limit, "<": x < limit}[op]


def _eval_clause(c: Clause, deltas: Sequence[Delta], alpha: float) -> ClauseResult:
    mine = [d for d in deltas if d.metric == c.metric]
    if not mine:
        return ClauseResult(c, INCONCLUSIVE, f"{c.metric} was not measured on both sides")
    m = METRICS[c.metric]
    statuses: list[str] = []
    reasons: list[str] = []
    for d in mine:
        where = f" at {d.point}" if d.point else ""
        if c.kind == "threshold":
            assert c.op is not None and c.amount is not None
            limit = c.amount / 100.0 if c.relative else c.amount
            if c.relative:
                x, lo, hi = d.rel_diff, d.rel_ci_low, d.rel_ci_high
            else:
                x, lo, hi = d.diff, None, None
            if x is None:
                statuses.append(INCONCLUSIVE)
                reasons.append(f"no relative change{where} (baseline is 0)")
                continue
            shown = f"{x * 100:+.1f}%" if c.relative else f"{x:+.4g} {m.unit}"
            if lo is None or hi is None:
                ok = _holds(c.op, x, limit)
                statuses.append(PASS if ok else FAIL)
                reasons.append(f"{shown}{where} (single reading)")
                continue
            ci = f"{shown} [{lo * 100:+.1f}%, {hi * 100:+.1f}%]{where}"
            low_ok, high_ok = _holds(c.op, lo, limit), _holds(c.op, hi, limit)
            if low_ok and high_ok:
                statuses.append(PASS)
            elif not low_ok and not high_ok:
                statuses.append(FAIL)
            else:
                statuses.append(INCONCLUSIVE)
            reasons.append(ci)
            continue
        # not_worse / better
        if d.diff is None:
            statuses.append(INCONCLUSIVE)
            reasons.append(f"no value{where}")
            continue
        improved = (d.diff > 0) == m.higher_is_better and d.diff != 0
        worsened = (d.diff < 0) == m.higher_is_better and d.diff != 0
        rel = f"{d.rel_diff * 100:+.1f}%" if d.rel_diff is not None else f"{d.diff:+.4g}"
        if d.p_value is not None:
            significant = d.p_value < alpha
            note = f"{rel}{where}, p={d.p_value:.3g}"
        else:
            significant = d.diff != 0
            note = f"{rel}{where} (single reading)"
        if c.kind == "not_worse":
            statuses.append(FAIL if worsened and significant else PASS)
        else:
            if improved and significant:
                statuses.append(PASS)
            elif worsened and significant:
                statuses.append(FAIL)
            else:
                statuses.append(INCONCLUSIVE if d.p_value is not None else FAIL)
        reasons.append(note)
    if FAIL in statuses:
        status = FAIL
    elif INCONCLUSIVE in statuses:
        status = INCONCLUSIVE
    else:
        status = PASS
    return ClauseResult(c, status, "; ".join(reasons))


def run_experiment(
    baseline: Group,
    variant: Group,
    criteria: str,
    *,
    alpha: float = 0.05,
) -> ExperimentResult:
    """Deltas of ``variant`` against ``baseline`` and the verdict against ``criteria``."""
    clauses = parse_criteria(criteria)
    if not baseline.runs or not variant.runs:
        raise UsageError("an experiment needs at least one baseline and one variant run")
    wanted = list(dict.fromkeys([*EXPERIMENT_METRICS, *(c.metric for c in clauses)]))
    deltas = compute_deltas(baseline, variant, wanted)
    results = tuple(_eval_clause(c, deltas, alpha) for c in clauses)
    statuses = {r.status for r in results}
    if FAIL in statuses:
        verdict = REJECT
    elif INCONCLUSIVE in statuses:
        verdict = INCONCLUSIVE
    else:
        verdict = ADOPT
    return ExperimentResult(baseline, variant, criteria, deltas, results, verdict, alpha)


def fmt_pct(x: float | None) -> str:
    """``+4.2%`` or an empty string."""
    return "" if x is None or not math.isfinite(x) else f"{x * 100:+.1f}%"
