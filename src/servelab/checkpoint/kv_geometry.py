"""The config keys that decide the KV pool, held against the tensors (issue 41).

The KV pool's bytes per token per layer are ``num_key_value_heads x head_dim`` (K and V),
over ``num_hidden_layers`` layers. transformers fills a key the config.json leaves out with
its class's default: Qwen2's ``num_attention_heads`` is 32, which for Qwen2.5-7B (28 heads,
hidden 3584) makes ``head_dim`` 112 instead of 128 and the KV pool 14 % too large, without
a word. The tensor shapes know better: a layer's ``k_proj`` has ``num_key_value_heads x
head_dim`` rows (a fused ``qkv_proj``, ``(heads + 2 x kv_heads) x head_dim``).

:func:`check_kv_geometry` refuses a checkpoint whose reading of those keys contradicts its
``k_proj`` (or ``qkv_proj``) shapes, or whose config declares more layers than its tensors
hold, naming the key, the file and the tensor; a KV-deciding key left to transformers'
default is refused when no attention tensor can confirm the default. MLA layers (their latent
cache has no per-head geometry in ``k_proj``) and GGUF files (whose metadata is the
geometry llama.cpp reads) are not checked here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from servelab.checkpoint.source_record import CheckpointSource
from servelab.errors import ConfigError
from servelab.families import ModelDims, model_dims
from servelab.families.base import raw_text

#: Keys whose value decides the KV pool (with ``num_key_value_heads`` defaulting, by
#: convention, to ``num_attention_heads`` and ``head_dim`` to ``hidden_size / heads``).
KV_KEYS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim")

_PROJ = re.compile(
    r"(?:^|\.)layers\.(\d+)\.(?:self_attn|attention|attn)\.(k_proj|qkv_proj)"
    r"\.(?:weight|weight_packed|qweight)$"
)
_LAYER = re.compile(r"(?:^|\.)(?:language_model\.)?(?:model\.)?layers\.(\d+)\.")


def _tensor_rows(tensors: Iterable[tuple[str, tuple[int, ...]]]) -> dict[int, tuple[str, int]]:
    """Layer index -> (tensor name, output rows) of its K (or fused QKV) projection."""
    out: dict[int, tuple[str, int]] = {}
    for name, shape in tensors:
        if (m := _PROJ.search(name)) and shape and "vision" not in name and "visual" not in name:
            out.setdefault(int(m.group(1)), (name, int(shape[0])))
    return out


def _said(text: Mapping[str, Any], key: str, value: int) -> str:
    """``key = value`` as the config said it, or as transformers' default filled it in."""
    return f"{key} {value}" if key in text else f"{key} {value} (not in the file: " \
        "transformers' default)"


def check_kv_geometry(
    dims: ModelDims,
    config: Mapping[str, Any],
    tensors: Iterable[tuple[str, tuple[int, ...]]],
    source: str,
) -> None:
    """ConfigError when ``config`` (as ``dims`` reads it) and the tensor shapes disagree on
    what decides the KV pool (see the module docs); ``source`` names the config file."""
    if dims.mla is not None:
        return
    text = raw_text(config)
    listed = list(tensors)
    rows = _tensor_rows(listed)
    layers = {int(m.group(1)) for name, _ in listed if (m := _LAYER.search(name))
              and "vision" not in name and "visual" not in name and not name.startswith("mtp.")}
    if not layers:  # no decoder layer by Hugging Face's names (a GGUF file's blk.N.*)
        return
    if layers and dims.num_layers > max(layers) + 1:
        raise ConfigError(
            f"{source}: {_said(text, 'num_hidden_layers', dims.num_layers)} but the tensors "
            f"hold {max(layers) + 1} decoder layers: the KV pool would be planned for layers "
            "that do not ship")
    checked = False
    for i, att in enumerate(dims.attention):
        if att is None or i not in rows:
            continue
        name, got = rows[i]
        kv_rows = att.num_kv_heads * att.head_dim
        fused = name.split(".")[-2] == "qkv_proj"
        want = dims.num_attention_heads * att.head_dim + 2 * kv_rows if fused else kv_rows
        if got != want:
            what = (f"(num_attention_heads + 2 x num_key_value_heads) x head_dim = "
                    f"({dims.num_attention_heads} + 2 x {att.num_kv_heads}) x {att.head_dim}"
                    if fused else
                    f"num_key_value_heads x head_dim = {att.num_kv_heads} x {att.head_dim}")
            unsaid = [k for k in KV_KEYS[1:] if k not in text]
            defaults = ""
            if unsaid:
                heads = (f"num_attention_heads {dims.num_attention_heads}"
                         if "num_attention_heads" in unsaid else "")
                rest = [k for k in unsaid if k != "num_attention_heads"]
                defaults = (f" ({', '.join(x for x in (heads, *rest) if x)}: not in the file, "
                            "transformers' defaults)")
            hint = ""
            if not fused and att.num_kv_heads and got % att.num_kv_heads == 0:
                hd = got // att.num_kv_heads
                hint = f"; the tensors say head_dim {hd}"
                if dims.hidden_size % hd == 0:
                    hint += f" ({dims.hidden_size // hd} heads of hidden {dims.hidden_size})"
            raise ConfigError(
                f"{source}: layer {i}: {what} = {want} rows{defaults}, but {name} has {got}"
                f"{hint}: the config contradicts the tensors, and the KV pool would be wrong")
        checked = True
    if not checked and dims.attention and any(a is not None for a in dims.attention):
        missing = [k for k in ("num_attention_heads", "num_hidden_layers") if k not in text]
        if missing:
            raise ConfigError(
                f"{source}: no {' or '.join(missing)}, and no attention projection whose shape "
                "would confirm transformers' default: give the key (it decides the KV pool)")


def check_source(source: CheckpointSource) -> None:
    """:func:`check_kv_geometry` on a checkpoint as read (its config.json and headers); a
    config no family reads is left to the planner's own refusal."""
    if not source.config:
        return
    try:
        dims = model_dims(source.config, f"{source.location}/config.json")
    except ConfigError:
        return  # the planner refuses it with its own reason
    check_read_source(source, dims)


def check_read_source(source: CheckpointSource, dims: ModelDims | None) -> None:
    """:func:`check_source` with the config already read into ``dims`` (inspect's report's
    reading: a plan reads its config once); ``None``: no family reads it."""
    if not source.config or dims is None:
        return
    where = f"{source.location}/config.json"
    check_kv_geometry(dims, source.config, ((t.name, t.shape) for t in source.tensors), where)


__all__ = ["KV_KEYS", "check_kv_geometry", "check_read_source", "check_source"]
