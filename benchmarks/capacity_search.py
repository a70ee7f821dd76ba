"""Capacity search vs a fixed grid: requests needed to locate the SLO capacity within ±5 %.

Against servelab's synthetic server (test infrastructure) whose decode slows with load —
each chunk gap is ``ITL + k × (streams in flight − 1)`` — both methods look for the
highest Poisson request rate whose median TPOT stays within the SLO, with the same
requests per probe (``--requests``, plus the same warm-up):

- *bisection*: ``servelab capacity`` (double from ``--low`` until the SLO is missed,
  geometric bisection to a bracket within ``--tolerance``, two confirming reruns);
- *fixed grid*: every rate of a geometric grid with steps of ``1 + tolerance`` from
  ``--low``, run in ascending order and stopped at the first miss (the cheapest a grid can
  be; a grid that does not stop runs all ``--high``/``--low`` of its points).

Both are run for real in one process against one server; the script prints both request
counts, both answers and the ratio. Usage::

    .venv/bin/python benchmarks/capacity_search.py --out /tmp/capacity_search.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from servelab.bench.capacity import CapacityRunner, SearchSpec, grid, run_capacity
from servelab.bench.client import BenchClient
from servelab.bench.run import BenchConfig, open_session
from servelab.bench.slo import parse_slo
from servelab.bench.spec import WorkloadSpec
from servelab.bench.workload import WorkloadRunner
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer


def run_grid(cfg: BenchConfig, spec: SearchSpec, slo_text: str) -> dict[str, Any]:
    """Probe every grid rate in ascending order until the first miss."""
    slo = parse_slo(slo_text)
    w = replace(cfg.workload, max_repeats=1)
    ses = open_session(replace(cfg, workload=w))

    async def go() -> dict[str, Any]:
        async with BenchClient(ses.base, ses.options, timeouts=cfg.timeouts) as client:
            cap = CapacityRunner(WorkloadRunner(client, ses.builder, w), slo, spec)
            best = None
            for v in grid(spec):
                if not await cap.measure(v, "grid"):
                    return {"capacity": best, "first_miss": v, "probes": len(cap.probes),
                            "requests": sum(p.requests for p in cap.probes)}
                best = v
            return {"capacity": best, "first_miss": None, "probes": len(cap.probes),
                    "requests": sum(p.requests for p in cap.probes)}

    try:
        return asyncio.run(go())
    finally:
        ses.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ttft-ms", type=float, default=5.0)
    ap.add_argument("--itl-ms", type=float, default=2.0)
    ap.add_argument("--itl-per-running-ms", type=float, default=1.0)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--slo", default="tpot_p50=10")
    ap.add_argument("--low", type=float, default=8.0)
    ap.add_argument("--high", type=float, default=256.0)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    scfg = SyntheticConfig(ttft_s=args.ttft_ms / 1e3, itl_s=args.itl_ms / 1e3,
                           itl_per_running_s=args.itl_per_running_ms / 1e3)
    spec = SearchSpec(variable="rate", low=args.low, high=args.high,
                      tolerance=args.tolerance, confirm=2)
    rows: dict[str, Any] = {}
    with SyntheticServer(scfg) as srv:
        cfg = BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=args.output_len, concurrency=(4096,),
            request_rate=1.0, requests=args.requests, warmup_requests=4),
            scrape_metrics=False)
        t = time.perf_counter()
        res = run_capacity(cfg, parse_slo(args.slo), spec)
        rows["bisection"] = {"capacity": res.outcome.capacity,
                             "first_miss": res.outcome.bracket_high,
                             "probes": len(res.probes), "requests": res.requests,
                             "wall_s": time.perf_counter() - t}
        t = time.perf_counter()
        g = run_grid(cfg, spec, args.slo)
        g["wall_s"] = time.perf_counter() - t
        rows["fixed grid (stops at first miss)"] = g
    n_grid = len(grid(spec))
    print(f"SLO {args.slo}; synthetic decode gap {args.itl_ms:g} ms + "
          f"{args.itl_per_running_ms:g} ms per extra stream; Poisson arrivals; "
          f"{args.requests} measured + 4 warm-up requests per probe; range "
          f"{args.low:g}-{args.high:g} req/s, ±{args.tolerance:.0%} "
          f"(full grid: {n_grid} points)\n")
    slo_ms = parse_slo(args.slo).terms[0].threshold_ms
    n_star = 1 + (slo_ms - args.itl_ms) / args.itl_per_running_ms
    e2e_s = (args.ttft_ms + (args.output_len - 1) * slo_ms) / 1e3
    print(f"steady-state estimate (Little's law, constant load): {n_star:g} streams in "
          f"flight at the SLO, E2E {e2e_s * 1e3:g} ms → {n_star / e2e_s:.3g} req/s\n")
    print("| method | capacity req/s | first miss req/s | probes | requests | wall s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        miss = f"{r['first_miss']:.3g}" if r["first_miss"] is not None else "–"
        cap = f"{r['capacity']:.3g}" if r["capacity"] is not None else "–"
        print(f"| {name} | {cap} | {miss} | {r['probes']} | {r['requests']} | "
              f"{r['wall_s']:.1f} |")
    b, gr = rows["bisection"], rows["fixed grid (stops at first miss)"]
    print(f"\ngrid requests ÷ bisection requests: {gr['requests'] / b['requests']:.2f}× "
          f"(a grid that runs all {n_grid} points: "
          f"{n_grid * gr['requests'] / max(gr['probes'], 1) / b['requests']:.1f}×)")
    if args.out is not None:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)},
                                        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
