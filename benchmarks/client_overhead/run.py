"""Client overhead: servelab's bench client vs `vllm bench serve` vs GuideLLM, side by side.

Against servelab's synthetic streaming server (servelab.testing.synthetic_server, one
fresh server process per measurement), at each concurrency, each tool runs in its own
process with the same request count and output length:

- timing: the server emits the first chunk after TTFT_MS and then one chunk every
  ITL_MS; each tool's reported mean TTFT and mean ITL are compared with the
  configured values (error = measured / configured - 1);
- throughput: the server streams as fast as the client reads (itl 0, up to 16 chunks
  per write); each tool's sustained output tokens/s (completed output tokens over its
  own benchmark duration), and its CPU per streamed token: the CPU time of the tool's
  process tree (from /proc) between the first request reaching the server and the last
  response ending (the script polls the server every 10 ms), over the tokens streamed.
  Start-up and prompt preparation fall outside that window. On a shared machine the
  wall rate is bounded by whatever else runs; CPU per token is the client's own cost,
  and 1e6 / (µs/token) is the rate one client core could sustain.

Usage (prints a Markdown table, writes JSON with --out):

    .venv/bin/python benchmarks/client_overhead/run.py \
        --vllm-python /work/scratch/vllm-venv/bin/python \
        --guidellm /work/scratch/peers-venv/bin/guidellm --out /tmp/client_overhead.json

Peers are optional (omit --vllm-python / --guidellm to skip them). Ports 18410+.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVELAB = ROOT / ".venv" / "bin" / "servelab"
PY = sys.executable

VLLM_SHIM = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = FlexibleArgumentParser()\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)


@dataclass
class Measured:
    tool: str
    scenario: str
    concurrency: int
    completed: int
    failed: int
    output_tok_s: float
    mean_ttft_ms: float | None
    mean_itl_ms: float | None
    wall_s: float
    cpu_s: float
    """CPU seconds of the tool's process (and its children), start-up included."""
    stream_cpu_s: float | None
    """CPU seconds of the tool's process tree while the server was streaming to it."""
    command: list[str]

    output_tokens: int = 0


class Server:
    """A synthetic server process (its own process group) on a port."""

    def __init__(self, port: int, ttft_ms: float, itl_ms: float) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            [PY, "-m", "servelab.testing.synthetic_server", "--port", str(port),
             "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms), "--model", "synthetic"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.url = f"http://127.0.0.1:{port}"
        SERVER_URL.append(self.url)
        for _ in range(200):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1).read()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("synthetic server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


CPU_USED: list[float] = []
"""CPU seconds (user + system) of the last tool process, appended by _run."""
STREAM_CPU: list[float | None] = []
"""CPU seconds the last tool's process tree used while the server was streaming to it."""
SERVER_URL: list[str] = []

_TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants (plus reaped children)."""
    stats: dict[int, tuple[int, float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        f = raw[raw.rindex(")") + 2:].split()
        # fields after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
        stats[int(entry)] = (int(f[1]), (int(f[11]) + int(f[12])) / _TICK,
                             (int(f[13]) + int(f[14])) / _TICK)
    total = 0.0
    for pid, (_, own, reaped) in stats.items():
        p, seen = pid, 0
        while p in stats and p != root and seen < 64:
            p, seen = stats[p][0], seen + 1
        if p == root:
            total += own + (reaped if pid == root else 0.0)
    return total


def _server_state(url: str) -> tuple[float, float]:
    text = urllib.request.urlopen(url + "/metrics", timeout=2).read().decode()
    vals = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            vals[name.split("{")[0]] = float(v)
    return vals["synthetic:generation_requests_total"], vals["vllm:num_requests_running"]


def _run(cmd: list[str], timeout: float, expect: int | None = None) -> float:
    """Run a tool; with ``expect`` requests, also measure its CPU during streaming.

    A monitor polls the synthetic server every 10 ms: the streaming window opens when
    the first generation request arrives and closes when ``expect`` have arrived and
    none is running; the tool's process-tree CPU is read at both edges.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    window: dict[str, float] = {}
    done = threading.Event()

    def monitor() -> None:
        url = SERVER_URL[-1]
        while not done.is_set():
            try:
                n, running = _server_state(url)
            except OSError:
                n, running = 0.0, 0.0
            if "start" not in window and n >= 1:
                window["start"] = _tree_cpu(proc.pid)
            if "start" in window and expect is not None and n >= expect and running == 0:
                window["end"] = _tree_cpu(proc.pid)
                return
            time.sleep(0.01)

    mon = threading.Thread(target=monitor, daemon=True)
    if expect is not None:
        mon.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        done.set()
    if expect is not None:
        mon.join(5)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}):\n{out[-2000:]}\n"
                           f"{err[-3000:]}")
    CPU_USED.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    STREAM_CPU.append(window["end"] - window["start"] if "end" in window else None)
    return time.monotonic() - t


def run_servelab(url: str, c: int, n: int, out_len: int, tmp: Path) -> tuple[dict[str, Any],
                                                                               list[str]]:
    out = tmp / f"servelab-{c}.json"
    cmd = [str(SERVELAB), "bench", url, "--model", "synthetic", "--prompt-lens", "16",
           "--output-len", str(out_len), "--concurrency", str(c), "--requests", str(n),
           "--max-repeats", "1", "--warmup", "0", "--json", "--out", str(out)]
    _run(cmd, 600, expect=n)
    m = json.loads(out.read_text())["points"][0]["metrics"]
    return {"completed": m["completed"], "failed": m["failed"],
            "output_tok_s": m["output_throughput"],
            "mean_ttft_ms": (m["ttft_ms"] or {}).get("mean"),
            "mean_itl_ms": (m["itl_ms"] or {}).get("mean")}, cmd


def run_vllm(vllm_py: str, tok: Path) -> Callable[[str, int, int, int, Path],
                                                  tuple[dict[str, Any], list[str]]]:
    def go(url: str, c: int, n: int, out_len: int, tmp: Path) -> tuple[dict[str, Any],
                                                                        list[str]]:
        name = f"vllm-{c}.json"
        cmd = [vllm_py, "-c", VLLM_SHIM, "--backend", "openai", "--base-url", url,
               "--endpoint", "/v1/completions", "--model", "synthetic", "--tokenizer", str(tok),
               "--dataset-name", "random", "--random-input-len", "16",
               "--random-output-len", str(out_len), "--num-prompts", str(n),
               "--max-concurrency", str(c), "--request-rate", "inf", "--ignore-eos",
               "--num-warmups", "0", "--ready-check-timeout-sec", "0", "--disable-tqdm",
               "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result",
               "--result-dir", str(tmp), "--result-filename", name]
        _run(cmd, 900, expect=n)
        d = json.loads((tmp / name).read_text())
        return {"completed": d["completed"], "failed": d.get("failed", 0),
                "output_tok_s": d["output_throughput"], "mean_ttft_ms": d["mean_ttft_ms"],
                "mean_itl_ms": d["mean_itl_ms"]}, cmd
    return go


def run_guidellm(guidellm: str, tok: Path) -> Callable[[str, int, int, int, Path],
                                                       tuple[dict[str, Any], list[str]]]:
    def go(url: str, c: int, n: int, out_len: int, tmp: Path) -> tuple[dict[str, Any],
                                                                        list[str]]:
        out = tmp / f"guidellm-{c}.json"
        cmd = [guidellm, "run",
               "--backend", f"kind=openai_http,target={url},model=synthetic,"
               "request_format=/v1/completions",
               "--profile", f"kind=concurrent,streams={c}",
               "--constraint", f"kind=max_requests,count={n}",
               "--data", f"kind=synthetic_text,prompt_tokens=16,output_tokens={out_len}",
               "--tokenizer", f"kind=huggingface_auto,model={tok}",
               "--output", f"kind=json,path={out}", "--disable-console-interactive"]
        _run(cmd, 900, expect=n)
        return parse_guidellm(json.loads(out.read_text())), cmd
    return go


def parse_guidellm(d: dict[str, Any]) -> dict[str, Any]:
    """GuideLLM 0.8 JSON: totals, successful-request means, duration of the benchmark."""
    bench = d["benchmarks"][0]
    metrics = bench["metrics"]

    def succ(name: str) -> dict[str, Any]:
        return dict(metrics.get(name, {}).get("successful") or {})

    totals = metrics["request_totals"]
    out_tokens = float(succ("output_token_count").get("total_sum") or 0.0)
    duration = float(bench["duration"])
    return {"completed": int(totals.get("successful", 0)),
            "failed": int(totals.get("errored", 0)) + int(totals.get("incomplete", 0)),
            "output_tok_s": out_tokens / duration if duration > 0 else 0.0,
            "mean_ttft_ms": succ("time_to_first_token_ms").get("mean"),
            "mean_itl_ms": succ("inter_token_latency_ms").get("mean")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vllm-python", help="Interpreter of a vLLM install (vllm bench serve).")
    ap.add_argument("--guidellm", help="The guidellm executable.")
    ap.add_argument("--concurrency", default="1,64,512")
    ap.add_argument("--ttft-ms", type=float, default=200.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--timing-output-len", type=int, default=32)
    ap.add_argument("--throughput-output-len", type=int, default=1024)
    ap.add_argument("--throughput-requests-per-stream", type=int, default=4)
    ap.add_argument("--port", type=int, default=18410)
    ap.add_argument("--tools", default="servelab,vllm,guidellm")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="client-overhead-"))
    from servelab.synth.tiny import make_tiny_model

    tok = tmp / "tiny-llama"
    make_tiny_model("llama", tok)
    tools: dict[str, Callable[[str, int, int, int, Path], tuple[dict[str, Any], list[str]]]] = {}
    wanted = args.tools.split(",")
    if "servelab" in wanted:
        tools["servelab"] = run_servelab
    if "vllm" in wanted and args.vllm_python:
        tools["vllm bench serve"] = run_vllm(args.vllm_python, tok)
    if "guidellm" in wanted and args.guidellm:
        tools["guidellm"] = run_guidellm(args.guidellm, tok)
    rows: list[Measured] = []
    port = args.port
    load0 = os.getloadavg()
    for c in (int(x) for x in args.concurrency.split(",")):
        for scenario, ttft, itl, out_len, n in (
                ("timing", args.ttft_ms, args.itl_ms, args.timing_output_len, max(10, 2 * c)),
                ("throughput", 0.0, 0.0, args.throughput_output_len,
                 max(50, args.throughput_requests_per_stream * c))):
            for name, fn in tools.items():
                srv = Server(port, ttft, itl)
                try:
                    t = time.monotonic()
                    r, cmd = fn(srv.url, c, n, out_len, tmp)
                    wall = time.monotonic() - t
                finally:
                    srv.stop()
                rows.append(Measured(name, scenario, c, r["completed"], r["failed"],
                                     float(r["output_tok_s"] or 0.0), r["mean_ttft_ms"],
                                     r["mean_itl_ms"], wall, CPU_USED[-1], STREAM_CPU[-1],
                                     cmd, output_tokens=r["completed"] * out_len))
                print(f"{name:18s} {scenario:10s} c={c:<4d} cpu {CPU_USED[-1]:.2f}s "
                      f"streaming cpu {STREAM_CPU[-1]} {r}", file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    print(render(rows, args, load0, load1))
    if args.out:
        args.out.write_text(json.dumps({
            "config": vars(args) | {"out": str(args.out)}, "loadavg_before": load0,
            "loadavg_after": load1, "cpus": os.cpu_count(),
            "rows": [r.__dict__ for r in rows]},
            indent=1, default=str))


def streaming_cpu_us(r: Measured) -> float | None:
    """Client CPU per streamed token during the streaming window."""
    if r.stream_cpu_s is None or not r.output_tokens:
        return None
    return r.stream_cpu_s / r.output_tokens * 1e6


def render(rows: list[Measured], args: argparse.Namespace, load0: tuple[float, ...],
           load1: tuple[float, ...]) -> str:
    lines = [f"Synthetic server: timing TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, "
             f"{args.timing_output_len} tokens; throughput: ITL 0, "
             f"{args.throughput_output_len} tokens × max(50, "
             f"{args.throughput_requests_per_stream} × concurrency) requests. "
             f"{os.cpu_count()} CPUs, load average "
             f"{load0[0]:.1f} before / {load1[0]:.1f} after.", "",
             "| concurrency | tool | streamed tok/s (wall) | × best peer (wall) | "
             "client CPU µs/token | tok/s per client core | × best peer (CPU) | "
             "TTFT error | ITL error | ok/failed |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def pct(x: float | None, ref: float) -> str:
        return f"{(x / ref - 1):+.2%}" if x is not None else "–"

    for c in sorted({r.concurrency for r in rows}):
        by = {(r.tool, r.scenario): r for r in rows if r.concurrency == c}
        tools = [t for (t, sc) in by if sc == "throughput"]
        cpu = {t: streaming_cpu_us(by[(t, "throughput")]) for t in tools}
        peers_cpu = [1e6 / v for t, v in cpu.items() if t != "servelab" and v]
        peers_wall = [by[(t, "throughput")].output_tok_s for t in tools if t != "servelab"]
        best_cpu = max(peers_cpu) if peers_cpu else None
        best_wall = max(peers_wall) if peers_wall else None
        for t in tools:
            tr, ti = by[(t, "throughput")], by.get((t, "timing"))
            us = cpu.get(t)
            core = 1e6 / us if us else None
            cells = [
                str(c), t, f"{tr.output_tok_s:,.0f}",
                f"{tr.output_tok_s / best_wall:.2f}×" if best_wall else "–",
                f"{us:.1f}" if us else "–", f"{core:,.0f}" if core else "–",
                f"{core / best_cpu:.2f}×" if core and best_cpu else "–",
                pct(ti.mean_ttft_ms, args.ttft_ms) if ti else "–",
                pct(ti.mean_itl_ms, args.itl_ms) if ti else "–",
                f"{tr.completed}/{tr.failed}" + (f", {ti.completed}/{ti.failed}" if ti else ""),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
