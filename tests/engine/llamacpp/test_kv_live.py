"""servelab's llama.cpp KV arithmetic equals what a real ``llama-server`` logs.

The session's tiny llama (``llamacpp_engine``: F16 KV, ``-c 4096 -np 2``), the demo's
llama.cpp build (``recipes/tiny-llamacpp-cpu.toml``: ``-c 16384 -np 4``) and two other
flag combinations of the demo's model: a q8_0 K and V cache on 2 slots with a context
that is not a multiple of 256 per slot, and ``--parallel`` auto (4 slots, one unified
stream) with a q4_0 K cache. Each start takes seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.engine.llamacpp.test_kv import logged_kv_line

from servelab.checkpoint.sources import load_checkpoint
from servelab.engines import get_engine
from servelab.engines.llamacpp.kv import LlamaCppKv, LlamaCppKvPlan, plan_llamacpp_kv
from servelab.engines.llamacpp.kvcheck import check_llamacpp_kv_against_log
from servelab.engines.llamacpp.recipe import LlamaCppSection
from servelab.families import model_dims
from servelab.serve.launch import launch
from servelab.serve.process import RunningEngine
from servelab.serve.recipe import Recipe, load_recipe

pytestmark = [pytest.mark.engine, pytest.mark.slow]

DEMO_RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "tiny-llamacpp-cpu.toml"


def _plan_for(recipe: Recipe, eng: RunningEngine) -> LlamaCppKvPlan:
    """What servelab plans for the recipe's flags and the GGUF the engine served."""
    arithmetic = get_engine("llamacpp").kv_arithmetic(recipe.engine)
    assert isinstance(arithmetic, LlamaCppKv) and eng.model_dir is not None
    config = load_checkpoint(str(eng.model_dir)).config or {}
    return plan_llamacpp_kv(model_dims(config), arithmetic.flags)


def _assert_equal(plan: LlamaCppKvPlan, eng: RunningEngine) -> None:
    check = check_llamacpp_kv_against_log(plan, eng.facts)
    assert check.ok, check.mismatches()
    assert plan.log_line == logged_kv_line(eng.log_path.read_text(encoding="utf-8"))


def test_the_session_llama_engine(llamacpp_engine: Callable[..., Any]) -> None:
    from tests.engines import tiny_llamacpp_recipe

    eng = llamacpp_engine("Q8_0")
    _assert_equal(_plan_for(tiny_llamacpp_recipe("Q8_0"), eng), eng)


def _demo(**flags: Any) -> Recipe:
    recipe = load_recipe(DEMO_RECIPE)
    assert isinstance(recipe.engine, LlamaCppSection)
    if not flags:
        return recipe
    section = recipe.engine.model_copy(
        update={"flags": recipe.engine.flags.model_copy(update=flags)})
    return recipe.model_copy(update={"engine": section})


@pytest.mark.parametrize(
    "flags",
    [
        {},  # the demo's build as it is
        {"ctx_size": 3000, "parallel": 2, "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
        {"ctx_size": 5000, "parallel": None, "cache_type_k": "q4_0", "flash_attn": "off"},
    ],
    ids=["demo", "q8_0-2-slots", "auto-slots-unified"],
)
def test_the_demo_model_under_several_flags(tmp_path: Path, flags: dict[str, Any]) -> None:
    recipe = _demo(threads=2, **flags)
    eng = launch(recipe, run_dir=tmp_path, port="auto")
    try:
        plan = _plan_for(recipe, eng)
        _assert_equal(plan, eng)
    finally:
        eng.stop()
    if "parallel" in flags and flags["parallel"] is None:
        assert (plan.slots, plan.streams, plan.cells) == (4, 1, 5120)
