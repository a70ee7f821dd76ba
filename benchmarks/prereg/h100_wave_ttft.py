"""Post hoc (issue 39): does replaying servelab bench's closed-loop waves explain the first H100
runs' TTFT under load, which the pre-registered steady-state closed loop put 70-93 % short?

    .venv/bin/python benchmarks/prereg/h100_wave_ttft.py

Steps priced from the pre-registered composition only (benchmarks/prereg/2026-12-05-ops-aic-
before.json, commit f2ebc2a, written before any H100 run; nothing fitted here): a decode-only
step of b requests is the ``batch`` grid at b (context 1,024), a step holding prompt chunks is
the ``prefill`` grid at its tokens (chunks plus one per decoder). These are replayed through
servelab.predict.schedule.simulate with vLLM's step budget (8,192 tokens), max_num_seqs 1,024,
the KV pool each run logged, and the bench's max(3, 2c) requests, once as vLLM 0.26 schedules
(a step ahead: the waves stay together) and once with the old next-step admission. Measured
TTFT: the runs' mean over requests (benchmarks/gpu/results/h100-2026-12-05/runs.json), as
benchmarks/load/check_sweeps.py summarises it. Post hoc: the runs were seen before this
replay was written; the pre-registered figures are unchanged.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "load"))
sys.path.insert(0, str(HERE))

from check_sweeps import measured_run  # noqa: E402
from ops_aic_gpus import _interp  # noqa: E402

from servelab.plan.load import requests_for  # noqa: E402
from servelab.predict.schedule import Limits, Load, simulate, stats  # noqa: E402

PREREG = HERE / "2026-12-05-ops-aic-before.json"
RUNS = HERE.parent / "gpu/results/h100-2026-12-05/runs.json"
BUILDS = {"llama-3.1-8b-bf16-h100": "llama-3.1-8b", "qwen3-30b-a3b-bf16-h100": "qwen3-30b-a3b",
          "gemma-3-27b-bf16-h100": "gemma-3-27b"}
BUDGET, MAX_SEQS = 8192, 1024


def _read(grid: Mapping[str, Any], x: float) -> float:
    lo, hi = min(float(k) for k in grid), max(float(k) for k in grid)
    return _interp(grid, min(max(x, lo), hi), "ms")[0] / 1e3


def step_cost(pred: Mapping[str, Any]) -> Any:
    def cost(contexts: Sequence[int], chunks: Sequence[tuple[int, int]]) -> float:
        tokens = sum(n for _, n in chunks)
        if tokens:
            return _read(pred["prefill"], tokens + len(contexts))
        return _read(pred["batch"], len(contexts))
    return cost


def main() -> int:
    doc = json.loads(PREREG.read_text(encoding="utf-8"))
    runs = json.loads(RUNS.read_text(encoding="utf-8"))["runs"]
    print("| build | prompt | c | TTFT ms measured | steady state (pre-registered) | "
          "waves replayed (vLLM 0.26, a step ahead) | next-step admission |")
    print("|---|---:|---:|---:|---|---|---|")
    errs: dict[str, list[float]] = {"steady": [], "ahead": [], "next": []}
    for run in runs:
        build = BUILDS[run["recipe_name"]]
        pred = next(p for p in doc["predictions"] if p["build"] == build and p["gpu"] == "h100")
        out = int(run["workload"]["output_len"])
        meas = measured_run(run, out)
        for (p, c), m in sorted(meas.items()):
            if c < 4:
                continue
            steady = next((s["ttft_ms"] / 1e3 for s in pred["serving"]
                           if s["concurrency"] == c and s["prompt"] == p), None)
            load = Load(p, out, requests_for(c), concurrency=c)
            limits = Limits(BUDGET, MAX_SEQS, int(run["kv_pool_tokens"]) // (p + out))
            cells = []
            for key, ahead in (("ahead", True), ("next", False)):
                x = stats(simulate(step_cost(pred), load, limits, ahead=ahead), load).ttft_mean_s
                errs[key].append(abs(x / m["ttft"] - 1))
                cells.append(f"{x * 1e3:,.0f} ({x / m['ttft'] - 1:+.0%})")
            st = "—"
            if steady is not None:
                errs["steady"].append(abs(steady / m["ttft"] - 1))
                st = f"{steady * 1e3:,.0f} ({steady / m['ttft'] - 1:+.0%})"
            print(f"| {build} | {p:,} | {c} | {m['ttft'] * 1e3:,.0f} | {st} | {cells[0]} | "
                  f"{cells[1]} |")
    for k, v in errs.items():
        v = sorted(v)
        print(f"\n{k}: median |error| {v[len(v) // 2] * 100:.0f}% over {len(v)} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
