"""Pre-registration of servelab's llama.cpp predictions on this host's CPU (issue 30).

The builds are the twelve recipes benchmarks/cpu/llamacpp-*.toml: two random model families
(a llama-shaped and a qwen2-shaped model of ~90 M parameters) at six GGUF file types each
(F16, Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0), served by llama-server with two threads.
``ROLES`` fixes, before anything is measured, which builds calibrate (their runs become rows
of the priors table) and which are the check set (never enter it): the whole qwen2 family
(a family the calibration has not seen) and the llama Q5_K_M build (a GGUF type it has not
seen). benchmarks/cpu/calibrate_llamacpp.sh measures them.

    .venv/bin/python benchmarks/prereg/cpu_llamacpp.py predict OUT.json [--priors P] [--probe J]
    .venv/bin/python benchmarks/prereg/cpu_llamacpp.py errors OUT.json EXPORT.json [EXPORT ...]
    .venv/bin/python benchmarks/prereg/cpu_llamacpp.py calibration EXPORT.json OUT.json

``predict`` plans each recipe's GGUF with its flags (``servelab plan GGUF --engine llamacpp
-H host -c C -np N --json --no-store``: the shipped priors only, or ``--priors``) at the
lengths its bench measures and writes the predictions, the fit's own
number where servelab prints none, the roofline bound, the servelab commit and the date
(``--probe``: the host's ceilings from a probe file, e.g. the one calibrate_llamacpp.sh
writes in its quiet window, instead of a probe taken now: the host's roofline then does not
move with the load at planning time).
``errors`` joins them with the measured points of a ``servelab export`` of the runs (more
exports: repeated passes, one column each). ``calibration`` keeps the calibration-role runs
of an export (what benchmarks/priors/from_runs.py turns into priors rows).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from builds import Point, fitted  # benchmarks/prereg/builds.py

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "benchmarks" / "cpu"
TYPES = ("f16", "q8-0", "q6-k", "q5-k-m", "q4-k-m", "q4-0")
#: recipe name -> role, fixed before the measurements
ROLES = {
    **{f"llamacpp-llama-{t}": "calibration" for t in TYPES if t != "q5-k-m"},
    "llamacpp-llama-q5-k-m": "check",
    **{f"llamacpp-qwen2-{t}": "check" for t in TYPES},
}


def plan(recipe: str, priors: str | None, probe: str | None) -> list[dict[str, Any]]:
    """The recipe's predicted decode and prefill points (``servelab plan RECIPE --json``)."""
    from servelab.serve.launch import resolve_model
    from servelab.serve.recipe import load_recipe

    # the recipe's GGUF with its flags and bench lengths (a recipe planned as a recipe
    # takes the shipped priors only: --priors would not reach it)
    rec = load_recipe(CPU / f"{recipe}.toml")
    model, _ = resolve_model(rec)
    flags = rec.engine.flags
    lens = ",".join(str(n) for n in rec.bench.prompt_lens)
    cmd = [sys.executable, "-m", "servelab", "plan", model, "--engine", "llamacpp", "-H",
           rec.hardware or "host", "-c", str(flags.ctx_size), "-np", str(flags.parallel),
           "--prompt-lens", lens, "--json", "--no-store"]
    if priors:
        cmd += ["--priors", priors]
    if probe:
        cmd += ["--probe", probe]
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    speed, out = doc["speed"], []
    for kind, key in (("decode", "context_len"), ("prefill", "prompt_len")):
        fit = speed.get(f"{kind}_fit") or {}
        for row in speed[kind]:
            n = int(row[key])
            p = Point(recipe, "llamacpp", "host", kind, n, 0.0, "", ROLES[recipe])
            out.append({
                "recipe": recipe, "role": ROLES[recipe], "kind": kind, "length": n,
                "predicted_tok_s": row.get("predicted_tok_s"),
                "low": row.get("predicted_low"), "high": row.get("predicted_high"),
                "fitted_tok_s": fitted(p, doc, row, fit),
                "roofline_tok_s": row.get("roofline_tok_s"),
                "label": fit.get("label"),
                "kernel_path": (speed.get("kernel_path") or {}).get("name"),
                "bytes_per_token": row.get("bytes_per_token"),
            })
    return out


def predict(out: Path, priors: str | None, probe: str | None) -> int:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    points = [p for recipe in ROLES for p in plan(recipe, priors, probe)]
    doc = {
        "schema": "servelab.prereg/1",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "servelab_commit": commit,
        "command": " ".join(["benchmarks/prereg/cpu_llamacpp.py", "predict", str(out)]
                            + (["--priors", priors] if priors else [])
                            + (["--probe", probe] if probe else [])),
        "roles": ROLES,
        "points": points,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


def measured(export: Path) -> dict[tuple[str, str, int], tuple[float, float, float, str]]:
    """(recipe, kind, length) -> (tok/s, CI low, CI high, load note) from a run export."""
    from servelab.points import PointKey
    from servelab.store.exchange import run_from_dict

    doc = json.loads(export.read_text(encoding="utf-8"))
    got: dict[tuple[str, str, int], tuple[float, float, float, str]] = {}
    for raw in doc["runs"]:
        run = run_from_dict(raw, source=str(export))
        for kind in ("decode", "prefill"):
            for n in (128, 512):
                m = run.metric(f"{kind}_tok_s", PointKey(n, 1).label)
                if m is not None:
                    lo, hi = m.ci_low if m.ci_low is not None else m.value, m.ci_high or m.value
                    got[(run.recipe_name, kind, n)] = (m.value, lo, hi, "")
    return got


def errors(pred: Path, exports: list[Path]) -> int:
    """Markdown: measured (95 % CI) per pass, predicted (interval) or the fit's number, the
    error of the first pass (and of the others), measured / bound."""
    doc = json.loads(pred.read_text(encoding="utf-8"))
    passes = [measured(e) for e in exports]
    print(f"servelab {doc['servelab_commit'][:10]}, {doc['date']}\n")
    heads = " | ".join(f"pass {i + 1} (95 % CI)" for i in range(len(passes)))
    print(f"| build | kind | len | role | {heads} | predicted (interval) | error "
          "| inside | measured / bound |")
    print("|---" * (8 + len(passes)) + "|")
    for r in doc["points"]:
        key = (r["recipe"], r["kind"], r["length"])
        got = [p[key] for p in passes if key in p]
        if not got:
            continue
        cells, errs, ins = [], [], []
        pr, fit, roof = r["predicted_tok_s"], r["fitted_tok_s"], r["roofline_tok_s"]
        for m, lo, hi, _ in got:
            wide = (hi - lo) / 2 / m > 0.10  # a rate whose CI is wide is flagged
            cells.append(f"{m:,.1f} ({lo:,.1f}-{hi:,.1f})" + (" wide CI" if wide else ""))
            ref = pr if pr is not None else fit
            errs.append("" if ref is None else f"{m / ref - 1:+.1%}")
            if pr is not None:
                ins.append("yes" if r["low"] <= m <= r["high"] else "no")
        pred = "no prediction" if pr is None else f"{pr:,.1f} ({r['low']:,.1f}-{r['high']:,.1f})"
        if pr is None and fit:
            pred += f"; fit says {fit:,.1f}"
        bound = f"{got[0][0] / roof:.2f}" if roof else ""
        print(f"| {r['recipe'].removeprefix('llamacpp-')} | {r['kind']} | {r['length']} "
              f"| {r['role']} | {' | '.join(cells)} | {pred} | {', '.join(errs)} "
              f"| {', '.join(ins)} | {bound} |")
    return 0


def calibration(export: Path, out: Path) -> int:
    """``export`` less the runs of the check set (the rows the priors table may take)."""
    doc = json.loads(export.read_text(encoding="utf-8"))
    runs = [r for r in doc["runs"] if ROLES.get(r["recipe_name"]) == "calibration"]
    out.write_text(json.dumps({**doc, "runs": runs}, indent=1) + "\n", encoding="utf-8")
    print(f"{len(runs)} calibration runs of {len(doc['runs'])} -> {out}")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "predict":
        pri = args[args.index("--priors") + 1] if "--priors" in args else None
        probe = args[args.index("--probe") + 1] if "--probe" in args else None
        sys.exit(predict(Path(args[1]), pri, probe))
    if len(args) >= 3 and args[0] == "errors":
        sys.exit(errors(Path(args[1]), [Path(a) for a in args[2:]]))
    if len(args) == 3 and args[0] == "calibration":
        sys.exit(calibration(Path(args[1]), Path(args[2])))
    sys.exit(__doc__)
