"""Fixtures for plan tests: full-dimension header replicas of Qwen3.6-35B-A3B builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.synth.replica import (
    EXPERTS_AND_ATTENTION,
    QWEN3_6_35B_A3B,
    QuantLayout,
    write_replica,
)


@pytest.fixture(scope="session")
def qwen36_fp8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3.6-35B-A3B FP8 (channel-wise W8A8 experts + attention), headers only."""
    out = tmp_path_factory.mktemp("qwen36-fp8")
    write_replica(out, QWEN3_6_35B_A3B, QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION))
    return out


@pytest.fixture(scope="session")
def qwen36_nvfp4a16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3.6-35B-A3B NVFP4A16 (weight-only FP4 experts + attention), headers only."""
    out = tmp_path_factory.mktemp("qwen36-nvfp4a16")
    write_replica(
        out, QWEN3_6_35B_A3B, QuantLayout("nvfp4", EXPERTS_AND_ATTENTION, fp4_activations=False)
    )
    return out



@pytest.fixture(scope="session")
def qwen36_bf16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3.6-35B-A3B BF16 (the unquantized export), headers only."""
    out = tmp_path_factory.mktemp("qwen36-bf16")
    write_replica(out, QWEN3_6_35B_A3B, QuantLayout("bf16"))
    return out
