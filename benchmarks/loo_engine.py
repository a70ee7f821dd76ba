"""Should an engine's predictions borrow the leave-one-family-out width of its own engine, or
of every engine on the hardware (what servelab does)?

    PYTHONPATH=src .venv/bin/python benchmarks/loo_engine.py

Over the shipped priors, per hardware and kind, every family is left out in turn
(servelab.predict.holdout.held_out: each engine's families are left out of that engine's
calibration) and its points predicted. The 90 % split-conformal half-width of the errors is
printed pooled over the hardware's engines and per engine. Then, for each engine's held-out
points, the coverage of the interval each point would print, the larger of its fit's own
width and a lent one, scored two ways. The lent width comes from the other families'
errors, so a family never lends to itself. **pooled** lends from every engine's other
families (servelab now). **engine** lends from the same engine's other families, where that
engine has at least three families on the hardware (servelab.predict.holdout.MIN_FAMILIES),
else pooled. "inside / predicted" counts points whose interval spans at most 4x. Host rows
are planned at the reference box's committed probe (benchmarks/cpu/results/
probe-llamacpp-cpu.json), so the whole table is deterministic.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from loo_family import _score

from servelab.hardware.lookup import this_host
from servelab.hardware.probe import load_probe
from servelab.hardware.profiles import with_probe
from servelab.predict.calibration import reference_of
from servelab.predict.holdout import MIN_FAMILIES, HeldOutPoint, held_out
from servelab.predict.levels import BY_FAMILY
from servelab.predict.priors import load_priors
from servelab.predict.widths import conformal

PROBE = Path(__file__).resolve().parent / "cpu" / "results" / "probe-llamacpp-cpu.json"


def _lent(points: Sequence[HeldOutPoint], donors: Sequence[HeldOutPoint]) -> list[float | None]:
    """Each point's printed half-width with the lent width from ``donors`` of other groups."""
    out: list[float | None] = []
    for p in points:
        borrowed = conformal([q.error for q in donors if q.kind == p.kind
                              and q.group != p.group and q.error is not None])
        mine = [e for e in (p.own_rel_error, borrowed) if e is not None]
        out.append(max(mine) if mine else None)
    return out


def main() -> int:
    probe = load_probe(json.loads(PROBE.read_text(encoding="utf-8")))
    host = with_probe(this_host(), bandwidth=probe.copy_bandwidth.best,
                      compute={k: v.best for k, v in probe.matmul.items()})
    ref = reference_of([], load_priors(), host)
    engine_of = {str(s.build): s.engine for s in ref.samples}
    print("| hardware | kind | engine | families | points | 90 % width, pooled / engine | "
          "coverage lent pooled | coverage lent by engine |")
    print("|---|---|---|---|---|---|---|---|")
    for hardware in sorted({s.hardware for s in ref.samples}):
        mine = [s for s in ref.samples if s.hardware == hardware]
        points = held_out(mine, ref.physical, BY_FAMILY, lower=ref.lower, intervals=True)
        for kind in ("decode", "prefill"):
            pts = [p for p in points if p.kind == kind and p.error is not None]
            if not pts:
                continue
            pooled = conformal([p.error for p in pts if p.error is not None])
            for engine in sorted({engine_of[p.build] for p in pts}):
                own = [p for p in pts if engine_of[p.build] == engine]
                fams = len({p.group for p in own})
                width = conformal([p.error for p in own if p.error is not None])
                donors = own if fams >= MIN_FAMILIES else pts
                a, b = _score(own, _lent(own, pts)), _score(own, _lent(own, donors))

                def cov(s: dict[str, object]) -> str:
                    c = s["coverage"]
                    share = f"{c:.0%}" if isinstance(c, float) else "-"
                    return f"{s['inside']}/{s['predicted']} ({share})"

                def pct(v: float | None) -> str:
                    return "-" if v is None else f"±{v:.0%}"

                errs = [abs(p.error) for p in own if p.error is not None]
                print(f"| {hardware} | {kind} | {engine} | {fams} | {len(own)} (median abs. error "
                      f"{statistics.median(errs):.0%}) | {pct(pooled)} / {pct(width)} | "
                      f"{cov(a)} | {cov(b)}{'' if fams >= MIN_FAMILIES else ' (pooled)'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
