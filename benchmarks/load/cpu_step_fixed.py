"""Which fixed cost a CPU step holding prompt chunks pays, checked on stored sweeps (issue 31).

The pre-registered form charged every such step the single-stream prefill fit's fixed term
(a request's HTTP, scheduling and first token); the alternative charges the decode fit's
per-step fixed term instead. Each stored sweep in RUNS_EXPORT (``servelab runs export``) is
predicted with its model left out (:func:`servelab.evidence.sweeps.held_out_sweeps`), once
per form, and the per-point errors printed side by side with their medians.

    python benchmarks/load/cpu_step_fixed.py RUNS_EXPORT_JSON
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from servelab.evidence.sweeps import SweepRow, held_out_sweeps
from servelab.store.exchange import read_import_file

KEYS = ("tpot_s", "ttft_s", "stream_tok_s", "output_tok_s_per_gpu")


def main(path: Path) -> None:
    runs = read_import_file(path)
    got: dict[str, list[SweepRow]] = {}
    for form in ("prefill", "decode"):
        rows, skipped = held_out_sweeps(runs, cpu_step_fixed=form)
        for s in skipped:
            print(f"skipped {s.model}: {s.reason}")
        got[form] = [r for r in rows if r.hardware == "host"]
    print("| build | prompt | c | " + " | ".join(
        f"{k} prefill-fixed / decode-fixed" for k in KEYS) + " |")
    print("|---|---:|---:|" + "---|" * len(KEYS))
    for a, b in zip(got["prefill"], got["decode"], strict=True):
        cells = [f"{a.metrics[k].error * 100:+.0f}% / {b.metrics[k].error * 100:+.0f}%"
                 for k in KEYS]
        print(f"| {a.model} | {a.prompt_len:,} | {a.concurrency} | " + " | ".join(cells) + " |")
    for form, rows in got.items():
        many = [r for r in rows if r.concurrency > 1]
        line = ", ".join(
            f"{k} {statistics.median(abs(r.metrics[k].error) for r in many) * 100:.0f}%"
            for k in KEYS)
        print(f"\nstep fixed cost from the {form} fit: median |error| over {len(many)} points "
              f"at 2+ streams: {line}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
