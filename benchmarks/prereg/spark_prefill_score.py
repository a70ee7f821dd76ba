"""Score the pre-registered Spark predictions (benchmarks/prereg/spark-prefill/before.json,
commit 21b2c5d) against the published vLLM figures collected after it
(benchmarks/prereg/spark-prefill/published.toml).

    .venv/bin/python benchmarks/prereg/spark_prefill_score.py   # a Markdown table

Each published row is matched to the registered prediction of the same preset and shape:

* ``prefill_tok_s`` at one stream: the single-stream prefill at that prompt length;
* ``ttft_ms`` at one stream: that prompt over the single-stream prefill (the prediction has no
  request overhead beside it);
* ``decode_tok_s`` at one stream: decode at the row's prompt length (1,024 where none is
  stated, said in the row);
* ``output_tok_s_aggregate`` from llama-benchy ("tg": the generation phase only, every stream
  together): clients / predicted TPOT at 1,024-token prompts, the same decode-phase rate;
* aggregate prefill over several streams has no registered counterpart and is listed only.

Error = predicted / published − 1; "in" = the published figure lies inside the registered
interval. A row the registration has no prediction for (a build other than the registered
preset's storage) says so and is not scored.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tomllib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "spark-prefill"


def _by_len(points: list[dict[str, Any]], key: str, n: int) -> dict[str, Any] | None:
    return next((p for p in points if p[key] == n), None)


def score(row: dict[str, Any], build: dict[str, Any] | None) -> dict[str, Any]:
    out = {"preset": row["preset"], "metric": row["metric"], "len": row.get("prompt_len"),
           "c": row.get("concurrency", 1), "published": row["value"],
           "exact": row.get("exact", True), "url": row["url"], "pred": None, "low": None,
           "high": None, "why": ""}
    if build is None:
        out["why"] = "no registered prediction for this preset"
        return out
    m, c, n = row["metric"], row.get("concurrency", 1), row.get("prompt_len")
    if m == "prefill_tok_s" and c == 1 and n is not None:
        p = _by_len(build["prefill"], "prompt_len", n)
        if p is not None:
            out.update(pred=p["predicted_tok_s"], low=p["predicted_low"],
                       high=p["predicted_high"])
    elif m == "ttft_ms" and c == 1 and n is not None:
        p = _by_len(build["prefill"], "prompt_len", n)
        if p is not None:
            out.update(pred=n / p["predicted_tok_s"] * 1e3, low=n / p["predicted_high"] * 1e3,
                       high=n / p["predicted_low"] * 1e3)
    elif m == "decode_tok_s" and c == 1:
        d = _by_len(build["decode"], "context_len", n or 1024)
        if d is not None:
            out.update(pred=d["predicted_tok_s"], low=d["predicted_low"],
                       high=d["predicted_high"])
            if n is None:
                out["why"] = "no prompt length stated: decode at 1,024"
    elif m == "output_tok_s_aggregate" and "llama-benchy" in row.get("tool", ""):
        lp = next((p for p in build["load"] if p["concurrency"] == c and
                   p["prompt_len"] == (n or 1024)), None)
        if lp is not None and lp["tpot_s"] is not None:
            t = lp["tpot_s"]
            out.update(pred=c / t["value"], low=c / t["high"], high=c / t["low"])
    if out["pred"] is None and not out["why"]:
        out["why"] = "no registered counterpart (aggregate prefill, or a shape not registered)"
    if out["pred"] is not None:
        out["error"] = out["pred"] / out["published"] - 1
        out["inside"] = out["low"] <= out["published"] <= out["high"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.parse_args()
    before = json.loads((HERE / "before.json").read_text(encoding="utf-8"))
    rows = tomllib.loads((HERE / "published.toml").read_text(encoding="utf-8"))["run"]
    builds = {b["preset"]: b for b in before["builds"]}
    scored = [score(r, builds.get(r["preset"])) for r in rows]
    # the registered Qwen3.6 preset is the FP8 per-channel build; a BF16 row is another build
    for s, r in zip(scored, rows, strict=True):
        if r["preset"] == "qwen3.6-35b-a3b" and "FP8" not in r["build"].upper():
            s.update(pred=None, error=None, inside=None,
                     why="BF16 build; the registered qwen3.6-35b-a3b preset is FP8 per channel")
    print("| preset | metric | prompt | c | published | predicted (interval) | error | in? "
          "| exact build | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in scored:
        pred = "–" if s["pred"] is None else \
            f"{s['pred']:,.1f} ({s['low']:,.1f}–{s['high']:,.1f})"
        err = "–" if s.get("error") is None else f"{s['error'] * 100:+.1f} %"
        ins = "–" if s.get("inside") is None else ("in" if s["inside"] else "**out**")
        print(f"| {s['preset']} | {s['metric']} | {s['len'] or '–'} | {s['c']} | "
              f"{s['published']:,.1f} | {pred} | {err} | {ins} | "
              f"{'yes' if s['exact'] else 'no'} | {s['why']} |")
    for label, keep in (("every scored row", lambda s: True),
                        ("exact builds", lambda s: s["exact"])):
        for metric in ("prefill_tok_s", "ttft_ms", "decode_tok_s", "output_tok_s_aggregate"):
            errs = [abs(s["error"]) for s in scored if s.get("error") is not None and
                    s["metric"] == metric and keep(s)]
            ins = [s["inside"] for s in scored if s.get("error") is not None and
                   s["metric"] == metric and keep(s)]
            if errs:
                print(f"{label}, {metric}: {len(errs)} rows, median |error| "
                      f"{statistics.median(errs) * 100:.1f} %, max {max(errs) * 100:.1f} %, "
                      f"{sum(ins)}/{len(ins)} inside")


if __name__ == "__main__":
    main()
