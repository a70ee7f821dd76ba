"""Request-rate grids: every rate is its own stored point (``p16-c4-r4``, ``p16-c4-r8``),
through a real bench against the synthetic streaming server, SQLite/PostgreSQL, JSON export
and import, compare and pages; labels written before rates were in the key still read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.analysis import Group, compare_groups
from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.points import PointKey, arrival_tag
from servelab.site.measured import concurrent_rows, point_values
from servelab.store import export_doc, open_store, read_import_file, run_from_bench_json
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer

_ARRIVALS = st.sampled_from(["", "constant", "gamma0.5", "gamma2", "ramp4", "ramp", "trace"])


@given(st.integers(1, 10**6), st.one_of(st.none(), st.integers(1, 4096)), st.integers(0, 10**6),
       st.one_of(st.none(), st.floats(1e-3, 1e4)), _ARRIVALS)
def test_point_key_label_round_trip(prompt: int, conc: int | None, depth: int,
                                    rate: float | None, arrival: str) -> None:
    key = PointKey(prompt, conc, depth, rate, arrival)
    assert PointKey.parse(key.label) == key
    assert PointKey.parse(f"vllm-{key.label}") == key  # embedded in a longer name


def test_rate_labels_and_old_labels() -> None:
    assert PointKey(512, 8, rate=2).label == "p512-c8-r2"
    assert PointKey(512, 8, rate=0.5, arrival="constant").label == "p512-c8-r0.5-constant"
    assert PointKey(512, 8, rate=1 / 3).label == "p512-c8-r0.333333"
    assert PointKey(512, 8, rate=2, arrival=arrival_tag("gamma", 0.5)).label == \
        "p512-c8-r2-gamma0.5"
    assert PointKey(512, 8, rate=1, arrival=arrival_tag("ramp", 1, 4)).load == \
        "1 req/s ramp to 4 req/s"
    # labels stored before rates were part of the key read back as closed-loop points
    for old in ("p2048-c1", "p512-d4096-c1", "p100-cmax"):
        pid = PointKey.parse(old)
        assert pid is not None and not pid.open_loop and pid.label == old
    assert PointKey(2048, 1) != PointKey(2048, 1, rate=2)
    assert PointKey(2048, 4, rate=2) != PointKey(2048, 4, rate=4)
    assert PointKey(2048, 4, rate=2) != PointKey(2048, 4, rate=2, arrival="constant")


def _rate_grid_bench(profile: str) -> dict[str, Any]:
    with SyntheticServer(SyntheticConfig(ttft_s=0.005, itl_s=0.004)) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=6, concurrency=(4,), request_rates=(20.0, 40.0),
            profile=profile, requests=6, max_repeats=1, warmup_requests=1)))  # type: ignore[arg-type]
    assert [(p.point.request_rate, p.metrics.completed) for p in res.points] == [
        (20.0, 6), (40.0, 6)]
    return res.to_json()


@pytest.mark.timeout(120)
def test_a_rate_grid_is_stored_as_one_point_per_rate(db_url: str, tmp_path: Path) -> None:
    rec = run_from_bench_json(_rate_grid_bench("poisson"), recipe_name="synthetic",
                              engine_name="synthetic", engine_version="1")
    assert rec.points == ("p16-c4-r20", "p16-c4-r40")
    assert [len(rec.samples_at(p)) for p in rec.points] == [6, 6]  # warm-ups left out
    assert rec.metric("decode_tok_s", "p16-c4-r20") is not None
    assert rec.metric("decode_tok_s", "p16-c4-r40") is not None
    assert rec.decode_tok_s is None  # no closed-loop single-stream point: no headline
    const = run_from_bench_json(_rate_grid_bench("constant"), recipe_name="synthetic",
                                engine_name="synthetic", engine_version="1")
    assert const.points == ("p16-c4-r20-constant", "p16-c4-r40-constant")
    # an old run, stored before rates were in the key, sits in the same database
    old_doc = json.loads((Path(__file__).with_name("data") / "old-export.json").read_text())
    with open_store(db_url) as store:
        ids = [store.add_run(rec), store.add_run(const)]
        got = [store.get_run(i) for i in ids]
        path = tmp_path / "runs.json"
        path.write_text(json.dumps(export_doc(got)))
        old_path = tmp_path / "old.json"
        old_path.write_text(json.dumps(old_doc))
        old = read_import_file(old_path)
        old_ids = [store.add_run(r) for r in old]
        old_back = [store.get_run(i) for i in old_ids]
    assert [g.points for g in got] == [rec.points, const.points]
    assert [g.samples for g in got] == [rec.samples, const.samples]
    again = read_import_file(path)  # export -> import keeps the points apart
    assert [r.points for r in again] == [rec.points, const.points]
    assert [r.points for r in old_back] == [("p16-c1",), ("p16-c4",)]  # as they were stored
    assert [old_back[0].samples, old_back[1].samples] == [old[0].samples, old[1].samples]
    # compare (stored run vs its re-imported export): one row per rate, never merged
    comp = compare_groups([Group("stored", (got[0],)), Group("imported", (again[0],))],
                          metrics=["decode_tok_s"])
    assert [r.point for r in comp.rows] == ["p16-c4-r20", "p16-c4-r40"]
    # pages: each rate is its own row of the several-streams table, labelled with its load
    decode = point_values(got[0], "decode_tok_s")
    assert set(decode) == {PointKey(16, 4, 0, 20.0), PointKey(16, 4, 0, 40.0)}
    rows = concurrent_rows({"1": got[0]})
    assert [(r.load, r.per_gpu) for r in rows] == [("20 req/s Poisson", None),
                                                    ("40 req/s Poisson", None)]


def test_vllm_bench_serve_files_at_a_rate_keep_it_in_the_point() -> None:
    from servelab.store.exchange import run_from_vllm_bench

    doc = json.loads((Path(__file__).with_name("data")
                      / "vllm-0.32-bench-serve-detailed.json").read_text())
    (closed,) = run_from_vllm_bench(doc).points
    assert PointKey.parse(closed) is not None and "-r" not in closed  # "inf": all at once
    poisson = run_from_vllm_bench({**doc, "request_rate": 2.5}).points
    gamma = run_from_vllm_bench({**doc, "request_rate": 2.5, "burstiness": 0.5}).points
    assert poisson == (f"{closed}-r2.5",) and gamma == (f"{closed}-r2.5-gamma0.5",)
