"""Is the H200 prefill miss one host speed per lease? An analysis of the committed exports.

    .venv/bin/python benchmarks/gpu/session_effect.py

Each prefill point gets its leave-one-model-out prediction, as in `servelab calibration report`.
The prediction is then corrected by the median measured / predicted of the other builds run in
the same lease (the same export; the 32-layer Qwen3-235B FP8 had its own lease) at the same
prompt length. If the misses were one host speed per lease, the correction would remove them.
On the ten exports of 2026-12-04 it does not: 7 of 60 points beyond 25 % before, 12 after;
on the eleven of that afternoon 9 of 69 before, 11 after (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from servelab.evidence.runs import checkpoint_names, ledger_for_runs, samples_from_run
from servelab.store.exchange import run_from_dict
from servelab.store.model import RunRecord

RESULTS = Path(__file__).resolve().parent / "results"
#: the run that had a lease of its own inside an export
OWN_LEASE = "qwen3-235b-a22b-fp8-32l"


def _runs() -> tuple[list[RunRecord], dict[str, str]]:
    files = [RESULTS / "run-h200-qwen3-30b-a3b-fp8.json",
             *sorted(RESULTS.glob("calibration-*/runs-h200-calibration.json"))]
    runs, lease = [], {}
    for f in files:
        for d in json.loads(f.read_text(encoding="utf-8"))["runs"]:
            run = run_from_dict(d, source=str(f))
            if run.status == "ok":
                runs.append(run)
                own = OWN_LEASE in (run.model_id or "")
                lease[str(run.run_id)] = f.parent.name + ("+" if own else "")
    return runs, lease


def main() -> int:
    runs, lease = _runs()
    # which lease measured each point: a run's samples, by build and measured tok/s
    where = {
        (smp.name, smp.length, smp.tok_s): lease[str(run.run_id)]
        for run, name in zip(runs, checkpoint_names(runs), strict=True)
        for smp in samples_from_run(run, name)
    }
    # the predictions `servelab calibration report` makes (each build as if never run)
    points = [
        (r.model, r.length, where[(r.model, r.length, r.measured_tok_s)],
         r.measured_tok_s / r.predicted_tok_s)
        for r in ledger_for_runs(runs)
        if r.kind == "prefill" and r.predicted_tok_s
    ]
    raw = [abs(r - 1) for *_, r in points]
    fixed = []
    for model, length, at, r in points:
        peers = [q for m, n, a, q in points if a == at and n == length and m != model]
        fixed.append(abs(r / statistics.median(peers) - 1) if len(peers) >= 2 else abs(r - 1))
    for label, errs in (("leave-one-model-out", raw), ("corrected per lease", fixed)):
        print(f"{label:20s} beyond 25 %: {sum(e > 0.25 for e in errs)}/{len(errs)}  "
              f"median {statistics.median(errs):.1%}  max {max(errs):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
