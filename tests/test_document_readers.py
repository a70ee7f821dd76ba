"""Typed readers beside the writers of stored documents: a plan file, the ledger. Each
reads back what its writer wrote and names the file and the problem on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.errors import InputError
from servelab.predict.ledger import LedgerDocument, LedgerRow, LedgerSummary, read_ledger
from servelab.sizing.document import load_plan


def _row(measured: float, predicted: float | None) -> LedgerRow:
    return LedgerRow("h200", "vllm", "bf16", "m", "decode", 2048, measured, predicted,
                     None if predicted is None else predicted * 0.9,
                     None if predicted is None else predicted * 1.1, "family", "src")


def test_the_ledger_reads_back_what_it_wrote() -> None:
    doc = LedgerDocument("2026-12-04.1", (_row(95.0, 100.0), _row(50.0, 100.0), _row(1.0, None)),
                         (LedgerSummary("h200", "decode", 3, 2, 0.5, 0.05, 1),))
    text = json.dumps(doc.to_dict())
    back = read_ledger(json.loads(text), source="ledger.json")
    assert back == doc
    assert [r.inside for r in back.rows] == [True, False, None]
    assert back.rows[0].error == pytest.approx(-0.05)
    assert json.loads(text)["rows"][1]["inside_interval"] is False


@pytest.mark.parametrize(("doc", "problem"), [
    ({"schema": "servelab.runs/1"}, "not a servelab.ledger/1 document"),
    ({"schema": "servelab.ledger/1", "rows": {}}, "needs 'rows' and 'summary' lists"),
    ({"schema": "servelab.ledger/1", "rows": [{"hardware": "h200"}], "summary": []},
     "a ledger row lacks engine"),
    ({"schema": "servelab.ledger/1", "rows": [7], "summary": []}, "not an object"),
])
def test_a_bad_ledger_is_named(doc: object, problem: str) -> None:
    with pytest.raises(InputError) as err:
        read_ledger(doc, source="ledger.json")
    assert str(err.value).startswith("ledger.json: ") and problem in str(err.value)


def test_a_plan_file_reads_back_and_bad_ones_are_named(tmp_path: Path) -> None:
    good = tmp_path / "plan.json"
    good.write_text(json.dumps({
        "schema": "servelab.plan/1", "engine": {"name": "vllm"},
        "kv_pool": {"tokens": 4096, "max_concurrency": 1.0, "rule": "r"},
        "speed": {"decode": [{"context_len": 512, "roofline_tok_s": 80.0,
                              "predicted_tok_s": 60.0, "predicted_low": 50.0,
                              "predicted_high": 70.0}], "prefill": []},
    }))
    plan = load_plan(good)
    assert plan.kv_tokens == 4096 and plan.kv_arithmetic == "vLLM"
    point = plan.speed_at("decode", 512)
    assert point is not None and point.interval == (60.0, 50.0, 70.0)
    for text, problem in [
        ("{", "not JSON (line 1"),
        ('{"schema": "servelab.bench/1"}', "not a servelab.plan/1 document"),
        ('{"schema": "servelab.plan/1", "kv_pool": 3}', "'kv_pool' is not an object"),
        ('{"schema": "servelab.plan/1", "speed": {"decode": 3}}', "'speed.decode' is not a list"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(InputError) as err:
            load_plan(bad)
        assert str(err.value).startswith(f"{bad}: ") and problem in str(err.value), text
    with pytest.raises(InputError, match="no such file"):
        load_plan(tmp_path / "none.json")
