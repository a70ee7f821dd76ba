"""`servelab plan -H h100` (the plan path: servelab's composition over AIConfigurator's H100
tables with the H200-fitted transfer, :mod:`servelab.predict.ops_aic`) against servelab's own
H100 runs, scored post hoc.

    .venv/bin/python benchmarks/ops/plan_h100_check.py \\
        benchmarks/gpu/results/h100-2026-12-05/runs.json [--load]

The runs (recipes benchmarks/gpu/*-bf16-h100.toml: Llama-3.1-8B, Qwen3-30B-A3B and Gemma-3-27B
text decoder, BF16 at published dimensions, vLLM 0.26.0 with its dummy loader on one H100 80GB
HBM3) were measured after the same composition's predictions were pre-registered
(benchmarks/prereg/2026-12-05-ops-aic-before.json, scored by
benchmarks/prereg/ops_aic_h100_score.py); this script scores what `plan` prints, which came
after the runs: post hoc, nothing tuned on them.

Per run: its checkpoint is rebuilt as the header replica the run served (the config
benchmarks/gpu/gen_checkpoint.py's ARCHS names, written by servelab.synth.replica; the
script stops unless its header hash is the run's ``checkpoint_header_hash``), then planned
through the CLI with the recipe's vLLM flags (``--max-model-len``,
``--kv-cache-memory-bytes``) and ``--engine-version`` the run's. Single stream: the measured
mean TPOT against the plan's decode at the mean decode context (prompt + 64 of the 128 output
tokens) and the measured mean TTFT against the plan's prefill at the prompt; ``in`` says
whether the measured value is inside the printed interval. ``--load`` adds the plan's
``--concurrency`` points at each measured (prompt, clients) against the closed-loop sweep
(TPOT, TTFT, output tok/s).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
sys.path.insert(0, str(ROOT / "benchmarks" / "load"))

from check_sweeps import measured_run  # noqa: E402
from gen_checkpoint import ARCHS  # noqa: E402

from servelab.synth.replica import write_replica  # noqa: E402

OUTPUT = 128
HALF_OUTPUT = 64


def servelab(*args: str) -> dict[str, Any]:
    """One servelab command's JSON document (exit 0 or 1: a plan that says something)."""
    res = subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True,
                         text=True, check=False)
    if res.returncode not in (0, 1):
        raise SystemExit(f"servelab {' '.join(args)}: exit {res.returncode}\n{res.stderr}")
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def replica(run: Mapping[str, Any], root: Path) -> Path:
    """The run's checkpoint as the header replica it served (hash checked)."""
    arch = str(run["model_id"]).removesuffix("-bf16-random")
    out = root / arch
    write_replica(out, json.loads(json.dumps(ARCHS[arch])))
    got = servelab("inspect", str(out), "--json")["source"]["header_sha256"]
    if got != run["checkpoint_header_hash"]:
        raise SystemExit(f"{arch}: replica header hash {got[:12]} is not the run's "
                         f"{str(run['checkpoint_header_hash'])[:12]}")
    return out


def plan_args(run: Mapping[str, Any], path: Path, prompts: Sequence[int]) -> list[str]:
    flags = tomllib.loads(run["recipe_text"])["engine"]["flags"]
    return ["plan", str(path), "-H", str(run["hardware"]), "--json", "--no-store",
            "--engine-version", str(run["engine_version"]),
            "--max-model-len", str(flags["max_model_len"]),
            "--kv-cache-memory-bytes", str(flags["kv_cache_memory_bytes"]),
            "--prompt-lens", ",".join(str(p) for p in prompts)]


def _inside(x: float, lo: float, hi: float) -> str:
    return "in" if lo <= x <= hi else "OUT"


def single(name: str, doc: Mapping[str, Any], meas: Mapping[tuple[int, int], Any],
           errs: list[float], hits: list[bool]) -> list[str]:
    sp = doc["speed"]
    dec = {d["context_len"]: d for d in sp["decode"]}
    pre = {p["prompt_len"]: p for p in sp["prefill"]}
    rows = []
    for (p, c), m in sorted(meas.items()):
        if c != 1:
            continue
        d, f = dec[p + HALF_OUTPUT], pre[p]
        tpot, ttft = m["tpot"] * 1e3, m["ttft"] * 1e3
        t_ms = 1e3 / d["predicted_tok_s"]
        t_lo, t_hi = 1e3 / d["predicted_high"], 1e3 / d["predicted_low"]
        f_ms = p / f["predicted_tok_s"] * 1e3
        f_lo, f_hi = p / f["predicted_high"] * 1e3, p / f["predicted_low"] * 1e3
        errs += [abs(t_ms / tpot - 1), abs(f_ms / ttft - 1)]
        hits += [t_lo <= tpot <= t_hi, f_lo <= ttft <= f_hi]
        rows.append(f"| {name} | {p:,} | {tpot:.2f} | {t_ms:.2f} ({t_lo:.2f}–{t_hi:.2f}) | "
                    f"{t_ms / tpot - 1:+.1%} | {_inside(tpot, t_lo, t_hi)} | {ttft:.1f} | "
                    f"{f_ms:.1f} ({f_lo:.1f}–{f_hi:.1f}) | {f_ms / ttft - 1:+.1%} | "
                    f"{_inside(ttft, f_lo, f_hi)} |")
    return rows


def load(name: str, doc: Mapping[str, Any], meas: Mapping[tuple[int, int], Any]) -> list[str]:
    pts = {(q["prompt_len"], q["concurrency"]): q for q in doc["load"]["points"]["points"]}
    rows = []
    for (p, c), m in sorted(meas.items()):
        q = pts.get((p, c))
        if q is None or q["no_prediction"]:
            rows.append(f"| {name} | {p:,} | {c} | no load prediction |")
            continue
        cells = []
        for key, mv, scale in (("tpot_s", m["tpot"], 1e3), ("ttft_s", m["ttft"], 1e3),
                               ("output_tok_s_per_gpu", m["per_gpu"], 1.0)):
            v = q[key]
            cells.append(f"{mv * scale:,.1f} | {v['value'] * scale:,.1f} "
                         f"{v['value'] / mv - 1:+.1%} "
                         f"{_inside(mv, v['low'], v['high'])}")
        rows.append(f"| {name} | {p:,} | {c} | " + " | ".join(cells) + " |")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    with_load = "--load" in args
    files = [a for a in args if a != "--load"]
    if len(files) != 1:
        raise SystemExit(__doc__)
    runs = json.loads(Path(files[0]).read_text(encoding="utf-8"))["runs"]
    errs: list[float] = []
    hits: list[bool] = []
    single_rows: list[str] = []
    load_rows: list[str] = []
    src = ""
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            name = str(run["model_id"]).removesuffix("-bf16-random")
            meas = measured_run(run, OUTPUT)
            prompts = sorted({p for p, _ in meas} | {p + HALF_OUTPUT for p, _ in meas})
            path = replica(run, Path(tmp))
            doc = servelab(*plan_args(run, path, prompts))
            fit = doc["speed"]["decode_fit"]
            if fit["level"] != "operator model":
                raise SystemExit(f"{name}: plan did not use the operator model: "
                                 f"{doc['speed']['notes']}")
            src = fit["source"]
            single_rows += single(name, doc, meas, errs, hits)
            if with_load:
                conc = sorted({c for _, c in meas})
                ldoc = servelab(*plan_args(run, path, sorted({p for p, _ in meas})),
                                "--concurrency", ",".join(map(str, conc)),
                                "--output-len", str(OUTPUT))
                load_rows += load(name, ldoc, meas)
    print(f"plan's source: {src}\n")
    print("| build | prompt | TPOT ms measured | plan (interval) | error | | TTFT ms measured "
          "| plan (interval) | error | |")
    print("|---|---:|---:|---|---:|---|---:|---|---:|---|")
    print("\n".join(single_rows))
    print(f"\nsingle stream (TPOT and TTFT): median |error| {statistics.median(errs):.1%}, "
          f"max {max(errs):.1%}, n={len(errs)}; inside the printed interval: "
          f"{sum(hits)} of {len(hits)}")
    if with_load:
        print("\n| build | prompt | clients | TPOT ms measured | plan | TTFT ms measured | "
              "plan | out tok/s measured | plan |")
        print("|---|---:|---:|---:|---|---:|---|---:|---|")
        print("\n".join(load_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
