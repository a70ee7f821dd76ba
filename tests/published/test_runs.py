"""Published runs (issue 40): the shipped table, the matcher, and ``servelab runs import``."""

from __future__ import annotations

import json
import re
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from servelab.cli.app import main
from servelab.errors import InputError
from servelab.hardware.profiles import resolve_profile_name
from servelab.published.runs import (
    PublishedRun,
    load_published,
    parse_published,
    published_for,
)
from servelab.store import open_store, read_import_file
from servelab.store.exchange import PUBLISHED_LABEL

TABLE = resources.files("servelab.published").joinpath("runs.toml")


def _figures(text: str) -> set[float]:
    return {float(d.replace(",", "")) for d in re.findall(r"\d[\d,]*(?:\.\d+)?", text)}


def test_every_shipped_row_is_sourced_and_read_from_its_quote() -> None:
    rows = load_published()
    assert len(rows) >= 25
    for r in rows:
        assert r.url or r.document, r
        assert r.url is None or r.url.startswith("https://"), r
        assert r.value in _figures(r.quote), f"{r.value} is not in the quote: {r.quote}"
        assert resolve_profile_name(r.hardware) == r.hardware  # a servelab profile's name


def test_the_seed_builds_published_figures_on_a_spark() -> None:
    fast = published_for("unsloth/Qwen3.6-35B-A3B-NVFP4-Fast", "dgx-spark")
    assert sorted((r.spec or "", r.value) for r in fast) == [("", 67.9), ("mtp k=3", 106.5)]
    mtp = next(r for r in fast if r.spec)
    assert mtp.line == ("published: 106.5 tok/s decode, MTP k=3, vllm 0.24.0 (seed recipe "
                        "page, Qwen3.6 35B-A3B — FP8 (its figure for the NVFP4-Fast recipe), "
                        "2026-07-28)")
    (a16,) = published_for("nvidia/Qwen3.6-35B-A3B-NVFP4A16", "dgx-spark")
    assert (a16.value, a16.prompt_tokens, a16.date) == (42.57, 2048, "2026-07-27")
    fp8 = published_for("hf://qwen/qwen3.6-35b-a3b-fp8@main", "DGX-Spark",
                        metric="decode_tok_s", engine="vllm")
    assert {r.value for r in fp8} >= {38.27, 38.70, 52.3}
    assert fp8[-1].date == "2026-07-06"  # newest first
    assert published_for("Qwen/Qwen3.6-35B-A3B-FP8", "h200") == ()
    assert published_for("unsloth/Qwen3.6-35B-A3B-NVFP4-Fast", "dgx-spark",
                         metric="prefill_tok_s") == ()


def test_llama_cpp_spark_bench_rows() -> None:
    rows = published_for("ggml-org/gpt-oss-120b-GGUF", "dgx-spark", engine="llama.cpp")
    assert {(r.metric, r.value) for r in rows} == {("decode_tok_s", 59.02),
                                                   ("prefill_tok_s", 1937.54)}
    assert all("benches/dgx-spark.md" in (r.url or "") for r in rows)


def _doc() -> dict[str, object]:
    return tomllib.loads(TABLE.read_text(encoding="utf-8"))


@pytest.mark.parametrize("edit, message", [
    ({"value": -1}, "value must be a positive number"),
    ({"metric": "speed"}, "metric 'speed' is not one of"),
    ({"date": "28/07/2026"}, "is not YYYY-MM-DD"),
    ({"url": None, "document": None}, "needs url or document"),
    ({"colour": "red"}, "unknown key"),
])
def test_a_bad_row_is_refused_naming_it(edit: dict[str, object], message: str) -> None:
    doc = _doc()
    rows = doc["runs"]
    assert isinstance(rows, list)
    row = {**rows[1], **edit}
    rows[1] = {k: v for k, v in row.items() if v is not None}
    with pytest.raises(InputError, match=f"mine.toml: run 2.*{message}"):
        parse_published(doc, "mine.toml")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    else:  # pragma: no cover - main always exits
        code = 0
    out, err = capsys.readouterr()
    return code, out, err


def test_runs_import_takes_the_shipped_table_and_json_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "results.db")
    table = tmp_path / "published.toml"
    table.write_text(TABLE.read_text(encoding="utf-8"), encoding="utf-8")
    code, out, err = _run(capsys, "runs", "import", str(table), "--db", db, "--json")
    assert code == 0, err
    added = json.loads(out)["added"]
    assert len(added) == len(load_published())
    code, out, _ = _run(capsys, "runs", "import", str(table), "--db", db, "--json")
    assert json.loads(out) == {"added": [], "skipped": added}  # the same rows: one run each
    with open_store(db) as store:
        runs = store.list_runs()
    fast = [r for r in runs if r.model_id == "unsloth/Qwen3.6-35B-A3B-NVFP4-Fast"
            and r.workload and r.workload.get("spec") == "mtp k=3"]
    (run,) = fast
    assert run.decode_tok_s == 106.5 and run.hardware == "dgx-spark"
    assert run.engine_name == "vllm" and run.engine_version == "0.24.0"
    assert run.labels == (PUBLISHED_LABEL,) and run.prediction is None  # no plan: never fitted
    assert run.extra and run.extra["published"]["quote"].startswith("Prefer unsloth")
    (fp8,) = [r for r in runs if r.model_id == "Qwen/Qwen3.6-35B-A3B-FP8"
              and r.decode_tok_s == 38.27]
    metric = fp8.metric("decode_tok_s", "p2048-c1")
    assert metric is not None and metric.value == 38.27 and metric.n == 0
    assert fp8.engine_args == ("--max-model-len", "262144", "--kv-cache-memory-bytes",
                               "6442450944")
    # a team's own row, as JSON
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"schema": "servelab.published/1", "runs": [
        PublishedRun("me/My-Build", "h200", "vllm", "decode_tok_s", 71.5, "2026-11-30",
                     "our lab notebook", "71.5 tok/s", url="https://example.org/nb").to_dict(),
    ]}), encoding="utf-8")
    (rec,) = read_import_file(mine)
    assert (rec.model_id, rec.decode_tok_s, rec.labels) == ("me/My-Build", 71.5, ("published",))


def test_a_bad_published_file_writes_nothing(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "results.db")
    bad = tmp_path / "bad.toml"
    bad.write_text(TABLE.read_text(encoding="utf-8").replace("value = 106.5", "value = 0"),
                   encoding="utf-8")
    code, _, err = _run(capsys, "runs", "import", str(bad), "--db", db)
    assert code == 2 and "bad.toml: run 2" in err and "value must be a positive number" in err
    other = tmp_path / "other.toml"
    other.write_text('schema = "servelab.runs/1"\n', encoding="utf-8")
    code, _, err = _run(capsys, "runs", "import", str(other), "--db", db)
    assert code == 2 and "must be published runs" in err
    with open_store(db) as store:
        assert store.list_runs() == []
