"""``--csv`` holds one value per cell: numbers without units or thousands separators, the
units in the column names (issue 41: "67,366 tokens", "100.5 bound", "409.715 ±197.136")."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from tests.analysis.datasets import seed_like_dataset
from tests.store.records import make_run
from tests.store.test_cli_runs import run_cli

from servelab.store import open_store
from servelab.synth.replica import write_replica
from servelab.synth.replica_presets import preset_config, preset_layout

# a number with something after it (a unit, a label, an interval), or with separators
UNIT_IN_VALUE = re.compile(r"[+-]?\d[\d,]*(\.\d+)?(%|x| ?(tokens?|bound|predicted|measured|"
                           r"GiB|MiB|ms|s|tok/s)\b| ?±.*| ?\[.*)")
SEPARATORS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")


def _cells(text: str) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(text)))
    assert rows, text
    return rows[0], rows[1:]


def _assert_plain(text: str) -> list[dict[str, str]]:
    header, rows = _cells(text)
    assert rows, text
    for row in rows:
        assert len(row) == len(header)
        for name, cell in zip(header, row, strict=True):
            assert not UNIT_IN_VALUE.fullmatch(cell), (name, cell)
            assert not SEPARATORS.fullmatch(cell), (name, cell)
    return [dict(zip(header, row, strict=True)) for row in rows]


def test_choose_csv_is_plain_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        write_replica(tmp_path / name, preset_config(name), preset_layout(name, None, None))
    code, out, err = run_cli(capsys, "choose", str(tmp_path / "gpt-oss-20b"),
                             str(tmp_path / "gpt-oss-120b"), "-H", "5090", "-c", "32768",
                             "--no-store", "--csv")
    assert code == 0, err
    rows = _assert_plain(out)
    first = rows[0]
    assert int(first["kv_pool_tokens"]) > 10_000  # "67,366 tokens" was the cell
    assert float(first["decode_tok_s"]) > 0 and first["decode_source"] in (
        "predicted", "bound", "measured")
    assert float(first["bytes_per_token_gib"]) > 0
    for r in rows:
        for col in ("decode_low_tok_s", "decode_high_tok_s", "concurrency_at_context"):
            assert r[col] == "" or float(r[col]) >= 0


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "results.db")
    with open_store(path) as store:
        for run in seed_like_dataset():
            store.add_run(run)
        for run_id, decode in (("fp8-a", 38.3), ("fp8-b", 1106.5)):  # 1,106.5: a separator
            store.add_run(make_run(day="2026-07-28", decode=decode, seed=70, run_id=run_id,
                                   recipe_name=f"qwen3.6-{run_id}", weights_gib=35.28))
    return path


def test_runs_list_and_compare_csv_are_plain_values(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    code, out, err = run_cli(capsys, "runs", "list", "--db", db, "--csv")
    assert code == 0, err
    _assert_plain(out)
    code, out, err = run_cli(capsys, "compare", "fp8-a", "fp8-b", "--db", db, "--csv")
    assert code == 0, err
    rows = _assert_plain(out)
    header = list(rows[0])
    assert header[:4] == ["metric", "unit", "point", header[3]]
    assert any(h.endswith("(%)") for h in header) and any("p-value" in h for h in header)
    assert {r["unit"] for r in rows} >= {"tok/s"}


def test_calibration_report_csv_is_plain_values(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "calibration", "report", "--priors-only", "--hardware",
                             "h200", "--csv")
    assert code == 0, err
    rows = _assert_plain(out)
    assert {"measured", "predicted", "low", "high", "error_pct"} <= set(rows[0])
    assert all(float(r["measured"]) > 0 for r in rows)
