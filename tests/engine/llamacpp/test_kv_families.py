"""llama.cpp's caches for the families beyond one plain attention cache.

Sliding-window models (Gemma 3, gpt-oss) get two caches from llama.cpp
(``llama_kv_cache_iswa``): the non-SWA cache of ``n_ctx_seq`` cells over the global
layers, the SWA cache of ``pad256(min(n_ctx_seq, window x slots + n_ubatch))`` cells over
the sliding ones. Qwen2 is a plain cache with attention biases. The ground truth is real
``llama-server`` logs: the tiny models of :mod:`servelab.synth.tiny`, converted to GGUF
by :mod:`servelab.synth.gguf` and served, their every cache line equal to the plan's
(recorded once under ``tests/engine/logs``; the live tests serve them again).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from tests.engine.llamacpp.test_kv import LOGS

from servelab.checkpoint.sources import load_checkpoint
from servelab.engines import get_engine
from servelab.engines.llamacpp.kv import (
    LlamaCppKv,
    LlamaCppKvPlan,
    plan_llamacpp_kv,
)
from servelab.engines.llamacpp.kvcheck import check_llamacpp_kv_against_log
from servelab.engines.llamacpp.logfacts import parse_log
from servelab.engines.llamacpp.recipe import LlamaCppFlags, LlamaCppSection
from servelab.errors import UsageError
from servelab.families import model_dims
from servelab.serve.launch import launch
from servelab.serve.recipe import ModelSection, Recipe

_PREFIX = re.compile(r"^\d+\.\d{2}\.\d{3}\.\d{3} [IWEDT] ")
_CACHE_LINE = re.compile(r"llama_kv_cache(_iswa)?: (size = |creating)")

# (recorded log, tiny architecture, llama-server flags): each line of the log's caches
# equals the plan's. The flags make every rule bite: a window x slots + ubatch below the
# context (the SWA cache is smaller), one above it (capped at the context), --swa-full,
# a non-unified cache (one stream per slot), a quantized K and V.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("llamacpp-b1-cpu-gemma3-iswa-np2.log", "gemma3_text",
     {"ctx_size": 4096, "parallel": 2, "kv_unified": True}),
    ("llamacpp-b1-cpu-gemma3-iswa-np2-streams.log", "gemma3_text",
     {"ctx_size": 4096, "parallel": 2, "ubatch_size": 128}),
    ("llamacpp-b1-cpu-gemma3-iswa-swa-full.log", "gemma3_text",
     {"ctx_size": 1024, "parallel": 1, "swa_full": True, "cache_type_k": "q8_0",
      "cache_type_v": "q8_0"}),
    ("llamacpp-b1-cpu-gpt-oss-iswa-auto.log", "gpt_oss", {"ctx_size": 512}),
    ("llamacpp-b1-cpu-gpt-oss-iswa-np3.log", "gpt_oss",
     {"ctx_size": 6000, "parallel": 3}),
    ("llamacpp-b1-cpu-qwen2.log", "qwen2", {"ctx_size": 3000, "parallel": 2}),
]  # fmt: skip


# One start per family in the live tests (a few seconds each).
_LIVE = ("llamacpp-b1-cpu-gemma3-iswa-np2-streams.log", "llamacpp-b1-cpu-gpt-oss-iswa-np3.log",
         "llamacpp-b1-cpu-qwen2.log")


def logged_cache_lines(log: str) -> tuple[str, ...]:
    """Every line llama.cpp prints about its KV caches, in order, prefixes removed."""
    return tuple(
        _PREFIX.sub("", ln) for ln in log.splitlines() if _CACHE_LINE.search(ln)
    )


def recipe(arch: str, flags: dict[str, Any]) -> Recipe:
    return Recipe(
        name=f"test-llamacpp-{arch}",
        hardware="host",
        model=ModelSection(synth=arch, served_name=f"tiny-{arch}"),
        engine=LlamaCppSection(
            name="llamacpp",
            gguf_type="F16",
            startup_timeout_s=300,
            stop_grace_s=10,
            flags=LlamaCppFlags(threads=2, **flags),
        ),
    )


def _settings(flags: dict[str, Any]) -> LlamaCppFlags:
    arithmetic = get_engine("llamacpp").kv_arithmetic(recipe("llama", flags).engine)
    assert isinstance(arithmetic, LlamaCppKv)
    return arithmetic.flags


def _dims(arch: str, window: int | None = None) -> Any:
    """The tiny model of ``arch`` (its window replaced when ``window`` is given)."""
    from servelab.synth.tiny import make_config_dict

    cfg = make_config_dict(arch)
    return model_dims(cfg if window is None else {**cfg, "sliding_window": window})


@pytest.mark.parametrize(("log", "arch", "flags"), CASES, ids=[c[0] for c in CASES])
def test_recorded_logs_equal_the_plan(log: str, arch: str, flags: dict[str, Any]) -> None:
    text = (LOGS / log).read_text(encoding="utf-8")
    plan = plan_llamacpp_kv(_dims(arch), _settings(flags))
    assert plan.log_lines == logged_cache_lines(text)
    check = check_llamacpp_kv_against_log(plan, parse_log(text))
    assert check.ok, check.mismatches()


def test_the_swa_cache_is_the_window_times_slots_plus_a_ubatch_padded() -> None:
    dims = _dims("gemma3_text", window=1024)
    unified = plan_llamacpp_kv(dims, LlamaCppFlags(ctx_size=131072))  # 4 slots, unified
    swa = unified.swa
    assert swa is not None
    assert (swa.cells, len(swa.layers), len(unified.main.layers)) == (4608, 5, 1)
    per_slot = plan_llamacpp_kv(dims, LlamaCppFlags(ctx_size=131072, parallel=4))
    assert per_slot.swa is not None and per_slot.swa.cells == 1536  # 1024 + 512 per stream
    short = plan_llamacpp_kv(dims, LlamaCppFlags(ctx_size=1000, parallel=1))
    assert short.swa is not None and short.swa.cells == short.cells == 1024
    full = plan_llamacpp_kv(dims, LlamaCppFlags(ctx_size=131072, swa_full=True))
    assert full.swa is not None and full.swa.cells == 131072
    # at 128k the sliding layers hold 4,608 cells each, not 131,072: 4.4x less KV in all
    assert full.total_bytes / unified.total_bytes == pytest.approx(
        (1 * 131072 + 5 * 131072) / (1 * 131072 + 5 * 4608))


def test_an_iswa_plan_prints_both_caches_and_counts_both_in_memory() -> None:
    plan = plan_llamacpp_kv(_dims("gpt_oss"), LlamaCppFlags(ctx_size=4096, parallel=1))
    assert [c.role for c in plan.caches] == ["non-SWA", "SWA"]
    assert plan.total_bytes == sum(c.total_bytes for c in plan.caches)
    assert plan.tokens == 4096 and plan.layers == (1,) and plan.caches[1].layers == (0,)
    d = plan.to_dict()
    assert [c["role"] for c in d["caches"]] == ["non-SWA", "SWA"]
    assert len(d["log_lines"]) == 4


def test_families_llama_cpp_does_not_keep_apart_are_refused() -> None:
    from servelab.errors import ConfigError
    from servelab.synth.tiny import make_config_dict

    # Qwen2 with windows on some layers: refused when the config is read (vLLM refused it)
    cfg = {**make_config_dict("qwen2"), "use_sliding_window": True, "sliding_window": 128}
    with pytest.raises(ConfigError, match="use_sliding_window"):
        model_dims(cfg)
    # Mistral's window: llama.cpp's llama architecture keeps no SWA cache; not guessed
    with pytest.raises(UsageError, match="not an architecture servelab models"):
        plan_llamacpp_kv(_dims("mistral"), LlamaCppFlags(ctx_size=4096))
    hybrid = make_config_dict("qwen3_next")  # Gated DeltaNet: a recurrent state cache
    with pytest.raises(UsageError, match="not an architecture servelab models"):
        plan_llamacpp_kv(model_dims(hybrid), LlamaCppFlags(ctx_size=4096))


def test_a_gguf_of_gemma3_reads_its_sliding_layers_as_llama_cpp_does(tmp_path: Path) -> None:
    from servelab.synth.gguf import write_gguf
    from servelab.synth.tiny import make_tiny_model

    hf = make_tiny_model("gemma3_text", tmp_path / "g3")
    gguf = write_gguf(hf, tmp_path / "g3.gguf")
    from_gguf = model_dims(load_checkpoint(str(gguf)).config or {})
    from_hf = model_dims(load_checkpoint(str(hf)).config or {})
    assert from_gguf.layer_types == from_hf.layer_types == ("sliding_attention",) * 5 + (
        "full_attention",)
    assert from_gguf.sliding_window == from_hf.sliding_window == 256
    settings = LlamaCppFlags(ctx_size=4096, parallel=2)
    assert (plan_llamacpp_kv(from_gguf, settings).log_lines
            == plan_llamacpp_kv(from_hf, settings).log_lines)


def _served_plan(arch: str, flags: dict[str, Any], run_dir: Path) -> tuple[LlamaCppKvPlan, str]:
    eng = launch(recipe(arch, flags), run_dir=run_dir, port="auto")
    try:
        assert eng.model_dir is not None
        dims = model_dims(load_checkpoint(str(eng.model_dir)).config or {})
        return plan_llamacpp_kv(dims, _settings(flags)), eng.log_path.read_text("utf-8")
    finally:
        eng.stop()


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "flags"),
    [(arch, flags) for log, arch, flags in CASES if log in _LIVE],
    ids=["gemma3", "gpt-oss", "qwen2"],
)
def test_a_served_tiny_model_logs_the_planned_caches(
    tmp_path: Path, arch: str, flags: dict[str, Any]
) -> None:
    plan, log = _served_plan(arch, flags, tmp_path)
    assert plan.log_lines == logged_cache_lines(log)


def test_a_gguf_is_labelled_by_its_own_type_never_as_a_vllm_scheme(tmp_path: Path) -> None:
    from servelab.checkpoint.report import build_report
    from servelab.sizing.weights import weights_from_report
    from servelab.synth.gguf import write_gguf
    from servelab.synth.tiny import make_tiny_model

    hf = make_tiny_model("qwen2", tmp_path / "q2")
    for qtype, scheme in (("Q8_0", "gguf-q8_0"), ("F16", "gguf-f16")):
        gguf = write_gguf(hf, tmp_path / f"q2-{qtype}.gguf", qtype=qtype)  # type: ignore[arg-type]
        weights = weights_from_report(build_report(load_checkpoint(str(gguf))))
        assert weights.scheme == scheme
    # the safetensors it came from is bf16
    assert weights_from_report(build_report(load_checkpoint(str(hf)))).scheme == "bf16"
