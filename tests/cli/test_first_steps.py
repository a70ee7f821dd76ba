"""What a new user trips on first (issue 41): each small thing, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.cli.app import main


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_runs_list_before_any_run_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SERVELAB_DB", raising=False)
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path / "home"))
    rc, out, err = _main(["runs", "list"], capsys)
    assert (rc, err) == (0, "")
    assert out.startswith("no runs stored yet: `servelab run RECIPE`")
    rc, out, _ = _main(["runs", "list", "--json"], capsys)
    assert rc == 0 and json.loads(out)["runs"] == []
    rc, out, _ = _main(["runs", "list", "--recipe", "x"], capsys)
    assert rc == 0 and "no runs stored yet" in out
    assert not (tmp_path / "home").exists()  # listing creates no database
    # a database named on purpose that is not there is a typo, not an empty store
    rc, _, err = _main(["runs", "list", "--db", str(tmp_path / "typo.db")], capsys)
    assert rc == 2 and "no results database here" in err
