"""The same site from a real PostgreSQL results database (``--db postgresql://…``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from site_records import SECRET, populate_store
from tests.pg import PgServer

from servelab.site.collect import collect_site
from servelab.store import open_store

pytestmark = pytest.mark.postgres

SITE_PORTS = range(18600, 18700)  # engineer F's range; the store tests use 18500-18599


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    server = PgServer.start(SITE_PORTS)
    try:
        yield server.create_database("site")
    finally:
        server.stop()


def test_site_from_postgresql_matches_sqlite(pg_url: str, tmp_path: Path) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'r.db'}"
    for url in (pg_url, sqlite_url):
        with open_store(url) as store:
            populate_store(store)

    def summary(url: str) -> list[tuple[str, str, int, float]]:
        with open_store(url) as store:
            site = collect_site(store)
        return [(p.slug, r.engine_version, r.prompt_tokens, round(r.measured.value, 9))
                for p in site.recipes for r in (*p.decode, *p.prefill)]

    assert summary(pg_url) == summary(sqlite_url) != []
    cli = Path(sys.executable).parent / "servelab"
    out = tmp_path / "site"
    proc = subprocess.run([str(cli), "site", "build", str(out), "--db", pg_url],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (out / "recipes" / "tiny-bf16.html").is_file()
    assert all(SECRET not in p.read_text() for p in out.rglob("*.html"))
