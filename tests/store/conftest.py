"""Store fixtures: one real PostgreSQL server per session, and ``db_url`` parametrized over
SQLite and PostgreSQL so that every store test runs on both backends."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.pg import PgServer

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL server started for this session (fails, never skips, when missing)."""
    server = PgServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of a fresh, empty results database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    server: PgServer = request.getfixturevalue("pg_server")
    return server.create_database(f"servelab_test_{next(_counter)}")
