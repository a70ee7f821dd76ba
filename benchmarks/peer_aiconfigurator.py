"""servelab's operator model against every H200 vLLM single-stream point the project holds,
with AIConfigurator's prediction for the same points side by side (issue 39).

    .venv/bin/python benchmarks/peer_aiconfigurator.py [--aic-python /tmp/aic-venv/bin/python]
        [--isolation-us X] [--markdown]

The points are the shipped priors' H200 vLLM 0.26.0 rows (servelab.predict.priors: servelab's
own runs, benchmarks/gpu/results/): single-stream decode (1000 / TPOT) and prefill
(prompt / TTFT) at 512, 2,048 and 8,192 tokens, and the profiled device-only decode steps.
Each build is rebuilt as an operator model from the config gen_checkpoint.py wrote for it
(benchmarks/ops/builds.py) and predicted from the shipped H200 operator tables
(src/servelab/ops/data/h200-vllm-0.26.0):

* ``ops``: the operator sum alone (decode: one step at the prompt plus half the output
  as context; prefill: one step of the whole prompt, vLLM's 8,192-token budget holding it);
* ``ops+c``: plus the engine's per-step overhead the operators do not contain, one constant
  for decode and one for prefill, each the median of (measured - ops) over every OTHER
  family's points (the build's whole family is left out of its own correction);
* ``aic``: AIConfigurator 0.12.0's ``predict_decode_latency(1, L, 2)`` /
  ``predict_prefill_latency(1, L)`` on h200_sxm with its vLLM tables (0.24.0), the same config
  written as a local model, FP8 builds as ``fp8_block`` GEMM and MoE; run through
  benchmarks/ops/aic_predict.py under ``--aic-python`` (the extra's venv). Where
  AIConfigurator refuses an architecture, the row says so.

``--isolation-us``: subtract this per operator call (the timing overhead an operator measured
alone carries; benchmarks/ops/compose_check.py measures it); default: the value recorded in
benchmarks/ops/results/compose-h200.json when present, else 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "ops"))

from builds import build  # noqa: E402

from servelab.ops.costs import Costs  # noqa: E402
from servelab.ops.step import EngineSteps, StepShape, step_time  # noqa: E402
from servelab.ops.tables import shipped  # noqa: E402
from servelab.predict.priors import load_priors  # noqa: E402

#: Output tokens of the stored single-stream runs (their recipes: 128): the decode step's
#: context is the prompt plus half of them.
HALF_OUTPUT = 64
COMPOSE = HERE / "ops" / "results" / "compose-h200.json"


@dataclass
class Point:
    build: str
    family: str
    kind: str
    length: int
    measured_ms: float
    device_only: bool
    eager: bool
    ops_ms: float = 0.0
    corrected_ms: float = 0.0
    aic_ms: float | None = None
    aic_note: str = ""


def _err(pred: float, meas: float) -> float:
    return pred / meas - 1.0


def points() -> list[Point]:
    out = []
    for s in load_priors().samples:
        if s.hardware != "h200" or s.engine != "vllm" or s.spec_method:
            continue
        out.append(Point(str(s.build), s.build.family if hasattr(s.build, "family") else "",
                         s.kind, s.length, s.seconds * 1e3, s.device_only, s.eager))
    fam = {str(s.build): _family(s) for s in load_priors().samples}
    for p in out:
        p.family = fam[p.build]
    return out


def _family(sample: Any) -> str:
    fam = getattr(sample, "family", None)
    if fam:
        return str(fam)
    return str(getattr(sample.build, "family", ""))


def predict_ops(ps: Sequence[Point], isolation_ms: float) -> None:
    costs = Costs([shipped()["h200-vllm-0.26.0"]])
    models: dict[str, Any] = {}
    for p in ps:
        b = build(p.build)
        if b is None:
            raise SystemExit(f"no operator model for build {p.build}")
        m = models.setdefault(p.build, b.model())
        if p.kind == "decode":
            st = step_time(m, costs, StepShape.decode(1, p.length + HALF_OUTPUT),
                           EngineSteps(isolation_ms=isolation_ms))
            p.ops_ms = st.device_ms if p.device_only else st.total_ms
        else:
            st = step_time(m, costs, StepShape.prefill(p.length),
                           EngineSteps(cuda_graph_max=0, isolation_ms=isolation_ms))
            p.ops_ms = st.total_ms


def correct(ps: Sequence[Point]) -> dict[str, dict[str, float]]:
    """Leave-family-out engine overhead per kind; returns the constant used per family."""
    used: dict[str, dict[str, float]] = defaultdict(dict)
    for p in ps:
        if p.device_only:
            p.corrected_ms = p.ops_ms
            continue
        others = [q.measured_ms - q.ops_ms for q in ps
                  if q.kind == p.kind and q.family != p.family and not q.device_only]
        c = statistics.median(others) if others else 0.0
        used[p.family][p.kind] = c
        p.corrected_ms = p.ops_ms + c
    return used


def predict_aic(ps: Sequence[Point], aic_python: str) -> str:
    req: dict[str, Any] = {"system": "h200_sxm", "backend": "vllm", "builds": []}
    by_build: dict[str, list[Point]] = defaultdict(list)
    for p in ps:
        if not p.device_only:
            by_build[p.build].append(p)
    for name, pts in by_build.items():
        b = build(name)
        assert b is not None
        q = "fp8_block" if b.fmt == "fp8-block" else None
        req["builds"].append({"name": name, "config": b.config, "gemm_quant": q,
                              "moe_quant": q, "points": [{"kind": p.kind, "length": p.length}
                                                         for p in pts]})
    try:
        proc = subprocess.run([aic_python, str(HERE / "ops" / "aic_predict.py")],
                              input=json.dumps(req), capture_output=True, text=True,
                              timeout=1800, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        for p in ps:
            p.aic_note = "AIConfigurator not run"
        return f"AIConfigurator not run: {e}"
    res = json.loads(proc.stdout)
    for r in res["results"]:
        pts = by_build[r["name"]]
        if "error" in r:
            for p in pts:
                p.aic_note = r["error"].split(".")[0][:90]
            continue
        got = {(q["kind"], q["length"]): q["ms"] for q in r["points"]}
        for p in pts:
            p.aic_ms = got.get((p.kind, p.length))
    return f"aiconfigurator-core {res.get('aiconfigurator_core')}"


def _stats(errs: list[float]) -> str:
    if not errs:
        return "—"
    a = [abs(e) for e in errs]
    return f"{statistics.median(a):.1%} / {max(a):.1%} (n={len(a)})"


def report(ps: Sequence[Point], used: dict[str, dict[str, float]], isolation_ms: float,
           aic_label: str, markdown: bool) -> None:
    print(f"operator tables: {shipped()['h200-vllm-0.26.0'].provenance.label()}; "
          f"isolation adjustment {isolation_ms * 1e3:.1f} us per operator; {aic_label}\n")
    print("| build | family | kind | tokens | measured ms | ops ms (err) | ops+c ms (err) | "
          "AIC ms (err) |")
    print("|---|---|---|---|---|---|---|---|")
    for p in sorted(ps, key=lambda p: (p.family, p.build, p.kind, p.length, p.device_only)):
        kind = p.kind + (" (device)" if p.device_only else "")
        aic = (f"{p.aic_ms:.2f} ({_err(p.aic_ms, p.measured_ms):+.0%})"
               if p.aic_ms is not None else (p.aic_note or "—"))
        print(f"| {p.build} | {p.family} | {kind} | {p.length} | {p.measured_ms:.2f} | "
              f"{p.ops_ms:.2f} ({_err(p.ops_ms, p.measured_ms):+.0%}) | "
              f"{p.corrected_ms:.2f} ({_err(p.corrected_ms, p.measured_ms):+.0%}) | {aic} |")
    print("\nLeave-family-out engine overhead added (ms): " + "; ".join(
        f"{f}: decode {c.get('decode', 0):+.2f}, prefill {c.get('prefill', 0):+.2f}"
        for f, c in sorted(used.items())))
    print("\n| family | kind | ops median/max abs err | ops+c | AIC (its points) | "
          "servelab ops+c on AIC's points |")
    print("|---|---|---|---|---|---|")
    fams = sorted({p.family for p in ps})
    for kind in ("decode", "prefill"):
        for fam in [*fams, "all"]:
            sel = [p for p in ps if p.kind == kind and not p.device_only and
                   (fam == "all" or p.family == fam)]
            if not sel:
                continue
            both = [p for p in sel if p.aic_ms is not None]
            print(f"| {fam} | {kind} | {_stats([_err(p.ops_ms, p.measured_ms) for p in sel])} | "
                  f"{_stats([_err(p.corrected_ms, p.measured_ms) for p in sel])} | "
                  f"{_stats([_err(p.aic_ms, p.measured_ms) for p in both if p.aic_ms])} | "
                  f"{_stats([_err(p.corrected_ms, p.measured_ms) for p in both])} |")
    dev = [p for p in ps if p.device_only]
    if dev:
        print("\nDevice-only decode (profiled GPU busy time per step) against the operator "
              "sum: " + ", ".join(f"{p.build} {_err(p.ops_ms, p.measured_ms):+.0%}"
                                  for p in dev))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aic-python", default="/tmp/aic-venv/bin/python")
    ap.add_argument("--isolation-us", type=float, default=None)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    if args.isolation_us is not None:
        iso = args.isolation_us / 1e3
    elif COMPOSE.is_file():
        iso = float(json.loads(COMPOSE.read_text())["isolation_ms"])
    else:
        iso = 0.0
    ps = points()
    predict_ops(ps, iso)
    used = correct(ps)
    label = predict_aic(ps, args.aic_python)
    report(ps, used, iso, label, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
