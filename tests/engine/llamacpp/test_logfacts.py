"""llama-server log facts, from real logs of the llama.cpp build servelab installs.

``llamacpp-b1-cpu-qwen3moe-q8_0.log``: the tiny Qwen3-MoE as GGUF Q8_0, ``--ctx-size 16384
--parallel 4 --log-verbosity 4`` on 2 CPU threads, up to the first idle line.
``llamacpp-b1-cpu-missing-model.log``: a model path that does not exist.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engines import get_engine
from servelab.engines.facts import Phase
from servelab.engines.llamacpp.logfacts import LogParser, parse_log, parse_version

LOGS = Path(__file__).resolve().parents[1] / "logs"


def test_facts_of_a_started_server() -> None:
    facts = parse_log((LOGS / "llamacpp-b1-cpu-qwen3moe-q8_0.log").read_text(encoding="utf-8"))
    assert facts.version == "b1-llama-cpp-python-0.3.36"
    assert facts.architecture == "qwen3moe"
    assert facts.threads == 2
    # 4,096 cells per slot stream x 4 streams; K and V of 2 layers x 2 heads x 32 in F16.
    assert facts.kv_pool_tokens == 16384
    assert facts.kv_cache_gib == pytest.approx(8.0 / 1024)
    assert facts.kv_cache_gib == pytest.approx(16384 * 2 * (2 * 32) * 2 * 2 / 2**30)
    assert (facts.kv_cache_type, facts.kv_device) == ("f16", "CPU")
    assert (facts.max_model_len, facts.parallel_slots) == (4096, 4)
    assert facts.checkpoint_gib == pytest.approx(0.29 / 1024)
    assert facts.weights_gib == pytest.approx(0.29 / 1024)
    assert facts.offloaded_layers is None  # no GPU: llama.cpp prints no offload line
    assert facts.server_url == "http://127.0.0.1:35911"
    assert facts.startup_s == pytest.approx(0.984196)
    assert facts.errors == ()


def test_phases_in_order_and_the_engine_parses_the_same() -> None:
    text = (LOGS / "llamacpp-b1-cpu-qwen3moe-q8_0.log").read_text(encoding="utf-8")
    parser = LogParser()
    phases = [p for line in text.splitlines() if (p := parser.feed(line)) is not None]
    assert phases == [Phase.LOADING_WEIGHTS, Phase.KV_ALLOCATION, Phase.SERVER_STARTING]
    assert get_engine("llamacpp").parse_log(text) == parse_log(text)


def test_a_missing_model_is_an_error() -> None:
    facts = parse_log((LOGS / "llamacpp-b1-cpu-missing-model.log").read_text(encoding="utf-8"))
    root = facts.root_error()
    assert root is not None and "/nonexistent/model.gguf" in root.text
    assert facts.kv_pool_tokens is None and facts.server_url is None


def test_version_from_the_version_flag() -> None:
    out = "version: 0.5.0-dev (build 1, commit llama-cpp-python-0.3.36)\nbuilt with GNU 12.2.0\n"
    assert parse_version(out) == "b1-llama-cpp-python-0.3.36"
    assert parse_version("no version here") is None
