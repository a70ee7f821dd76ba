"""Score plan's H200 predictions for gpt-oss-120b (MXFP4 experts, composed over
AIConfigurator's H200 tables) against the published single-H200 vLLM figures collected after
they were registered (benchmarks/prereg/spark-prefill/h200-gpt-oss-published.toml, collected
after commit 685393d).

    .venv/bin/python benchmarks/prereg/h200_gpt_oss_score.py   # a Markdown table

Two parts, kept apart:

* **registered**: the figures in h200-gpt-oss-before.json as written: single-stream decode at
  the registered context nearest the published run's mean context (prompt + half the output),
  single-stream TTFT as the mean prompt over the registered prefill at the nearest registered
  length; the registered load points are at 1,024-token prompts and 128 output tokens, a shape
  no published run used, so they are not scored.
* **same code, published shapes** (post hoc, labelled so): ``servelab plan`` of the same
  replica at each published run's mean prompt and output lengths and its concurrency, run now
  by this script with the code as registered (nothing changed since in servelab.predict or
  servelab.ops): TPOT, TTFT and output tok/s.

Error = predicted / published − 1; "in" = inside the printed interval.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "benchmarks" / "prereg" / "spark-prefill"
ENV = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}


def _nearest(points: list[dict[str, Any]], key: str, n: float) -> dict[str, Any]:
    return min(points, key=lambda p: abs(p[key] - n))


def _plan(rep: Path, prompt: int, output: int, conc: list[int]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "servelab", "plan", str(rep), "-H", "h200", "--no-store",
         "--json", "--prompt-lens", str(prompt), "--output-len", str(output),
         "--concurrency", ",".join(map(str, conc))],
        capture_output=True, text=True, cwd=ROOT, env=ENV, check=False)
    if out.returncode not in (0, 1):
        raise SystemExit(out.stderr)
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def _row(what: str, pub: dict[str, Any], pred: float, lo: float, hi: float,
         errs: dict[str, list[tuple[float, bool]]]) -> None:
    v = pub["value"]
    e = pred / v - 1
    inside = lo <= v <= hi
    errs.setdefault(f"{what} {pub['metric']}", []).append((abs(e), inside))
    print(f"| {what} | {pub['metric']} | {pub.get('prompt_len')}/{pub.get('output_len')} | "
          f"{pub['concurrency']} | {v:,.2f} | {pred:,.2f} ({lo:,.2f}–{hi:,.2f}) | "
          f"{e * 100:+.1f} % | {'in' if inside else '**out**'} |")


def main() -> None:
    before = json.loads((HERE / "h200-gpt-oss-before.json").read_text(encoding="utf-8"))
    reg = next(b for b in before["builds"] if b["preset"] == "gpt-oss-120b")
    rows = [r for r in tomllib.loads((HERE / "h200-gpt-oss-published.toml").read_text(
        encoding="utf-8"))["run"] if r.get("tp", 1) == 1 and r["preset"] == "gpt-oss-120b"
        and r.get("stat", "mean") == "mean"]
    errs: dict[str, list[tuple[float, bool]]] = {}
    print("| part | metric | prompt/output (nominal) | c | published | predicted (interval) "
          "| error | in? |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["concurrency"] != 1:
            continue
        ctx = r["prompt_len_mean"] + r["output_len_mean"] / 2
        if r["metric"] == "decode_tok_s":
            d = _nearest(reg["decode"], "context_len", ctx)
            _row("registered", r, d["predicted_tok_s"], d["predicted_low"],
                 d["predicted_high"], errs)
        elif r["metric"] == "ttft_ms":
            p = _nearest(reg["prefill"], "prompt_len", r["prompt_len_mean"])
            n = r["prompt_len_mean"]
            _row("registered", r, n / p["predicted_tok_s"] * 1e3, n / p["predicted_high"] * 1e3,
                 n / p["predicted_low"] * 1e3, errs)
    shapes: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in rows:
        key = (round(r["prompt_len_mean"]), round(r["output_len_mean"]))
        shapes.setdefault(key, []).append(r)
    with tempfile.TemporaryDirectory() as tmp:
        rep = Path(tmp) / "gpt-oss-120b"
        subprocess.run([sys.executable, "-m", "servelab", "synth", "replica", str(rep),
                        "--model", "gpt-oss-120b"], check=True, capture_output=True, cwd=ROOT,
                       env=ENV)
        for (prompt, output), rs in sorted(shapes.items()):
            conc = sorted({r["concurrency"] for r in rs if r["concurrency"] <= 256})
            print(f"plan at {prompt}/{output}, c={conc} ...", file=sys.stderr, flush=True)
            doc = _plan(rep, prompt, output, conc)
            pts = {p["concurrency"]: p for p in doc["load"]["points"]["points"]}
            for r in rs:
                p = pts.get(r["concurrency"])
                if p is None:
                    continue
                key = {"tpot_ms": "tpot_s", "ttft_ms": "ttft_s",
                       "output_tok_s_aggregate": "output_tok_s_per_gpu"}.get(r["metric"])
                if key is None:
                    continue
                f = p[key]
                k = 1e3 if r["metric"].endswith("_ms") else 1.0
                _row("same code, published shape", r, f["value"] * k, f["low"] * k,
                     f["high"] * k, errs)
    for what, es in errs.items():
        print(f"{what}: {len(es)} rows, median |error| "
              f"{statistics.median(e for e, _ in es) * 100:.1f} %, "
              f"max {max(e for e, _ in es) * 100:.1f} %, {sum(i for _, i in es)}/{len(es)} inside")


if __name__ == "__main__":
    main()
