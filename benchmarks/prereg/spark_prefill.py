"""Pre-register what ``servelab plan`` predicts on a DGX Spark under vLLM once prefill comes
from the fitted rooflines (issue 39 item 4, servelab.predict.ops_fitted), before any published
Spark prefill or load figure outside the fit is looked up to score it.

    PYTHONPATH=src .venv/bin/python benchmarks/prereg/spark_prefill.py \\
        -o benchmarks/prereg/spark-prefill/before.json

For every replica preset (published dimensions, each in its published storage) that fits one
Spark, ``servelab plan REPLICA -H dgx-spark --no-store --json`` at prompts of 512, 1,024,
2,048, 4,096 and 8,192 tokens: the single-stream prefill (tok/s, its interval, source and
basis) and decode at the same contexts; and for each, ``--concurrency 1,2,4,8,16,32,64
--output-len 128 --prompt-lens 1024`` (closed loops of 1,024-token prompts, llama-benchy's
``pp1024 tg128`` shape): TPOT, TTFT and output tok/s with their intervals. Nothing here is
fitted: the efficiencies are the shipped ones (servelab/ops/data/efficiency.json, fitted on the
points benchmarks/ops/published.py lists, the Spark's prefill points all Qwen3.6).

``-H HW --presets A,B``: the same for other hardware (the H200's gpt-oss builds, whose MXFP4
experts servelab's own H200 tables lack, through AIConfigurator's H200 tables).

Scored by benchmarks/prereg/spark_prefill_score.py against published figures entered after
this file's commit (benchmarks/prereg/spark-prefill/published.toml).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ("gpt-oss-120b", "gpt-oss-20b", "qwen3.6-35b-a3b", "qwen2.5-7b", "mistral-7b",
           "phi-4", "gemma-3-27b", "gemma-3-12b", "gemma-3-4b", "nemotron-nano-9b-v2",
           "mixtral-8x7b")
LENS = "512,1024,2048,4096,8192"
LOAD = ("--concurrency", "1,2,4,8,16,32,64", "--output-len", "128", "--prompt-lens", "1024")


def _servelab(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True,
                         text=True, cwd=ROOT, check=False,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin",
                              "COLUMNS": "100"})
    if out.returncode not in (0, 1) or not out.stdout.strip():
        raise SystemExit(f"servelab {' '.join(args)}: exit {out.returncode}: {out.stderr}")
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def _band(v: Any) -> dict[str, Any] | None:
    return None if v is None else {k: v.get(k) for k in ("value", "low", "high")}


def predict(preset: str, work: Path, hardware: str = "dgx-spark") -> dict[str, Any]:
    rep = work / preset
    subprocess.run([sys.executable, "-m", "servelab", "synth", "replica", str(rep), "--model",
                    preset], check=True, capture_output=True, cwd=ROOT,
                   env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    base = ("plan", str(rep), "-H", hardware, "--no-store", "--json")
    single = _servelab(*base, "--prompt-lens", LENS)
    sp = single["speed"]
    row: dict[str, Any] = {
        "preset": preset, "fits": single["fits"],
        "weights_gib": single["weights"].get("resident_bytes", 0) / 2**30,
        "prefill_fit": sp["prefill_fit"] and sp["prefill_fit"].get("label"),
        "prefill_level": sp["prefill_fit"] and sp["prefill_fit"].get("level"),
        "decode_fit": sp["decode_fit"] and sp["decode_fit"].get("label"),
        "prefill": [{k: p.get(k) for k in ("prompt_len", "predicted_tok_s", "predicted_low",
                                          "predicted_high", "roofline_tok_s")}
                    for p in sp["prefill"]],
        "decode": [{k: d.get(k) for k in ("context_len", "predicted_tok_s", "predicted_low",
                                         "predicted_high")} for d in sp["decode"]],
        "notes": [n for n in sp.get("notes", []) if n.startswith("prefill")],
    }
    loaded = _servelab(*base, *LOAD)
    load = loaded.get("load") or {}
    pts = (load.get("points") or {}).get("points") or []
    row["load"] = [{"concurrency": p["concurrency"], "prompt_len": p["prompt_len"],
                    "tpot_s": _band(p.get("tpot_s")), "ttft_s": _band(p.get("ttft_s")),
                    "output_tok_s": _band(p.get("output_tok_s_per_gpu")),
                    "no_prediction": p.get("no_prediction")} for p in pts]
    row["load_refused"] = load.get("no_prediction") or (None if pts else "no load section")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("-H", "--hardware", default="dgx-spark")
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated")
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT, check=True).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in a.presets.split(","):
            print(f"{preset} ...", file=sys.stderr, flush=True)
            rows.append(predict(preset, Path(tmp), a.hardware))
    doc = {"written": datetime.now(UTC).isoformat(timespec="seconds"), "head": commit,
           "hardware": a.hardware,
           "command": "PYTHONPATH=src .venv/bin/python benchmarks/prereg/spark_prefill.py "
                      f"-o {a.out} -H {a.hardware} --presets {a.presets}", "builds": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = a.out.with_suffix(".tmp")
    tmp_out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    tmp_out.replace(a.out)
    for r in rows:
        pre = {p["prompt_len"]: p["predicted_tok_s"] for p in r["prefill"]}
        print(f"{r['preset']:>22}  {r['prefill_level']}  " +
              "  ".join(f"{k}:{'-' if v is None else round(v)}" for k, v in pre.items()))


if __name__ == "__main__":
    main()
