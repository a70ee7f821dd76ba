"""Planning inputs read once per session (inspect of a full-size replica takes seconds)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.plan.weights import Weights, weights_from_report


@functools.cache
def planning_inputs(path: Path) -> tuple[Mapping[str, Any], Weights]:
    """(config, Weights) of a checkpoint, read once per session (inspect takes seconds)."""
    source = load_checkpoint(path)
    assert source.config is not None
    return source.config, weights_from_report(build_report(source), name=path.name)
