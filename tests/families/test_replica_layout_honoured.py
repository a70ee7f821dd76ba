"""``servelab synth replica --layout`` writes what it says or refuses (issue 41): a dense
model's FP8/NVFP4 replica quantizes its MLP (it quantized only attention, 47 of 51 GiB of
gemma-3-27b left in BF16), and a preset stored natively (gpt-oss's MXFP4) refuses
``--layout bf16`` instead of writing the MXFP4 build."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.cli_checks import assert_one_line_errors

from servelab.synth.replica import LINEARS, QuantLayout, replica_tensors
from servelab.synth.replica_presets import preset_config, preset_layout


def _plan(name: str, layout: str | None, targets: tuple[str, ...] | None = None):  # type: ignore[no-untyped-def]
    return replica_tensors(preset_config(name), preset_layout(name, layout, targets))


@pytest.mark.parametrize("name", ["mistral-7b", "qwen2.5-7b", "phi-4", "gemma-3-27b",
                                  "mixtral-8x7b"])
@pytest.mark.parametrize(("layout", "most"), [("fp8-channel", 0.6), ("fp8-block", 0.6),
                                              ("nvfp4", 0.4)])
def test_a_quantized_layout_quantizes_the_mlp_too(name: str, layout: str, most: float) -> None:
    bf16 = _plan(name, "bf16").total_bytes
    plan = _plan(name, layout)
    # embeddings, lm_head, norms, a vision tower stay BF16: above 1/2 (1/4); attention alone
    # left gemma-3-27b at 0.92
    assert plan.total_bytes < most * bf16, (name, layout, plan.total_bytes / bf16)
    quantized = {re.sub(r"\.\d+\.", ".#.", m) for m in plan.quantized_modules}
    mlp = {re.sub(r"\.\d+\.", ".#.", m) for m in plan.linear_modules
           if re.search(r"\.(mlp|block_sparse_moe\.experts)\.", m) and "vision" not in m}
    assert mlp and mlp <= quantized
    never = [m for m in plan.quantized_modules
             if re.search(r"(vision|visual|lm_head|\.gate$|router)", m)]
    assert never == []


def test_the_default_targets_on_qwen3_6_are_experts_and_attention() -> None:
    assert set(_plan("qwen3.6-35b-a3b", None).quantized_modules) == set(
        _plan("qwen3.6-35b-a3b", None, ("\\.mlp\\.experts\\.", "\\.mlp\\.shared_expert\\.",
                                        "\\.self_attn\\.(q|k|v|o)_proj$")).quantized_modules)
    assert preset_layout("mistral-7b", "nvfp4", None) == QuantLayout("nvfp4", LINEARS)


def test_a_layout_the_replica_cannot_honour_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "r")
    assert_one_line_errors([
        (["synth", "replica", out, "--model", "gpt-oss-120b", "--layout", "bf16"],
         "--layout bf16: gpt-oss-120b's replica is written in its published storage (native)"),
        (["synth", "replica", out, "--model", "gpt-oss-20b", "--targets", "experts"],
         "--targets: gpt-oss-20b's replica is written in its published storage only"),
        (["synth", "replica", out, "--model", "deepseek-v3", "--targets", "experts"],
         "published storage (fp8-block), quantized as it ships"),
        (["synth", "replica", out, "--model", "mistral-7b", "--targets", "experts"],
         "--targets: a bf16 layout quantizes nothing"),
    ], capsys)
    assert not (tmp_path / "r").exists()  # nothing written half-way
