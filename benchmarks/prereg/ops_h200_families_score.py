"""Score the pre-registered operator-model predictions for the two new H200 families
(benchmarks/prereg/ops-h200-families/ops-before.json, issue 39) against their measured runs.

    .venv/bin/python benchmarks/prereg/ops_h200_families_score.py RUNS_EXPORT_JSON

RUNS_EXPORT_JSON: ``servelab runs export`` of the device's calibration store (device_steps.sh
cal-collect). Each run's points (prompt, concurrency) are summarized as
benchmarks/load/check_sweeps.py does (TPOT and TTFT: mean over requests; tok/s per stream: mean
of 1 / TPOT; output tok/s: concurrency x output / mean E2E) and compared with the prediction as
it was committed; an error is measured / predicted - 1 for rates and predicted / measured - 1
for latencies' reciprocals, as check_sweeps.py reports them. The top-down model's
single-stream decode (``plan-<arch>-h200.json``, committed beside) is scored too.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "load"))

from check_sweeps import compare, measured_run, render  # noqa: E402

PREREG = HERE / "ops-h200-families"


def _band(ms: float, lo_hi: list[float]) -> dict[str, float]:
    return {"value": ms / 1e3, "low": lo_hi[0] / 1e3, "high": lo_hi[1] / 1e3}


def _rate(v: float, lo_hi: list[float]) -> dict[str, float]:
    return {"value": v, "low": lo_hi[0], "high": lo_hi[1]}


def predicted(build: dict[str, Any], width: float) -> dict[tuple[int, int], dict[str, Any]]:
    """The committed closed-loop predictions in check_sweeps.compare's form."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for p in build["closed_loop"]:
        tpot = _band(p["tpot_ms"], p["tpot_ms_interval"])
        stream = {"value": 1 / tpot["value"], "low": 1 / tpot["high"], "high": 1 / tpot["low"]}
        out[(p["prompt"], p["concurrency"])] = {
            "tpot": tpot, "ttft": _band(p["ttft_ms"], p["ttft_ms_interval"]),
            "stream": stream, "per_gpu": _rate(p["output_tok_s"], p["output_tok_s_interval"]),
            "e": width}
    return out


def top_down_decode(arch: str, measured: dict[tuple[int, int], dict[str, float]]) -> list[str]:
    """The committed plan's single-stream decode against the measured one-stream TPOT."""
    plan = json.loads((PREREG / f"plan-{arch}-h200.json").read_text(encoding="utf-8"))
    lines = []
    for d in plan["speed"]["decode"]:
        pred, low, high = (d.get(k) for k in ("predicted_tok_s", "predicted_low",
                                              "predicted_high"))
        ctx = d["context_len"]
        m = measured.get((ctx, 1))
        if not m or pred is None or low is None or high is None:
            continue
        meas = m["stream"]
        inside = low <= meas <= high
        lines.append(f"| {arch} | {ctx:,} | {pred:.1f} ({low:.1f}-{high:.1f}) | {meas:.1f} | "
                     f"{meas / pred - 1:+.1%}"
                     f"{'' if inside else ' (out)'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit(__doc__)
    doc = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    pre = json.loads((PREREG / "ops-before.json").read_text(encoding="utf-8"))
    width = pre["width_p90_log"]["decode"]
    runs = {r.get("model_id") or r.get("served_name"): r for r in doc["runs"]}
    rows: list[dict[str, Any]] = []
    td: list[str] = []
    for b in pre["builds"]:
        run = next((r for name, r in runs.items() if name and name.startswith(b["build"])), None)
        if run is None:
            print(f"{b['build']}: no measured run in {args[0]}")
            continue
        meas = measured_run(run, b["closed_loop"][0]["output"])
        rows += compare(b["build"].removesuffix("-random"), predicted(b, width), meas)
        td += top_down_decode(b["arch"], meas)
    print(f"Pre-registered {pre['written']} at {pre['commit'][:7]}; operator model, "
          f"closed loop (single stream = c 1):\n")
    print(render(rows))
    one = [r for r in rows if r["c"] == 1]
    if one:
        print("\nsingle stream only: TPOT median |error| "
              f"{statistics.median(abs(r['tpot'][2]) for r in one):.1%}, TTFT "
              f"{statistics.median(abs(r['ttft'][2]) for r in one):.1%}")
    if td:
        print("\nTop-down model (servelab plan at 387f014), single-stream decode tok/s:\n")
        print("| build | prompt | predicted (interval) | measured | error |")
        print("|---|---:|---|---:|---|")
        print("\n".join(td))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
