"""How long ``servelab plan`` takes for parallel layouts up to 64 GPUs, next to one GPU.

Usage::

    .venv/bin/python benchmarks/plan_parallel.py [--repeats 15]

The model is a full-dimension header replica of Qwen3.6-35B-A3B in BF16 (40 layers, 256
experts, hybrid attention; headers only, so no weight bytes hit the disk), inspected once.
Each layout is then planned with :func:`servelab.plan.build.build_plan` on the ``h200``
profile at the model's full 262,144-token context: per-GPU weights, each rank's KV pool
(with the largest-context search), memory budget, the single-GPU speed prediction and the
parallel decode with its communication terms. The figure is the median wall time of
``--repeats`` runs; the ratio is ``layout / 1 GPU``. The target is < 1 s for 64 GPUs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.hardware.profiles import BUILTIN
from servelab.hardware.topology import topology_for
from servelab.pipeline.planning import plan_checkpoint
from servelab.plan.build import build_plan
from servelab.plan.checkpoint import Checkpoint
from servelab.plan.request import PlanRequest, StoreChoice
from servelab.predict.evidence import Evidence
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.layout import ParallelLayout
from servelab.sizing.weights import weights_from_report
from servelab.synth.replica import QuantLayout, write_replica
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

LAYOUTS: tuple[tuple[str, ParallelLayout], ...] = (
    ("1 GPU", ParallelLayout()),
    ("TP8 (8 GPUs)", ParallelLayout(tensor=8)),
    ("TP8 x PP8 (64 GPUs)", ParallelLayout(tensor=8, pipeline=8)),
    ("TP8 x DP8 + EP (64 GPUs)", ParallelLayout(tensor=8, data=8, expert=True)),
    ("TP4 x PP4 x DP4 (64 GPUs)", ParallelLayout(tensor=4, pipeline=4, data=4)),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    hw = BUILTIN["h200"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "qwen36-bf16"
        write_replica(out, QWEN3_6_35B_A3B, QuantLayout("bf16"))
        source = load_checkpoint(str(out))
        config = dict(source.config or {})
        weights = weights_from_report(build_report(source), name="Qwen3.6-35B-A3B (replica)")
        # The whole CLI path: read every header, inspect, plan (1 GPU, then TP8 x PP8).
        whole: dict[str, float] = {}
        for label, lay in (("1 GPU", ParallelLayout()), ("64 GPUs", LAYOUTS[2][1])):
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                plan_checkpoint(PlanRequest.from_flags(
                    str(out), hw, topology_for(hw.name), knobs=EngineKnobs(layout=lay),
                    store=StoreChoice(use=False)))
                runs.append(time.perf_counter() - t0)
            whole[label] = statistics.median(runs)
    print(
        "whole `servelab plan` path (read ~62k tensor headers + inspect + plan), median of 3: "
        f"1 GPU {whole['1 GPU']:.3f} s, TP8 x PP8 {whole['64 GPUs']:.3f} s "
        f"({whole['64 GPUs'] / whole['1 GPU']:.2f}x)"
    )
    base: float | None = None
    print(f"{'layout':<28} {'median s':>9} {'vs 1 GPU':>9}  per-GPU weights  KV tokens/replica")
    for label, layout in LAYOUTS:
        times: list[float] = []
        plan = None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            request = PlanRequest.from_flags("replica", hw, topology_for(hw.name),
                                             knobs=EngineKnobs(layout=layout))
            plan = build_plan(request, Checkpoint.of(config, weights), Evidence(calibrate=False))
            times.append(time.perf_counter() - t0)
        assert plan is not None
        med = statistics.median(times)
        base = base or med
        print(
            f"{label:<28} {med:>9.4f} {med / base:>8.2f}x  "
            f"{plan.gpu_weights.per_gpu / 2**30:>11.2f} GiB  {plan.kv.tokens:>12,}"
        )


if __name__ == "__main__":
    main()
