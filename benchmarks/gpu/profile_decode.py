"""Where a single-stream decode step's time goes on the GPU: vLLM's own torch profiler over N
decode iterations of one request, summarised per kernel and per step. With ``--prefill`` the
same for one prefill step per prompt length instead.

Issue 12: the speed model left two things unexplained on the H200 (Qwen3-Next 12 layers costs
about twice Qwen3.6's per-layer time; Llama-3.2-3B more per layer than Llama-3.1-8B). A trace
tells whether a step is GPU-bound (kernels back to back) or host-bound (the GPU idles between
steps), and which kernels carry the time.

Run on the device (benchmarks/gpu/device_steps.sh phase ``profile``)::

    python benchmarks/gpu/profile_decode.py RECIPE.toml --out DIR [--steps 64]

It starts the recipe's engine (servelab's own argument builder, plus vLLM's
``--profiler-config``), sends two warm-up requests, then one request whose decode iterations
``delay..delay+steps`` are traced (the prefill iteration is skipped), stops the engine and
writes ``DIR/profile.json``: GPU busy time per step, the step period, the idle share, and the
kernels by time per step, with coarse categories (MoE, GEMM, attention, linear attention,
norms and elementwise, sampling). Nothing else of servelab is involved: the numbers are
vLLM's and CUPTI's.

``--prefill 512,2048,8192`` (issue 12: is a prefill longer than the largest CUDA graph bound
by the device's kernels or by the host launching them?): per length, two warm-up requests,
``--timed`` more timed without the profiler (wall time of a one-token completion: the prefill
step, sampling and HTTP), then one traced prefill step (``max_iterations`` 1). Prompts are
random token ids, a different draw per request, so prefix caching serves none of them. The
summary adds the kernels' span and the host's (first to last CPU event of the step) and the
kernel launches the host made; the profiler's own cost per launch lengthens a host-bound
step, so the timed requests are the step's real time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from servelab.serve.launch import engine_argv
from servelab.serve.recipe import load_recipe

CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "moe",
        re.compile(
            r"fused_moe|moe_align|topk_softmax|moe_sum|count_and_sort|"
            r"expert|topk_?gating|grouped_topk",
            re.I,
        ),
    ),
    (
        "linear attention",
        re.compile(
            r"gated_delta|delta_rule|causal_conv1d|fla_|chunk_|"
            r"recurrent|l2norm|gdn|mamba|ssm",
            re.I,
        ),
    ),
    ("attention", re.compile(r"flash|fmha|attn|attention|paged|reshape_and_cache|rotary", re.I)),
    ("gemm", re.compile(r"gemm|gemv|nvjet|sm90_xmma|cutlass|cublas|matmul|splitk", re.I)),
    (
        "sampling",
        re.compile(
            r"sort|argmax|softmax|topk|top_k|sampl|cumsum|multinomial|"
            r"exponential|log_softmax",
            re.I,
        ),
    ),
    (
        "norm / elementwise",
        re.compile(
            r"norm|triton_|elementwise|vectorized|act_and_mul|"
            r"silu|sigmoid|add|mul|copy|fill|cat|index",
            re.I,
        ),
    ),
)


def category(name: str) -> str:
    """The coarse class a kernel name falls in (first match wins)."""
    for label, pattern in CATEGORIES:
        if pattern.search(name):
            return label
    return "other"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 600.0) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return bytes(resp.read())


def wait_ready(base: str, proc: subprocess.Popen[bytes], limit: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None:
            raise SystemExit(f"engine exited with {proc.returncode} before it was ready")
        try:
            http(f"{base}/v1/models", timeout=5)
            return
        except (urllib.error.URLError, OSError):
            time.sleep(2)
    raise SystemExit(f"engine not ready after {limit:.0f} s")


LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
            "cudaGraphLaunch")
HOST_CATS = ("cpu_op", "python_function", "cuda_runtime", "cuda_driver", "user_annotation")


def summarise(trace: Path, steps: int, *, one_step: bool = False) -> dict[str, Any]:
    """Kernel time per step from one worker's Chrome trace (``one_step``: the trace holds one
    step, whatever CUDA graphs it launched: a prefill's piecewise graphs launch many)."""
    with gzip.open(trace, "rt") if trace.suffix == ".gz" else open(trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    kernels = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    runtime = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cuda_runtime":
            r = runtime[e["name"]]
            r[0] += 1
            r[1] += float(e.get("dur", 0))
    # launches through the runtime (PyTorch's own kernels, graph replays) and through the
    # driver (Triton's launcher)
    launches: dict[str, int] = defaultdict(int)
    for e in events:
        cat = e.get("cat")
        if e.get("ph") == "X" and cat in ("cuda_runtime", "cuda_driver") and e["name"] in LAUNCHES:
            launches[e["name"]] += 1
    annotations = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "gpu_user_annotation"):
            a = annotations[f"{e['cat']}:{e['name']}"]
            a[0] += 1
            a[1] += float(e.get("dur", 0))
    if not kernels:
        return {"trace": trace.name, "error": "no kernel events"}
    kernels.sort(key=lambda e: e["ts"])
    busy = 0.0
    end = -1.0
    for e in kernels:
        s, d = float(e["ts"]), float(e.get("dur", 0))
        if s >= end:
            busy += d
            end = s + d
        elif s + d > end:
            busy += s + d - end
            end = s + d
    span = float(kernels[-1]["ts"]) + float(kernels[-1].get("dur", 0)) - float(kernels[0]["ts"])
    graph_launches = runtime.get("cudaGraphLaunch", [0, 0.0])[0]
    n = 1 if one_step else (graph_launches if graph_launches else steps)
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") in HOST_CATS]
    host_span = (
        max(float(e["ts"]) + float(e.get("dur", 0)) for e in host)
        - min(float(e["ts"]) for e in host)
        if host
        else None
    )
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in kernels:
        k = by_name[e["name"][:160]]
        k[0] += 1
        k[1] += float(e.get("dur", 0))
    by_cat: dict[str, float] = defaultdict(float)
    for name, (_, dur) in by_name.items():
        by_cat[category(name)] += dur
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    return {
        "trace": trace.name,
        "steps": n,
        "steps_from": (
            "one traced step" if one_step
            else "cudaGraphLaunch count" if graph_launches else "requested"
        ),
        "host_span_us": host_span,
        "launches": {k: launches[k] for k in LAUNCHES if k in launches},
        "kernel_events": len(kernels),
        "kernels_per_step": len(kernels) / n,
        "gpu_busy_us_per_step": busy / n,
        "step_period_us": span / n,
        "gpu_idle_share": 1.0 - busy / span if span > 0 else None,
        "categories_us_per_step": {
            k: v / n for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])
        },
        "kernels": [
            {"name": name, "per_step": cnt / n, "us_per_step": dur / n, "category": category(name)}
            for name, (cnt, dur) in top[:60]
        ],
        "runtime_calls": {
            k: {"count": v[0], "us": v[1]}
            for k, v in sorted(runtime.items(), key=lambda kv: -kv[1][1])[:15]
        },
        "annotations": {
            k: {"count": v[0], "us": v[1]}
            for k, v in sorted(annotations.items(), key=lambda kv: -kv[1][1])[:25]
        },
    }


def recategorise(profile: Path) -> dict[str, float]:
    """Time per step by category over a written profile's kernel list (its top kernels by
    time), with the current :data:`CATEGORIES`."""
    doc = json.loads(profile.read_text(encoding="utf-8"))
    out: dict[str, float] = defaultdict(float)
    for k in doc["summary"]["kernels"]:
        out[category(k["name"])] += float(k["us_per_step"])
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def token_prompt(n: int, draw: int, vocab: int) -> list[int]:
    """``n`` random token ids below ``vocab`` (one draw per request: no two prompts share a
    prefix block)."""
    rng = random.Random(draw)
    return [rng.randrange(vocab // 20, vocab - 1) for _ in range(n)]


def vocab_size(model_dir: str) -> int:
    """The checkpoint's vocabulary size (its config.json; 32,000 when it says nothing)."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 32000
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    return int(text.get("vocab_size") or cfg.get("vocab_size") or 32000)


def new_trace(prof_dir: Path, before: set[Path], limit: float = 120.0) -> Path | None:
    """The trace file that appeared in ``prof_dir`` since ``before``, once written."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        fresh = [p for p in prof_dir.rglob("*.pt.trace.json*") if p not in before]
        if fresh:
            p = max(fresh, key=lambda q: q.stat().st_mtime)
            size = -1
            while size != p.stat().st_size:  # written in one go, but not at once
                size = p.stat().st_size
                time.sleep(2)
            return p
        time.sleep(1)
    return None


def profile_prefill(
    base: str, model: str, prof_dir: Path, lengths: list[int], timed: int, vocab: int
) -> dict[str, Any]:
    """Per prompt length: warm-up, timed requests without the profiler, one traced step."""
    out: dict[str, Any] = {}
    draw = 0

    def once(n: int) -> float:
        nonlocal draw
        draw += 1
        body = {"model": model, "prompt": token_prompt(n, draw, vocab), "max_tokens": 1,
                "temperature": 0.0}
        t = time.monotonic()
        http(f"{base}/v1/completions", body)
        return time.monotonic() - t

    for n in lengths:
        for _ in range(2):
            once(n)
        wall = [once(n) for _ in range(timed)]
        before = set(prof_dir.rglob("*.pt.trace.json*"))
        http(f"{base}/start_profile", {})
        traced = once(n)
        http(f"{base}/stop_profile", {})
        trace = new_trace(prof_dir, before)
        point: dict[str, Any] = {
            "timed_s": wall,
            "timed_mean_s": sum(wall) / len(wall) if wall else None,
            "traced_request_s": traced,
        }
        if trace is not None:
            point["trace"] = trace.name
            point["summary"] = summarise(trace, 1, one_step=True)
        out[str(n)] = point
        s = point.get("summary", {})
        print(json.dumps({"prompt": n, "timed_mean_ms": 1e3 * (point["timed_mean_s"] or 0),
                          "busy_ms": (s.get("gpu_busy_us_per_step") or 0) / 1e3,
                          "kernel_span_ms": (s.get("step_period_us") or 0) / 1e3,
                          "host_span_ms": (s.get("host_span_us") or 0) / 1e3,
                          "launches": s.get("launches")}), flush=True)
    return out


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--recategorise":
        print(json.dumps(recategorise(Path(sys.argv[2])), indent=1))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--delay", type=int, default=8)
    ap.add_argument("--prefill", default="", help="prompt lengths, comma-separated: trace "
                    "one prefill step per length instead of decode steps")
    ap.add_argument("--timed", type=int, default=6, help="with --prefill: requests timed "
                    "without the profiler per length")
    ap.add_argument("--startup-timeout", type=float, default=900.0)
    a = ap.parse_args()
    lengths = [int(v) for v in a.prefill.split(",") if v.strip()]
    recipe = load_recipe(a.recipe)
    prof_dir = (a.out / "trace").resolve()
    prof_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    python = str(recipe.engine_python() or sys.executable)
    model = str(recipe.model_path())
    argv = engine_argv(recipe, launcher=[python], model=model, port=port)
    config = {
        "profiler": "torch",
        "torch_profiler_dir": str(prof_dir),
        "torch_profiler_with_stack": False,
        "torch_profiler_dump_cuda_time_total": False,
        "ignore_frontend": True,
        "delay_iterations": 0 if lengths else a.delay,
        "max_iterations": 1 if lengths else a.steps,
    }
    argv += ["--profiler-config", json.dumps(config)]
    env = {**os.environ, **dict(recipe.engine.env)}
    with open(a.out / "engine.log", "wb") as log:
        print("engine:", " ".join(argv), flush=True)
        proc = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        base = f"http://127.0.0.1:{port}"
        result: dict[str, Any] = {"recipe": recipe.name, "steps": a.steps, "delay": a.delay}
        try:
            t0 = time.monotonic()
            wait_ready(base, proc, a.startup_timeout)
            result["startup_s"] = time.monotonic() - t0
            if lengths:
                result["prefill"] = profile_prefill(
                    base, recipe.served_model_name(), prof_dir, lengths, a.timed,
                    vocab_size(model),
                )
            else:
                decode_trace(base, recipe.served_model_name(), prof_dir, a, result)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    if not lengths:
        traces = sorted(prof_dir.rglob("*.pt.trace.json*"), key=lambda p: p.stat().st_size)
        result["traces"] = [p.name for p in traces]
        if traces:
            result["summary"] = summarise(traces[-1], a.steps)
    (a.out / "profile.json").write_text(json.dumps(result, indent=1))
    s = result.get("summary", {})
    print(
        json.dumps(
            {
                k: s.get(k)
                for k in (
                    "steps",
                    "gpu_busy_us_per_step",
                    "step_period_us",
                    "gpu_idle_share",
                    "categories_us_per_step",
                )
            },
            indent=1,
        )
    )
    return 0


def decode_trace(
    base: str, model: str, prof_dir: Path, a: argparse.Namespace, result: dict[str, Any]
) -> None:
    """Two warm-up requests, then one whose decode iterations the profiler traces."""
    body = {
        "model": model,
        "prompt": "The history of the city " * 4,
        "max_tokens": 48,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    for _ in range(2):
        http(f"{base}/v1/completions", body)
    before = set(prof_dir.rglob("*.pt.trace.json*"))
    http(f"{base}/start_profile", {})
    body["max_tokens"] = a.delay + a.steps + 16
    t1 = time.monotonic()
    out = json.loads(http(f"{base}/v1/completions", body))
    result["request_s"] = time.monotonic() - t1
    result["completion_tokens"] = out.get("usage", {}).get("completion_tokens")
    http(f"{base}/stop_profile", {})
    new_trace(prof_dir, before)


if __name__ == "__main__":
    raise SystemExit(main())
