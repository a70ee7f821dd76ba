"""Synthetic run series with known answers, shared by the analysis tests."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
from tests.store.records import make_run

from servelab.store import RunRecord


def _days(start: str, count: int, step: int = 1) -> list[str]:
    d0 = date.fromisoformat(start)
    return [(d0 + timedelta(days=i * step)).isoformat() for i in range(count)]


def seed_like_dataset() -> list[RunRecord]:
    """The seed's unexplained drop: ~76.8 tok/s from 2026-07-06, ~42.6 from 2026-07-27.

    Run-to-run scatter of ~1 %, within-run request noise of 2 %. Between the last good and the
    first bad row, the engine build and the driver changed; the host stayed Spark-1.
    """
    rng = np.random.default_rng(42)
    runs = []
    for i, day in enumerate(_days("2026-07-06", 6, 3)):  # 07-06 .. 07-21
        runs.append(
            make_run(
                day=day,
                decode=76.8 * (1 + 0.01 * rng.standard_normal()),
                seed=i,
                run_id=f"good-{i}",
                engine_version="0.24.0",
                driver="580.95",
            )
        )
    for i, day in enumerate(_days("2026-07-27", 3)):  # 07-27 .. 07-29
        runs.append(
            make_run(
                day=day,
                decode=42.6 * (1 + 0.01 * rng.standard_normal()),
                seed=50 + i,
                run_id=f"bad-{i}",
                engine_version="0.26.0",
                driver="580.126",
            )
        )
    return runs
