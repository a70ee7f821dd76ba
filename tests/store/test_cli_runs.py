"""``servelab runs ...`` end to end through the real entry point on a real SQLite file."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from tests.store.records import make_run

from servelab.cli.app import app, main
from servelab.store import open_store


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``servelab ARGS`` in-process through ``main`` (the console script's function)."""
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    else:  # pragma: no cover - main always exits
        code = 0
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "results.db")
    with open_store(path) as store:
        store.add_run(make_run(day="2026-07-06", run_id="20260706-a", labels=("nightly",)))
        store.add_run(
            make_run(
                day="2026-07-27", run_id="20260727-b", seed=2, decode=42.6, engine_version="0.26.0"
            )
        )
    return path


def test_list_in_every_format(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, out, _ = run_cli(capsys, "runs", "list", "--db", db, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "servelab.runs/1"
    assert [r["run_id"] for r in doc["runs"]] == ["20260727-b", "20260706-a"]  # newest first
    code, out, _ = run_cli(capsys, "runs", "list", "--db", db, "--csv", "--label", "nightly")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0][:3] == ["id", "started (UTC)", "status"] and len(rows) == 2
    assert rows[1][0] == "20260706-a"
    code, out, _ = run_cli(capsys, "runs", "list", "--db", db, "--markdown")
    assert "| id | started (UTC) |" in out and "20260727-b" in out
    code, out, err = run_cli(capsys, "runs", "list", "--db", db, "--json", "--csv")
    assert code == 2 and "choose one of --json, --csv, --markdown" in err


def test_show_export_import_delete(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    code, out, _ = run_cli(capsys, "runs", "show", "20260706", "--db", db, "--json", "--samples")
    assert code == 0
    run = json.loads(out)
    assert run["run_id"] == "20260706-a" and len(run["samples"]) == 20
    code, out, _ = run_cli(capsys, "runs", "show", "20260727-b", "--db", db)
    assert code == 0 and "0.26.0" in out and "decode_tok_s" in out
    export = tmp_path / "out.json"
    code, _, err = run_cli(capsys, "runs", "export", "--db", db, "-o", str(export))
    assert code == 0 and "exported 2 runs" in err
    other = str(tmp_path / "other.db")
    code, out, _ = run_cli(capsys, "runs", "import", str(export), "--db", other, "--json")
    assert code == 0 and json.loads(out) == {"added": ["20260706-a", "20260727-b"], "skipped": []}
    code, out, _ = run_cli(capsys, "runs", "import", str(export), "--db", other)
    assert "imported 0 runs, skipped 2" in out
    with open_store(other) as store:
        assert len(store.get_run("20260706-a").samples) == 20
    code, out, _ = run_cli(capsys, "runs", "delete", "20260706-a", "--yes", "--db", other)
    assert code == 0 and "deleted 1 run" in out
    code, _, err = run_cli(capsys, "runs", "show", "20260706-a", "--db", other)
    assert code == 1 and err.strip() == "error: no run with id '20260706-a'"


def test_bad_database_and_bad_import_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "notes.db"
    bad.write_text("these are my notes, not a database\n" * 20)
    code, _, err = run_cli(capsys, "runs", "list", "--db", str(bad))
    assert code == 2  # a --db that is no database is bad input (issue 33)
    assert err.count("\n") == 1 and "notes.db: not a SQLite database" in err
    code, _, err = run_cli(capsys, "runs", "list", "--db", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "is a directory" in err
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2")
    db = str(tmp_path / "ok.db")
    code, _, err = run_cli(capsys, "runs", "import", str(junk), "--db", db)
    assert code == 2 and "junk.json: not JSON" in err
    assert not Path(db).exists()  # nothing written when the input is bad


def test_import_redacts_secrets(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    token = "hf_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"
    doc = {
        "schema": "servelab.runs/1",
        "runs": [
            {
                "started_at": "2026-07-28T10:00:00+00:00",
                "run_id": "leaky",
                "engine_args": ["--hf-token", token],
                "log_tail": f"HF_TOKEN={token}",
                "status": "failed",
                "status_reason": "boom",
            }
        ],
    }
    path = tmp_path / "leaky.json"
    path.write_text(json.dumps(doc))
    db = str(tmp_path / "r.db")
    assert run_cli(capsys, "runs", "import", str(path), "--db", db)[0] == 0
    code, out, _ = run_cli(capsys, "runs", "show", "leaky", "--db", db, "--json")
    assert code == 0 and token not in out and "[REDACTED]" in out


def test_every_store_and_analysis_command_has_help() -> None:
    root: Any = typer.main.get_command(app)
    runs = root.commands["runs"]
    commands = [runs.commands[n] for n in ("list", "show", "export", "import", "delete")]
    commands += [root.commands[n] for n in ("compare", "history", "experiment")]
    for cmd in commands:
        assert cmd.help, cmd.name
        for param in cmd.params:
            if param.name == "help":
                continue
            assert getattr(param, "help", None), f"{cmd.name} {param.name} has no help"
