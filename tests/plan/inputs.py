"""Planning inputs read once per session (inspect of a full-size replica takes seconds)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.sizing.weights import Weights, weights_from_report


@functools.cache
def planning_inputs(path: Path) -> tuple[Mapping[str, Any], Weights]:
    """(config, Weights) of a checkpoint, read once per session (inspect takes seconds)."""
    source = load_checkpoint(path)
    assert source.config is not None
    return source.config, weights_from_report(build_report(source), name=path.name)


def assert_rows_are_the_plans(rows: Any, doc: Mapping[str, Any]) -> None:
    """Priors ``rows`` (samples of one build) carry the kernel path, layers, expert slots,
    bytes and FLOPs of ``doc``, the ``servelab plan --json`` of that build at their lengths."""
    speed, dims = doc["speed"], doc["dims"]
    decode = {r["context_len"]: r for r in speed["decode"]}
    prefill = {r["prompt_len"]: r for r in speed["prefill"]}
    for s in rows:
        assert s.kernel_path == speed["kernel_path"]["name"]
        assert s.layers == dims["num_layers"]
        assert s.expert_slots == dims["num_layers"] * (dims["num_experts"] or 0)
        if s.kind == "decode":
            assert s.bytes_read == decode[s.length]["bytes_per_token"]
        else:
            p = prefill[s.length]
            assert (s.bytes_read, s.flops) == (p["bytes_read"], p["flops"])
