"""Calibration inputs from the results store: past runs become plan Measurements. Pure.

A stored run carries its measured single-stream decode/prefill per prompt length (metrics at
points ``p{N}-c1``) and the prediction made before it (bytes read per token, prefill FLOPs,
the kernel path). Together they give one :class:`~servelab.plan.calibrate.Measurement` per
point: what the engine achieved against what the hardware ceiling allowed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from servelab.plan.calibrate import Measurement
from servelab.store.model import STATUS_OK, RunRecord


def _speed(run: RunRecord) -> Mapping[str, Any] | None:
    speed = (run.prediction or {}).get("speed")
    return speed if isinstance(speed, Mapping) else None


def measurements_from_run(run: RunRecord) -> list[Measurement]:
    """Decode and prefill Measurements of one successful run (empty when it lacks inputs)."""
    speed = _speed(run)
    if run.status != STATUS_OK or speed is None or not run.engine_version or not run.hardware:
        return []
    kernel = speed.get("kernel_path")
    backend = str(kernel.get("name")) if isinstance(kernel, Mapping) else "unknown"
    precision = str(speed.get("compute_precision") or "bf16")
    engine = run.engine_name or "vllm"
    out: list[Measurement] = []
    for kind, key, metric in (
        ("decode", "context_len", "decode_tok_s"),
        ("prefill", "prompt_len", "prefill_tok_s"),
    ):
        for point in speed.get(kind) or []:
            if not isinstance(point, Mapping) or not isinstance(point.get(key), int):
                continue
            length = int(point[key])
            measured = run.metric(metric, f"p{length}-c1")
            if measured is None or measured.value <= 0:
                continue
            if kind == "decode":
                cost = point.get("bytes_per_token")
            else:
                flops = point.get("flops")
                cost = flops / length if isinstance(flops, int | float) and length else None
            if not isinstance(cost, int | float) or cost <= 0:
                continue
            out.append(
                Measurement(
                    engine=engine,
                    engine_version=run.engine_version,
                    backend=backend,
                    hardware=run.hardware,
                    kind=kind,
                    length=length,
                    tok_s=measured.value,
                    cost_per_token=float(cost),
                    precision=precision,
                    label=run.run_id or "",
                )
            )
    return out


def measurements_from_runs(runs: Iterable[RunRecord]) -> list[Measurement]:
    """All Measurements of ``runs``."""
    return [m for run in runs for m in measurements_from_run(run)]
