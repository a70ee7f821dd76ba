"""What servelab knows about each model family: one home, read by inspect, plan, synth and
the GGUF reader alike.

* :mod:`~servelab.families.layers`: the layer kinds (full, sliding, chunked, MLA, Gated
  DeltaNet, Mamba2, none) and their per-layer dimensions;
* :mod:`~servelab.families.dims`: :class:`ModelDims`, a model's dimensions as planning needs
  them;
* :func:`model_dims`: a parsed ``config.json`` -> :class:`ModelDims` (a refusal naming the key
  for what servelab cannot read, never a guessed default).

Imports nothing above :mod:`servelab.errors`.
"""

from __future__ import annotations

from servelab.families.dims import ModelDims
from servelab.families.layers import (
    CHUNKED,
    DTYPE_BYTES,
    FULL,
    LINEAR,
    MAMBA,
    MLA,
    NONE,
    SLIDING,
    AttentionLayer,
    LinearAttentionDims,
    Mamba2Dims,
    MlaDims,
)
from servelab.families.reader import model_dims, text_config

__all__ = [
    "CHUNKED",
    "DTYPE_BYTES",
    "FULL",
    "LINEAR",
    "MAMBA",
    "MLA",
    "NONE",
    "SLIDING",
    "AttentionLayer",
    "LinearAttentionDims",
    "Mamba2Dims",
    "MlaDims",
    "ModelDims",
    "model_dims",
    "text_config",
]
