"""The H200 vLLM builds the project holds, as operator models: a stored build's name
(``qwen3-30b-a3b-fp8-random``, ``qwen3-next-bf16-12l-random``, ...) -> the config
benchmarks/gpu/gen_checkpoint.py wrote for it (its ARCHS entry, cut to the build's layer
count) and its storage layout (``--layout fp8-block`` quantizes TEXT_LINEARS; BF16
otherwise), read by :func:`servelab.ops.model.step_model`.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "gpu"))

from gen_checkpoint import ARCHS, set_layers  # noqa: E402

from servelab.ops.model import StepModel, step_model  # noqa: E402
from servelab.synth.replica import TEXT_LINEARS, QuantLayout  # noqa: E402

#: Stored build-name prefixes -> gen_checkpoint architecture.
_ARCH = {
    "qwen3.6-35b-a3b": "qwen3.6-35b-a3b",
    "qwen3-next": "qwen3-next-80b-a3b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "qwen3-235b-a22b": "qwen3-235b-a22b",
    "qwen3-4b": "qwen3-4b",
    "qwen3-32b": "qwen3-32b",
    "llama-3.1-70b": "llama-3.1-70b",
    "llama-3.1-8b": "llama-3.1-8b",
    "llama-3.2-3b": "llama-3.2-3b",
}
_NAME = re.compile(r"^(?P<arch>.+?)-(?P<fmt>bf16|fp8)(-(?P<layers>\d+)l)?(-mtp\d+)?-random$")


@dataclass(frozen=True)
class Build:
    name: str
    arch: str
    fmt: str  # "bf16" or "fp8-block"
    layers: int | None
    config: dict[str, Any]

    def model(self) -> StepModel:
        layout = QuantLayout("fp8-block", TEXT_LINEARS) if self.fmt == "fp8-block" else None
        return step_model(self.config, layout, name=self.name)


def build(name: str) -> Build | None:
    """The stored build ``name`` as an operator-model input (None: not a gen_checkpoint
    build)."""
    m = _NAME.match(name)
    if m is None:
        return None
    arch = _ARCH.get(m["arch"])
    if arch is None:
        return None
    cfg = json.loads(json.dumps(ARCHS[arch]))
    layers = int(m["layers"]) if m["layers"] else None
    if layers:
        set_layers(cfg, layers)
    return Build(name, arch, "fp8-block" if m["fmt"] == "fp8" else "bf16", layers, cfg)
