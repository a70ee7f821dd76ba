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
  process for the same requests at 256 minus at 2 output tokens, over the extra tokens
  (start-up and per-request costs cancel). On a shared machine the wall rate is bounded
  by whatever else runs; CPU per token is the client's own cost, and 1e6 / (µs/token)
  is the rate one client core could sustain.

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
    baseline_cpu_s: float
    """The same tool's CPU seconds for a 1-request, 2-token run: start-up cost."""
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


def _run(cmd: list[str], timeout: float) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({r.returncode}):\n{r.stdout[-2000:]}\n"
                           f"{r.stderr[-3000:]}")
    CPU_USED.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return time.monotonic() - t


def run_servelab(url: str, c: int, n: int, out_len: int, tmp: Path) -> tuple[dict[str, Any],
                                                                               list[str]]:
    out = tmp / f"servelab-{c}.json"
    cmd = [str(SERVELAB), "bench", url, "--model", "synthetic", "--prompt-lens", "16",
           "--output-len", str(out_len), "--concurrency", str(c), "--requests", str(n),
           "--max-repeats", "1", "--warmup", "0", "--json", "--out", str(out)]
    _run(cmd, 600)
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
        _run(cmd, 900)
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
        _run(cmd, 900)
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
    ap.add_argument("--throughput-output-len", type=int, default=256)
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
    baseline: dict[str, float] = {}
    for name, fn in tools.items():  # start-up CPU of each tool: 1 request, 2 tokens
        srv = Server(port, 0.0, 0.0)
        try:
            fn(srv.url, 1, 1, 2, tmp)
        finally:
            srv.stop()
        baseline[name] = CPU_USED[-1]
        print(f"{name:18s} start-up CPU {baseline[name]:.2f} s", file=sys.stderr, flush=True)
    for c in (int(x) for x in args.concurrency.split(",")):
        n = max(10, 2 * c)
        for scenario, ttft, itl, out_len in (
                ("timing", args.ttft_ms, args.itl_ms, args.timing_output_len),
                ("short", 0.0, 0.0, 2),
                ("throughput", 0.0, 0.0, args.throughput_output_len)):
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
                                     r["mean_itl_ms"], wall, CPU_USED[-1], baseline[name],
                                     cmd, output_tokens=r["completed"] * out_len))
                print(f"{name:18s} {scenario:10s} c={c:<4d} cpu {CPU_USED[-1]:.2f}s {r}",
                      file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    print(render(rows, args, load0, load1))
    if args.out:
        args.out.write_text(json.dumps({
            "config": vars(args) | {"out": str(args.out)}, "loadavg_before": load0,
            "loadavg_after": load1, "cpus": os.cpu_count(),
            "rows": [r.__dict__ for r in rows]},
            indent=1, default=str))


def streaming_cpu_us(long: Measured, short: Measured) -> float | None:
    """Client CPU per streamed token: the same requests at 256 vs 2 output tokens.

    Subtracting the 2-token run removes start-up and every per-request cost (prompt
    preparation, connections, request/response), leaving the cost of streaming.
    """
    extra = long.output_tokens - short.output_tokens
    if extra <= 0:
        return None
    return max(long.cpu_s - short.cpu_s, 0.0) / extra * 1e6


def request_cpu_us(short: Measured) -> float | None:
    """Client CPU per request (prompt, connection, 2 tokens) above the tool's start-up."""
    if not short.completed:
        return None
    return max(short.cpu_s - short.baseline_cpu_s, 0.0) / short.completed * 1e6


def render(rows: list[Measured], args: argparse.Namespace, load0: tuple[float, ...],
           load1: tuple[float, ...]) -> str:
    lines = [f"Synthetic server: timing TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, "
             f"{args.timing_output_len} tokens; throughput: ITL 0, "
             f"{args.throughput_output_len} tokens. {os.cpu_count()} CPUs, load average "
             f"{load0[0]:.1f} before / {load1[0]:.1f} after.", "",
             "| concurrency | tool | streamed tok/s (wall) | × best peer (wall) | "
             "client CPU µs/token | tok/s per client core | × best peer (CPU) | "
             "client CPU µs/request | TTFT error | ITL error | ok/failed |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def pct(x: float | None, ref: float) -> str:
        return f"{(x / ref - 1):+.2%}" if x is not None else "–"

    for c in sorted({r.concurrency for r in rows}):
        by = {(r.tool, r.scenario): r for r in rows if r.concurrency == c}
        tools = [t for (t, sc) in by if sc == "throughput"]
        cpu = {t: streaming_cpu_us(by[(t, "throughput")], by[(t, "short")])
               for t in tools if (t, "short") in by}
        peers_cpu = [1e6 / v for t, v in cpu.items() if t != "servelab" and v]
        peers_wall = [by[(t, "throughput")].output_tok_s for t in tools if t != "servelab"]
        best_cpu = max(peers_cpu) if peers_cpu else None
        best_wall = max(peers_wall) if peers_wall else None
        for t in tools:
            tr, ti, sh = by[(t, "throughput")], by.get((t, "timing")), by.get((t, "short"))
            us = cpu.get(t)
            core = 1e6 / us if us else None
            rq = request_cpu_us(sh) if sh else None
            cells = [
                str(c), t, f"{tr.output_tok_s:,.0f}",
                f"{tr.output_tok_s / best_wall:.2f}×" if best_wall else "–",
                f"{us:.1f}" if us else "–", f"{core:,.0f}" if core else "–",
                f"{core / best_cpu:.2f}×" if core and best_cpu else "–",
                f"{rq:,.0f}" if rq is not None else "–",
                pct(ti.mean_ttft_ms, args.ttft_ms) if ti else "–",
                pct(ti.mean_itl_ms, args.itl_ms) if ti else "–",
                f"{tr.completed}/{tr.failed}" + (f", {ti.completed}/{ti.failed}" if ti else ""),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
