"""Model config files: strict JSON decoding and views over nested ``text_config``.

Pure functions over bytes and mappings; the readers in :mod:`servelab.checkpoint.sources`
fetch the bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from servelab.checkpoint.safetensors_format import JsonProblem, loads_strict_json
from servelab.errors import ConfigError

#: Config files servelab reads next to the weights, when present.
CONFIG_FILE: Final = "config.json"
QUANT_CONFIG_FILE: Final = "hf_quant_config.json"
GENERATION_CONFIG_FILE: Final = "generation_config.json"
INDEX_FILE: Final = "model.safetensors.index.json"
SINGLE_FILE: Final = "model.safetensors"

#: Largest JSON side file accepted (an index of ~60k tensors is a few MB).
MAX_JSON_FILE_BYTES: Final = 64_000_000
#: Config nesting allowed (real configs nest 3-4 deep; quantization configs a little more).
MAX_CONFIG_DEPTH: Final = 32

_SUBCONFIG_KEYS: Final = ("text_config", "vision_config", "audio_config")


def parse_json_object(raw: bytes, *, file: str) -> dict[str, Any]:
    """Decode a JSON config file that must be an object; :class:`ConfigError` otherwise."""
    if len(raw) > MAX_JSON_FILE_BYTES:
        raise ConfigError(
            f"{len(raw):,} bytes exceeds the {MAX_JSON_FILE_BYTES:,}-byte limit for JSON files",
            path=file,
        )
    try:
        doc = loads_strict_json(raw, max_depth=MAX_CONFIG_DEPTH)
    except JsonProblem as exc:
        raise ConfigError(f"{exc.message} [rule: {exc.rule}]", path=file) from None
    if not isinstance(doc, dict):
        raise ConfigError("top-level JSON is not an object [rule: not-object]", path=file)
    return doc


def text_config(config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The language-model view of a config.

    Multimodal configs (e.g. ``qwen3_5_moe``) nest the text model under ``text_config``;
    this returns the top-level keys (minus the nested sub-configs) overlaid with the
    ``text_config`` keys, which win. A plain config is returned as is (minus any
    sub-config keys). ``None`` gives an empty mapping.
    """
    if not config:
        return {}
    base = {k: v for k, v in config.items() if k not in _SUBCONFIG_KEYS}
    nested = config.get("text_config")
    if isinstance(nested, Mapping):
        base.update(nested)
    return base


def vision_config(config: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The nested ``vision_config`` mapping, or ``None`` when the model has none."""
    if not config:
        return None
    nested = config.get("vision_config")
    return nested if isinstance(nested, Mapping) else None


def quantization_config(
    config: Mapping[str, Any] | None, hf_quant_config: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """The declared quantization: ``quantization_config`` (top level or in ``text_config``),
    else ModelOpt's ``hf_quant_config.json`` (its ``quantization`` section when present)."""
    for view in (config or {}, text_config(config)):
        q = view.get("quantization_config")
        if isinstance(q, Mapping):
            return q
    if hf_quant_config:
        inner = hf_quant_config.get("quantization")
        return inner if isinstance(inner, Mapping) else hf_quant_config
    return None
