"""Issue 42's done-when, counted through the real seams: a plan reads its checkpoint's
``config.json`` into dimensions once (:func:`servelab.families.config_reads`, counted in the
one function that does it), and a run resolves its recipe's launcher once
(:func:`servelab.serve.resolved.launcher_resolutions`, counted in the one function that does
it), whichever command asks."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.families import config_reads
from servelab.serve.resolved import launcher_resolutions

pytestmark = pytest.mark.timeout(600)

RECIPE = """\
name = "tiny-llama-synthetic"
hardware = "h200"
[model]
synth = "llama"
served_name = "tiny-synthetic"
[engine]
name = "synthetic"
stop_grace_s = 5
[engine.flags]
ttft_ms = 5
itl_ms = 1
[bench]
prompt_tokens = [32]
output_tokens = 4
concurrency = [1]
repetitions = 2
max_repetitions = 2
warmup = 0
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny Qwen3-Next checkpoint, a tiny llama as GGUF, and a recipe of the synthetic
    engine serving a tiny llama."""
    from servelab.synth.gguf import write_gguf
    from servelab.synth.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("reads")
    recipe = root / "synthetic.toml"
    recipe.write_text(RECIPE, encoding="utf-8")
    llama = make_tiny_model("llama", root / "llama")
    return {"next": make_tiny_model("qwen3_next", root / "next"), "recipe": recipe,
            "gguf": write_gguf(llama, root / "llama.gguf", qtype="Q8_0")}


def _reads(argv: list[str]) -> int:
    before = config_reads()
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    return config_reads() - before


def test_a_plan_reads_its_config_once(tiny: dict[str, Path]) -> None:
    assert _reads(["plan", str(tiny["next"]), "-H", "h200", "--no-store", "--json"]) == 1
    assert _reads(["plan", str(tiny["gguf"]), "-H", "h200", "--no-store"]) == 1
    assert _reads(["plan", str(tiny["recipe"]), "--no-store"]) == 1
    assert _reads(["choose", str(tiny["next"]), str(tiny["gguf"]), "-H", "h200", "-c", "4096",
                   "--no-store"]) == 2  # one plan per build


def test_a_run_resolves_its_launcher_once_and_reads_its_config_once(
    tiny: dict[str, Path], tmp_path: Path
) -> None:
    launchers, reads = launcher_resolutions(), config_reads()
    res = CliRunner().invoke(app, ["run", str(tiny["recipe"]), "--db", str(tmp_path / "r.db"),
                                   "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert launcher_resolutions() - launchers == 1
    assert config_reads() - reads == 1
