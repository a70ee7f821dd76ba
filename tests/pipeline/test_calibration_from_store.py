"""A stored run's prediction and measurements come back as calibration inputs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from servelab.hardware.profiles import get_profile
from servelab.pipeline.calibration import measurements_from_run
from servelab.pipeline.run import calibration_for
from servelab.store import open_store
from servelab.store.model import Metric, RunRecord

GB = 1e9


def _run(decode: float) -> RunRecord:
    speed = {
        "bandwidth": 4.8e12,
        "kernel_path": {"name": "TRITON Fp8"},
        "compute_precision": "fp8",
        "decode": [{"context_len": 512, "bytes_per_token": int(3 * GB)}],
        "prefill": [{"prompt_len": 512, "flops": 512 * 6.0e9}],
    }
    return RunRecord(
        started_at=datetime(2026, 12, 2, tzinfo=UTC), recipe_name="r", engine_name="vllm",
        engine_version="0.26.0", hardware="h200", prediction={"speed": speed},
        metrics=(Metric("decode_tok_s", decode, "p512-c1", n=16, unit="tok/s"),
                 Metric("prefill_tok_s", 20_000.0, "p512-c1", n=16, unit="tok/s")),
    )


def test_stored_runs_calibrate_the_next_prediction(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "r.db")) as store:
        store.add_run(_run(240.0))
        store.add_run(_run(230.0))
        (stored, _) = store.list_runs()
        assert stored.prediction == _run(240.0).prediction  # nothing redacted away
        ms = measurements_from_run(stored)
        assert {m.kind for m in ms} == {"decode", "prefill"}
        h200 = get_profile("h200")
        decode, prefill = calibration_for(store, (h200, "0.26.0", "TRITON Fp8"))
    assert decode is not None and prefill is not None
    assert decode.n == 2
    ceiling, _ = h200.effective_bandwidth_ceiling()
    assert decode.median == pytest.approx(235.0 * 3 * GB / ceiling)
