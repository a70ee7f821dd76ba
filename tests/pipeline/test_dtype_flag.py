"""``engine.flags.dtype`` in the plan: vLLM casts unquantized weights, and the KV cache
("auto") follows the model dtype — the demo's FP32 build has half the KV tokens of BF16."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.plan.inputs import plan_of

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.hardware.lookup import get_profile
from servelab.plan.checkpoint import planned_checkpoint
from servelab.synth.tiny import make_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model("qwen3_moe", tmp_path_factory.mktemp("m") / "qwen3_moe",
                           overrides={"head_dim": 32})


def _plan(tiny: Path, dtype: str | None) -> tuple[int, int]:
    source = load_checkpoint(tiny)
    checkpoint = planned_checkpoint(build_report(source), source.config, name="tiny",
                                    header_hash=None, dtype=dtype)
    plan = plan_of(checkpoint.config, checkpoint.weights, get_profile("h200"), max_model_len=4096,
                   kv_cache_memory_bytes=256 * 2**20, engine_version="0.32.0")
    return plan.kv.tokens, checkpoint.weights.resident_bytes


def test_float32_doubles_weights_and_halves_the_kv_pool(tiny: Path) -> None:
    tokens_auto, weights_auto = _plan(tiny, None)
    tokens_bf16, weights_bf16 = _plan(tiny, "bfloat16")
    tokens_fp32, weights_fp32 = _plan(tiny, "float32")
    assert (tokens_auto, weights_auto) == (tokens_bf16, weights_bf16)
    assert weights_fp32 == 2 * weights_bf16
    assert tokens_fp32 * 2 == pytest.approx(tokens_bf16, rel=0.01)


def test_unknown_dtype_is_a_usage_error(tiny: Path) -> None:
    from servelab.errors import UsageError

    source = load_checkpoint(tiny)
    with pytest.raises(UsageError, match="float13"):
        planned_checkpoint(build_report(source), source.config, name="tiny", header_hash=None,
                           dtype="float13")
