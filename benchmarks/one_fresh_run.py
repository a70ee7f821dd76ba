"""One fresh stored run against the shipped priors: does it replace them, or join them?

    PYTHONPATH=src .venv/bin/python benchmarks/one_fresh_run.py [--hardware h200]

Each build X of the priors table on the hardware in turn plays the one run a user's store
holds (its rows are taken out of the priors, as for a build the table did not have); every
other build Y is then predicted as a build never run (Y left out of everything), with the
calibration levels servelab builds (servelab.predict.levels.levels_for) in two ways:

* ``replace``: the stored run's level above the priors, the priors only its prior (the rule
  before issue 30: one run's fit replaced the table);
* ``combine``: where the stored level holds fewer models than the priors of the same scope, one
  level of both (servelab now).

Printed: per kind, the median and largest |error| (predicted / measured - 1) over every
(X, Y, point), and how many points miss by more than 25 %; then the issue's case (X a dense
70B, Y's 8,192-token prefill). Deterministic.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

from servelab.predict.calibration import profile_lower, profile_roofline
from servelab.predict.form import Sample
from servelab.predict.levels import Level, Target, fit_levels, levels_for
from servelab.predict.priors import load_priors


def _replaced(levels: Sequence[Level], stored: Sequence[Sample]) -> list[Level]:
    """The levels as they were before combining: a combined level keeps its stored runs."""
    mine = set(stored)
    out = []
    for lv in levels:
        if " with " in lv.level:
            lv = Level(lv.level.split(" with ")[0], tuple(s for s in lv.samples if s in mine),
                       lv.source, lv.fallback, lv.pooled)
        out.append(lv)
    return out


def errors(hardware: str) -> dict[str, dict[str, list[tuple[str, str, int, float]]]]:
    """``{rule: {kind: [(X, Y, length, error)]}}``."""
    table = [s for s in load_priors().samples if s.hardware == hardware and s.engine == "vllm"]
    builds = sorted({s.build.model for s in table if not s.device_only})
    out: dict[str, dict[str, list[tuple[str, str, int, float]]]] = {
        "replace": {"decode": [], "prefill": []}, "combine": {"decode": [], "prefill": []}}
    for x in builds:
        stored = [s for s in table if s.build.model == x]
        priors = [s for s in table if s.build.model != x]
        for y in builds:
            if y == x:
                continue
            mine = [s for s in priors if s.build.model == y and not s.device_only]
            for path, kind in sorted({(s.kernel_path, s.kind) for s in mine}):
                points = [s for s in mine if s.kernel_path == path and s.kind == kind]
                target = Target("vllm", path, hardware, y, points[0].build.family)
                levels = levels_for(target, stored, priors)
                roof, low = profile_roofline(kind, points[0]), profile_lower(kind, points[0])
                for rule, lv in (("combine", levels), ("replace", _replaced(levels, stored))):
                    fit = fit_levels(lv, kind, target, roof, low, intervals=False)
                    for s in points:
                        tokens = 1.0 if kind == "decode" else s.length
                        tok = tokens / fit.seconds(s.features)
                        out[rule][kind].append((x, y, s.length, tok / s.tok_s - 1.0))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", default="h200")
    args = ap.parse_args(argv)
    got = errors(args.hardware)
    print("| rule | kind | points | median abs error | max abs error | beyond 25 % |")
    print("|---|---|---|---|---|---|")
    for rule in ("replace", "combine"):
        for kind in ("decode", "prefill"):
            errs = sorted(abs(e) for *_, e in got[rule][kind])
            beyond = sum(1 for e in errs if e > 0.25)
            print(f"| {rule} | {kind} | {len(errs)} | {statistics.median(errs):.1%} | "
                  f"{errs[-1]:.1%} | {beyond} |")
    print()
    print("The issue's case: the one stored run a dense 70B, the hybrid MoEs' 8,192-token "
          "prefill:")
    print()
    print("| stored run | predicted build | replace | combine |")
    print("|---|---|---|---|")
    rows = {rule: {(x, y): e for x, y, n, e in got[rule]["prefill"] if n == 8192}
            for rule in got}
    for (x, y), e in sorted(rows["replace"].items()):
        if x.startswith("llama-3.1-70b") and y.startswith(("qwen3.6", "qwen3-next")):
            print(f"| {x} | {y} | {e:+.1%} | {rows['combine'][(x, y)]:+.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
