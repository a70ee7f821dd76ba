"""Predicted against measured under load: per-point errors and interval coverage (issue 31).

Two sources of predictions:

- a committed ``servelab plan --json`` document with a ``load`` key (the pre-registered
  ones, benchmarks/prereg/load-*), read as it was committed;
- a live leave-one-model-out plan: the shipped priors without the measured model's rows,
  through ``servelab.plan.load`` (a stored sweep checked after the fact: not pre-registered).

Measured points come from a ``servelab bench --json`` result or a ``servelab runs export``
document (per-request samples). Per point: TPOT (mean of the requests'), TTFT (mean), tok/s
per stream (mean of 1 / TPOT) and output tok/s per GPU (closed loop: concurrency x output
tokens / mean E2E, Little's law, as the prediction reports it); error = measured /
predicted - 1 for rates, and for latencies as the same ratio on their reciprocals.

    python benchmarks/load/check_sweeps.py h200-stored CKPT_DIR
    python benchmarks/load/check_sweeps.py cpu PREREG_DIR MEASURED_DIR
    python benchmarks/load/check_sweeps.py cpu-runs PREREG_DIR RUNS_EXPORT_JSON
    python benchmarks/load/check_sweeps.py h200-runs PREREG_DIR RUNS_EXPORT_JSON
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servelab.bench.metrics import per_request
from servelab.bench.samples import RequestSample

ROOT = Path(__file__).resolve().parents[2]
PRIORS = ROOT / "src/servelab/predict/priors.toml"
METRICS = ("tpot", "ttft", "stream", "per_gpu")


def priors_without(model: str) -> Path:
    """A copy of the shipped priors without ``model``'s rows (leave-one-model-out)."""
    head, *blocks = PRIORS.read_text(encoding="utf-8").split("[[sample]]")
    keep = [b for b in blocks if f'model = "{model}"\n' not in b]
    if len(keep) == len(blocks):
        raise SystemExit(f"no prior rows of {model!r}")
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False, encoding="utf-8") as f:
        f.write(head + "".join("[[sample]]" + b for b in keep))
    return Path(f.name)


def _summary(ttft: list[float], tpot: list[float], e2e: list[float], c: int, out: int
             ) -> dict[str, float]:
    return {
        "tpot": statistics.fmean(tpot), "ttft": statistics.fmean(ttft),
        "stream": statistics.fmean(1.0 / x for x in tpot),
        "per_gpu": c * out / statistics.fmean(e2e), "n": float(len(tpot)),
    }


def measured_bench(path: Path) -> dict[tuple[int, int], dict[str, float]]:
    """Per (prompt, concurrency): the measured summary of a ``servelab bench --json`` file."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for p in doc["points"]:
        rs = [RequestSample.from_json(s) for s in p["samples"]]
        vals = [per_request(s) for s in rs if not s.warmup]
        vals = [v for v in vals if "tpot_ms" in v]
        if not vals:
            continue
        out[(p["prompt_len"], p["concurrency"])] = _summary(
            [v["ttft_ms"] / 1e3 for v in vals], [v["tpot_ms"] / 1e3 for v in vals],
            [v["e2el_ms"] / 1e3 for v in vals], p["concurrency"], p["output_len"])
    return out


def measured_export(path: Path, output_len: int) -> dict[tuple[int, int], dict[str, float]]:
    """The same from a ``servelab runs export`` document's first run (its samples)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return measured_run(doc["runs"][0] if "runs" in doc else doc, output_len)


def measured_run(run: Mapping[str, Any], output_len: int
                 ) -> dict[tuple[int, int], dict[str, float]]:
    """The same from one exported run (its samples)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for s in run["samples"]:
        if s.get("error") is None and s.get("tpot_s"):
            groups.setdefault(s["point"], []).append(s)
    out = {}
    for label, ss in groups.items():
        p, c = (int(x[1:]) for x in label.split("-")[:2])
        out[(p, c)] = _summary([s["ttft_s"] for s in ss], [s["tpot_s"] for s in ss],
                               [s["e2e_s"] for s in ss], c, output_len)
    return out


def predicted_doc(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """Per (prompt, concurrency): the predicted point of a committed plan JSON."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    pts = doc["load"]["points"]["points"]
    return {(p["prompt_len"], p["concurrency"]): _pred(p) for p in pts}


def _pred(p: Mapping[str, Any]) -> dict[str, Any]:
    def g(k: str) -> Mapping[str, float]:
        v = p[k]
        return v if isinstance(v, Mapping) else {"value": v.value, "low": v.low, "high": v.high}

    return {"tpot": g("tpot_s"), "ttft": g("ttft_s"), "stream": g("stream_tok_s"),
            "per_gpu": g("output_tok_s_per_gpu"), "e": p["rel_error"]}


def predicted_live(checkpoint: str, hardware: str, model: str, points: Sequence[tuple[int, int]],
                   output_len: int, requests: int | None, *, max_model_len: int,
                   kv_cache_memory_bytes: int, engine_version: str
                   ) -> dict[tuple[int, int], dict[str, Any]]:
    """Leave-one-model-out predictions through servelab.plan.load (see module docs)."""
    from dataclasses import asdict

    from servelab.engines import get_engine
    from servelab.hardware.lookup import get_profile
    from servelab.hardware.topology import topology_for
    from servelab.pipeline.planning import plan_checkpoint
    from servelab.plan.load import batched_tokens, predict_load, requests_for
    from servelab.plan.request import PlanRequest, StoreChoice
    from servelab.predict.schedule import Load
    from servelab.sizing.knobs import EngineKnobs

    hw = get_profile(hardware)
    arithmetic = get_engine("vllm").kv_arithmetic()
    assert arithmetic is not None
    plan = plan_checkpoint(PlanRequest(
        checkpoint, hw, topology_for(hw.name), arithmetic,
        startup_rules=get_engine("vllm").startup_rules, engine_version=engine_version,
        knobs=EngineKnobs(max_model_len=max_model_len,
                          kv_cache_memory_bytes=kv_cache_memory_bytes),
        store=StoreChoice(use=False, priors=priors_without(model))))
    tokens = batched_tokens(plan, None)
    loads = [Load(p, output_len, requests or requests_for(c), concurrency=c) for p, c in points]
    lp = predict_load(plan, loads, tokens)
    return {(pt.prompt_len, pt.concurrency or 0): _pred(asdict(pt)) for pt in lp.points}


def compare(label: str, pred: Mapping[tuple[int, int], Mapping[str, Any]],
            meas: Mapping[tuple[int, int], Mapping[str, float]]) -> list[dict[str, Any]]:
    """Rows of predicted vs measured with errors and whether each is inside its interval."""
    rows = []
    for key in sorted(set(pred) & set(meas)):
        p, m = pred[key], meas[key]
        row: dict[str, Any] = {"build": label, "prompt": key[0], "c": key[1], "e": p["e"]}
        for k in METRICS:
            v = m[k]
            band = p[k]
            rate = k in ("stream", "per_gpu")
            err = v / band["value"] - 1.0 if rate else band["value"] / v - 1.0
            row[k] = (band["value"], v, err, band["low"] <= v <= band["high"])
        rows.append(row)
    return rows


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table and a summary line per metric."""
    lines = ["| build | prompt | c | ± | TPOT ms pred / meas / err | TTFT ms pred / meas / err "
             "| tok/s/stream pred / meas / err | tok/s/GPU pred / meas / err |",
             "|---|---:|---:|---:|---|---|---|---|"]
    for r in rows:
        cells = []
        for k, scale, d in (("tpot", 1e3, 1), ("ttft", 1e3, 0), ("stream", 1, 1),
                            ("per_gpu", 1, 0)):
            pv, mv, err, inside = r[k]
            cells.append(f"{pv * scale:,.{d}f} / {mv * scale:,.{d}f} / {err * 100:+.0f}%"
                         + ("" if inside else " (out)"))
        e = f"{r['e'] * 100:.0f}%" if r["e"] < 1 else "none"
        lines.append(f"| {r['build']} | {r['prompt']:,} | {r['c']} | {e} | " + " | ".join(cells)
                     + " |")
    for k in METRICS:
        errs = [abs(r[k][2]) for r in rows]
        ins = sum(1 for r in rows if r[k][3])
        if errs:
            lines.append(f"\n{k}: median |error| {statistics.median(errs) * 100:.0f}%, largest "
                         f"{max(errs) * 100:.0f}%, inside the interval {ins} of {len(errs)}")
    return "\n".join(lines)


def scaling(rows: Sequence[Mapping[str, Any]]) -> str:
    """TPOT at c streams over TPOT at one stream, predicted against measured, per build and
    prompt: the batched form's scaling without the machine's speed that day (a box running
    three times slower than when its priors were measured slows both alike)."""
    one = {(r["build"], r["prompt"]): r for r in rows if r["c"] == 1}
    out = ["| build | prompt | c | TPOT(c) / TPOT(1) predicted | measured | error |",
           "|---|---:|---:|---:|---:|---:|"]
    errs = []
    for r in rows:
        base = one.get((r["build"], r["prompt"]))
        if base is None or r["c"] == 1:
            continue
        pred = r["tpot"][0] / base["tpot"][0]
        meas = r["tpot"][1] / base["tpot"][1]
        errs.append(pred / meas - 1.0)
        out.append(f"| {r['build']} | {r['prompt']:,} | {r['c']} | {pred:.2f} | {meas:.2f} | "
                   f"{errs[-1] * 100:+.0f}% |")
    if errs:
        out.append(f"\nmedian |error| {statistics.median(abs(e) for e in errs) * 100:.0f}%, "
                   f"largest {max(abs(e) for e in errs) * 100:.0f}% over {len(errs)} points")
    return "\n".join(out)


CPU = {"tiny-llama-cpu": "tiny-llama", "tiny-qwen3-moe-cpu": "tiny-qwen3-moe",
       "tiny-qwen3-next-cpu": "tiny-qwen3-next"}


def main(argv: Sequence[str]) -> None:
    if argv[0] == "h200-stored":
        ckpt = argv[1]
        export = ROOT / "benchmarks/gpu/results/run-h200-qwen3-30b-a3b-fp8.json"
        meas = measured_export(export, 256)
        pred = predicted_live(ckpt, "h200", "qwen3-30b-a3b-fp8-random", sorted(meas), 256, 16,
                              max_model_len=40960, kv_cache_memory_bytes=32 << 30,
                              engine_version="0.26.0")
        rows = compare("Qwen3-30B-A3B FP8 (stored)", pred, meas)
        print(render(rows))
        print()
        print(scaling(rows))
        return
    if argv[0] == "cpu":
        prereg, measured = Path(argv[1]), Path(argv[2])
        rows = []
        for tag in ("lomo", "priors"):
            rows_tag = []
            for recipe in CPU:
                bench = measured / f"{recipe}.bench.json"
                if not bench.exists():
                    continue
                pred = predicted_doc(prereg / f"plan-{recipe}-{tag}.json")
                rows_tag += compare(f"{recipe} ({tag})", pred, measured_bench(bench))
            print(f"\n### predictions from {tag}\n")
            print(render(rows_tag))
            print(f"\n### scaling with the streams, predictions from {tag}\n")
            print(scaling(rows_tag))
            rows += rows_tag
        return
    if argv[0] == "cpu-runs":
        cpu_runs(Path(argv[1]), Path(argv[2]))
        return
    if argv[0] == "h200-runs":
        h200_runs(Path(argv[1]), Path(argv[2]))
        return
    raise SystemExit(__doc__)


def h200_runs(prereg: Path, export: Path) -> None:
    """The pre-registered H200 predictions (``plan-<build>-h200.json``, made from the shipped
    priors alone) against the device runs of ``device_steps.sh load-bg`` (a ``servelab runs
    export``): per-point errors and coverage, then the predicted SLO capacity against the one
    each run measured (its recipe's ``[capacity]``)."""
    runs = json.loads(export.read_text(encoding="utf-8"))["runs"]
    rows = []
    caps = ["| build | prompt | predicted (range) | measured (run) |", "|---|---:|---:|---:|"]
    for run in runs:
        build = str(run["recipe_name"]).removesuffix("-h200-load")
        plan = prereg / f"plan-{build}-h200.json"
        if run["status"] != "ok" or not plan.exists():
            continue
        measured = measured_run(run, int(run["workload"]["output_len"]))
        rows += compare(build, predicted_doc(plan), measured)
        pred = {c["prompt_len"]: c for c in
                json.loads(plan.read_text(encoding="utf-8"))["load"]["capacity"]}
        for row in ((run.get("extra") or {}).get("capacity") or {}).get("capacities", []):
            c = pred.get(row["prompt_len"])
            if c is not None:
                caps.append(f"| {build} | {row['prompt_len']:,} | {c['capacity']} "
                            f"({c['low']}–{c['high']}) | {row['capacity']} ({run['run_id']}) |")
    print(render(rows))
    print("\n### scaling with the streams\n")
    print(scaling(rows))
    print("\n### SLO capacity (closed-loop concurrency)\n")
    print("\n".join(caps))


def cpu_runs(prereg: Path, export: Path) -> None:
    """The pre-registered predictions against the runs of ``measure_runs.sh`` (a ``servelab
    runs export``): per-point errors, then the pre-registered SLO capacity against the one
    each run measured (its recipe's ``[capacity]``)."""
    runs = json.loads(export.read_text(encoding="utf-8"))["runs"]
    caps = ["| build | prompt | predicted, leave-one-model-out (range) | predicted, all priors "
            "| measured (run) |", "|---|---:|---:|---:|---:|"]
    for tag in ("lomo", "priors"):
        rows = []
        for run in runs:
            recipe = str(run["recipe_name"]).removesuffix("-load")
            if recipe not in CPU or run["status"] != "ok":
                continue
            meas = measured_run(run, int(run["workload"]["output_len"]))
            pred = predicted_doc(prereg / f"plan-{recipe}-{tag}.json")
            rows += compare(f"{recipe} ({tag})", pred, meas)
            if tag == "lomo":
                caps += _capacity_rows(prereg, recipe, run)
        print(f"\n### predictions from {tag}\n")
        print(render(rows))
        print(f"\n### scaling with the streams, predictions from {tag}\n")
        print(scaling(rows))
    print("\n### SLO capacity (closed-loop concurrency)\n")
    print("\n".join(caps))


def _capacity_rows(prereg: Path, recipe: str, run: Mapping[str, Any]) -> list[str]:
    cap = (run.get("extra") or {}).get("capacity")
    if not cap:
        return []
    pred = {tag: {c["prompt_len"]: c for c in json.loads(
        (prereg / f"plan-{recipe}-{tag}.json").read_text(encoding="utf-8"))["load"]["capacity"]}
        for tag in ("lomo", "priors")}

    def fmt(v: float | None) -> str:
        return "none" if v is None else f"{v:g}"

    out = []
    for row in cap["capacities"]:
        p = row["prompt_len"]
        lomo, allp = pred["lomo"].get(p), pred["priors"].get(p)
        if lomo is None or allp is None:
            continue
        out.append(f"| {recipe} | {p:,} | {fmt(lomo['capacity'])} ({fmt(lomo['low'])}–"
                   f"{fmt(lomo['high'])}) | {fmt(allp['capacity'])} | {fmt(row['capacity'])} |")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
