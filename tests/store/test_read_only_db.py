"""Read-only commands never create a results database (issue 33): a mistyped ``--db`` is an
error naming the path, and nothing appears on disk — not the file, not its directories."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.bench.cli import servelab

READ_ONLY = [
    ["runs", "list"], ["runs", "show", "20260101"], ["runs", "export", "-o", "{tmp}/x.json"],
    ["runs", "delete", "20260101", "--yes"], ["history", "some-recipe"],
    ["compare", "abc", "def"], ["experiment", "a", "b"],
    ["calibration", "report"],
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("argv", READ_ONLY, ids=lambda a: "-".join(a[:2]))
def test_a_mistyped_db_is_an_error_and_creates_nothing(argv: list[str], tmp_path: Path) -> None:
    db = tmp_path / "typo" / "resluts.db"
    proc = servelab(*[a.format(tmp=tmp_path) for a in argv], "--db", str(db))
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, err)
    assert f"{db}: no results database here" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "typo").exists()
