"""Transport choice: CPU per streamed chunk of raw asyncio (servelab) vs aiohttp vs httpx.

Same synthetic server (its own process, streaming as fast as the client reads), same
workload, same per-event work (servelab's collector parses every event); only the
HTTP layer differs. aiohttp is not a servelab dependency; install it next to servelab
for this script only:

    .venv/bin/pip install aiohttp
    .venv/bin/python benchmarks/client_overhead/transports.py --rounds 3

Prints client CPU µs per chunk and wall chunks/s per transport (median of --rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable

from servelab.bench.client import BenchClient, ClientOptions, RequestSpec, _Collector

BODY = {"model": "synthetic", "prompt": "a b c d", "max_tokens": 256, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True}


def _events(buf: bytearray, col: _Collector) -> None:
    while True:
        end = buf.find(b"\n\n")
        if end < 0:
            return
        event = bytes(buf[:end])
        del buf[: end + 2]
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                col.on_data(line[5:].strip(), time.perf_counter_ns())


async def run_servelab(url: str, c: int, n: int) -> int:
    async with BenchClient(url, ClientOptions(model="synthetic")) as cl:
        sem = asyncio.Semaphore(c)

        async def one(i: int) -> int:
            async with sem:
                s = await cl.send(RequestSpec("a b c d", 4, 256), i, t0_ns=0)
                return len(s.chunk_ns)

        return sum(await asyncio.gather(*(one(i) for i in range(n))))


async def run_aiohttp(url: str, c: int, n: int) -> int:
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        sem = asyncio.Semaphore(c)

        async def one(i: int) -> int:
            async with sem:
                col = _Collector(time.perf_counter_ns(), False, True)
                buf = bytearray()
                async with session.post(url + "/v1/completions", json=BODY) as r:
                    async for data in r.content.iter_any():
                        buf += data
                        _events(buf, col)
                return len(col.chunk_ns)

        return sum(await asyncio.gather(*(one(i) for i in range(n))))


async def run_httpx(url: str, c: int, n: int) -> int:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=600) as client:
        sem = asyncio.Semaphore(c)

        async def one(i: int) -> int:
            async with sem:
                col = _Collector(time.perf_counter_ns(), False, True)
                buf = bytearray()
                async with client.stream("POST", url + "/v1/completions", json=BODY) as r:
                    async for data in r.aiter_raw():
                        buf += data
                        _events(buf, col)
                return len(col.chunk_ns)

        return sum(await asyncio.gather(*(one(i) for i in range(n))))


RUNNERS: dict[str, Callable[[str, int, int], Awaitable[int]]] = {
    "servelab (asyncio.Protocol)": run_servelab, "aiohttp": run_aiohttp, "httpx": run_httpx}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=18430)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    srv = subprocess.Popen([sys.executable, "-m", "servelab.testing.synthetic_server", "--port",
                            str(args.port), "--ttft-ms", "0", "--itl-ms", "0"],
                           stdout=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in RUNNERS}
        for _ in range(args.rounds):
            for name, fn in RUNNERS.items():  # interleaved, so load changes hit all alike
                cpu, wall = time.process_time(), time.perf_counter()
                chunks = asyncio.run(fn(url, args.concurrency, args.requests))
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                results[name].append((cpu / chunks * 1e6, chunks / wall))
        load = os.getloadavg()[0]
        print(f"c={args.concurrency}, {args.requests} requests x 256 chunks, "
              f"{args.rounds} rounds, load average {load:.1f}")
        print("| transport | client CPU µs/chunk (median) | chunks/s wall (median) |")
        print("|---|---:|---:|")
        for name, vals in results.items():
            us = statistics.median(v[0] for v in vals)
            cps = statistics.median(v[1] for v in vals)
            print(f"| {name} | {us:.1f} | {cps:,.0f} |")
        print(json.dumps({k: v for k, v in results.items()}))
    finally:
        os.killpg(srv.pid, signal.SIGTERM)
        srv.wait(10)


if __name__ == "__main__":
    main()
