"""A build that does not fit gets its way in (issue 40): DeepSeek-V3 (641 GiB of FP8 weights)
on one H200 is told the tensor-parallel size of one H200 node that fits it, planned; a build
that fits is told nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.cli.app import main
from servelab.synth.replica import write_replica
from servelab.synth.replica_presets import preset_config, preset_layout

pytestmark = pytest.mark.timeout(600)


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    try:
        main(["plan", *argv, "--no-store"])
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    return " ".join(capsys.readouterr().out.split())


def test_deepseek_v3_on_one_h200_is_told_what_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # as published: FP8 (128x128 blocks)
    write_replica(tmp_path, preset_config("deepseek-v3"), preset_layout("deepseek-v3", None, None))
    out = _plan(capsys, str(tmp_path), "-H", "h200")
    assert "fits: NO" in out
    assert ("way in: tensor parallel over 8 GPUs of one 8 x h200 node: --tensor-parallel-size 8 "
            "fits with a KV pool of") in out
    assert "tensor parallel over 4 GPUs" not in out  # the smallest size that fits, planned
    # that plan, made as the line says, fits
    tp8 = _plan(capsys, str(tmp_path), "-H", "h200", "--tensor-parallel-size", "8")
    assert "fits per GPU: yes" in tp8 and "way in:" not in tp8


def test_a_build_that_fits_has_no_way_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_replica(tmp_path, preset_config("mistral-7b"))
    out = _plan(capsys, str(tmp_path), "-H", "h200")
    assert "fits: yes" in out and "way in:" not in out
    # on a 32 GiB card at its full context, too: the KV pool is what shrinks
    small = _plan(capsys, str(tmp_path), "-H", "rtx-5090", "--max-model-len", "4096")
    assert "way in:" not in small


def test_a_build_no_node_holds_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    write_replica(tmp_path, preset_config("deepseek-v3"))  # BF16: 1.25 TiB of weights
    out = _plan(capsys, str(tmp_path), "-H", "h200")
    assert ("way in: no tensor-parallel size up to 8 GPUs of one h200 node fits it: a smaller "
            "build of the model (servelab choose --discover)") in out
