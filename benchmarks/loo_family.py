"""Leave-one-family-out (and leave-one-kernel-path-out) over every stored and prior build, per
hardware: how far servelab's predictions miss when the calibration set of a hardware has never
seen the family (or kernel path) of the build, and how many of those misses the printed
interval covers.

    PYTHONPATH=src .venv/bin/python benchmarks/loo_family.py \
        benchmarks/gpu/results/run-h200-qwen3-30b-a3b-fp8.json \
        benchmarks/gpu/results/calibration-*/runs-h200-calibration.json \
        benchmarks/cpu/results/runs-vllm-cpu-calibration-2026-12-03.json

The builds are the shipped priors (src/servelab/predict/priors.toml) plus the stored runs of
the exports that the priors do not restate (servelab.predict.calibration.reference_of). For each
hardware with two families or more, every family in turn is left out of that hardware's
calibration set and its builds predicted (servelab.predict.holdout.held_out). Two intervals
are scored on each held-out point:

* ``own``: the interval the remaining calibration levels give from their own
  leave-one-model-out errors (what servelab printed for a family it had not seen before the
  interval rule of issue 30: the spread of the builds it had);
* ``printed``: the interval servelab prints now: the larger of ``own`` and the leave-one-
  family-out half-width (90 % split-conformal quantile) of the *other* families on the
  lending hardware (so a family never lends to itself); wider than 4x (upper / lower) is "no
  prediction" and not counted as predicted.

Coverage: held-out points inside their interval / points with a prediction. Width: upper /
lower of the interval. Deterministic except on ``host`` (its profile probes the live machine's
bandwidth for the roofline).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from servelab.evidence.runs import samples_from_runs
from servelab.predict.calibration import profile_lower, profile_roofline, reference_of
from servelab.predict.holdout import HeldOutPoint, held_out
from servelab.predict.levels import BY_FAMILY, BY_PATH, MAX_RATIO
from servelab.predict.priors import load_priors
from servelab.predict.widths import conformal
from servelab.store.exchange import run_from_dict


def _width(e: float) -> float:
    return (1 + e) / (1 - e) if e < 1 else float("inf")


def _score(points: Sequence[HeldOutPoint], rels: Sequence[float | None]) -> dict[str, object]:
    """Coverage and widths of ``rels`` (one half-width per point; None: no interval)."""
    predicted = [(p, e) for p, e in zip(points, rels, strict=True)
                 if p.error is not None and e is not None and _width(e) <= MAX_RATIO]
    inside = sum(1 for p, e in predicted if abs(p.error or 0.0) <= e)
    widths = sorted(_width(e) for _, e in predicted)
    return {
        "points": len(points),
        "predicted": len(predicted),
        "inside": inside,
        "coverage": inside / len(predicted) if predicted else None,
        "median_width": statistics.median(widths) if widths else None,
        "max_width": widths[-1] if widths else None,
    }


def lent(points: Sequence[HeldOutPoint]) -> list[float | None]:
    """The printed half-width of each held-out point: the larger of its fit's own and the
    90 % quantile of the other groups' held-out errors of its kind (nested: a group never
    lends to itself)."""
    out: list[float | None] = []
    for p in points:
        others = [q.error for q in points
                  if q.kind == p.kind and q.group != p.group and q.error is not None]
        borrowed = conformal(others)
        mine = [e for e in (p.own_rel_error, borrowed) if e is not None]
        out.append(max(mine) if mine else None)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("exports", nargs="*", type=Path, help="servelab run exports (JSON)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    runs = []
    for path in args.exports:
        doc = json.loads(path.read_text(encoding="utf-8"))
        runs += [run_from_dict(r, source=str(path)) for r in doc["runs"]]
    table = load_priors()
    ref = reference_of(samples_from_runs(runs), table)

    rows = []
    for hardware in sorted({s.hardware for s in ref.samples}):
        mine = [s for s in ref.samples if s.hardware == hardware]
        for by in (BY_FAMILY, BY_PATH):
            points = held_out(mine, profile_roofline, by, lower=profile_lower, intervals=True)
            if not points:
                rows.append({"hardware": hardware, "by": by, "kind": "-",
                             "groups": len({s.build.family for s in mine}),
                             "note": "one group only: nothing to leave out"})
                continue
            printed = lent(points)
            for kind in ("decode", "prefill"):
                sel = [i for i, p in enumerate(points) if p.kind == kind]
                if not sel:
                    continue
                pts = [points[i] for i in sel]
                errs = sorted(abs(p.error) for p in pts if p.error is not None)
                rows.append({
                    "hardware": hardware, "by": by, "kind": kind,
                    "groups": len({p.group for p in pts}),
                    "builds": len({p.build for p in pts}),
                    "median_abs_error": statistics.median(errs) if errs else None,
                    "max_abs_error": errs[-1] if errs else None,
                    "half_width_90": conformal(errs),
                    "own": _score(pts, [p.own_rel_error for p in pts]),
                    "printed": _score(pts, [printed[i] for i in sel]),
                })
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0

    def pct(v: object) -> str:
        return f"{v:.0%}" if isinstance(v, float) else "-"

    def x(v: object) -> str:
        return f"x{v:.2f}" if isinstance(v, float) else "-"

    print("| hardware | left out | kind | groups | builds | median / max abs error | 90 % "
          "half-width | own interval: inside / predicted, median width | printed interval: "
          "inside / predicted, median width |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "note" in r:
            print(f"| {r['hardware']} | {r['by']} | - | {r['groups']} | | {r['note']} | | | |")
            continue
        own, new = r["own"], r["printed"]
        assert isinstance(own, dict) and isinstance(new, dict)
        print(f"| {r['hardware']} | {r['by']} | {r['kind']} | {r['groups']} | {r['builds']} | "
              f"{pct(r['median_abs_error'])} / {pct(r['max_abs_error'])} | "
              f"±{pct(r['half_width_90'])} | {own['inside']}/{own['predicted']} of "
              f"{own['points']} ({pct(own['coverage'])}), {x(own['median_width'])} | "
              f"{new['inside']}/{new['predicted']} of {new['points']} "
              f"({pct(new['coverage'])}), {x(new['median_width'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
