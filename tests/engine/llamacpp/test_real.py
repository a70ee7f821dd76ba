"""Real llama.cpp (``llama-server``) serving the tiny llama as GGUF on CPU.

Facts off its log, ``bench`` against it unchanged (usage-counted tokens, exact prompt
lengths through its ``/tokenize``), and no process left behind. One start serves the
session (``llamacpp_engine`` fixture); a start takes seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from servelab.bench.run import BenchConfig, run_bench
from servelab.bench.spec import WorkloadSpec
from servelab.checkpoint.report import inspect_checkpoint
from servelab.engines.llamacpp.logfacts import parse_log
from servelab.serve.launch import launch
from servelab.serve.process import group_alive, port_is_free

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.engines import tiny_llamacpp_recipe

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_facts_from_the_log(llamacpp_engine) -> None:  # type: ignore[no-untyped-def]
    eng = llamacpp_engine("Q8_0")
    facts = eng.facts
    assert facts.architecture == "llama"
    assert facts.version is not None
    # ctx_size 4096 cells over 2 slots: the KV cache holds 4096 tokens, a slot 2048.
    assert facts.kv_pool_tokens == 4096
    assert facts.max_model_len == 2048
    assert facts.parallel_slots == 2
    assert facts.threads == 2
    assert facts.kv_cache_type == "f16"
    # 2 layers x 4096 cells x (2 KV heads x 16) x K and V x 2 bytes = 1 MiB.
    assert facts.kv_cache_gib == pytest.approx(2 * 4096 * 32 * 2 * 2 / 2**30)
    assert facts.startup_s is not None and facts.startup_s > 0
    assert facts.server_url == eng.base_url
    assert eng.model_dir is not None and eng.model_dir.suffix == ".gguf"
    # llama.cpp prints the tensor bytes in MiB with two decimals.
    tensor_bytes = inspect_checkpoint(eng.model_dir).total_bytes
    assert facts.checkpoint_gib == pytest.approx(tensor_bytes / 2**30, abs=0.006 / 1024)
    # The same facts from the whole log file as from the live parser.
    assert parse_log(eng.log_path.read_text(encoding="utf-8")).kv_pool_tokens == 4096


def test_bench_against_llamacpp(llamacpp_engine) -> None:  # type: ignore[no-untyped-def]
    eng = llamacpp_engine("Q8_0")
    result = run_bench(
        BenchConfig(
            base_url=eng.base_url,
            model=eng.served_model_name,
            workload=WorkloadSpec(
                prompt_lens=(32, 128),
                output_len=16,
                concurrency=(1, 2),
                requests=2,
                max_repeats=1,
                warmup_requests=1,
            ),
        )
    )
    doc = result.to_json()
    assert doc["prompt_source"] == "server /tokenize (llama.cpp)"
    samples = [s for p in result.points for s in p.samples if not s.warmup]
    assert samples and all(s.error is None for s in samples), [s.error_detail for s in samples]
    for s in samples:
        assert s.prompt_tokens == s.prompt_len  # exact lengths, verified by usage
        assert s.completion_tokens == 16  # ignore_eos honoured
        assert s.chunk_ns  # streamed


def test_the_served_gguf_inspects_like_the_log_says(llamacpp_engine) -> None:  # type: ignore[no-untyped-def]
    eng = llamacpp_engine("Q8_0")
    report = inspect_checkpoint(eng.model_dir)
    assert report.quant.label == "gguf Q8_0"
    assert report.num_layers == 2
    assert {d.dtype for d in report.dtypes} == {"Q8_0", "F32"}


def test_stop_leaves_nothing(tmp_path: Path) -> None:
    eng = launch(tiny_llamacpp_recipe("F16", parallel=1), run_dir=tmp_path, port="auto")
    pgid, port = eng.pgid, eng.spec.port
    assert eng.facts.kv_cache_type == "f16"
    assert eng.stop() is not None
    assert not group_alive(pgid)
    assert port_is_free(eng.spec.host, port)
    assert (tmp_path / "engine.log").read_text(encoding="utf-8").strip()
