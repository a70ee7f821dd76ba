"""Migrations (empty -> latest, v1 -> v2 with data) and refusing foreign/corrupted/newer DBs."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from tests.store.records import make_run

from servelab.errors import StoreError, StoreSchemaError
from servelab.store import RunRecord, open_store
from servelab.store.connect import make_engine, resolve_url
from servelab.store.db import Store
from servelab.store.schema import LATEST_VERSION


def _tables(store: Store) -> set[str]:
    return set(sa.inspect(store.engine).get_table_names())


def test_empty_database_migrates_to_latest(db_url: str) -> None:
    with open_store(db_url) as store:
        assert store.schema_version() == LATEST_VERSION == 2
        assert {
            "runs",
            "samples",
            "metrics",
            "run_labels",
            "experiments",
            "servelab_migrations",
        } <= _tables(store)
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT version, name FROM servelab_migrations ORDER BY version"
            ).all()
        assert [tuple(r) for r in rows] == [(1, "initial"), (2, "experiments-and-power")]
    with open_store(db_url) as again:  # re-opening applies nothing twice
        assert again.schema_version() == LATEST_VERSION


def test_v1_database_with_runs_migrates_to_v2(db_url: str) -> None:
    # Build a real v1 database: only step 1 applied, and a run written by the v1 shape.
    store = Store(make_engine(resolve_url(db_url)), resolve_url(db_url))
    assert store.migrate(target=1) == 1
    assert "experiments" not in _tables(store)
    cols = {c["name"] for c in sa.inspect(store.engine).get_columns("runs")}
    assert "power_w" not in cols
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO runs (id, created_at, started_at, status, recipe_name, decode_tok_s) "
            "VALUES ('20260706-120000-aaaaaa', '2026-07-06 12:00:00', '2026-07-06 12:00:00', "
            "'ok', 'old-recipe', 76.8)"
        )
    store.close()
    with open_store(db_url) as migrated:
        assert migrated.schema_version() == 2
        old = migrated.get_run("20260706-120000-aaaaaa")
        assert (old.recipe_name, old.decode_tok_s, old.power_w) == ("old-recipe", 76.8, None)
        assert old.started_at == datetime(2026, 7, 6, 12, tzinfo=UTC)
        new_id = migrated.add_run(make_run(power_w=95.5))
        assert migrated.get_run(new_id).power_w == 95.5


def test_opening_without_migrate_refuses_old_schema(db_url: str) -> None:
    store = Store(make_engine(resolve_url(db_url)), resolve_url(db_url))
    store.migrate(target=1)
    store.close()
    with pytest.raises(StoreSchemaError, match="needs migrating to 2"):
        open_store(db_url, migrate=False)


def test_newer_schema_is_refused(db_url: str) -> None:
    with open_store(db_url) as store, store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO servelab_migrations (version, name, applied_at) "
            "VALUES (99, 'from-the-future', '2030-01-01 00:00:00')"
        )
    with pytest.raises(StoreSchemaError, match="schema version 99 is newer"):
        open_store(db_url)


def test_foreign_database_is_refused(db_url: str) -> None:
    engine = sa.create_engine(resolve_url(db_url))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    engine.dispose()
    with pytest.raises(StoreSchemaError, match=r"not a servelab results database.*customers"):
        open_store(db_url)


def test_non_sqlite_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    path.write_bytes(b"PK\x03\x04 this is a zip, not a database" * 10)
    before = path.read_bytes()
    with pytest.raises(StoreSchemaError, match=r"results\.db: not a SQLite database"):
        open_store(str(path))
    assert path.read_bytes() == before


def test_corrupted_sqlite_file_gets_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    with open_store(str(path)) as store:
        for i in range(30):
            store.add_run(make_run(seed=i, n=50))
    with sqlite3.connect(path) as conn:  # fold the WAL back so the main file holds the data
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    # Keep the 100-byte header valid; trash the schema page and the b-tree pages.
    for off in range(100, len(data), 97):
        data[off] = 0xFF ^ data[off]
    path.write_bytes(bytes(data))
    with pytest.raises(StoreSchemaError, match="corrupted database"):
        store = open_store(str(path))
        store.list_runs(samples=True)


def test_unreachable_postgres_is_a_store_error() -> None:
    url = "postgresql://nobody:secretpw@127.0.0.1:18599/none?connect_timeout=2"
    with pytest.raises(StoreError) as info:
        open_store(url)
    assert "secretpw" not in str(info.value)
    assert "database unavailable" in str(info.value)


def test_default_location_follows_servelab_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Environment configuration (not code under test) is what is being exercised here.
    monkeypatch.delenv("SERVELAB_DB", raising=False)
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path / "home"))
    with open_store(None) as store:
        store.add_run(RunRecord(started_at=datetime(2026, 7, 6, tzinfo=UTC)))
    assert (tmp_path / "home" / "results.db").exists()
