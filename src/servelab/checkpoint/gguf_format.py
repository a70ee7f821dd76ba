"""GGUF files (llama.cpp's format) read as a checkpoint: tensor table and metadata only.

:func:`load_gguf` parses the file with the ``gguf`` package's reader (which maps the
file; no tensor data is read) and returns the same
:class:`~servelab.checkpoint.source_record.CheckpointSource` a safetensors checkpoint gives, so
``inspect``'s report and lint apply unchanged:

* each tensor keeps its llama.cpp name (``blk.3.attn_q.weight``, ``token_embd.weight``;
  :mod:`servelab.checkpoint.roles` knows those names), its dtype is the GGML type
  (``F16``, ``BF16``, ``Q8_0``, ``Q4_K`` ...), its shape is given outermost first (as in
  PyTorch: ``[out, in]``, the reverse of GGML's ``ne``) and its bytes are the file's;
* the config is the Hugging Face equivalent of the ``<arch>.*`` metadata keys
  (``num_hidden_layers`` from ``block_count`` and so on), so planning and roles read the
  same names as for safetensors; its ``dtype`` is ``float16``, the type llama.cpp keeps
  its KV cache in by default;
* the quantization is declared as ``{"quant_method": "gguf", "file_type": ...}``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servelab.checkpoint.gguf_extent import Truncated, gguf_extent
from servelab.checkpoint.safetensors_format import (
    ShardHeader,
    TensorEntry,
    is_lfs_pointer,
    lfs_pointer_error,
)
from servelab.checkpoint.source_record import CheckpointSource, identity_sha256
from servelab.errors import HeaderError
from servelab.families import gguf_model_type

__all__ = ["GGUF_SUFFIX", "is_gguf", "load_gguf"]

GGUF_SUFFIX = ".gguf"
_MAGIC = b"GGUF"

# llama.cpp's sliding-window pattern when the file has no per-layer array
# (``load_swa_pattern(ml, N)`` in src/models/<arch>.cpp): layer il slides unless
# il % N == N - 1.
_SWA_PATTERN = {"gemma3": 6, "gpt-oss": 2}

# (config key, GGUF key suffix after "<arch>.")
_CONFIG_KEYS = (
    ("num_hidden_layers", "block_count"),
    ("max_position_embeddings", "context_length"),
    ("hidden_size", "embedding_length"),
    ("intermediate_size", "feed_forward_length"),
    ("num_attention_heads", "attention.head_count"),
    ("num_key_value_heads", "attention.head_count_kv"),
    ("head_dim", "attention.key_length"),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    ("rope_theta", "rope.freq_base"),
    ("num_experts", "expert_count"),
    ("num_local_experts", "expert_count"),  # each family's config class reads its own key
    ("n_routed_experts", "expert_count"),
    ("sliding_window", "attention.sliding_window"),
    ("num_experts_per_tok", "expert_used_count"),
    ("moe_intermediate_size", "expert_feed_forward_length"),
    ("shared_expert_intermediate_size", "expert_shared_feed_forward_length"),
    ("vocab_size", "vocab_size"),
)


def is_gguf(path: Path) -> bool:
    """True for a file that starts with the GGUF magic."""
    try:
        with path.open("rb") as fh:
            return fh.read(4) == _MAGIC
    except OSError:
        return False


def _value(field: Any) -> Any:
    try:
        return field.contents()
    except (ValueError, IndexError, TypeError):
        return None


def _config(meta: Mapping[str, Any], names: set[str], vocab: int | None) -> dict[str, Any]:
    arch = str(meta.get("general.architecture", ""))
    # the model_type the family that claims this llama.cpp architecture reads it as
    cfg: dict[str, Any] = {"model_type": gguf_model_type(arch), "dtype": "float16"}
    for key, suffix in _CONFIG_KEYS:
        value = meta.get(f"{arch}.{suffix}")
        if isinstance(value, list):  # per-layer arrays (e.g. head_count_kv): the first
            value = value[0] if value else None
        if value is not None:
            cfg[key] = value
    if "vocab_size" not in cfg and vocab is not None:
        cfg["vocab_size"] = vocab
    # sliding_window came with _CONFIG_KEYS; which layers slide is llama.cpp's reading
    window = cfg.get("sliding_window")
    if isinstance(window, int) and window > 0 and arch in _SWA_PATTERN:
        cfg["layer_types"] = _swa_layer_types(meta, arch, int(cfg.get("num_hidden_layers", 0)))
    cfg["tie_word_embeddings"] = "output.weight" not in names
    return cfg


def _swa_layer_types(meta: Mapping[str, Any], arch: str, n_layers: int) -> list[str]:
    """Which layers slide, as llama.cpp reads it: the per-layer array, else the pattern."""
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) == n_layers:
        flags = [bool(x) for x in pattern]
    else:
        n = int(pattern) if isinstance(pattern, int) else _SWA_PATTERN[arch]
        flags = [n == 0 or i % n < n - 1 for i in range(n_layers)]
    return ["sliding_attention" if f else "full_attention" for f in flags]


def load_gguf(path: Path, location: str) -> CheckpointSource:
    """Read a GGUF file's metadata and tensor table as a ``CheckpointSource``."""
    from gguf import GGUFReader


    name = path.name
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise HeaderError(f"cannot read: {exc.strerror or exc}", path=path, rule="gguf") from None
    if is_lfs_pointer(head):
        raise lfs_pointer_error(str(path))
    try:
        reader = GGUFReader(path, "r")
    except (ValueError, OSError, IndexError, KeyError) as exc:
        raise _unreadable(path, exc) from None
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml.") and key not in ("tokenizer.ggml.model",):
            continue  # vocabularies are large and say nothing about the weights
        meta[key] = _value(field)
    base = reader.data_offset
    tensors = tuple(
        TensorEntry(
            name=t.name,
            dtype=t.tensor_type.name,
            shape=tuple(int(d) for d in reversed(t.shape)),
            begin=int(t.data_offset) - base,
            end=int(t.data_offset) - base + int(t.n_bytes),
            shard=name,
        )
        for t in reader.tensors
    )
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = len(tokens.data) if tokens is not None else None
    h = hashlib.sha256()
    with path.open("rb") as fh:
        h.update(fh.read(base))
    header = ShardHeader(
        file=name,
        header_len=base,
        file_size=path.stat().st_size,
        metadata={k: str(v) for k, v in meta.items() if isinstance(v, str | int | float)},
        tensors=tensors,
        sha256=h.hexdigest(),
    )
    file_type = meta.get("general.file_type")
    quant = {"quant_method": "gguf", "file_type": _file_type_name(file_type)}
    cfg = _config(meta, {t.name for t in tensors}, vocab)
    cfg["quantization_config"] = quant
    return CheckpointSource(
        location=location,
        kind="file",
        revision=None,
        shards=(header,),
        config=cfg,
        quant_config=None,
        generation_config=None,
        index_metadata=None,
        header_sha256=identity_sha256((header,)),
        bytes_fetched=base,
    )


def _unreadable(path: Path, exc: Exception) -> HeaderError:
    """Why the reader failed, in the file's terms: where a truncated file ends too early
    (not numpy's reshape message), else the reader's own words."""
    try:
        gguf_extent(path)
    except Truncated as t:
        return HeaderError(str(t), path=path, rule="gguf-truncated")
    except (ValueError, OSError) as why:
        return HeaderError(f"not a readable GGUF file: {why}", path=path, rule="gguf")
    return HeaderError(f"not a readable GGUF file: {exc}", path=path, rule="gguf")


def _file_type_name(value: Any) -> str | None:
    from gguf import LlamaFileType

    try:
        return LlamaFileType(int(value)).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        return None
