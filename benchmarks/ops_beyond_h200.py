"""The operator model beyond the H200's measured tables, scored side by side with servelab's
shipped priors model in one run (issue 39).

    .venv/bin/python benchmarks/ops_beyond_h200.py [--no-plan] [--jobs 2] [--write]
        [--prereg benchmarks/prereg/2026-12-05-ops-aic-before.json]

``--write`` also writes the efficiencies fitted to every point (with each point's held-out
error and source) to src/servelab/ops/data/efficiency.json, the fit servelab ships
(servelab.ops.fitted).

**Hardware without operator tables** (DGX Spark, RTX 4090 / 5090, RTX PRO 6000, Apple M1
Ultra / M2 Max; llama.cpp on the H200): every end-to-end point the project keeps there
(benchmarks/ops/published.py: the pre-registered published points of issue 30 and the
shipped priors' rows), each predicted by

* ``ops``: each operator's roofline on the hardware (servelab.ops.roofline) divided by an
  efficiency per operator class, fitted (servelab.ops.efficiency) to every OTHER point of the
  engine with the point's unit left out: its family where its hardware holds several, else
  its build where it holds several, else the point; its interval from the same held-out
  errors of the engine's other points (those of its own unit excluded): its hardware's own
  when it has at least three, else every hardware's; wider than 4x: no prediction;
* ``shipped``: ``servelab plan`` with the shipped priors as they are (the row itself is in
  the table for a calibration point: in-sample) and ``shipped-LOO``: with the same unit's
  rows taken out of a copy of the priors table (``--priors``), the fair comparison.

Printed per hardware and engine: points, median / max |error| of the predicted speed
(predicted tok/s / measured - 1) and interval coverage of each model, then per point.

**GPUs with AIConfigurator tables** (``--prereg``): the pre-registered predictions
(benchmarks/prereg/ops_aic_gpus.py) against the published measurements collected afterwards
(benchmarks/prereg/ops_aic_published.py), servelab's composition beside AIConfigurator's own
prediction and the shipped model's answer (none: it has no vLLM prior on these GPUs).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import tomllib
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "ops"))
sys.path.insert(0, str(HERE / "prereg"))

import builds as prereg  # noqa: E402  (benchmarks/prereg/builds.py)

from published import PRIORS, SPARK_QWEN, Pub, points, works  # noqa: E402
from servelab.ops.efficiency import (  # noqa: E402
    HeldOut,
    Interval,
    PointWork,
    fit,
    held_out,
    interval,
    unit_of,
)
from servelab.ops.fitted import fit_doc  # noqa: E402
from servelab.synth.replica import write_replica  # noqa: E402
from servelab.synth.replica_presets import QWEN3_6_35B_A3B  # noqa: E402

EFF = ROOT / "src" / "servelab" / "ops" / "data" / "efficiency.json"


@dataclass
class Row:
    pub: Pub
    work: PointWork
    ops: HeldOut
    ops_iv: Interval
    unit: str
    shipped: dict[str, Any] = field(default_factory=dict)
    shipped_loo: dict[str, Any] = field(default_factory=dict)

    @property
    def ops_tok_s(self) -> float:
        tokens = 1 if self.pub.kind == "decode" else self.pub.length
        return tokens / self.ops.predicted_ms * 1e3


def err(pred: float | None, meas: float) -> float | None:
    return None if pred is None else pred / meas - 1


def _unit_rows(p: Pub, unit: str, doc: dict[str, Any]) -> list[int]:
    """Indices of the priors rows the held-out unit of ``p`` covers (its family, its build
    or the point, on its hardware and engine)."""
    base = prereg.base_model(p.build)
    ftype = p.build.removeprefix(base + "-").lower() if base != p.build else ""
    out = []
    for i, r in enumerate(doc["sample"]):
        if r["hardware"] != p.hardware or r["engine"] != p.engine:
            continue
        if unit == "family":
            hit = (r.get("family") or "") == p.family
        else:
            kp = r["kernel_path"].split()[0].removeprefix("gguf-")
            hit = r["model"] == base and (not ftype or kp == ftype)
            if unit == "point":
                hit = hit and r["kind"] == p.kind and int(r["length"]) == p.length
        if hit:
            out.append(i)
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)


def priors_without(rows: list[int], doc: dict[str, Any], path: Path) -> Path:
    """A copy of the shipped priors table without ``rows``."""
    lines = [f'schema = "{doc["schema"]}"', f'version = "{doc["version"]}-loo"', ""]
    for i, r in enumerate(doc["sample"]):
        if i in rows:
            continue
        lines.append("[[sample]]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in r.items())
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def shipped_plan(pub: Pub, root: Path, priors: Path | None) -> dict[str, Any]:
    """``servelab plan --json`` of the point's build (benchmarks/prereg/builds.py plan())."""
    p = prereg.Point(pub.build, pub.engine, pub.hardware, pub.kind, pub.length, pub.tok_s,
                     pub.source, pub.role)
    try:
        return prereg.plan(p, root, str(priors) if priors else None)
    except Exception as e:  # the CLI's refusal, said
        return {"error": f"{type(e).__name__}: {e}"[:200]}


def score_no_tables(args: argparse.Namespace) -> None:
    pubs = points()
    ws, refused = works(pubs)
    by_ident = {p.ident: p for p in pubs}
    rows: list[Row] = []
    fits = []
    for engine in ("llamacpp", "vllm"):
        pw = [w for w in ws if w.engine == engine]
        errs = held_out(pw)
        for h in errs:
            unit, drop = unit_of(h.point, pw)
            iv = interval(h.predicted_ms, errs, h.point.hardware, engine, h.point.kind,
                          exclude=drop)
            rows.append(Row(by_ident[h.point.ident], h.point, h, iv, unit))
        fits.append(fit_doc(fit(pw), errs, pw, {
            "source": f"fitted to {len(pw)} {engine} end-to-end points on "
                      f"{len({w.hardware for w in pw})} hardware (benchmarks/ops/published.py)"}))
    if args.write:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        doc = {"schema": "servelab.ops.efficiency/1",
               "date": dt.date.today().isoformat(), "servelab_commit": commit,
               "command": " ".join([".venv/bin/python", "benchmarks/ops_beyond_h200.py",
                                    *sys.argv[1:]]),
               "fits": fits}
        EFF.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {EFF.relative_to(ROOT)}\n")
    doc = tomllib.loads(PRIORS.read_text(encoding="utf-8"))
    if not args.no_plan:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for r in rows:  # replicas once, serially (the CLI runs read them)
                if r.pub.build in SPARK_QWEN:
                    write_replica(root / r.pub.build, QWEN3_6_35B_A3B, SPARK_QWEN[r.pub.build])
                else:
                    prereg.replica(r.pub.build, root)

            def run(r: Row) -> None:
                r.shipped = shipped_plan(r.pub, root, None)
                drop = _unit_rows(r.pub, r.unit, doc)
                pri = priors_without(drop, doc, root / f"priors-{id(r)}.toml")
                r.shipped_loo = shipped_plan(r.pub, root, pri)
                r.shipped_loo["rows_left_out"] = len(drop)

            with ThreadPoolExecutor(max_workers=args.jobs) as ex:
                list(ex.map(run, rows))
    report_no_tables(rows, refused)


def _cov(hits: list[bool]) -> str:
    return f"{sum(hits)}/{len(hits)}" if hits else "—"


def _stat(es: Sequence[float | None]) -> str:
    a = [abs(e) for e in es if e is not None]
    if not a:
        return "—"
    n_none = sum(e is None for e in es)
    return f"{statistics.median(a):.1%} / {max(a):.1%}" + (f" ({n_none} none)" if n_none else "")


def report_no_tables(rows: list[Row], refused: dict[str, str]) -> None:
    print("## Hardware without operator tables: roofline x fitted efficiency, held out\n")
    if refused:
        print("Points without an operator model: " + json.dumps(refused) + "\n")
    print("| hardware | engine | points | ops: median / max abs error | ops: inside interval "
          "(no prediction) | shipped LOO: median / max | shipped LOO: inside | shipped as "
          "is: median / max | shipped as is: inside |")
    print("|---|---|---|---|---|---|---|---|---|")
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r.pub.hardware, r.pub.engine)].append(r)
    tot: dict[str, list[Any]] = defaultdict(list)

    def inside(d: dict[str, Any], meas: float) -> bool | None:
        if d.get("predicted_tok_s") is None or d.get("low") is None:
            return None
        return bool(d["low"] <= meas <= d["high"])

    for key in sorted(groups):
        g = groups[key]
        g_label = "h200 (servelab runs)" if key[0] == "h200" else key[0]
        e_ops = [err(r.ops_tok_s, r.pub.tok_s) for r in g]
        cov_ops = [bool(r.ops_iv.ok and r.ops_iv.low_ms is not None and r.ops_iv.high_ms
                        is not None and r.ops_iv.low_ms <= r.pub.measured_ms <=
                        r.ops_iv.high_ms) for r in g if r.ops_iv.ok]
        nop = sum(not r.ops_iv.ok for r in g)
        e_loo = [err(r.shipped_loo.get("predicted_tok_s"), r.pub.tok_s) for r in g]
        e_sh = [err(r.shipped.get("predicted_tok_s"), r.pub.tok_s) for r in g]
        c_loo = [c for r in g if (c := inside(r.shipped_loo, r.pub.tok_s)) is not None]
        c_sh = [c for r in g if (c := inside(r.shipped, r.pub.tok_s)) is not None]
        print(f"| {g_label} | {key[1]} | {len(g)} | {_stat(e_ops)} | {_cov(cov_ops)}"
              f"{f' ({nop})' if nop else ''} | {_stat(e_loo)} | {_cov(c_loo)} | "
              f"{_stat(e_sh)} | {_cov(c_sh)} |")
        if key[0] != "h200":
            for name, v in (("ops", e_ops), ("loo", e_loo), ("sh", e_sh)):
                tot[name].extend(v)
            tot["cov_ops"].extend(cov_ops)
            tot["c_loo"].extend(c_loo)
            tot["c_sh"].extend(c_sh)
            tot["n"].extend(g)
    print(f"| **all but the H200** | both | {len(tot['n'])} | {_stat(tot['ops'])} | "
          f"{_cov(tot['cov_ops'])} | {_stat(tot['loo'])} | {_cov(tot['c_loo'])} | "
          f"{_stat(tot['sh'])} | {_cov(tot['c_sh'])} |")
    print("\nBy kind (ops, held out): median / max abs speed error, inside interval (no "
          "prediction)\n")
    print("| hardware | engine | kind | points | ops: median / max | inside (no prediction) |")
    print("|---|---|---|---|---|---|")
    kinds: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        kinds[(r.pub.hardware, r.pub.engine, r.pub.kind)].append(r)
    for (hw, eng, kind), g in sorted(kinds.items()):
        inside_ops = [bool(r.ops_iv.low_ms is not None and r.ops_iv.high_ms is not None and
                           r.ops_iv.low_ms <= r.pub.measured_ms <= r.ops_iv.high_ms)
                      for r in g if r.ops_iv.ok]
        nop = sum(not r.ops_iv.ok for r in g)
        print(f"| {hw} | {eng} | {kind} | {len(g)} | "
              f"{_stat([err(r.ops_tok_s, r.pub.tok_s) for r in g])} | {_cov(inside_ops)}"
              f"{f' ({nop})' if nop else ''} |")
    print("\nPer point (speed error = predicted / measured - 1; held-out unit; ops interval "
          "in tok/s):\n")
    print("| point | role | measured tok/s | ops (err) [interval] | unit | shipped LOO (err) "
          "| shipped as is (err) |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: r.pub.ident):
        tok = 1 if r.pub.kind == "decode" else r.pub.length
        iv = (f"[{tok / r.ops_iv.high_ms * 1e3:,.1f}-{tok / r.ops_iv.low_ms * 1e3:,.1f}]"
              if r.ops_iv.ok and r.ops_iv.low_ms and r.ops_iv.high_ms else "no prediction")

        def cell(d: dict[str, Any], meas: float = r.pub.tok_s) -> str:
            v = d.get("predicted_tok_s")
            if not d:
                return "not run"
            if v is None:
                return "no prediction" if "error" not in d else "refused"
            return f"{v:,.1f} ({v / meas - 1:+.0%})"

        ident = f"{r.pub.hardware}/{r.pub.engine}/{r.pub.build}/{r.pub.kind}/{r.pub.length}"
        print(f"| {ident} | {r.pub.role} | {r.pub.tok_s:,.1f} | {r.ops_tok_s:,.1f} "
              f"({r.ops_tok_s / r.pub.tok_s - 1:+.0%}) {iv} | {r.unit} | "
              f"{cell(r.shipped_loo)} | {cell(r.shipped)} |")


def score_prereg(path: Path) -> None:
    pub_file = HERE / "prereg" / "ops_aic_published.py"
    if not pub_file.is_file():
        print(f"\n(no published measurements collected yet for {path.name})")
        return
    import ops_aic_gpus as pre  # benchmarks/prereg/ops_aic_gpus.py
    import ops_aic_published as published

    print(f"\n## Pre-registered GPUs: {path.name} against published measurements\n")
    doc = json.loads(path.read_text())
    print(f"pre-registered at servelab {doc['servelab_commit'][:10]} on {doc['date']}\n")
    print("| GPU | build | metric | x | measured | servelab (err) [interval] | inside | "
          "AIConfigurator (err) | source |")
    print("|---|---|---|---|---|---|---|---|---|")
    per: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for m in published.POINTS:
        r = pre.read(path, m.build, m.gpu, m.kind, m.x) if m.kind in ("decode", "prefill",
                                                                      "batch") else \
            pre.read_serving(path, m.build, m.gpu, m.kind, m.x, m.prompt, m.output)
        meas = m.value
        if "refused" in r:
            print(f"| {m.gpu} | {m.build} | {m.kind} | {m.x:g} | {meas:,.2f} | refused: "
                  f"{r['refused'][:80]} | | | {m.label} |")
            per[m.gpu]["refused"].append(1)
            continue
        # every metric is compared as a time (ms) or a rate, as published
        pred, lo, hi = r["value"], r["low"], r["high"]
        e = pred / meas - 1
        ok = lo <= meas <= hi
        aic_v = r.get("aic_value")
        ea = None if aic_v is None else aic_v / meas - 1
        per[m.gpu]["ops"].append(e)
        per[m.gpu]["inside"].append(ok)
        per[m.gpu]["aic"].append(ea)
        print(f"| {m.gpu} | {m.build} | {m.kind} {m.unit} | {m.x:g} | {meas:,.2f} | "
              f"{pred:,.2f} ({e:+.0%}) [{lo:,.2f}-{hi:,.2f}] | {'yes' if ok else 'no'} | "
              f"{'—' if aic_v is None else f'{aic_v:,.2f} ({ea:+.0%})'} | {m.label} |")
    print("\n| GPU | points | servelab: median / max abs error | inside | AIConfigurator: "
          "median / max | refused | shipped priors model |")
    print("|---|---|---|---|---|---|---|")
    for gpu, d in sorted(per.items()):
        print(f"| {gpu} | {len(d['ops'])} | {_stat(d['ops'])} | {_cov(d['inside'])} | "
              f"{_stat(d['aic'])} | {len(d['refused'])} | no vLLM prediction (roofline "
              "bound only) |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-plan", action="store_true",
                    help="skip the shipped model (servelab plan) columns")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write", action="store_true",
                    help="write the fits fitted to every point to "
                         "src/servelab/ops/data/efficiency.json")
    ap.add_argument("--prereg", type=Path, default=None)
    args = ap.parse_args(argv)
    score_no_tables(args)
    if args.prereg:
        score_prereg(args.prereg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
