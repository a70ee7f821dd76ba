"""AIConfigurator's tables through the optional extra: read when installed, refused clearly
when not (both branches are real: which one runs depends on the environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.errors import UsageError
from servelab.ops import aic


def test_the_extra_is_read_or_refused_clearly() -> None:
    if not aic.available():
        with pytest.raises(UsageError, match=r"servelab\[aiconfigurator\]"):
            aic.load("h200")
        return
    ts = aic.load("h200", "vllm")
    assert ts.provenance.source == "aiconfigurator"
    assert ts.table("gemm").rows and ts.table("generation_attention").rows


def test_a_system_it_lacks_is_refused_naming_what_it_has(tmp_path: Path) -> None:
    (tmp_path / "h200_sxm").mkdir()
    with pytest.raises(UsageError, match=r"no tables for 'h999'.*h200_sxm"):
        aic.load("h999", root=tmp_path)
    with pytest.raises(UsageError, match="no vllm tables"):
        aic.load("h200", root=tmp_path)
