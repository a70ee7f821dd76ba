"""Rough edges of issue 33: run ids stay whole (terminal or pipe), recipe check refuses an
unknown hardware name, capacity's defaults work for concurrency, and progress reaches a log."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from tests.bench.cli import servelab

from servelab.cli.output import emit
from servelab.cli.runs_cmd import runs_table
from servelab.store import RunRecord, open_store
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer


def _db_with_runs(path: Path) -> list[str]:
    long = "a-recipe-with-a-rather-long-name-for-a-narrow-terminal"
    with open_store(f"sqlite:///{path}") as store:
        return [store.add_run(RunRecord(
            started_at=datetime(2026, 12, 4, 12, i, tzinfo=UTC), recipe_name=f"{long}-{i}",
            model_id="Qwen/Qwen3.6-35B-A3B-FP8", engine_name="vllm", engine_version="0.32.0",
            hardware="dgx-spark", host="a-host-name", labels=("nightly", "baseline", "x" * 30),
            decode_tok_s=123.456)) for i in range(3)]


def test_run_ids_stay_whole_in_a_pipe_and_at_100_columns(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    ids = _db_with_runs(db)
    proc = servelab("runs", "list", "--db", str(db))  # stdout is a pipe here
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for rid in ids:
        assert any(rid in line for line in lines), proc.stdout
    with open_store(f"sqlite:///{db}", create=False) as store:
        runs = store.list_runs()
    buf = io.StringIO()
    emit("table", doc=None, tables=[runs_table(runs)],
         console=Console(file=buf, width=100, force_terminal=True, color_system=None))
    for rid in ids:
        assert any(rid in line for line in buf.getvalue().splitlines()), buf.getvalue()


@pytest.mark.parametrize("name", ["cpu", "h300"])
def test_recipe_check_refuses_an_unknown_hardware_name(name: str, tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    proc = servelab("recipe", "new", str(recipe))
    assert proc.returncode == 0, proc.stderr
    recipe.write_text(recipe.read_text().replace('hardware = "dgx-spark"',
                                                 f'hardware = "{name}"'))
    proc = servelab("recipe", "check", str(recipe))
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert str(recipe) in err and f"unknown hardware profile {name!r}" in err
    assert "dgx-spark" in err  # the known names are listed


@pytest.mark.timeout(120)
def test_bench_progress_reaches_a_log() -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        proc = servelab("bench", srv.base_url, "--model", "synthetic", "--prompt-lens", "8,16",
                        "--output-len", "4", "--requests", "3", "--max-repeats", "1",
                        "--no-record", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "[1/2] prompt 8 · out 4 · c=1 · measure 3/3" in proc.stderr
    assert "[2/2] prompt 16 · out 4 · c=1 · measure 3/3" in proc.stderr
    assert len(json.loads(proc.stdout)["points"]) == 2  # stdout stays clean JSON
