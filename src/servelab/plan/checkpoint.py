"""A checkpoint as the planner reads it, read once: its config and the dimensions its model
family reads from it (inspect's one reading: :attr:`CheckpointReport.dims
<servelab.checkpoint.report.CheckpointReport.dims>`), its weights by role, and the fingerprint
of its headers. Pure: an inspect report in, a frozen value out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servelab.checkpoint.quant import QuantScheme, detect_quant
from servelab.checkpoint.report import CheckpointReport
from servelab.errors import ServelabError, UsageError
from servelab.families import DTYPE_BYTES, ModelDims, family_for, model_dims
from servelab.sizing.weights import Weights, weights_from_report

__all__ = ["Checkpoint", "apply_dtype_flag", "planned_checkpoint"]


@dataclass(frozen=True)
class Checkpoint:
    """What a plan reads of a checkpoint."""

    config: Mapping[str, Any]
    dims: ModelDims
    family: str
    """Its model family (:mod:`servelab.families`), "" when none reads it."""
    weights: Weights
    header_hash: str | None = None
    """The checkpoint's header hash (stored runs of the same tensors are found by it)."""
    quant: QuantScheme | None = None
    """Its declared quantization (``config.json`` / ``hf_quant_config.json``); None: read
    from :attr:`config` (:attr:`scheme`)."""

    @property
    def scheme(self) -> QuantScheme:
        """Its declared quantization, as the engine's kernel selection reads it."""
        return self.quant if self.quant is not None else detect_quant(self.config)

    @property
    def model_type(self) -> str | None:
        """The text model's ``model_type`` (``text_config``'s where there is one)."""
        text = self.config.get("text_config")
        if isinstance(text, Mapping) and text.get("model_type"):
            return str(text["model_type"])
        return str(self.config["model_type"]) if self.config.get("model_type") else None

    @classmethod
    def of(cls, config: Mapping[str, Any], weights: Weights, *,
           header_hash: str | None = None) -> Checkpoint:
        """A checkpoint whose config and weights are already in hand (no inspect report):
        its dimensions read from ``config`` once, its family "" when none reads it."""
        dims = model_dims(config)
        try:
            family = family_for(config).name
        except ServelabError:
            family = ""
        return cls(dict(config), dims, family, weights, header_hash)


def planned_checkpoint(
    report: CheckpointReport,
    config: Mapping[str, Any] | None,
    *,
    name: str,
    header_hash: str | None,
    where: str | Path | None = None,
    dtype: str | None = None,
) -> Checkpoint:
    """The checkpoint ``report`` describes, as a plan reads it: named ``name``, its weights
    cast as the engine's ``--dtype`` casts them (``dtype``; ``None`` or ``auto``: as stored).

    ``where`` names the checkpoint in the error when it has no config (plan needs its
    dimensions); a config its family cannot read is that family's :class:`ConfigError`.
    """
    weights = weights_from_report(report, name=name)
    config = dict(config or {})
    if config:
        check_dtype_flag(dtype)
    if not config:
        raise UsageError("the checkpoint has no config.json; plan needs its dimensions",
                         path=where)
    dims = report.dims if report.dims is not None else model_dims(config)  # raises
    config, weights = apply_dtype_flag(config, weights, dtype, dims.dtype_bytes)
    if dtype is not None and dtype != "auto":
        dims = replace(dims, dtype=dtype)
    return Checkpoint(config, dims, report.family, weights, header_hash, report.quant)


def check_dtype_flag(dtype: str | None) -> None:
    """A UsageError for a ``--dtype`` servelab does not know."""
    if dtype is not None and dtype != "auto" and dtype not in DTYPE_BYTES:
        raise UsageError(f"engine.flags.dtype {dtype!r} is not a dtype servelab knows")


def apply_dtype_flag(
    config: dict[str, Any], weights: Weights, dtype: str | None, dtype_bytes: int
) -> tuple[dict[str, Any], Weights]:
    """What ``--dtype`` does to an unquantized checkpoint whose dtype is ``dtype_bytes`` wide:
    the engine casts the weights, and the KV cache ("auto") follows the model dtype.
    Quantized weights keep their bytes."""
    if dtype is None or dtype == "auto":
        return config, weights
    check_dtype_flag(dtype)
    old = dtype_bytes
    config = {**config, "dtype": dtype}
    inner = config.get("text_config")
    if isinstance(inner, dict):
        config["text_config"] = {**inner, "dtype": dtype}
    new = DTYPE_BYTES[dtype]
    if weights.scheme != "bf16" or new == old:
        return config, weights

    def scale(n: int) -> int:
        return n * new // old

    return config, replace(
        weights,
        resident_bytes=scale(weights.resident_bytes),
        decode_bytes_per_token=scale(weights.decode_bytes_per_token),
        routed_expert_bytes=scale(weights.routed_expert_bytes),
        mtp_bytes=scale(weights.mtp_bytes),
        vision_bytes=scale(weights.vision_bytes),
        source=f"{weights.source}; cast to {dtype} by the engine's --dtype",
    )
