"""vLLM's start-up memory check on a GB10 as the engine sees it (issue 40).

The figures: the dgx-spark profile's ``engine_memory`` (CUDA's 121.69 GiB total, 112.4 GiB
free at start from the seed's own log, 101.3 GiB the lowest public figure), vLLM's rule
(``request_memory``: free must be at least ``ceil(utilization x total)``; default 0.92) and
the seed's Spark log (``tests/engine/logs/vllm-gpu-fp8-spark.log``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servelab.engines.vllm.kv import plan_kv_pool
from servelab.engines.vllm.logfacts import parse_log
from servelab.engines.vllm.memcheck import (
    DEPENDS,
    NO_CHECK,
    NOT_KNOWN,
    REFUSES,
    STARTS,
    passing_utilization,
    requested_bytes,
    startup_memory,
)
from servelab.errors import HardwareProfileError
from servelab.hardware.profiles import BUILTIN, GIB, EngineMemory, load_profiles_toml
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

SEED_LOG = Path(__file__).parents[1] / "logs" / "vllm-gpu-fp8-spark.log"
SPARK = BUILTIN["dgx-spark"]
OVERHEAD = 2 * GIB  # the plan's overhead estimate (CUDA context + activation peak + graphs)


def _gib(x: float) -> int:
    return round(x * GIB)


def _seed() -> tuple[int, int]:
    """The seed log's free memory at start and its resident weights."""
    text = SEED_LOG.read_text(encoding="utf-8")
    m = re.search(r"Initial free memory ([\d.]+) GiB", text)
    assert m
    facts = parse_log(text)
    assert facts.weights_gib == 35.28
    return _gib(float(m.group(1))), _gib(facts.weights_gib)


def test_the_profile_holds_gb10_memory_as_cuda_reports_it_with_sources() -> None:
    em = SPARK.engine_memory
    assert em is not None
    assert f"{em.total_bytes / GIB:.2f}" == "121.69" and em.total_bytes < SPARK.memory_bytes
    assert (f"{em.free_bytes / GIB:.1f}", f"{em.free_low_bytes / GIB:.1f}") == ("112.4", "101.3")  # type: ignore[operator]
    for key in ("total", "free_at_start", "free_at_start_low"):
        assert em.sources[key]
    assert "vllm-gpu-fp8-spark.log" in em.sources["free_at_start"]
    assert BUILTIN["h200"].engine_memory is None


def test_the_rule_reproduces_public_refusal_messages() -> None:
    # "the check (wants 105.87 GiB)" at GPU_MEM_UTIL=0.87 of 121.69 GiB (MiaAI-Lab issue 47)
    assert f"{requested_bytes(_gib(121.69), 0.87) / GIB:.2f}" == "105.87"
    # "Free memory on cuda:0 (38.74/121.63 GiB) < desired utilization (0.35, 42.57 GiB)"
    assert f"{requested_bytes(_gib(121.63), 0.35) / GIB:.2f}" == "42.57"
    # ... "so we run at 0.82-0.83" with 101.3-102.2 GiB free
    assert passing_utilization(_gib(121.69), _gib(101.3)) == 0.83


def test_seed_case_starts_with_its_free_memory_and_keeps_its_pool() -> None:
    free, weights = _seed()
    em = SPARK.engine_memory
    assert em is not None
    s = startup_memory(em, version="0.26.0", weights_bytes=weights, overhead_bytes=OVERHEAD,
                       overhead_source="estimate", kv_cache_memory_bytes=6 * GIB,
                       measured_free_bytes=free)
    assert s.utilization == 0.92 and f"{s.requested_bytes / GIB:.2f}" == "111.95"
    assert s.verdict == STARTS  # 112.4 GiB free >= 111.95 GiB
    assert s.kv_budget_bytes == 6 * GIB
    pool = plan_kv_pool(QWEN3_6_35B_A3B, kv_cache_memory_bytes=s.kv_budget_bytes,
                        max_model_len=262_144, engine_version="0.26.0", platform="cuda")
    assert (pool.tokens, f"{pool.max_concurrency:.2f}") == (308_955, "1.18")


def test_no_flags_on_a_gb10_depends_on_free_memory_and_says_what_passes() -> None:
    _, weights = _seed()
    em = SPARK.engine_memory
    assert em is not None
    s = startup_memory(em, version="0.26.0", weights_bytes=weights, overhead_bytes=OVERHEAD,
                       overhead_source="estimate")
    assert s.verdict == DEPENDS
    assert [c.starts for c in s.checks] == [True, False]  # 112.4 starts, 101.3 refuses
    assert s.passing_utilization == 0.83
    assert "--gpu-memory-utilization 0.83 passes" in s.line
    # the KV budget vLLM gets at 0.92 of 121.69 GiB, not 0.9 of 128 GiB
    assert s.kv_budget_bytes == requested_bytes(em.total_bytes, 0.92) - weights - OVERHEAD
    assert f"{s.kv_budget_bytes / GIB:.2f}" == "74.67"
    assert s.kv_budget_bytes < int(0.9 * SPARK.memory_bytes) - weights - OVERHEAD
    pool = plan_kv_pool(QWEN3_6_35B_A3B, kv_cache_memory_bytes=s.kv_budget_bytes,
                        max_model_len=262_144, engine_version="0.26.0", platform="cuda")
    assert pool.tokens > 308_955
    at83 = startup_memory(em, version="0.26.0", weights_bytes=weights,
                          overhead_bytes=OVERHEAD, overhead_source="estimate",
                          gpu_memory_utilization=0.83)
    assert at83.verdict == STARTS and at83.utilization_source == "--gpu-memory-utilization"
    assert at83.kv_budget_bytes is not None and at83.kv_budget_bytes < s.kv_budget_bytes
    refused = startup_memory(em, version="0.26.0", weights_bytes=weights,
                             overhead_bytes=OVERHEAD, overhead_source="estimate",
                             gpu_memory_utilization=0.95)
    assert refused.verdict == REFUSES


def test_versions_not_read_and_the_extensible_kv_cache_are_said() -> None:
    em = EngineMemory(_gib(121.69), _gib(112.4))
    assert startup_memory(em, version="0.19.0", weights_bytes=0, overhead_bytes=0,
                          overhead_source="").verdict == NOT_KNOWN
    ext = startup_memory(em, version="0.34.0", weights_bytes=0, overhead_bytes=0,
                         overhead_source="")
    assert ext.verdict == NO_CHECK and ext.kv_budget_bytes is None and ext.utilization == 1.0
    pinned = startup_memory(em, version="0.34.0", weights_bytes=0, overhead_bytes=0,
                            overhead_source="", kv_cache_memory_bytes=6 * GIB)
    assert pinned.verdict == STARTS and pinned.utilization == 0.92


@pytest.mark.parametrize("table, message", [
    ("total_gib = 100\nfree_at_start_gib = 120", "at most the total"),
    ("total_gib = 100\nfree_at_start_gib = 90\nfree_at_start_low_gib = 95", "at most"),
    ("total_gib = 100\nfree_gib = 90", "unknown key"),
])
def test_a_bad_engine_memory_table_is_refused_naming_it(tmp_path: Path, table: str,
                                                        message: str) -> None:
    p = tmp_path / "hw.toml"
    p.write_text(f'[profile.box]\nbase = "dgx-spark"\n[profile.box.engine_memory]\n{table}\n',
                 encoding="utf-8")
    with pytest.raises(HardwareProfileError, match=message) as err:
        load_profiles_toml(p)
    assert "engine_memory" in str(err.value)


def test_a_user_profile_inherits_or_sets_engine_memory(tmp_path: Path) -> None:
    p = tmp_path / "hw.toml"
    p.write_text('[profile.box]\nbase = "dgx-spark"\n'
                 '[profile.other]\nbase = "dgx-spark"\n[profile.other.engine_memory]\n'
                 'total_gib = 121.6\nfree_at_start_gib = 105\n', encoding="utf-8")
    got = load_profiles_toml(p)
    assert got["box"].engine_memory == SPARK.engine_memory
    other = got["other"].engine_memory
    assert other is not None and other.free_low_bytes is None
    assert f"{other.free_bytes / GIB:.0f}" == "105"
