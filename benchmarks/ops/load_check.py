"""Every H200 load run the project holds, predicted by ``servelab plan``'s load model with its
steps from the operator model (servelab.predict.ops_load), the run's family left out of
every correction (issue 39 item 3).

    .venv/bin/python benchmarks/ops/load_check.py [--fitted]

Runs (measured per-request samples):

* qwen2.5-7b and mistral-7b: benchmarks/load/results/h200-2026-12-05/load/runs.json
  (512 and 2,048-token prompts, 128 output tokens, 4/16/64 streams, max(3, 2c) requests;
  served with ``--max-model-len 16384 --kv-cache-memory-bytes 32GiB``);
* Qwen3-30B-A3B FP8 (128x128 block): benchmarks/gpu/results/run-h200-qwen3-30b-a3b-fp8.json
  (512/2,048/8,192-token prompts, 256 output tokens, 1/4/16 streams, 16 requests;
  ``--max-model-len 40960 --kv-cache-memory-bytes 32GiB``).

Each build is planned from a header replica at its published dimensions (servelab synth
replica's presets; Qwen3-30B-A3B from the stored build's config, FP8 block), through
servelab.pipeline.planning as ``servelab plan`` does, and its load predicted with
servelab.plan.load.predict_load. The operator model's corrections are refitted with the
run's family left out (servelab.ops.calibrate.fit; qwen2 and mistral have no stored
single-stream run, so theirs are the shipped ones). ``--fitted`` prints the same table from
the fitted top-down step model (the path before the operator model) for comparison, with
the shipped priors less the run's model's rows (leave-one-model-out) as check_sweeps.py
does. Errors as benchmarks/load/check_sweeps.py: measured / predicted - 1 for rates, the
same on reciprocals for latencies.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "load"))

import json  # noqa: E402

from check_sweeps import (  # noqa: E402
    _pred,
    compare,
    measured_run,
    priors_without,
    render,
)

from servelab.engines import get_engine  # noqa: E402
from servelab.errors import UsageError  # noqa: E402
from servelab.hardware.lookup import get_profile  # noqa: E402
from servelab.hardware.topology import topology_for  # noqa: E402
from servelab.ops.calibrate import Floor, fit, price  # noqa: E402
from servelab.pipeline.planning import plan_checkpoint  # noqa: E402
from servelab.plan.load import batched_tokens, predict_load, requests_for  # noqa: E402
from servelab.plan.request import PlanRequest, StoreChoice  # noqa: E402
from servelab.predict.ops_source import (  # noqa: E402
    KEY_H200,
    costs_for,
    floors_of,
    observed,
    runs_doc,
)
from servelab.predict.priors import load_priors  # noqa: E402
from servelab.predict.schedule import Load  # noqa: E402
from servelab.sizing.knobs import EngineKnobs  # noqa: E402
from servelab.synth.replica import TEXT_LINEARS, QuantLayout, write_replica  # noqa: E402
from servelab.synth.replica_presets import preset_config, preset_layout  # noqa: E402

RUNS_0512 = ROOT / "benchmarks/load/results/h200-2026-12-05/load/runs.json"
RUN_QWEN3 = ROOT / "benchmarks/gpu/results/run-h200-qwen3-30b-a3b-fp8.json"


def replica(tmp: Path, name: str) -> Path:
    out = tmp / name
    if name == "qwen3-30b-a3b-fp8":
        cfg = runs_doc(KEY_H200)["builds"]["qwen3-30b-a3b-fp8-random"]["config"]
        write_replica(out, cfg, QuantLayout("fp8-block", TEXT_LINEARS))
    else:
        write_replica(out, preset_config(name), preset_layout(name, None, None))
    return out


def left_out_corrections(family: str) -> Any:
    doc = runs_doc(KEY_H200)
    costs = costs_for(KEY_H200)
    pts = observed(load_priors(), doc, "h200", "0.26.0")
    floors: list[Floor] = list(floors_of(doc))
    return fit([price(p, costs) for p in pts], floors, left_out=family)


def predict(ckpt: Path, family: str, points: list[tuple[int, int]], output_len: int,
            requests: int | None, max_model_len: int, fitted: bool, model: str
            ) -> dict[tuple[int, int], dict[str, Any]] | str:
    hw = get_profile("h200")
    engine = get_engine("vllm")
    arithmetic = engine.kv_arithmetic()
    assert arithmetic is not None
    store = StoreChoice(use=False)
    if fitted:  # no prior rows of the model: the shipped priors hold it out already
        with contextlib.suppress(SystemExit):
            store = StoreChoice(use=False, priors=priors_without(model))
    plan = plan_checkpoint(PlanRequest(
        str(ckpt), hw, topology_for(hw.name), arithmetic, startup_rules=engine.startup_rules,
        engine_version="0.26.0",
        knobs=EngineKnobs(max_model_len=max_model_len, kv_cache_memory_bytes=32 << 30),
        store=store))
    if fitted:
        plan = replace(plan, operator=None, speed=replace(
            plan.speed, decode_fit=plan.operator.fitted_decode if plan.operator else
            plan.speed.decode_fit, prefill_fit=plan.operator.fitted_prefill
            if plan.operator else plan.speed.prefill_fit))
    else:
        assert plan.operator is not None and plan.operator.calibration is not None, plan.notes
        cal = replace(plan.operator.calibration, corrections=left_out_corrections(family))
        plan = replace(plan, operator=replace(plan.operator, calibration=cal))
    tokens = batched_tokens(plan, None)
    loads = [Load(p, output_len, requests or requests_for(c), concurrency=c) for p, c in points]
    try:
        lp = predict_load(plan, loads, tokens)
    except UsageError as e:
        return str(e)
    return {(pt.prompt_len, pt.concurrency or 0): _pred(asdict(pt)) for pt in lp.points}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fitted", action="store_true",
                    help="the fitted top-down step model instead (leave-one-model-out)")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    missing: list[str] = []

    def add(name: str, pred: Any, meas: Any) -> None:
        if isinstance(pred, str):
            missing.append(f"{name}: {pred}")
        else:
            rows.extend(compare(name, pred, meas))

    with tempfile.TemporaryDirectory(prefix="servelab-load-check-") as tmp:
        for run in json.loads(RUNS_0512.read_text())["runs"]:
            name = str(run["recipe_name"]).removesuffix("-h200-load")
            if run["status"] != "ok":
                continue
            meas = measured_run(run, int(run["workload"]["output_len"]))
            model = f"{name}-bf16-random"
            pred = predict(replica(Path(tmp), name), "", sorted(meas),
                           int(run["workload"]["output_len"]), None, 16384, args.fitted,
                           model)
            add(name, pred, meas)
        doc = json.loads(RUN_QWEN3.read_text())
        run = doc["runs"][0] if "runs" in doc else doc
        meas = measured_run(run, 256)
        pred = predict(replica(Path(tmp), "qwen3-30b-a3b-fp8"), "qwen3_moe", sorted(meas),
                       256, 16, 40960, args.fitted, "qwen3-30b-a3b-fp8-random")
        add("qwen3-30b-a3b-fp8", pred, meas)
    print(f"steps from: {'the fitted top-down model' if args.fitted else 'the operator model'}"
          "\n")
    print(render(rows))
    for m in missing:
        print(f"\nno load prediction for {m}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
