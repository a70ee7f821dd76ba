"""Convert a tiny Hugging Face checkpoint to GGUF, as llama.cpp's converter would.

The result is a real GGUF file (``gguf.GGUFWriter``) that llama.cpp loads and serves:
llama.cpp's tensor names (``gguf.get_tensor_name_map``), the Q/K row permutation of its
``llama`` architecture (llama.cpp applies RoPE to interleaved pairs, Hugging Face to
halves), per-expert weights stacked into one ``[experts, out, in]`` plane per layer
(``blk.N.ffn_gate_exps`` ...) for ``qwen3_moe``, the model's byte-level BPE vocabulary and
merges as a ``gpt2`` tokenizer with the ``gpt-2`` pre-tokenizer, and its chat template.

File types: ``F32``, ``F16``, ``Q8_0``, ``Q6_K``, ``Q5_K_M``, ``Q4_K_M``, ``Q5_0``, ``Q4_0``,
each tensor of the GGML type llama.cpp's quantizer would give it
(:mod:`servelab.synth.gguf_types`); 1-D tensors (norms) and MoE routers stay ``F32`` as in
llama.cpp's own converter. Supported architectures: ``llama``,
``qwen3_moe``, ``qwen2`` (attention biases), ``gemma3_text`` (llama.cpp's ``gemma3``: RMS
norms stored as ``1 + w`` as Gemma's norm applies them, tied embeddings) and ``gpt_oss``
(llama.cpp's ``gpt-oss``, from bf16 weights: the fused ``gate_up_proj`` split into its
interleaved gate and up columns, expert planes transposed to llama.cpp's order, attention
sinks). A model with sliding-window layers gets its window and a per-layer
``sliding_window_pattern`` array, as llama.cpp reads them.

``torch`` and ``safetensors`` (the ``synth`` extra) read the bf16 source tensors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from servelab.errors import InputError, UsageError
from servelab.outfile import atomic_file
from servelab.synth.gguf_types import FILE_TYPES, FileType, quantize, tensor_type

__all__ = ["GGUF_TYPES", "GgufType", "add_vocab", "ensure_gguf", "gguf_path", "write_gguf"]

GgufType = FileType
GGUF_TYPES: tuple[GgufType, ...] = FILE_TYPES
SUPPORTED = ("llama", "qwen3_moe", "qwen2", "gemma3_text", "gpt_oss")
_GGUF_ARCH = {
    "llama": "llama",
    "qwen3_moe": "qwen3moe",
    "qwen2": "qwen2",
    "gemma3_text": "gemma3",
    "gpt_oss": "gpt-oss",
}
# gpt-oss's fused expert tensors (no ``.weight`` suffix in its checkpoints)
_FUSED_EXPERT = re.compile(
    r"^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)(_bias)?$"
)
_EXPERT = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(\w+)\.weight$")


def _permute(w: np.ndarray[Any, Any], n_head: int) -> np.ndarray[Any, Any]:
    """llama.cpp's ``LlamaModel.permute``: HF's rotate-half rows to interleaved pairs."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _hf_tensors(model_dir: Path) -> Iterator[tuple[str, np.ndarray[Any, Any]]]:
    try:
        from safetensors import safe_open
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise InputError(
            "writing GGUF needs the 'synth' extra: pip install 'servelab[synth]'"
        ) from exc
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise InputError("no *.safetensors files to convert", path=model_dir)
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open has no __iter__
                yield name, fh.get_tensor(name).float().numpy()


def _tokenizer(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "tokenizer.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the tokenizer: {exc}", path=path) from None
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise UsageError(f"{path}: only byte-level BPE tokenizers are converted")
    return data


def add_vocab(
    writer: Any, model_dir: Path, cfg: Mapping[str, Any], *, pads_normal: bool = False
) -> None:
    """The tokenizer of ``model_dir`` (byte-level BPE, ``tokenizer.json``) as llama.cpp's
    ``gpt2`` vocabulary on ``writer``, padded to ``cfg["vocab_size"]`` with tokens
    ``[PAD<i>]``: unused ones, or (``pads_normal``) ordinary tokens that decode to their
    text, so that a random-weight model, which mostly samples them, streams visible text."""
    import gguf

    tok = _tokenizer(model_dir)
    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    for added in tok.get("added_tokens", []):
        vocab[added["content"]] = int(added["id"])
    size = int(cfg.get("vocab_size", len(vocab)))
    by_id = {i: t for t, i in vocab.items()}
    special = {int(a["id"]) for a in tok.get("added_tokens", []) if a.get("special")}
    tokens, types = [], []
    for i in range(size):
        if i in by_id:
            tokens.append(by_id[i])
            control = i in special
            types.append(gguf.TokenType.CONTROL if control else gguf.TokenType.NORMAL)
        else:  # the embedding is larger than the vocabulary
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.NORMAL if pads_normal else gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"].get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    eos = cfg.get("eos_token_id")
    if isinstance(eos, int):
        writer.add_eos_token_id(eos)
    pad = cfg.get("pad_token_id")
    if isinstance(pad, int):
        writer.add_pad_token_id(pad)
    writer.add_add_bos_token(False)
    tc_path = model_dir / "tokenizer_config.json"
    if tc_path.is_file():
        template = json.loads(tc_path.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, str):
            writer.add_chat_template(template)


def write_gguf(model_dir: Path, out: Path, *, qtype: GgufType = "F16") -> Path:
    """Write ``model_dir`` (a tiny HF llama or qwen3_moe checkpoint) as GGUF ``out``.

    Written to a temporary file next to ``out`` and renamed, so ``out`` is complete or
    absent.
    """
    import gguf

    if qtype not in GGUF_TYPES:
        raise UsageError(f"unsupported GGUF type {qtype!r}; choose one of {', '.join(GGUF_TYPES)}")
    cfg_path = model_dir / "config.json"
    try:
        cfg: dict[str, Any] = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read config.json: {exc}", path=cfg_path) from None
    arch = cfg.get("model_type")
    if arch not in SUPPORTED:
        raise UsageError(
            f"GGUF conversion supports {', '.join(SUPPORTED)}, not {arch!r}", path=model_dir
        )
    n_layers = int(cfg["num_hidden_layers"])
    n_head = int(cfg["num_attention_heads"])
    n_kv = int(cfg.get("num_key_value_heads") or n_head)
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // n_head)
    model_arch = {
        "llama": gguf.MODEL_ARCH.LLAMA,
        "qwen3_moe": gguf.MODEL_ARCH.QWEN3MOE,
        "qwen2": gguf.MODEL_ARCH.QWEN2,
        "gemma3_text": gguf.MODEL_ARCH.GEMMA3,
        "gpt_oss": gguf.MODEL_ARCH.GPT_OSS,
    }[arch]
    names = gguf.get_tensor_name_map(model_arch, n_layers)
    n_experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
    ff_experts = int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0)
    rope = cfg.get("rope_parameters") or {}
    ftype = (
        gguf.LlamaFileType.ALL_F32
        if qtype == "F32"
        else gguf.LlamaFileType[f"MOSTLY_{qtype}"]
    )

    with atomic_file(out) as tmp:
        writer = gguf.GGUFWriter(tmp, _GGUF_ARCH[arch])
        writer.add_name(model_dir.name)
        writer.add_block_count(n_layers)
        writer.add_context_length(int(cfg.get("max_position_embeddings", 4096)))
        writer.add_embedding_length(int(cfg["hidden_size"]))
        writer.add_feed_forward_length(int(cfg["intermediate_size"]))
        writer.add_head_count(n_head)
        writer.add_head_count_kv(n_kv)
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
        writer.add_rope_dimension_count(head_dim)
        writer.add_rope_freq_base(_rope_theta(cfg, rope, "full_attention"))
        if cfg.get("sliding_window") and isinstance(cfg.get("layer_types"), list):
            _add_sliding(writer, cfg, rope)
        if n_experts:
            writer.add_expert_count(n_experts)
            writer.add_expert_used_count(int(cfg["num_experts_per_tok"]))
            writer.add_expert_feed_forward_length(ff_experts)
        writer.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
        writer.add_vocab_size(int(cfg["vocab_size"]))
        writer.add_file_type(ftype)
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        add_vocab(writer, model_dir, cfg)
        experts: dict[tuple[int, str], dict[int, np.ndarray[Any, Any]]] = {}
        for hf_name, data in _hf_tensors(model_dir):
            if fused := _FUSED_EXPERT.match(hf_name):
                for gguf_name, plane in _fused_expert_planes(names, fused, data):
                    _add_tensor(writer, gguf_name, plane, qtype, n_layers)
                continue
            if m := _EXPERT.match(hf_name):
                layer, xid, w_name = int(m.group(1)), int(m.group(2)), m.group(3)
                planes = experts.setdefault((layer, w_name), {})
                planes[xid] = data
                if len(planes) < n_experts:
                    continue
                hf_name = f"model.layers.{layer}.mlp.experts.{w_name}.weight"
                data = np.stack([planes[i] for i in range(n_experts)])
                del experts[(layer, w_name)]
            elif arch == "llama" and hf_name.endswith("self_attn.q_proj.weight"):
                data = _permute(data, n_head)
            elif arch == "llama" and hf_name.endswith("self_attn.k_proj.weight"):
                data = _permute(data, n_kv)
            elif arch == "gemma3_text" and hf_name.endswith("norm.weight"):
                data = data + 1.0  # Gemma's RMSNorm scales by (1 + w); llama.cpp's by w
            name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if name is None:
                raise UsageError(f"no GGUF name for tensor {hf_name!r}", path=model_dir)
            if hf_name.endswith(".sinks"):
                name += ".weight"  # llama.cpp loads blk.N.attn_sinks.weight
            _add_tensor(writer, name, data, qtype, n_layers)
        if experts:
            raise UsageError("incomplete expert planes in the checkpoint", path=model_dir)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file(progress=False)
        writer.close()
    return out


def _rope_theta(cfg: Mapping[str, Any], rope: Mapping[str, Any], layer_type: str) -> float:
    """RoPE base: ``rope_theta``, else ``rope_parameters`` (flat, or keyed by layer type)."""
    if "rope_theta" in cfg:
        return float(cfg["rope_theta"])
    nested = rope.get(layer_type)
    if isinstance(nested, Mapping):
        return float(nested.get("rope_theta", 1e4))
    return float(rope.get("rope_theta", 1e4))


def _fused_expert_planes(
    names: Any, m: re.Match[str], data: np.ndarray[Any, Any]
) -> Iterator[tuple[str, np.ndarray[Any, Any]]]:
    """gpt-oss's fused experts as llama.cpp's converter writes them.

    ``gate_up_proj`` is ``[E, H, 2I]`` with gate and up interleaved column by column; the
    GGUF planes are ``[E, I, H]`` (``ffn_gate_exps``/``ffn_up_exps``) and ``[E, H, I]``
    (``ffn_down_exps``); biases split the same way.
    """
    prefix, kind, bias = m.group(1), m.group(2), m.group(3) is not None
    suffix = ".bias" if bias else ".weight"

    def name(leaf: str) -> str:
        found = names.get_name(f"{prefix}.{leaf}")
        if found is None:
            raise UsageError(f"no GGUF name for tensor {prefix}.{leaf!r}")
        return f"{found}{suffix}"

    if kind == "down_proj":
        yield name("down_proj"), data if bias else data.transpose(0, 2, 1)
        return
    gate, up = (data[:, ::2], data[:, 1::2]) if bias else (data[:, :, ::2], data[:, :, 1::2])
    if not bias:
        gate, up = gate.transpose(0, 2, 1), up.transpose(0, 2, 1)
    yield name("gate_proj"), np.ascontiguousarray(gate)
    yield name("up_proj"), np.ascontiguousarray(up)


def _add_sliding(writer: Any, cfg: Mapping[str, Any], rope: Mapping[str, Any]) -> None:
    """Sliding-window layers: the window, which layers use it, and their RoPE base."""
    types = cfg["layer_types"]
    if len(types) != int(cfg["num_hidden_layers"]):
        raise UsageError("config.json layer_types does not match num_hidden_layers")
    writer.add_sliding_window(int(cfg["sliding_window"]))
    writer.add_sliding_window_pattern([t == "sliding_attention" for t in types])
    writer.add_rope_freq_base_swa(_rope_theta({}, rope, "sliding_attention"))


def gguf_path(model_dir: Path, qtype: str) -> Path:
    """Where the GGUF conversion of a (servelab-built) ``model_dir`` is cached."""
    return model_dir.parent / f"{model_dir.name}-{qtype}.gguf"


def ensure_gguf(model_dir: Path, qtype: GgufType) -> Path:
    """The cached GGUF conversion of ``model_dir`` (written once, atomically)."""
    out = gguf_path(model_dir, qtype)
    if out.is_file():
        return out
    return write_gguf(model_dir, out, qtype=qtype)


def _add_tensor(
    writer: Any, name: str, data: np.ndarray[Any, Any], qtype: GgufType, n_layers: int
) -> None:
    import gguf

    kind = tensor_type(name, data.ndim, qtype, n_layers)
    if kind == "F32":
        writer.add_tensor(name, data.astype(np.float32))
    elif kind == "F16":
        writer.add_tensor(name, data.astype(np.float16))
    else:
        packed = quantize(data, kind)  # uint8, byte shape
        writer.add_tensor(name, packed, raw_dtype=gguf.GGMLQuantizationType[kind])
