"""Which decode CUDA graphs an engine captured on a hardware profile when left to choose the
graph mode, and where that was seen: hardware data, by profile name, read by the start-up
checks (:mod:`servelab.sizing.startup`)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["OBSERVED_GRAPHS"]

#: profile name -> (FULL decode graphs captured, where that was seen: the engine log's
#: "Capturing CUDA graphs (...)" lines).
OBSERVED_GRAPHS: Mapping[str, tuple[bool, str]] = {
    "h200": (True, "vLLM 0.26.0 captures FULL decode CUDA graphs on the H200 and refused "
                   "such a start there"),
    "dgx-spark": (False, "the seed's vLLM 0.26.0 log on the DGX Spark shows only PIECEWISE "
                         "capture, so it may start there"),
}
