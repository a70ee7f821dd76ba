"""What a family is, and the reading helpers every family shares.

A :class:`Family` knows one kind of model: how to read its config (through transformers'
own config class, so that servelab sees the defaults vLLM sees), the layer kinds it
produces, role hints for its tensor names, its GGUF names, and its header-replica layout
and presets at published dimensions. Families are plain data plus functions; the registry
in :mod:`servelab.families` maps ``model_type`` to a family.

transformers is imported lazily (inside :func:`hf_config`): importing it costs seconds.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from servelab.errors import ConfigError
from servelab.families.dims import ModelDims
from servelab.families.layers import (
    CHUNKED,
    DTYPE_BYTES,
    FULL,
    SLIDING,
    AttentionLayer,
    LinearAttentionDims,
    Mamba2Dims,
    MlaDims,
)
from servelab.quiet import logging_enabled

#: Keys of a config.json that are bookkeeping, not model dimensions.
_NOT_KWARGS = frozenset({"model_type", "transformers_version", "auto_map", "_name_or_path"})


class ReplicaSink(Protocol):
    """What a family's replica layout writes into (``servelab.synth.replica``'s builder)."""

    def param(self, name: str, *shape: int, dtype: str | None = None) -> None:
        """A tensor stored as is (norms, biases, embeddings, native-format weights)."""

    def linear(
        self, module: str, out: int, inp: int, *, bias: bool = False, quantizable: bool = True
    ) -> None:
        """A linear layer ``module`` (weight [out, inp]), quantized by the replica's layout."""


#: (tensor name template with indices as ``#``, decoder layer index) -> a role name of
#: ``servelab.checkpoint.roles.Role`` or ``None`` (the generic name rules decide).
RoleHint = Callable[[str, int | None], str | None]


@dataclass(frozen=True)
class Preset:
    """A header-replica preset: a published config and where it was read from.

    ``layout``: the checkpoint's native storage (``bf16``, ``fp8-block`` or ``native``
    for formats the family's layout writes itself, such as gpt-oss's MXFP4 experts);
    ``quantize``: regexes of the linear modules a ``fp8-block`` export quantizes.
    """

    name: str
    source: str
    config: Callable[[], dict[str, Any]]
    layout: str = "bf16"
    quantize: tuple[str, ...] = ()


@dataclass(frozen=True)
class GgufNames:
    """llama.cpp's names for a family: ``general.architecture`` and tensor-name templates
    (Hugging Face template with ``#`` for the layer -> GGUF name, ``blk.#.…``)."""

    arch: str
    tensors: Mapping[str, str] = field(default_factory=dict)
    model_type: str | None = None
    """The model_type a GGUF file's flat config is read as (a multimodal family's text
    model_type; default: the family's first)."""


@dataclass(frozen=True)
class Family:
    """One model family: reading, layer kinds, roles, GGUF names, replica layout."""

    name: str
    model_types: tuple[str, ...]
    read: Callable[[Mapping[str, Any], str], ModelDims]
    gguf: GgufNames | None = None
    hf_model_type: str | None = None
    """The transformers config class to read with, when not the config's own model_type."""
    role_hint: Callable[[ModelDims], RoleHint] | None = None
    replica: Callable[[ReplicaSink, Mapping[str, Any]], None] | None = None
    presets: tuple[Preset, ...] = ()


# --- reading through transformers -------------------------------------------------------


@contextmanager
def _quiet_transformers(notes: list[str]) -> Iterator[None]:
    """Collect transformers' warnings and log records while a config is built: they
    become notes on the result instead of stderr noise (or errors under pytest)."""

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            notes.append(record.getMessage())

    logger = logging.getLogger("transformers")
    saved = (logger.handlers[:], logger.propagate)
    logger.handlers = [_Collect(logging.WARNING)]
    logger.propagate = False
    try:
        with logging_enabled(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        notes.extend(str(w.message) for w in caught)
    finally:
        logger.handlers, logger.propagate = saved


def hf_config(raw: Mapping[str, Any], source: str, model_type: str) -> tuple[Any, list[str]]:
    """``raw`` built by transformers' config class for ``model_type`` (its defaults
    filled in, its derived fields such as ``layer_types`` computed), plus the warnings
    transformers gave. A config transformers rejects is a :class:`ConfigError`."""
    from transformers import AutoConfig, PreTrainedConfig  # lazy: seconds to import

    # transformers writes non-finite floats as {"__float__": "Infinity"} and decodes them
    # when it reads a config file (Nemotron-H's time_step_limit); do as it does
    decoded = PreTrainedConfig._decode_special_floats(dict(raw))
    kwargs = {k: v for k, v in decoded.items() if k not in _NOT_KWARGS}
    notes: list[str] = []
    try:
        with _quiet_transformers(notes):
            cfg = AutoConfig.for_model(model_type, **kwargs)
    except Exception as e:
        raise ConfigError(
            f"{source}: transformers cannot read this {model_type} config: {e}"
        ) from e
    return cfg, notes


def text_part(cfg: Any) -> Any:
    """The language model's config of a (possibly multimodal) transformers config."""
    inner = getattr(cfg, "text_config", None)
    return inner if inner is not None else cfg


def raw_text(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model part of a parsed config (``text_config`` when present)."""
    inner = raw.get("text_config")
    return inner if isinstance(inner, Mapping) else raw


def get_int(cfg: Any, key: str, source: str, default: int | None = None) -> int:
    """Attribute ``key`` of a transformers config as a non-negative int, or a refusal."""
    value = getattr(cfg, key, default)
    if value is None:
        raise ConfigError(f"{source}: no {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{source}: {key!r} must be a non-negative integer, got {value!r}")
    return value


def opt_int(cfg: Any, key: str, source: str) -> int | None:
    """Attribute ``key`` as an int, or ``None`` when absent or null."""
    if getattr(cfg, key, None) is None:
        return None
    return get_int(cfg, key, source)


def dtype_of(raw: Mapping[str, Any], source: str) -> str:
    """The checkpoint's activation dtype (``dtype`` / ``torch_dtype``; bfloat16 if unset)."""
    for part in (raw_text(raw), raw):
        for key in ("dtype", "torch_dtype"):
            value = part.get(key)
            if isinstance(value, str):
                name = value.removeprefix("torch.")
                if name not in DTYPE_BYTES:
                    raise ConfigError(f"{source}: {key} = {value!r} is not a known dtype")
                return name
    return "bfloat16"


def map_layer_types(
    raw_types: Sequence[Any], aliases: Mapping[str, str], source: str, num_layers: int
) -> tuple[str, ...]:
    """A family's own layer-type names -> layer kinds; an unknown name is a refusal."""
    out: list[str] = []
    for i, t in enumerate(raw_types):
        kind = aliases.get(str(t))
        if kind is None:
            raise ConfigError(
                f"{source}: layer_types[{i}] = {t!r} is not a layer type servelab knows "
                f"(known: {', '.join(sorted(aliases))})"
            )
        out.append(kind)
    if len(out) != num_layers:
        raise ConfigError(
            f"{source}: {len(out)} layer_types for num_hidden_layers = {num_layers}"
        )
    return tuple(out)


def softmax_layers(
    kinds: Sequence[str],
    num_kv_heads: int,
    head_dim: int,
    *,
    v_head_dim: int | None = None,
    window: int | None = None,
    chunk: int | None = None,
    sinks: bool = False,
) -> tuple[AttentionLayer | None, ...]:
    """One :class:`AttentionLayer` per softmax-attention layer (None for other kinds)."""
    out: list[AttentionLayer | None] = []
    for k in kinds:
        if k in (FULL, SLIDING, CHUNKED):
            out.append(
                AttentionLayer(
                    k,
                    num_kv_heads,
                    head_dim,
                    v_head_dim if v_head_dim is not None else head_dim,
                    window=window if k == SLIDING else None,
                    chunk=chunk if k == CHUNKED else None,
                    sinks=sinks,
                )
            )
        else:
            out.append(None)
    return tuple(out)


def architecture(raw: Mapping[str, Any]) -> str | None:
    """The first of ``architectures``."""
    archs = raw.get("architectures")
    if isinstance(archs, Sequence) and not isinstance(archs, str) and archs:
        return str(archs[0])
    return None


def tied(outer: Any, text: Any) -> bool:
    """``tie_word_embeddings`` as transformers (and vLLM) read it: the text config's own
    value, which the multimodal classes share with the outer one."""
    value = getattr(text, "tie_word_embeddings", None)
    if value is None:
        value = getattr(outer, "tie_word_embeddings", False)
    return bool(value)


@dataclass(frozen=True)
class Common:
    """The dimensions every decoder family has, read once."""

    num_layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    max_position: int | None


def common(text: Any, source: str) -> Common:
    """Layers, heads, hidden size, vocabulary and context of a text config."""
    heads = get_int(text, "num_attention_heads", source)
    hidden = get_int(text, "hidden_size", source)
    kv = opt_int(text, "num_key_value_heads", source)
    hd = opt_int(text, "head_dim", source)
    if not heads:
        raise ConfigError(f"{source}: num_attention_heads must be positive")
    return Common(
        num_layers=get_int(text, "num_hidden_layers", source),
        heads=heads,
        kv_heads=kv if kv is not None else heads,
        head_dim=hd if hd else hidden // heads,
        hidden=hidden,
        vocab=get_int(text, "vocab_size", source),
        max_position=opt_int(text, "max_position_embeddings", source),
    )


def dims(
    family: str,
    raw: Mapping[str, Any],
    outer: Any,
    text: Any,
    c: Common,
    source: str,
    *,
    layer_types: tuple[str, ...],
    attention: tuple[AttentionLayer | None, ...],
    num_experts: int = 0,
    experts_per_token: int = 0,
    mtp_layers: int = 0,
    sliding_window: int | None = None,
    mla: MlaDims | None = None,
    mamba: Mamba2Dims | None = None,
    linear: LinearAttentionDims | None = None,
    mamba_ssm_dtype: str | None = None,
    notes: Sequence[str] = (),
) -> ModelDims:
    """Assemble a :class:`ModelDims` from a family's readings."""
    model_type = str(getattr(text, "model_type", None) or raw.get("model_type"))
    return ModelDims(
        model_type=model_type,
        architecture=architecture(raw),
        dtype=dtype_of(raw, source),
        num_layers=c.num_layers,
        layer_types=layer_types,
        num_attention_heads=c.heads,
        num_kv_heads=c.kv_heads,
        head_dim=c.head_dim,
        hidden_size=c.hidden,
        vocab_size=c.vocab,
        max_position_embeddings=c.max_position,
        linear=linear,
        mamba_ssm_dtype=mamba_ssm_dtype,
        mtp_layers=mtp_layers,
        num_experts=num_experts,
        experts_per_token=experts_per_token if num_experts else 0,
        sliding_window=sliding_window,
        family=family,
        attention=attention,
        mla=mla,
        mamba=mamba,
        tie_word_embeddings=tied(outer, text),
        notes=tuple(notes),
    )


#: Hugging Face layer-type names of softmax attention layers.
SOFTMAX_ALIASES: Mapping[str, str] = {
    "full_attention": FULL,
    "sliding_attention": SLIDING,
    "chunked_attention": CHUNKED,
}


def experts(text: Any, source: str, *keys: str) -> tuple[int, int]:
    """(routed experts, experts per token) from the first of ``keys`` the config has."""
    for key in keys:
        n = opt_int(text, key, source)
        if n:
            return n, get_int(text, "num_experts_per_tok", source)
    return 0, 0


@dataclass(frozen=True)
class Reading:
    """A config read by transformers: the outer and text configs, common dimensions and
    transformers' notes."""

    raw: Mapping[str, Any]
    outer: Any
    text: Any
    common: Common
    notes: list[str]
    source: str


def read_config(
    raw: Mapping[str, Any], source: str, model_type: str | None = None, *, mla: bool = False
) -> Reading:
    """Build ``raw`` through transformers (the config class of ``model_type``, by default
    the config's own) and read the common dimensions.

    The model's size is never taken from a config class's defaults: the config must name
    ``num_hidden_layers`` (or Nemotron-H's pattern, either spelling) and ``hidden_size``.
    An MLA key in a family without MLA is refused, not ignored.
    """
    text = raw_text(raw)
    for key in ("num_hidden_layers", "hidden_size"):
        # Nemotron-H names its layers by pattern (hybrid_override_pattern; transformers 5
        # writes it as layers_block_type), one per layer
        pattern = key == "num_hidden_layers" and (
            "hybrid_override_pattern" in text or "layers_block_type" in text
        )
        if key not in text and not pattern:
            raise ConfigError(
                f"{source}: no {key!r} (servelab does not take a model's size from defaults)"
            )
    if not mla and text.get("kv_lora_rank") is not None:
        raise ConfigError(
            f"{source}: kv_lora_rank (MLA) in a {raw.get('model_type')} config, whose family "
            "has no MLA layers"
        )
    outer, notes = hf_config(raw, source, model_type or str(raw.get("model_type")))
    text = text_part(outer)
    return Reading(raw, outer, text, common(text, source), notes, source)


def uniform_kinds(r: Reading, aliases: Mapping[str, str] = SOFTMAX_ALIASES) -> tuple[str, ...]:
    """Layer kinds of a softmax-attention family: its ``layer_types`` when the config
    class has them, else every layer sliding when a model-level ``sliding_window`` is set
    (vLLM applies the model-level window to layers that name none), else all full."""
    n = r.common.num_layers
    types = getattr(r.text, "layer_types", None)
    if types:
        return map_layer_types(types, aliases, r.source, n)
    if opt_int(r.text, "sliding_window", r.source):
        return (SLIDING,) * n
    return (FULL,) * n


def read_softmax(
    family: str, raw: Mapping[str, Any], source: str, *expert_keys: str, mtp_key: str | None = None,
    sinks: bool = False,
) -> ModelDims:
    """The whole reading of a family whose layers are all softmax attention (full,
    sliding or chunked, per the config class)."""
    r = read_config(raw, source)
    c = r.common
    kinds = uniform_kinds(r)
    window = opt_int(r.text, "sliding_window", source) if SLIDING in kinds else None
    chunk = opt_int(r.text, "attention_chunk_size", source) if CHUNKED in kinds else None
    if CHUNKED in kinds and not chunk:
        raise ConfigError(f"{source}: chunked_attention layers but no attention_chunk_size")
    n_exp, top_k = experts(r.text, source, *expert_keys)
    return dims(
        family, raw, r.outer, r.text, c, source,
        layer_types=kinds,
        attention=softmax_layers(kinds, c.kv_heads, c.head_dim, window=window, chunk=chunk,
                                 sinks=sinks),
        num_experts=n_exp,
        experts_per_token=top_k,
        mtp_layers=(opt_int(r.text, mtp_key, source) or 0) if mtp_key else 0,
        sliding_window=window,
        notes=r.notes,
    )
