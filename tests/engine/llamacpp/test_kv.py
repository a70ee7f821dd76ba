"""llama.cpp's KV cache as servelab computes it: the rules of the pinned source, the
recorded real log, the GGUF and the Hugging Face config of one model, ``servelab plan``.

The live engine checks are in ``test_llamacpp_kv_live.py``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from tests.cli_checks import assert_one_line_errors
from typer.testing import CliRunner

from servelab.checkpoint.sources import load_checkpoint
from servelab.cli.app import app
from servelab.engines.llamacpp import LLAMACPP, flag_args
from servelab.engines.llamacpp.kv import (
    LlamaCppKv,
    ggml_row_bytes,
    log_mib,
    plan_llamacpp_kv,
)
from servelab.engines.llamacpp.kvcheck import check_llamacpp_kv_against_log
from servelab.engines.llamacpp.logfacts import parse_log
from servelab.engines.llamacpp.recipe import LlamaCppFlags, LlamaCppSection
from servelab.errors import ConfigError, UsageError
from servelab.families import model_dims
from servelab.synth.gguf import write_gguf
from servelab.synth.tiny import make_tiny_model

LOGS = Path(__file__).resolve().parents[2] / "engine" / "logs"
# The demo's llama.cpp model: tiny Qwen3-MoE, 2 layers, 2 KV heads of 32.
QWEN3_MOE = {
    "model_type": "qwen3_moe", "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "hidden_size": 64, "vocab_size": 1024,
    "max_position_embeddings": 16384,
}  # fmt: skip
_PREFIX = re.compile(r"^\d+\.\d{2}\.\d{3}\.\d{3} [IWEDT] ")


def _plan(config: dict[str, Any] | None = None, **settings: Any):  # type: ignore[no-untyped-def]
    return plan_llamacpp_kv(model_dims(config or QWEN3_MOE), LlamaCppFlags(**settings))


def logged_kv_line(log: str) -> str:
    """The ``llama_kv_cache: size = ...`` line of a llama-server log, prefix removed."""
    [line] = [_PREFIX.sub("", ln) for ln in log.splitlines() if "llama_kv_cache: size" in ln]
    return line


def test_the_recorded_log_of_the_demo_build_equals_the_plan() -> None:
    log = (LOGS / "llamacpp-b1-cpu-qwen3moe-q8_0.log").read_text(encoding="utf-8")
    plan = _plan(ctx_size=16384, parallel=4)
    assert plan.log_line == logged_kv_line(log)
    check = check_llamacpp_kv_against_log(plan, parse_log(log))
    assert check.ok, check.mismatches()
    assert (plan.tokens, plan.cells, plan.streams, plan.total_bytes) == (16384, 4096, 4, 8 << 20)


def test_a_slot_share_is_padded_to_256_cells() -> None:
    plan = _plan(ctx_size=3000, parallel=2)
    assert (plan.n_ctx_seq, plan.n_ctx, plan.cells, plan.streams) == (1536, 3072, 1536, 2)
    # 2 layers x 2 streams x 1536 cells x 64 values x 2 bytes, for K and again for V
    assert plan.k_bytes == plan.v_bytes == 2 * 2 * 1536 * 64 * 2


def test_parallel_auto_is_four_slots_sharing_one_stream() -> None:
    plan = _plan(ctx_size=5000)
    assert (plan.slots, plan.unified, plan.streams, plan.cells, plan.tokens) == (
        4, True, 1, 5120, 5120)
    assert "4/1 seqs" in plan.log_line
    assert _plan(ctx_size=5000, parallel=2, kv_unified=True).streams == 1


def test_context_unset_is_the_training_context_per_stream() -> None:
    plan = _plan(parallel=2)
    assert (plan.cells, plan.streams) == (16384, 2)
    assert any("--fit" in n for n in plan.notes)
    with pytest.raises(UsageError, match="training context"):
        plan_llamacpp_kv(dataclasses.replace(model_dims(QWEN3_MOE), max_position_embeddings=None),
                         LlamaCppFlags(parallel=2))
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        model_dims({**QWEN3_MOE, "max_position_embeddings": None})


def test_block_quantized_types_are_sized_by_block() -> None:
    assert ggml_row_bytes("q8_0", 64) == 2 * 34
    assert ggml_row_bytes("q4_0", 64) == 2 * 18
    assert ggml_row_bytes("q5_1", 64) == 2 * 24
    assert ggml_row_bytes("f32", 64) == 256
    with pytest.raises(UsageError, match="does not divide"):
        ggml_row_bytes("q8_0", 48)
    with pytest.raises(UsageError, match="is not a llama"):
        ggml_row_bytes("fp8", 64)
    plan = _plan(ctx_size=4096, parallel=2, cache_type_k="q8_0", cache_type_v="q4_0")
    assert (plan.k_row_bytes, plan.v_row_bytes, plan.flash_attn) == (68, 36, "on")
    assert "K (q8_0)" in plan.log_line and "V (q4_0)" in plan.log_line


def test_what_llama_cpp_refuses_is_refused() -> None:
    with pytest.raises(UsageError, match="quantized V cache"):
        _plan(ctx_size=4096, cache_type_v="q8_0", flash_attn="off")
    head16 = {**QWEN3_MOE, "head_dim": 16}
    with pytest.raises(UsageError, match="does not divide the head size 16"):
        _plan(head16, ctx_size=4096, cache_type_k="q8_0")
    # without flash attention a quantized K only needs whole blocks per row (2 heads x 16)
    assert _plan(head16, ctx_size=4096, cache_type_k="q8_0", flash_attn="off").k_row_bytes == 34


@pytest.mark.parametrize(
    ("change", "exc", "why"),
    [
        ({"model_type": "gemma2"}, ConfigError, "not a model family"),
        ({"layer_types": ["full_attention", "sliding_attention"]}, UsageError, "sliding"),
        # Qwen3's config class drops sliding_window unless use_sliding_window is set
        ({"sliding_window": 128, "use_sliding_window": True}, ConfigError, "use_sliding_window"),
        ({"num_nextn_predict_layers": 1}, UsageError, "NextN/MTP"),
    ],
)
def test_unmodelled_caches_are_named_not_guessed(
    change: dict[str, Any], exc: type[Exception], why: str
) -> None:
    with pytest.raises(exc, match=why):
        _plan({**QWEN3_MOE, **change}, ctx_size=4096)


def test_sizes_print_as_llama_cpp_prints_them() -> None:
    # (float) n / (1024.0f*1024.0f): n is rounded to float32 first (24-bit mantissa).
    n = (1 << 33) + 5 * (1 << 20) - 1
    assert f"{log_mib(n):.2f}" == "8197.00"
    assert log_mib(1 << 20) == 1.0


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The demo's tiny Qwen3-MoE as safetensors and as GGUF Q8_0."""
    out = tmp_path_factory.mktemp("llamacpp-kv")
    hf = make_tiny_model("qwen3_moe", out / "hf", overrides={"head_dim": 32})
    return hf, write_gguf(hf, out / "tiny.gguf", qtype="Q8_0")


def test_gguf_and_hf_config_of_one_model_plan_alike(tiny_moe: tuple[Path, Path]) -> None:
    hf, gguf = tiny_moe
    settings = LlamaCppFlags(ctx_size=3000, parallel=2, cache_type_k="q8_0",
                                  cache_type_v="q8_0")
    plans = [plan_llamacpp_kv(model_dims(load_checkpoint(str(p)).config or {}), settings)
             for p in (hf, gguf)]
    assert plans[0].to_dict() == plans[1].to_dict()


def test_plan_cli_on_a_gguf_prints_llama_cpp_kv(
    tiny_moe: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, gguf = tiny_moe
    runner = CliRunner()
    args = ["plan", str(gguf), "-H", "host", "--no-store", "-c", "3000", "-np", "2",
            "-ctk", "q8_0", "-ctv", "q8_0"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["engine"]["name"] == "llamacpp"
    kv = doc["kv_pool"]
    assert (kv["engine"], kv["tokens"], kv["cells"], kv["type_k"]) == ("llamacpp", 3072, 1536,
                                                                        "q8_0")
    assert kv["bytes"] == 2 * 2 * 2 * 1536 * 68
    assert doc["memory"]["kv_pool_bytes"] == kv["bytes"]
    res = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "KV cache (llama.cpp arithmetic)" in res.stdout
    assert kv["log_lines"][0] in res.stdout
    # nothing of vLLM's is planned; vLLM is named only where the line says whose priors the
    # host has (a llama.cpp plan lacks llama.cpp data there, not data of any kind)
    flat = " ".join(res.stdout.split())
    assert "vLLM" not in flat.replace("the shipped priors for host are vLLM only", "")
    md = runner.invoke(app, [*args, "--markdown"])
    assert "## KV cache (llama.cpp arithmetic, predicted)" in md.stdout
    base = ["plan", str(gguf), "-H", "host", "--no-store"]
    assert_one_line_errors([
        ([*base, "--max-model-len", "4096"], "--max-model-len: vLLM's flags"),
        ([*base, "-ctv", "q8_0", "-fa", "off"], "quantized V cache"),
        ([*base, "--engine", "sglang"], "choose auto, vllm or llamacpp"),
    ], capsys)


def test_the_engine_hands_its_flags_to_the_planner() -> None:
    flags = LlamaCppFlags(ctx_size=4096, parallel=2, cache_type_v="q8_0", kv_unified=True)
    arithmetic = LLAMACPP.kv_arithmetic(LlamaCppSection(name="llamacpp", flags=flags))
    assert isinstance(arithmetic, LlamaCppKv)
    assert arithmetic.flags == LlamaCppFlags(
        ctx_size=4096, parallel=2, kv_unified=True, cache_type_v="q8_0")
    assert "--kv-unified" in flag_args(flags)
    # KV-shaping flags hidden in extra would escape the plan: the recipe refuses them
    with pytest.raises(ValidationError, match="does not model"):
        LlamaCppFlags(extra=("--kv-unified-per-slot", "4096"))
    with pytest.raises(ValidationError, match="so that plan sees it"):
        LlamaCppFlags(extra=("-ctk=q8_0",))


def test_plan_on_the_demo_recipe_predicts_the_line_its_engine_logged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    recipe = Path(__file__).resolve().parents[3] / "recipes" / "tiny-llamacpp-cpu.toml"
    res = CliRunner().invoke(app, ["plan", str(recipe), "--no-store", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["engine"]["name"], doc["hardware"]["name"]) == ("llamacpp", "host")
    log = (LOGS / "llamacpp-b1-cpu-qwen3moe-q8_0.log").read_text(encoding="utf-8")
    assert doc["kv_pool"]["log_lines"] == [logged_kv_line(log)]
    assert_one_line_errors(
        [(["plan", str(recipe), "-c", "4096"], "a recipe sets its engine's flags")], capsys)
