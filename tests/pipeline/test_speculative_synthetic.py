"""Measured acceptance through the real bench path: the synthetic server's spec-decode
counters (known: 3 tokens per chunk) → ``servelab bench`` → run record → store → the
measured acceptance plan uses, and the run page that shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.analysis.acceptance import measured_acceptance
from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from servelab.pipeline.run import bench_record
from servelab.site.collect import site_from_records
from servelab.site.render import render_site
from servelab.store import open_store
from servelab.store.model import utcnow
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer

HASH = "c" * 64


@pytest.mark.timeout(120)
def test_synthetic_counters_become_the_measured_acceptance(tmp_path: Path) -> None:
    spec = json.dumps({"method": "eagle", "num_speculative_tokens": 2})
    fields = {"recipe_name": "synthetic-spec", "engine_name": "synthetic", "hardware": "host",
              "checkpoint_header_hash": HASH,
              "engine_args": ("synthetic", "--speculative-config", spec)}
    ids = []
    with open_store(str(tmp_path / "results.db")) as store:
        # 30 tokens: 9 full drafts (2 accepted) + 1 with only position 0 → 2.9 per step;
        # 31 tokens: 10 full drafts → 3.0 per step
        for output_len in (30, 31):
            with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002,
                                                 tokens_per_chunk=3)) as srv:
                res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
                    prompt_lens=(16,), output_len=output_len, requests=2, max_repeats=1,
                    warmup_requests=0)))
            rec = bench_record(res, run_dir=tmp_path, started=utcnow(), fields=fields)
            ids.append(store.add_run(rec))
        runs = store.list_runs(samples=True)
    m = measured_acceptance(runs, header_hash=HASH, method="eagle", draft_tokens=2)
    assert m is not None and set(m.run_ids) == set(ids)
    assert (m.low, m.high) == pytest.approx((2.9, 3.0))
    assert m.value == pytest.approx(1 + (38 + 40) / 40)
    assert m.position_rates == pytest.approx((1.0, 38 / 40))
    site = site_from_records(runs, [])
    page = next(p for p in site.runs if p.run_id == ids[0])
    label, value = page.metrics[-1]
    assert label == "speculative acceptance length (eagle k=2)"
    assert value.value == pytest.approx(2.9) and value.run_id == ids[0]
    html = render_site(site)[f"runs/{ids[0]}.html"]
    assert "speculative acceptance length (eagle k=2)" in html and "2.90" in html
