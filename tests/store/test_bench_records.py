"""``bench`` records its run by default, and importing a result twice stores it once
(issue 33: duplicates shrank history's noise estimate and invited false alarms)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.bench.cli import servelab

from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer

ARGS = ("--model", "synthetic", "--prompt-lens", "8", "--output-len", "6", "--requests", "3",
        "--max-repeats", "1", "--warmup", "0")


def _ids(db: Path) -> list[str]:
    proc = servelab("runs", "list", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return sorted(r["run_id"] for r in json.loads(proc.stdout)["runs"])


@pytest.mark.timeout(180)
def test_bench_records_and_imports_are_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        rec = servelab("bench", srv.base_url, *ARGS, "--db", str(db), "--out",
                       str(tmp_path / "a.json"), "--slo", "ttft_p50=500")
        assert rec.returncode == 0, rec.stderr
        skip = servelab("bench", srv.base_url, *ARGS, "--db", str(db), "--no-record",
                        "--out", str(tmp_path / "b.json"))
        assert skip.returncode == 0, skip.stderr
    (rid,) = _ids(db)
    assert f"recorded as run {rid}" in rec.stderr and "recorded" not in skip.stderr
    (run,) = json.loads(servelab("runs", "list", "--db", str(db), "--json").stdout)["runs"]
    # the engine as the server names itself (/v1/models owned_by); no version it did not state
    assert run["engine_name"] == "servelab-synthetic" and run["engine_version"] is None
    for path, added in (("a.json", 0), ("b.json", 1), ("a.json", 0), ("b.json", 0)):
        imp = servelab("runs", "import", str(tmp_path / path), "--db", str(db), "--json")
        assert imp.returncode == 0, imp.stderr
        assert len(json.loads(imp.stdout)["added"]) == added, (path, imp.stdout)
    assert len(_ids(db)) == 2


@pytest.mark.timeout(180)
def test_a_recorded_bench_run_claims_no_context_on_its_page(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        rec = servelab("bench", srv.base_url, *ARGS, "--db", str(db))
    assert rec.returncode == 0, rec.stderr
    site = tmp_path / "site"
    built = servelab("site", "build", str(site), "--db", str(db))
    assert built.returncode == 0, built.stderr
    pages = "\n".join(p.read_text() for p in site.rglob("*.md"))
    assert "synthetic" in pages and "was measured on one" in pages
    assert "0-token context" not in pages
