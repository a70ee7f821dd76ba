"""Engine environment recorded with runs: torch from the engine's interpreter, CUDA from it."""

from __future__ import annotations

import sys
from pathlib import Path

from servelab.serve.environment import cuda_of_torch
from servelab.serve.recipe import parse_recipe
from servelab.serve.resolved import engine_environment


def test_cuda_build_from_the_torch_version() -> None:
    assert cuda_of_torch("2.11.0+cu130") == "13.0"
    assert cuda_of_torch("2.4.1+cu121") == "12.1"
    assert cuda_of_torch("2.13.0+cpu") is None
    assert cuda_of_torch(None) is None


def test_torch_is_read_from_the_recipe_interpreter(tmp_path: Path) -> None:
    # The test interpreter has torch (the synth extra): a recipe pointing at it learns its
    # version by package metadata, without importing anything.
    import torch

    recipe = parse_recipe(
        f'name = "x"\n[model]\nsynth = "llama"\n[engine]\npython = "{sys.executable}"\n',
        source=tmp_path / "r.toml",
    )
    env = engine_environment(recipe)
    assert env.torch == torch.__version__
    assert env.cuda == cuda_of_torch(torch.__version__)
