"""What servelab knows about each model family: one home, read by inspect, plan, synth and
the GGUF reader alike.

* :mod:`~servelab.families.layers`: the layer kinds (full, sliding, chunked, MLA, Gated
  DeltaNet, Mamba2, none) and their per-layer dimensions;
* :mod:`~servelab.families.dims`: :class:`ModelDims`, a model's dimensions as planning needs
  them;
* :mod:`~servelab.families.base`: :class:`Family` and the reading helpers (configs are
  read through transformers' own config classes, so servelab sees vLLM's defaults);
* one module per family (``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``phi3``, ``gemma3``,
  ``gpt_oss``, ``deepseek``, ``glm4_moe``, ``llama4``, ``nemotron_h``, ``minimax_m2``),
  registered below by ``model_type``: adding a family is one module, one line here and
  its tests;
* :func:`model_dims`: a parsed ``config.json`` -> :class:`ModelDims`, or a refusal naming
  the key and file (never a guessed default).

Imports nothing above :mod:`servelab.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.errors import ConfigError
from servelab.families import (
    deepseek,
    gemma3,
    glm4_moe,
    gpt_oss,
    llama,
    llama4,
    minimax_m2,
    mistral,
    nemotron_h,
    phi3,
    qwen2,
    qwen3,
)
from servelab.families.base import Family, GgufNames, Preset, ReplicaSink, RoleHint, hf_config
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

#: Every family servelab reads.
FAMILIES: tuple[Family, ...] = (
    llama.FAMILY,
    mistral.MISTRAL,
    mistral.MIXTRAL,
    qwen2.FAMILY,
    qwen3.QWEN3,
    qwen3.QWEN3_MOE,
    qwen3.QWEN3_HYBRID,
    phi3.FAMILY,
    gemma3.FAMILY,
    gpt_oss.FAMILY,
    deepseek.DEEPSEEK,
    deepseek.KIMI_K2,
    glm4_moe.FAMILY,
    llama4.FAMILY,
    nemotron_h.FAMILY,
    minimax_m2.FAMILY,
)

_BY_MODEL_TYPE: dict[str, Family] = {mt: f for f in FAMILIES for mt in f.model_types}


def model_type_of(config: Mapping[str, Any]) -> str | None:
    """A config's ``model_type`` (the outer one of a multimodal config)."""
    mt = config.get("model_type")
    if isinstance(mt, str) and mt:
        return mt
    inner = config.get("text_config")
    if isinstance(inner, Mapping) and isinstance(inner.get("model_type"), str):
        return str(inner["model_type"])
    return None


def family_for(config: Mapping[str, Any], source: str = "config.json") -> Family:
    """The family that reads ``config``, or a refusal naming its ``model_type``."""
    mt = model_type_of(config)
    if mt is None:
        raise ConfigError(f"{source}: no 'model_type'; servelab reads a model by its family")
    fam = _BY_MODEL_TYPE.get(mt)
    if fam is None:
        raise ConfigError(
            f"{source}: model_type {mt!r} is not a model family servelab reads "
            f"(families: {', '.join(sorted(_BY_MODEL_TYPE))})"
        )
    return fam


def family_for_gguf(arch: str) -> Family | None:
    """The family whose llama.cpp ``general.architecture`` is ``arch`` (first match:
    ``llama`` is Llama's, though Mistral and Mixtral convert to it too)."""
    return next((f for f in FAMILIES if f.gguf is not None and f.gguf.arch == arch), None)


def gguf_model_type(arch: str) -> str:
    """The model_type a GGUF file of llama.cpp architecture ``arch`` is read as (``arch``
    itself when no family claims it: reading it is then refused, naming it)."""
    fam = family_for_gguf(arch)
    if fam is None or fam.gguf is None:
        return arch
    return fam.gguf.model_type or fam.model_types[0]


def model_dims(config: Mapping[str, Any], source: str = "config.json") -> ModelDims:
    """Read :class:`ModelDims` from a parsed ``config.json`` through its family: the one
    function that reads a config into dimensions (counted: :func:`config_reads`).

    Raises :class:`ConfigError` naming the file and key for what servelab cannot read.
    """
    _READS[0] += 1
    return family_for(config, source).read(config, source)


_READS = [0]


def config_reads() -> int:
    """How many configs :func:`model_dims` has read in this process (a plan reads its
    checkpoint's once: tests count it)."""
    return _READS[0]


def filled_config(config: Mapping[str, Any], source: str = "config.json") -> dict[str, Any]:
    """``config`` with the defaults of its transformers config class filled in (the
    config's own keys win; nested ``text_config`` / ``vision_config`` alike)."""
    fam = family_for(config, source)
    built, _ = hf_config(config, source, fam.hf_model_type or str(model_type_of(config)))
    return _merge(built.to_dict(), config)


def _merge(defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for k, v in given.items():
        d = out.get(k)
        out[k] = _merge(d, v) if isinstance(v, Mapping) and isinstance(d, Mapping) else v
    return out


def presets() -> dict[str, tuple[Family, Preset]]:
    """Header-replica presets at published dimensions, by name."""
    return {p.name: (f, p) for f in FAMILIES for p in f.presets}


__all__ = [
    "CHUNKED",
    "DTYPE_BYTES",
    "FAMILIES",
    "FULL",
    "LINEAR",
    "MAMBA",
    "MLA",
    "NONE",
    "SLIDING",
    "AttentionLayer",
    "Family",
    "GgufNames",
    "LinearAttentionDims",
    "Mamba2Dims",
    "MlaDims",
    "ModelDims",
    "Preset",
    "ReplicaSink",
    "RoleHint",
    "config_reads",
    "family_for",
    "family_for_gguf",
    "filled_config",
    "gguf_model_type",
    "model_dims",
    "model_type_of",
    "presets",
]
