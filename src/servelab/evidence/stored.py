"""The stored runs servelab reads for a plan, without ever creating a database.

- :func:`store_exists`: whether there is a results database to read;
- :func:`stored_runs`: the successful runs (on a hardware profile), those that swept
  concurrency with their samples when asked;
- :func:`load_evidence`: what stored runs say about a plan under load (the batched form's
  held-out error, measured SLO capacities, the sweeps left out and why).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from servelab.plan.build import Plan
from servelab.plan.load import BatchedError, MeasuredCapacity
from servelab.predict.priors import load_priors
from servelab.store.db import Store
from servelab.store.model import STATUS_OK, RunFilter, RunRecord

__all__ = ["load_evidence", "store_exists", "stored_runs", "with_sweeps"]


def store_exists(db: str | None) -> bool:
    """Whether there is a results database to read: ``db`` or ``$SERVELAB_DB`` given, or
    the data directory's ``results.db`` exists (planning never creates one)."""
    from servelab.store.connect import ENV_DB, data_dir

    return db is not None or bool(os.environ.get(ENV_DB)) or (data_dir() / "results.db").exists()


def stored_runs(db: str | None, hardware: str | None, *, sweeps: bool = False
                ) -> list[RunRecord]:
    """Successful runs on ``hardware`` (on any when None) from the results database (none
    when ``db`` is unset and the default database does not exist: planning never creates
    one); ``sweeps``: runs that swept concurrency come with their samples."""
    from servelab.store.db import open_store

    if not store_exists(db):
        return []
    with open_store(db) as store:
        runs = store.list_runs(RunFilter(hardware=hardware, status=STATUS_OK))
        if sweeps:
            runs = with_sweeps(store, runs)
        return runs


def with_sweeps(store: Store, runs: Sequence[RunRecord]) -> list[RunRecord]:
    """``runs`` with the samples of those that swept concurrency (their measurement)."""
    from servelab.evidence.sweeps import sweeps_in

    return [store.get_run(r.run_id) if r.run_id and sweeps_in(r) else r for r in runs]


def load_evidence(runs: Sequence[RunRecord], plan: Plan, priors: Path | None = None
                  ) -> tuple[BatchedError | None, list[MeasuredCapacity], str | None]:
    """What stored ``runs`` say about ``plan`` under load: the batched form's held-out error
    on its hardware (:func:`servelab.evidence.sweeps.batched_error`, from every stored sweep
    predicted with its model left out), the SLO capacities measured with its checkpoint
    there, and a note naming the sweeps there that could not be predicted again (not in that
    error; ``calibration report --replica`` can score them)."""
    from servelab.evidence.sweeps import (
        batched_error,
        held_out_sweeps,
        left_out_note,
        stored_capacities,
    )

    if not runs:
        return None, [], None
    rows, skipped = held_out_sweeps(runs, load_priors(priors))
    hw = plan.hardware.name
    return (batched_error(rows, hw), stored_capacities(runs, plan.checkpoint_hash, hw),
            left_out_note(skipped, hw))
