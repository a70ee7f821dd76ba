"""servelab's operator model against every H200 vLLM single-stream point the project holds,
with AIConfigurator's prediction for the same points side by side (issue 39).

    .venv/bin/python benchmarks/peer_aiconfigurator.py [--aic-python /tmp/aic-venv/bin/python]
        [--isolation FRACTION CAP_US]

The points are the shipped priors' H200 vLLM 0.26.0 rows (servelab.predict.priors: servelab's
own runs, benchmarks/gpu/results/): single-stream decode (TPOT) and prefill (TTFT) at 512,
2,048 and 8,192 tokens, and the profiled device-only decode steps. Each build is rebuilt as
an operator model from the config gen_checkpoint.py wrote for it (benchmarks/ops/builds.py)
and predicted from the shipped H200 operator tables (src/servelab/ops/data/h200-vllm-0.26.0).
Columns:

* ``ops``: the sum of the operators as the tables measured them, each alone (decode: one
  step at the prompt plus half the output as context; prefill: one step of the whole
  prompt, vLLM's 8,192-token budget holding it);
* ``ops-m``: each operator call's isolated time t less min(fraction * t, cap), the part a
  graph of back-to-back kernels does not pay, as the tables MEASURED it
  (benchmarks/ops/compose_check.py: decoder stacks in one graph against their operators
  alone; meta.json ``isolation``). No run of any build enters this column;
* ``+c``: plus the engine's per-step overhead the operators do not contain, one constant for
  decode and one for prefill, each the median of (measured - adjusted sum) over every OTHER
  family's points, and a decode step never shorter than the host's floor the other
  families' 2-4-layer probes measured (benchmarks/gpu/results/*/probes-h200.json);
* ``ops-p+c``: the same with the isolation adjustment FITTED instead, for each family on the
  OTHER families' profiled device-only decode steps (``--isolation F CAP_US`` fixes it);
* ``AIC``: AIConfigurator 0.12.0's ``predict_decode_latency(1, L, 2)`` /
  ``predict_prefill_latency(1, L)`` on h200_sxm with its vLLM tables (0.24.0), the same config
  written as a local model, FP8 builds as ``fp8_block`` GEMM and MoE; run through
  benchmarks/ops/aic_predict.py under ``--aic-python`` (the extra's venv). Where
  AIConfigurator refuses an architecture, the row says so.

A build's whole family is left out of every correction of its own prediction.
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
from export_runs import floors  # noqa: E402

from servelab.ops.calibrate import Floor, Observed, held_out, price  # noqa: E402
from servelab.ops.costs import Costs  # noqa: E402
from servelab.ops.step import measured_isolation  # noqa: E402
from servelab.ops.tables import shipped  # noqa: E402
from servelab.predict.priors import load_priors  # noqa: E402


def probe_floors() -> list[tuple[str, float]]:
    """(family, median decode step ms over all points) of every stored probe run (the
    host-floor probes: 2 to 4 of a model's layers, benchmarks/ops/export_runs.py)."""
    return [(f["family"], f["ms"]) for f in floors()]


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
    adjusted_ms: float = 0.0
    corrected_ms: float = 0.0
    measured_adj_ms: float = 0.0  # with the isolation adjustment the tables measured
    measured_corr_ms: float = 0.0
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


def predict_ops(ps: Sequence[Point], isolation: tuple[float, float] | None
                ) -> dict[str, dict[str, float]]:
    """Fill ``ops_ms`` (isolated sums, no adjustment), ``adjusted_ms`` and ``corrected_ms``;
    return the adjustments used per family.

    servelab's own calibration (:mod:`servelab.ops.calibrate`, as ``servelab plan`` uses
    it): with ``isolation`` None, the isolation adjustment (each operator's isolated time t
    less min(fraction * t, cap)) is fitted for each family F on the profiled device-only
    decode steps of the OTHER families; then the engine's per-step overhead per kind is the
    median of (measured - adjusted sum) over the other families' points, and a decode step
    is never shorter than the host floor the other families' probes measured. Nothing of
    F's own runs enters F's prediction."""
    costs = Costs([shipped()["h200-vllm-0.26.0"]])
    models: dict[str, Any] = {}
    obs = []
    for p in ps:
        b = build(p.build)
        if b is None:
            raise SystemExit(f"no operator model for build {p.build}")
        models.setdefault(p.build, b.model())
        obs.append(Observed(p.build, p.family, p.kind, p.length, p.measured_ms,
                            models[p.build], p.device_only))
    floors = [Floor(f, ms) for f, ms in probe_floors()]
    held = held_out([price(o, costs) for o in obs], floors, isolation=isolation)
    used: dict[str, dict[str, float]] = defaultdict(dict)
    for p, h in zip(ps, held, strict=True):
        p.ops_ms, p.adjusted_ms, p.corrected_ms = h.operators_ms, h.isolation_ms, h.corrected_ms
        c = h.corrections
        used[p.family].update(floor_ms=c.floor_ms, isolation_frac=c.isolation_frac,
                              isolation_cap_us=c.isolation_cap_ms * 1e3, decode=c.decode_ms,
                              prefill=c.prefill_ms)
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


def report(ps: Sequence[Point], used: dict[str, dict[str, float]],
           used_m: dict[str, dict[str, float]], iso_label: str, aic_label: str) -> None:
    print(f"operator tables: {shipped()['h200-vllm-0.26.0'].provenance.label()}; "
          f"measured isolation adjustment: {iso_label}; {aic_label}\n")
    print("| build | family | kind | tokens | measured ms | ops (err) | ops-m (err) | "
          "ops-m+c (err) | ops-p+c (err) | AIC (err) |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    def cell(v: float, m: float) -> str:
        return f"{v:.2f} ({_err(v, m):+.0%})"

    for p in sorted(ps, key=lambda p: (p.family, p.build, p.kind, p.length, p.device_only)):
        kind = p.kind + (" (device)" if p.device_only else "")
        aic = cell(p.aic_ms, p.measured_ms) if p.aic_ms is not None else (p.aic_note or "—")
        print(f"| {p.build} | {p.family} | {kind} | {p.length} | {p.measured_ms:.2f} | "
              f"{cell(p.ops_ms, p.measured_ms)} | {cell(p.measured_adj_ms, p.measured_ms)} | "
              f"{cell(p.measured_corr_ms, p.measured_ms)} | "
              f"{cell(p.corrected_ms, p.measured_ms)} | {aic} |")
    for title, u in (("measured isolation (m)", used_m), ("fitted isolation (p)", used)):
        print(f"\nLeave-family-out adjustments, {title}: " + "; ".join(
            f"{f}: isolation min({c.get('isolation_frac', 0):.2f} t, "
            f"{c.get('isolation_cap_us', 0):.1f} us), engine overhead decode "
            f"{c.get('decode', 0):+.2f} ms (host floor {c.get('floor_ms', 0):.2f} ms), "
            f"prefill {c.get('prefill', 0):+.2f} ms" for f, c in sorted(u.items())))
    print("\nmedian / max |error| (points):\n")
    print("| family | kind | ops | ops-m | ops-m+c | ops-p+c | AIC (its points) | "
          "ops-p+c on AIC's points |")
    print("|---|---|---|---|---|---|---|---|")
    fams = sorted({p.family for p in ps})
    for kind in ("decode", "prefill"):
        for fam in [*fams, "all"]:
            sel = [p for p in ps if p.kind == kind and not p.device_only and
                   (fam == "all" or p.family == fam)]
            if not sel:
                continue
            both = [p for p in sel if p.aic_ms is not None]
            print(f"| {fam} | {kind} | {_stats([_err(p.ops_ms, p.measured_ms) for p in sel])} | "
                  f"{_stats([_err(p.measured_adj_ms, p.measured_ms) for p in sel])} | "
                  f"{_stats([_err(p.measured_corr_ms, p.measured_ms) for p in sel])} | "
                  f"{_stats([_err(p.corrected_ms, p.measured_ms) for p in sel])} | "
                  f"{_stats([_err(p.aic_ms, p.measured_ms) for p in both if p.aic_ms])} | "
                  f"{_stats([_err(p.corrected_ms, p.measured_ms) for p in both])} |")
    dev = [p for p in ps if p.device_only]
    if dev:
        print("\nDevice-only decode (profiled GPU busy time per step) against the operator "
              "sum: raw / measured isolation / fitted isolation (leave-family-out): " +
              ", ".join(f"{p.build} {_err(p.ops_ms, p.measured_ms):+.0%} / "
                        f"{_err(p.measured_adj_ms, p.measured_ms):+.0%} / "
                        f"{_err(p.adjusted_ms, p.measured_ms):+.0%}" for p in dev))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aic-python", default="/tmp/aic-venv/bin/python")
    ap.add_argument("--isolation", type=float, nargs=2, metavar=("FRACTION", "CAP_US"),
                    help="a fixed isolation adjustment instead of the leave-family-out fit")
    args = ap.parse_args(argv)
    iso: tuple[float, float] | None = None  # fitted leave-family-out from profiled steps
    if args.isolation is not None:
        iso = (args.isolation[0], args.isolation[1] / 1e3)
    ps = points()
    measured = measured_isolation(Costs([shipped()["h200-vllm-0.26.0"]]))
    if measured is None:
        raise SystemExit("the shipped H200 tables carry no measured isolation adjustment")
    used_m = predict_ops(ps, measured[:2])
    for p in ps:
        p.measured_adj_ms, p.measured_corr_ms = p.adjusted_ms, p.corrected_ms
    used = predict_ops(ps, iso)
    label = predict_aic(ps, args.aic_python)
    report(ps, used, used_m, f"min({measured[0]:.2f} t, {measured[1] * 1e3:.1f} us) from "
           f"{measured[2]}", label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
