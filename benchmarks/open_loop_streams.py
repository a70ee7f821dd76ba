"""100 and 1,000 streams on the open-loop profiles: nothing lost, timing kept, lag measured.

Against servelab's synthetic server (test infrastructure: first chunk after ``--ttft-ms``,
then one chunk every ``--itl-ms``), ``--requests-per-stream`` × streams requests are sent
open loop on each load profile at a rate that keeps about ``--streams`` streams in flight
(rate = streams ÷ the configured E2E), no concurrency cap, next to the closed-loop
baseline (all streams at once, as ``tests/bench/test_load.py``). Per row:
completed/failed, the most streams in flight at once, the client's dispatch lag (send time
− scheduled time: p50 / p99 / max), and the mean TTFT and chunk-gap errors against the
configured values. The server is a separate process, a fresh one per row. The client's
CPU per token is what ``benchmarks/client_overhead/run.py`` measures, not this script.

Usage::

    .venv/bin/python benchmarks/open_loop_streams.py --out /tmp/open_loop.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec

PROFILES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("closed loop (baseline)", {}),
    ("constant", {"profile": "constant"}),
    ("poisson", {"profile": "poisson"}),
    ("gamma, burstiness 0.25", {"profile": "gamma", "burstiness": 0.25}),
)


def _wait_healthy(port: int) -> None:
    for _ in range(200):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"synthetic server on port {port} did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="100,1000")
    ap.add_argument("--requests-per-stream", type=float, default=1.5)
    ap.add_argument("--ttft-ms", type=float, default=200.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--port", type=int, default=18440)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    e2e_s = (args.ttft_ms + (args.output_len - 1) * args.itl_ms) / 1e3
    rows = []
    port = args.port
    for streams in (int(x) for x in args.streams.split(",")):
        rate = streams / e2e_s
        n = round(streams * args.requests_per_stream)
        for name, kw in PROFILES:
            port += 1
            srv = subprocess.Popen([sys.executable, "-m", "servelab.testing.synthetic_server",
                                    "--port", str(port), "--ttft-ms", str(args.ttft_ms),
                                    "--itl-ms", str(args.itl_ms)], stdout=subprocess.DEVNULL)
            try:
                _wait_healthy(port)
                spec = WorkloadSpec(prompt_lens=(16,), output_len=args.output_len,
                                    concurrency=(streams if not kw else 100_000,),
                                    request_rate=rate if kw else None, requests=n,
                                    warmup_requests=0, max_repeats=1, **kw)
                t0 = time.perf_counter()
                res = run_bench(BenchConfig(f"http://127.0.0.1:{port}", spec,
                                            scrape_metrics=False))
                wall = time.perf_counter() - t0
            finally:
                srv.terminate()
                srv.wait(10)
            (pr,) = res.points
            m = pr.metrics
            lag = m.dispatch_lag_ms
            assert m.ttft_ms is not None and m.itl_ms is not None
            rows.append({
                "streams": streams, "profile": name, "rate": rate if kw else None,
                "requests": n, "completed": m.completed, "failed": m.failed,
                "max_in_flight": m.max_concurrent_requests,
                "lag_p50_ms": lag.median if lag else None, "lag_p99_ms": lag.p99 if lag else None,
                "lag_max_ms": lag.max if lag else None,
                "ttft_err": m.ttft_ms.mean / args.ttft_ms - 1,
                "itl_err": m.itl_ms.mean / args.itl_ms - 1,
                "wall_s": wall,
            })
    print(f"{args.output_len} tokens per request, server TTFT {args.ttft_ms:g} ms + one "
          f"chunk per {args.itl_ms:g} ms (E2E {e2e_s:g} s); open loop at streams ÷ E2E "
          f"req/s, no cap; closed loop: all streams at once\n")
    print("| streams | profile | req/s | ok/failed | max in flight | send lag p50 / p99 / "
          "max ms | TTFT error | chunk-gap error |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")

    def f(x: float | None, fmt: str) -> str:
        return "–" if x is None else format(x, fmt)

    for r in rows:
        lag = (f"{f(r['lag_p50_ms'], '.1f')} / {f(r['lag_p99_ms'], '.1f')} / "
               f"{f(r['lag_max_ms'], '.1f')}")
        print(f"| {r['streams']} | {r['profile']} | {f(r['rate'], ',.1f')} | "
              f"{r['completed']}/{r['failed']} | {r['max_in_flight']} | {lag} | "
              f"{r['ttft_err']:+.2%} | {r['itl_err']:+.2%} |")
    if args.out is not None:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)},
                                        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
