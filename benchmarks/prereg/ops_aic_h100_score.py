"""servelab's first own H100 runs against the operator composition over AIConfigurator's H100
tables, as pre-registered (issue 39): benchmarks/prereg/2026-12-05-ops-aic-before.json (commit
f2ebc2a, 16:21 UTC, before any H100 run), beside AIConfigurator 0.12.0's own predictions
committed in the same file.

    .venv/bin/python benchmarks/prereg/ops_aic_h100_score.py \\
        benchmarks/gpu/results/h100-2026-12-05/runs.json

The runs: Llama-3.1-8B, Qwen3-30B-A3B and Gemma-3-27B (text decoder), BF16 at published
dimensions, vLLM 0.26.0 with its dummy loader on one H100 80GB HBM3 (recipes
benchmarks/gpu/*-bf16-h100.toml), closed loops at 1, 4, 16 (and 64) clients of 128- and
1,024-token prompts, 128 output tokens. Per point, as benchmarks/load/check_sweeps.py
summarizes: TPOT and TTFT (means over requests), output tok/s (concurrency x output / mean
E2E). Predicted:

* single stream (c = 1): decode TPOT read from the committed decode grid at the mean decode
  context (prompt + 64; log-log between the two bracketing grid contexts, as the file's
  ``read`` mode does) and TTFT from the prefill grid at the prompt; AIConfigurator's own
  decode and prefill the same way;
* closed loop: the committed ``serving`` rows at the same (prompt, output, concurrency).

Error = predicted / measured - 1 (latencies); "in" = the measured value inside the committed
interval.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "load"))
sys.path.insert(0, str(HERE))

from check_sweeps import measured_run  # noqa: E402
from ops_aic_gpus import _interp  # noqa: E402

PREREG = HERE / "2026-12-05-ops-aic-before.json"
OUTPUT = 128
HALF_OUTPUT = 64


def _grid(g: Mapping[str, Any], x: float, key: str = "ms") -> float:
    """The committed grid read at ``x`` as the pre-registration's own ``read`` mode does."""
    return _interp(g, x, key)[0]


def _err(pred: float, meas: float) -> str:
    return f"{pred / meas - 1:+.1%}"


def score(pred: Mapping[str, Any], aic: Mapping[str, Any] | None,
          meas: Mapping[tuple[int, int], Mapping[str, float]]) -> tuple[list[str], list[float],
                                                                       list[float]]:
    rows: list[str] = []
    ours: list[float] = []
    theirs: list[float] = []
    serving = {(s["prompt"], s["output"], s["concurrency"]): s for s in pred["serving"]}
    for (p, c), m in sorted(meas.items()):
        tpot, ttft = m["tpot"] * 1e3, m["ttft"] * 1e3
        s = serving.get((p, OUTPUT, c))
        if c == 1:
            dec = _grid(pred["decode"], p + HALF_OUTPUT)
            lo = _grid(pred["decode"], p + HALF_OUTPUT, "low_ms")
            hi = _grid(pred["decode"], p + HALF_OUTPUT, "high_ms")
            pre = _grid(pred["prefill"], p)
            plo = _grid(pred["prefill"], p, "low_ms")
            phi = _grid(pred["prefill"], p, "high_ms")
            has = bool(aic) and "decode" in aic and "prefill" in aic  # else AIC refused it
            a_dec = _grid(aic["decode"], p + HALF_OUTPUT, "") if aic and has else None
            a_pre = _grid(aic["prefill"], p, "") if aic and has else None
            ours += [abs(dec / tpot - 1), abs(pre / ttft - 1)]
            if a_dec and a_pre:
                theirs += [abs(a_dec / tpot - 1), abs(a_pre / ttft - 1)]
            rows.append(
                f"| {pred['build']} | {p:,} | 1 (step) | {tpot:.2f} | {dec:.2f} {_err(dec, tpot)}"
                f"{'' if lo <= tpot <= hi else ' (out)'} | "
                f"{(f'{a_dec:.2f} ' + _err(a_dec, tpot)) if a_dec else '—'} | {ttft:.1f} | "
                f"{pre:.1f} {_err(pre, ttft)}{'' if plo <= ttft <= phi else ' (out)'} | "
                f"{(f'{a_pre:.1f} ' + _err(a_pre, ttft)) if a_pre else '—'} | — | — |")
        if s is None:
            continue
        inside = s["tpot_low_ms"] <= tpot <= s["tpot_high_ms"]
        rows.append(
            f"| {pred['build']} | {p:,} | {c} (loop) | {tpot:.2f} | {s['tpot_ms']:.2f} "
            f"{_err(s['tpot_ms'], tpot)}{'' if inside else ' (out)'} | — | {ttft:.1f} | "
            f"{s['ttft_ms']:.1f} {_err(s['ttft_ms'], ttft)} | — | {m['per_gpu']:,.0f} | "
            f"{s['output_tok_s']:,.0f} {s['output_tok_s'] / m['per_gpu'] - 1:+.1%} |")
    return rows, ours, theirs


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit(__doc__)
    doc = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    pre = json.loads(PREREG.read_text(encoding="utf-8"))
    preds = {p["build"]: p for p in pre["predictions"] if p["gpu"] == "h100" and "decode" in p}
    aic = pre["aiconfigurator"]["h100"]
    print(f"Pre-registered {pre['date']} at {pre['servelab_commit'][:7]} "
          f"({pre['command']}); measured: {args[0]}\n")
    print("| build | prompt | clients | TPOT ms measured | servelab (err) | AIC (err) | "
          "TTFT ms measured | servelab (err) | AIC (err) | out tok/s measured | "
          "servelab (err) |")
    print("|---|---:|---|---:|---|---|---:|---|---|---:|---|")
    ours_all: list[float] = []
    theirs_all: list[float] = []
    for run in doc["runs"]:
        build = str(run["model_id"]).removesuffix("-bf16-random")
        if build not in preds:
            print(f"| {build} | no pre-registered H100 prediction |")
            continue
        meas = measured_run(run, OUTPUT)
        rows, ours, theirs = score(preds[build], aic.get(build), meas)
        ours_all += ours
        theirs_all += theirs
        print("\n".join(rows))
    if ours_all:
        print(f"\nsingle stream (decode TPOT and TTFT): servelab median |error| "
              f"{statistics.median(ours_all):.1%} (max {max(ours_all):.1%}, n={len(ours_all)})"
              + (f"; AIConfigurator {statistics.median(theirs_all):.1%} (max "
                 f"{max(theirs_all):.1%}, n={len(theirs_all)})" if theirs_all else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
