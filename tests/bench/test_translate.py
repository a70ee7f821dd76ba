"""The metric translator: vLLM's, AIPerf's and GuideLLM's names from one run's timestamps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.bench.cli import servelab

from servelab.bench.metrics import per_request
from servelab.bench.result import write_json_atomic
from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.bench.translate import CONCEPTS, TOOLS, lookup, translate
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer


@pytest.mark.timeout(120)
def test_three_tools_agree_where_definitions_agree_and_differ_where_they_differ(
        tmp_path: Path) -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.01, itl_s=0.002)) as srv:
        res = run_bench(BenchConfig(srv.base_url, WorkloadSpec(
            prompt_lens=(16,), output_len=8, concurrency=(2,), requests=6, max_repeats=1)))
    (pr,) = res.points
    t = translate(pr, model=res.model, backend="openai-completions")
    v, a, g = t["vllm"], t["aiperf"], t["guidellm"]
    for _, *paths in CONCEPTS:  # one quantity, three names, one value
        vals = [lookup(t[tool], p) for tool, p in zip(TOOLS, paths, strict=True)]
        known = [x * 1000 if p.endswith("(s)") else x
                 for x, p in zip(vals, paths, strict=True) if x is not None]
        assert known and all(x == pytest.approx(known[0], rel=1e-9) for x in known), vals
    ok = [s for s in pr.samples if not s.warmup]
    assert a["request_count"]["avg"] == v["completed"] == 6
    assert a["inter_chunk_latency"]["avg"] == pytest.approx(v["mean_itl_ms"])
    assert a["ttst"]["avg"] == pytest.approx(
        sum((s.chunk_ns[1] - s.chunk_ns[0]) / 1e6 for s in ok) / 6)
    # GuideLLM's time_per_output_token_ms includes the TTFT: E2E / tokens, larger than TPOT.
    assert g["time_per_output_token_ms"]["mean"] == pytest.approx(
        sum(per_request(s)["e2el_ms"] / 8 for s in ok) / 6)
    assert g["time_per_output_token_ms"]["mean"] > g["inter_token_latency_ms"]["mean"]
    assert a["output_token_throughput_per_user"]["avg"] == pytest.approx(
        sum(1000 / per_request(s)["tpot_ms"] for s in ok) / 6)
    assert g["prompt_token_count"]["mean"] == 16 and a["output_sequence_length"]["max"] == 8

    path = tmp_path / "r.json"
    write_json_atomic(path, res.to_json())
    r = servelab("bench-translate", str(path))
    assert r.returncode == 0, r.stderr
    assert "mean_ttft_ms" in r.stdout and "ttft.avg" in r.stdout
    assert "time_to_first_token_ms.mean" in r.stdout and "inter_token_latency_ms.mean" in r.stdout
    j = servelab("bench-translate", str(path), "--json")
    d = json.loads(j.stdout)
    assert d["points"][0]["aiperf"]["ttft"]["avg"] == pytest.approx(a["ttft"]["avg"])
