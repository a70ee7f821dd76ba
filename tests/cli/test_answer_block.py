"""The answer block (issue 41) where the answer is no: a build that does not fit says why
and names a way in that works, in at most 10 lines of 80 columns; ``--brief`` prints the
block alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.answer_block import MAX_ROWS
from servelab.cli.app import app
from servelab.synth.replica import write_replica
from servelab.synth.replica_presets import preset_config, preset_layout


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("answer") / "gpt-oss-120b"
    write_replica(path, preset_config("gpt-oss-120b"), preset_layout("gpt-oss-120b", None, None))
    return path


@pytest.fixture
def oss(replica: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The replica's name, planned from its folder (as a user types it)."""
    monkeypatch.chdir(replica.parent)
    return replica.name


def _plan(*args: str) -> list[str]:
    res = CliRunner().invoke(app, ["plan", *args, "--no-store"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    return res.stdout.splitlines()


def test_a_build_too_big_says_why_and_how_many_gpus_hold_it(oss: str) -> None:
    out = _plan(oss, "-H", "rtx-4090", "--brief")
    assert out[0].startswith(f"{oss} on rtx-4090: does NOT fit (vLLM "), out
    assert len(out) <= MAX_ROWS and max(map(len, out)) <= 80, out
    said = re.sub(r"\s+", " ", " ".join(out))
    assert re.search(r"why [\d.]+ GiB weights \+ [\d.]+ GiB overhead exceed the [\d.]+ GiB "
                     r"budget", said), said
    found = re.search(r"next a smaller build \(compare them: servelab choose BUILD\.\.\. -H "
                      r"rtx-4090\) or (\d) GPUs \(-tp (\d)\)", said)
    assert found and found[1] == found[2], said
    # the way in it names works: that many GPUs fit, and half as many do not
    gpus = int(found[1])
    assert _plan(oss, "-H", "rtx-4090", "-tp", str(gpus), "--brief")[0].startswith(
        f"{oss} on rtx-4090: fits per GPU (TP{gpus} "), gpus
    assert "does NOT fit" in _plan(oss, "-H", "rtx-4090", "-tp", str(gpus // 2),
                                   "--brief")[0]


def test_brief_is_the_head_of_the_full_plan(oss: str) -> None:
    brief = _plan(oss, "-H", "dgx-spark", "--brief")
    full = _plan(oss, "-H", "dgx-spark")
    assert full[:len(brief)] == brief and full[len(brief)] == ""
    assert len(brief) <= MAX_ROWS and "Memory" in full and "Memory" not in brief
