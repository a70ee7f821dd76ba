"""Pre-registration of servelab's llama.cpp predictions for builds it then runs (issue 30).

Three sets, each a list of recipes with a role fixed before anything is measured
(``calibration``: its runs become rows of the priors table; ``check``: never enters it):

``cpu``: benchmarks/cpu/llamacpp-*.toml, two random model families (a llama-shaped and a
qwen2-shaped model of ~90 M parameters) at six GGUF file types each (F16, Q8_0, Q6_K, Q5_K_M,
Q4_K_M, Q4_0), served by llama-server with two threads on this host; the check set is the
whole qwen2 family (a family the calibration has not seen) and the llama Q5_K_M build (a GGUF
type it has not seen). benchmarks/cpu/calibrate_llamacpp.sh measures them.

``cpu3``: benchmarks/cpu/llamacpp-gemma3-*.toml, a third random family on the same host with
the same flags and lengths (Gemma-3-shaped, ~90 M parameters: 12 layers in Gemma 3's pattern
of five sliding-window layers then one global, tied embeddings) at the same six GGUF types;
every recipe a check (the host's llama.cpp calibration, llama and qwen2 at 2026-12-05.4.cpu,
has not seen the family). Fixed and predicted before it was measured; once scored, its first
pass joined the calibration (priors 2026-12-05.8), as the qwen2 check set's had, so a new
prediction for these recipes has seen them and scores nothing.

``h200``: benchmarks/gpu/llamacpp-*-h200.toml, full-size random-weight GGUFs (Llama-3-8B and
Qwen2.5-7B dimensions at the same six types, Llama-2-7B Q4_0, gpt-oss-20b MXFP4_MOE) served
by a CUDA llama-server on one H200 (benchmarks/gpu/llamacpp_h200.sh). Calibration: Llama-3-8B
at F16, Q8_0, Q6_K, Q4_K_M and Q4_0 and Qwen2.5-7B at F16, Q8_0 and Q4_K_M (two families, so
the levels have a leave-one-model-out width). Check: Llama-3-8B Q5_K_M and Qwen2.5-7B Q5_K_M
(a GGUF type the H200 calibration has not seen), Qwen2.5-7B Q6_K and Q4_0 (types seen on the
other family only), Llama-2-7B Q4_0 (a model the calibration has not seen; the model of
llama.cpp's published CUDA scoreboard) and gpt-oss-20b MXFP4_MOE (a family, a MoE and a type
the H200 calibration has not seen). The GGUFs live on the device, so ``predict`` plans
servelab's header replicas of the same builds (servelab.synth.gguf_replica: llama.cpp's
per-tensor types; llamacpp_h200.sh's GGUFs come from llama-quantize itself).

    .venv/bin/python benchmarks/prereg/llamacpp_sets.py predict SET OUT.json [--priors P]
        [--probe J]
    .venv/bin/python benchmarks/prereg/llamacpp_sets.py errors OUT.json EXPORT.json [EXPORT ...]
    .venv/bin/python benchmarks/prereg/llamacpp_sets.py calibration SET EXPORT.json OUT.json

``predict`` plans each recipe's GGUF with its flags (``servelab plan GGUF --engine llamacpp
-H HW -c C -np N [-fa F] --json --no-store``: the shipped priors only, or ``--priors``) at
the lengths its bench measures and writes the predictions, the fit's own number where
servelab prints none, the roofline bound, the servelab commit and the date (``--probe``: the
host's ceilings from a probe file, e.g. the one calibrate_llamacpp.sh writes in its quiet
window, instead of a probe taken now: the host's roofline then does not move with the load
at planning time). ``errors`` joins them with the measured points of a ``servelab export``
of the runs (more exports: repeated passes, one column each). ``calibration`` keeps the
calibration-role runs of an export (what benchmarks/priors/from_runs.py turns into priors
rows).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from builds import Point, fitted  # benchmarks/prereg/builds.py

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "benchmarks" / "cpu"
GPU = ROOT / "benchmarks" / "gpu"
TYPES = ("f16", "q8-0", "q6-k", "q5-k-m", "q4-k-m", "q4-0")
#: set -> (recipe folder, recipe name -> role), fixed before the measurements
SETS: dict[str, tuple[Path, dict[str, str]]] = {
    "cpu": (CPU, {
        **{f"llamacpp-llama-{t}": "calibration" for t in TYPES if t != "q5-k-m"},
        "llamacpp-llama-q5-k-m": "check",
        **{f"llamacpp-qwen2-{t}": "check" for t in TYPES},
    }),
    "cpu3": (CPU, {f"llamacpp-gemma3-{t}": "check" for t in TYPES}),
    "h200": (GPU, {
        **{f"llamacpp-llama3-8b-{t}-h200": "calibration" for t in TYPES if t != "q5-k-m"},
        "llamacpp-llama3-8b-q5-k-m-h200": "check",
        **{f"llamacpp-qwen2.5-coder-7b-{t}-h200": "calibration" for t in ("f16", "q8-0", "q4-k-m")},
        **{f"llamacpp-qwen2.5-coder-7b-{t}-h200": "check" for t in ("q6-k", "q5-k-m", "q4-0")},
        "llamacpp-llama2-7b-q4-0-h200": "check",
        "llamacpp-gpt-oss-20b-mxfp4-moe-h200": "check",
    }),
}


def _replica(rec: Any, tmp: Path) -> str:
    """A header replica of the device GGUF a recipe names (``<model>-<TYPE>.gguf``)."""
    from servelab.synth.gguf_replica import BUILDS, write_replica

    stem = Path(str(rec.model.path)).stem
    model, ftype = stem.rsplit("-", 1)
    return str(write_replica(BUILDS[model][0], ftype, tmp / f"{stem}.gguf"))


def plan(set_name: str, recipe: str, priors: str | None, probe: str | None,
         tmp: Path) -> list[dict[str, Any]]:
    """The recipe's predicted decode and prefill points (``servelab plan GGUF --json``)."""
    from servelab.serve.recipe import load_recipe
    from servelab.serve.resolved import resolve_model

    # the recipe's GGUF with its flags and bench lengths (a recipe planned as a recipe
    # takes the shipped priors only: --priors would not reach it)
    folder, roles = SETS[set_name]
    rec = load_recipe(folder / f"{recipe}.toml")
    model = _replica(rec, tmp) if set_name == "h200" else resolve_model(rec)[0]
    flags = rec.engine.flags
    lens = ",".join(str(n) for n in rec.bench.prompt_lens)
    cmd = [sys.executable, "-m", "servelab", "plan", model, "--engine", "llamacpp", "-H",
           rec.hardware or "host", "-c", str(flags.ctx_size), "-np", str(flags.parallel),
           "--prompt-lens", lens, "--json", "--no-store"]
    if flags.flash_attn:
        cmd += ["-fa", flags.flash_attn]
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
            p = Point(recipe, "llamacpp", rec.hardware or "host", kind, n, 0.0, "", roles[recipe])
            out.append({
                "recipe": recipe, "role": roles[recipe], "kind": kind, "length": n,
                "predicted_tok_s": row.get("predicted_tok_s"),
                "low": row.get("predicted_low"), "high": row.get("predicted_high"),
                "fitted_tok_s": fitted(p, doc, row, fit),
                "roofline_tok_s": row.get("roofline_tok_s"),
                "label": fit.get("label"),
                "kernel_path": (speed.get("kernel_path") or {}).get("name"),
                "bytes_per_token": row.get("bytes_per_token"),
            })
    return out


def predict(set_name: str, out: Path, priors: str | None, probe: str | None) -> int:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    roles = SETS[set_name][1]
    with tempfile.TemporaryDirectory() as tmp:
        points = [p for recipe in roles for p in plan(set_name, recipe, priors, probe, Path(tmp))]
    doc = {
        "schema": "servelab.prereg/1",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "servelab_commit": commit,
        "command": " ".join(["benchmarks/prereg/llamacpp_sets.py", "predict", set_name, str(out)]
                            + (["--priors", priors] if priors else [])
                            + (["--probe", probe] if probe else [])),
        "set": set_name,
        "roles": roles,
        "points": points,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


def measured(export: Path) -> dict[tuple[str, str, int], tuple[float, float, float, str]]:
    """(recipe, kind, length) -> (tok/s, CI low, CI high, flag) from a run export; the flag
    says why a point is not scored ("one request": no CI; "wide CI": over ±10 %)."""
    from servelab.points import PointKey
    from servelab.store.exchange import run_from_dict

    doc = json.loads(export.read_text(encoding="utf-8"))
    got: dict[tuple[str, str, int], tuple[float, float, float, str]] = {}
    kinds = {"decode_tok_s": "decode", "prefill_tok_s": "prefill"}
    for raw in doc["runs"]:
        run = run_from_dict(raw, source=str(export))
        for m in run.metrics:
            key = PointKey.parse(m.point) if m.name in kinds else None
            if key is None or key != PointKey(key.prompt_tokens, 1):  # single stream only
                continue
            lo, hi = m.ci_low if m.ci_low is not None else m.value, m.ci_high or m.value
            flag = ("one request" if m.n < 2
                    else "wide CI" if (hi - lo) / 2 / m.value > 0.10 else "")
            got[(run.recipe_name, kinds[m.name], key.prompt_tokens)] = (m.value, lo, hi, flag)
    return got


def errors(pred: Path, exports: list[Path]) -> int:
    """Markdown: measured (95 % CI) per pass, predicted (interval) or the fit's number, the
    error of each pass ("—" where a pass has no figure for the point), measured / bound of
    the first pass that has one; a flagged point (one request, or a CI over ±10 %) says so
    and is not scored (no error, no inside)."""
    doc = json.loads(pred.read_text(encoding="utf-8"))
    passes = [measured(e) for e in exports]
    print(f"servelab {doc['servelab_commit'][:10]}, {doc['date']}\n")
    heads = " | ".join(f"pass {i + 1} (95 % CI)" for i in range(len(passes)))
    print(f"| build | kind | len | role | {heads} | predicted (interval) | error "
          "| inside | measured / bound |")
    print("|---" * (8 + len(passes)) + "|")
    scored: dict[tuple[str, int], list[tuple[float, bool | None]]] = {}
    for r in doc["points"]:
        key = (r["recipe"], r["kind"], r["length"])
        got = [p.get(key) for p in passes]
        if not any(got):
            continue
        cells, errs, ins = [], [], []
        pr, fit, roof = r["predicted_tok_s"], r["fitted_tok_s"], r["roofline_tok_s"]
        ref = pr if pr is not None else fit
        for g in got:
            if g is None:
                cells.append("—")
                errs.append("—")
                ins.append("—")
                continue
            m, lo, hi, flag = g
            if not flag and ref is not None:
                inside = r["low"] <= m <= r["high"] if pr is not None else None
                scored.setdefault((r["kind"], r["length"]), []).append((m / ref - 1, inside))
            cells.append(f"{m:,.1f} ({lo:,.1f}-{hi:,.1f})" + (f" {flag}" if flag else ""))
            errs.append("—" if flag or ref is None else f"{m / ref - 1:+.1%}")
            ins.append("—" if flag else "yes" if pr is not None and r["low"] <= m <= r["high"]
                       else "no")
        if pr is None:
            ins = []
        pred = "no prediction" if pr is None else f"{pr:,.1f} ({r['low']:,.1f}-{r['high']:,.1f})"
        if pr is None and fit:
            pred += f"; fit says {fit:,.1f}"
        first = next(g for g in got if g is not None)
        bound = f"{first[0] / roof:.2f}" if roof else ""
        build = r["recipe"].removeprefix("llamacpp-").removesuffix("-h200")
        print(f"| {build} | {r['kind']} | {r['length']} "
              f"| {r['role']} | {' | '.join(cells)} | {pred} | {', '.join(errs)} "
              f"| {', '.join(ins)} | {bound} |")
    print("\n| kind | len | scored points (all passes) | median / max abs. error | mean error "
          "| inside the printed interval |")
    print("|---" * 6 + "|")
    for (kind, n), vals in sorted(scored.items()):
        e = sorted(abs(v) for v, _ in vals)
        mid = (e[(len(e) - 1) // 2] + e[len(e) // 2]) / 2
        judged = [i for _, i in vals if i is not None]
        cover = f"{sum(judged)} of {len(judged)}" if judged else "no prediction printed"
        print(f"| {kind} | {n} | {len(vals)} | {mid:.1%} / {e[-1]:.1%} "
              f"| {sum(v for v, _ in vals) / len(vals):+.1%} | {cover} |")
    return 0


def calibration(set_name: str, export: Path, out: Path) -> int:
    """``export`` less the runs of the check set (the rows the priors table may take)."""
    roles = SETS[set_name][1]
    doc = json.loads(export.read_text(encoding="utf-8"))
    runs = [r for r in doc["runs"] if roles.get(r["recipe_name"]) == "calibration"]
    out.write_text(json.dumps({**doc, "runs": runs}, indent=1) + "\n", encoding="utf-8")
    print(f"{len(runs)} calibration runs of {len(doc['runs'])} -> {out}")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) >= 3 and args[0] == "predict" and args[1] in SETS:
        pri = args[args.index("--priors") + 1] if "--priors" in args else None
        probe = args[args.index("--probe") + 1] if "--probe" in args else None
        sys.exit(predict(args[1], Path(args[2]), pri, probe))
    if len(args) >= 3 and args[0] == "errors":
        sys.exit(errors(Path(args[1]), [Path(a) for a in args[2:]]))
    if len(args) == 4 and args[0] == "calibration" and args[1] in SETS:
        sys.exit(calibration(args[1], Path(args[2]), Path(args[3])))
    sys.exit(__doc__)
