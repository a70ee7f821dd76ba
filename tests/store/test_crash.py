"""kill -9 mid-write leaves no partial run; concurrent writer processes lose no rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.store.records import make_run

from servelab.errors import RunNotFoundError
from servelab.store import RunFilter, open_store

WRITER = Path(__file__).with_name("writer.py")


def _count(store_url: str, table: str, run_id: str) -> int:
    with open_store(store_url) as store, store.engine.connect() as conn:
        col = "id" if table == "runs" else "run_id"
        q = f"SELECT count(*) FROM {table} WHERE {col} = '{run_id}'"
        return int(conn.exec_driver_sql(q).scalar_one())


@pytest.mark.slow
def test_kill_9_mid_write_leaves_no_partial_run(db_url: str) -> None:
    with open_store(db_url):
        pass  # migrate first so the writer's transaction is the run, not the schema
    lines: list[str] = []
    with subprocess.Popen(
        [sys.executable, str(WRITER), db_url, "crash"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if line.strip() == "MID":
                os.kill(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=60)
        err = proc.stderr.read()
    assert lines == ["COMMITTED", "MID"], (lines, err)
    assert proc.returncode == -signal.SIGKILL
    with open_store(db_url) as store:
        assert store.get_run("committed-before-crash").samples  # committed run survived
        with pytest.raises(RunNotFoundError):
            store.get_run("killed-mid-write")
        # ... and nothing of it anywhere, then the database still takes writes.
        after = store.add_run(make_run(seed=9))
        assert store.count_runs() == 2 and store.has_run(after)
    for table in ("runs", "samples", "metrics", "run_labels"):
        assert _count(db_url, table, "killed-mid-write") == 0


@pytest.mark.slow
def test_concurrent_writers_lose_no_rows(db_url: str) -> None:
    with open_store(db_url):
        pass
    writers, per_writer = 4, 15
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRITER), db_url, "many", str(per_writer), f"w{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]
    for p in procs:
        with p:
            out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out.strip() == "DONE"
    with open_store(db_url) as store:
        assert store.count_runs() == writers * per_writer
        for i in range(writers):
            runs = store.list_runs(RunFilter(label=f"w{i}"), samples=True)
            assert [r.run_id for r in runs] == [f"w{i}-{k:04d}" for k in range(per_writer)]
            assert all(len(r.samples) == 30 for r in runs)


@pytest.mark.slow
def test_writers_racing_on_a_fresh_database_migrate_it_once(db_url: str) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRITER), db_url, "many", "3", f"fresh{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    for p in procs:
        with p:
            _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    with open_store(db_url) as store, store.engine.connect() as conn:
        versions = conn.exec_driver_sql("SELECT version FROM servelab_migrations").scalars().all()
        assert sorted(versions) == [1, 2]
        assert store.count_runs() == 12
