"""Write a RANDOM-weight checkpoint at REAL dimensions, generated on the GPU, straight to disk.

No weights can be fetched on the device, so this builds one: the tensor list (names, dtypes,
shapes) comes from :func:`servelab.synth.replica.replica_tensors`, the same layout servelab's
header replicas use, so it is exactly what a real Hugging Face export of the config carries;
the values are drawn with torch on the GPU and written as safetensors shards
(``safetensors.torch.save_file``) with a ``model.safetensors.index.json``. Also written: the
config (with the layout's ``quantization_config``), ``generation_config.json`` and a byte-level
BPE tokenizer whose vocabulary has EXACTLY ``vocab_size`` entries (constructed, not trained),
so every id a random model samples decodes.

Default: Qwen3-30B-A3B's published dimensions (48 layers, hidden 2048, 32 Q / 4 KV heads of
128, 128 routed experts top-8 of intermediate 768, vocab 151,936) in Qwen's fine-grained FP8
layout (``quant_method: fp8``, ``weight_block_size: [128, 128]``: attention and expert
projections F8_E4M3 + F32 ``weight_scale_inv`` per 128x128 block; router, norms, embedding and
lm_head BF16), about 31 GB. ``--layout bf16 --layers N`` writes BF16 with the real per-layer
dimensions and N layers instead (the full BF16 model, ~61 GB, does not fit a 64 GiB disk).

    python benchmarks/gpu/gen_checkpoint.py --out /root/ckpt/qwen3-30b-a3b-fp8
    python benchmarks/gpu/gen_checkpoint.py --out DIR --device cpu --tiny   # CPU self-test

Weights: BF16 ~ N(0, 0.02²); FP8 weights ~ N(0, 1) in e4m3 with scale_inv 0.02 (so the
dequantized weight is again ~ N(0, 0.02²)); norm weights 1. Seeded; never zeros.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from servelab.synth.replica import (  # noqa: E402
    QWEN3_6_35B_A3B,
    TEXT_LINEARS,
    QuantLayout,
    TensorSpec,
    preset_config,
    quantization_config,
    replica_tensors,
    write_replica,
)

#: Qwen/Qwen3-30B-A3B config.json (published dimensions).
QWEN3_30B_A3B: Mapping[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

#: meta-llama/Llama-3.1-8B config.json (published dimensions): the dense architecture.
LLAMA_3_1_8B: Mapping[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}

#: Qwen/Qwen3-Next-80B-A3B-Instruct config.json (published dimensions): the hybrid
#: linear-attention MoE (3 Gated DeltaNet layers to 1 full-attention layer, 512 experts top-10).
QWEN3_NEXT_80B_A3B: Mapping[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "full_attention_interval": 4,
    "head_dim": 256,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "max_position_embeddings": 262144,
    "mlp_only_layers": [],
    "model_type": "qwen3_next",
    "moe_intermediate_size": 512,
    "norm_topk_prob": True,
    "num_attention_heads": 16,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "num_hidden_layers": 48,
    "num_key_value_heads": 2,
    "output_router_logits": False,
    "partial_rotary_factor": 0.25,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000000,
    "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

#: meta-llama/Llama-3.2-3B config.json (published dimensions): a second, smaller dense model
#: (tied embeddings).
LLAMA_3_2_3B: Mapping[str, Any] = {
    **LLAMA_3_1_8B,
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_attention_heads": 24,
    "num_hidden_layers": 28,
    "rope_scaling": {**LLAMA_3_1_8B["rope_scaling"], "factor": 32.0},
    "tie_word_embeddings": True,
}

#: meta-llama/Llama-3.1-70B config.json (published dimensions): a dense model with large
#: layers (served with fewer layers: the BF16 model does not fit one H200).
LLAMA_3_1_70B: Mapping[str, Any] = {
    **LLAMA_3_1_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
}

#: Qwen/Qwen3-235B-A22B config.json (published dimensions): the large attention MoE
#: (128 experts top-8 of intermediate 1536, hidden 4096, 64 Q / 4 KV heads).
QWEN3_235B_A22B: Mapping[str, Any] = {
    **QWEN3_30B_A3B,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_attention_heads": 64,
    "num_hidden_layers": 94,
    "max_window_layers": 94,
}


#: Qwen/Qwen3-4B config.json (published dimensions): a small dense model of another family
#: than Llama (per-head q/k RMSNorm, 36 layers, GQA 32/8, tied embeddings).
QWEN3_4B: Mapping[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2560,
    "initializer_range": 0.02,
    "intermediate_size": 9728,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

#: Qwen/Qwen3-32B config.json (published dimensions): a large dense model (64 layers,
#: GQA 64/8, hidden 5,120), untied.
QWEN3_32B: Mapping[str, Any] = {
    **QWEN3_4B,
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "max_window_layers": 64,
    "num_attention_heads": 64,
    "num_hidden_layers": 64,
    "tie_word_embeddings": False,
}


def _qwen3_6_35b_a3b() -> dict[str, Any]:
    """Qwen/Qwen3.6-35B-A3B (the seed's model; Qwen3.5-MoE architecture, a VL class in vLLM
    0.26, served text-only with ``--language-model-only``), with the rope block of the real
    config.json so transformers 5 builds the same M-RoPE."""
    cfg = json.loads(json.dumps(QWEN3_6_35B_A3B))
    cfg["text_config"]["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": 10000000,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    }
    cfg["text_config"]["bos_token_id"] = None
    cfg["text_config"]["eos_token_id"] = 248046
    return cfg


def _gemma_3_27b_text() -> dict[str, Any]:
    """google/gemma-3-27b-it's decoder alone, as vLLM's text-only ``Gemma3ForCausalLM``
    (``model_type: gemma3_text``): the published text_config (62 layers, 5 sliding of window
    1,024 per full one, 32 Q / 16 KV heads of 128, vocab 262,208). The vision tower is left
    out so that no image processor is needed to start vLLM; a text prompt's step is the same."""
    cfg = dict(preset_config("gemma-3-27b")["text_config"])
    cfg.update(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text",
               max_position_embeddings=131072, bos_token_id=2, eos_token_id=1,
               pad_token_id=0, torch_dtype="bfloat16", tie_word_embeddings=True)
    return cfg


ARCHS: Mapping[str, Mapping[str, Any]] = {
    "qwen3-30b-a3b": QWEN3_30B_A3B,
    "qwen3-235b-a22b": QWEN3_235B_A22B,
    "llama-3.1-8b": LLAMA_3_1_8B,
    "llama-3.2-3b": LLAMA_3_2_3B,
    "llama-3.1-70b": LLAMA_3_1_70B,
    "qwen3-4b": QWEN3_4B,
    "qwen3-32b": QWEN3_32B,
    "qwen3-next-80b-a3b": QWEN3_NEXT_80B_A3B,
    "qwen3.6-35b-a3b": _qwen3_6_35b_a3b(),
    # issue 39's pre-registered new families (benchmarks/prereg/ops-h200-families/)
    "gemma-3-27b": _gemma_3_27b_text(),
    "nemotron-nano-9b-v2": dict(preset_config("nemotron-nano-9b-v2")),
}


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The decoder's config: ``text_config`` of a VL config, else the config itself."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, dict) else cfg


def set_layers(cfg: dict[str, Any], layers: int) -> None:
    """Keep the first ``layers`` decoder layers (and their per-layer types)."""
    t = text_config(cfg)
    t["num_hidden_layers"] = layers
    if "max_window_layers" in t:
        t["max_window_layers"] = layers
    if isinstance(t.get("layer_types"), list):
        t["layer_types"] = t["layer_types"][:layers]

#: Small dimensions of the same architecture for a CPU self-test (real vocabulary size).
TINY_OVERRIDES: Mapping[str, Any] = {
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "max_window_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "intermediate_size": 512,
}

SPECIALS = {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>"}
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_full_vocab_tokenizer(out_dir: Path, vocab_size: int, max_len: int) -> int:
    """Save a byte-level BPE tokenizer with exactly ``vocab_size`` ids; returns its size.

    Ids: the 256 byte symbols, then two-symbol merges, then three-symbol merges (a two-symbol
    token + a byte symbol), in a fixed order, with Qwen's three special tokens at Qwen's ids
    when they fit (otherwise at the end).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    specials = dict(SPECIALS)
    if max(specials) >= vocab_size:
        specials = {vocab_size - 3 + i: t for i, t in enumerate(SPECIALS.values())}

    def candidates() -> Iterator[tuple[str, tuple[str, str] | None]]:
        for ch in alphabet:
            yield ch, None
        pairs = [a + b for a in alphabet for b in alphabet]
        for p in pairs:
            yield p, (p[0], p[1])
        for p in pairs:
            for ch in alphabet:
                yield p + ch, (p, ch)

    ids = (i for i in range(vocab_size) if i not in specials)
    vocab: dict[str, int] = {t: i for i, t in specials.items()}
    merges: list[tuple[str, str]] = []
    for i, (token, merge) in zip(ids, candidates(), strict=False):
        vocab[token] = i
        if merge is not None:
            merges.append(merge)
    if sorted(vocab.values()) != list(range(vocab_size)):
        raise SystemExit(f"gen_checkpoint: tokenizer ids do not cover 0..{vocab_size - 1}")

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        model_max_length=max_len,
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return len(fast)


def write_generation_files(out: Path, cfg: Mapping[str, Any]) -> int:
    """``generation_config.json`` and the full-vocabulary tokenizer; returns its size."""
    gen_cfg = {
        "bos_token_id": cfg.get("bos_token_id"),
        "eos_token_id": cfg.get("eos_token_id"),
        "do_sample": False,
    }
    (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")
    t = text_config(dict(cfg))
    return build_full_vocab_tokenizer(
        out, int(t["vocab_size"]), int(t["max_position_embeddings"])
    )


def _fill(spec: TensorSpec, device: str, gen: Any) -> Any:
    import torch

    if spec.dtype == "BF16":
        if spec.name.endswith("norm.weight"):
            return torch.ones(spec.shape, dtype=torch.bfloat16, device=device)
        t = torch.randn(spec.shape, dtype=torch.bfloat16, device=device, generator=gen)
        return t.mul_(0.02)
    if spec.dtype == "F8_E4M3":
        t = torch.randn(spec.shape, dtype=torch.bfloat16, device=device, generator=gen)
        return t.clamp_(-8, 8).to(torch.float8_e4m3fn)
    if spec.dtype == "F32":  # FP8 block scales (weight_scale_inv)
        return torch.full(spec.shape, 0.02, dtype=torch.float32, device=device)
    raise SystemExit(f"gen_checkpoint: no filler for dtype {spec.dtype} ({spec.name})")


def write_checkpoint(
    out: Path,
    config: Mapping[str, Any],
    layout: QuantLayout,
    *,
    device: str,
    shard_bytes: int,
    seed: int,
) -> dict[str, Any]:
    """Generate and write every tensor; returns a summary (bytes, seconds, shards)."""
    import torch
    from safetensors.torch import save_file

    plan = replica_tensors(config, layout)
    out.mkdir(parents=True, exist_ok=True)
    groups: list[list[TensorSpec]] = [[]]
    size = 0
    for t in plan.tensors:
        if groups[-1] and size + t.nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.nbytes
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    weight_map: dict[str, str] = {}
    t0 = time.perf_counter()
    gen_s = write_s = 0.0
    for i, group in enumerate(groups, 1):
        name = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        a = time.perf_counter()
        tensors = {s.name: _fill(s, device, gen).cpu() for s in group}
        b = time.perf_counter()
        tmp = out / f".tmp-{name}"
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, out / name)
        c = time.perf_counter()
        gen_s += b - a
        write_s += c - b
        weight_map.update({s.name: name for s in group})
        nbytes = sum(s.nbytes for s in group)
        print(
            f"  {name}: {len(group)} tensors, {nbytes / 1e9:.2f} GB "
            f"(generate {b - a:.1f} s, write {c - b:.1f} s)",
            flush=True,
        )
        del tensors
    total = plan.total_bytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    cfg = json.loads(json.dumps(dict(config)))
    qc = quantization_config(layout, plan)
    if qc is not None:
        cfg["quantization_config"] = qc
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    n_tok = write_generation_files(out, cfg)
    return {
        "tensors": len(plan.tensors),
        "bytes": total,
        "shards": len(groups),
        "tokenizer_size": n_tok,
        "generate_s": round(gen_s, 2),
        "write_s": round(write_s, 2),
        "total_s": round(time.perf_counter() - t0, 2),
        "layout": layout.kind,
        "num_hidden_layers": text_config(cfg)["num_hidden_layers"],
    }


def write_sparse_checkpoint(
    out: Path, config: Mapping[str, Any], layout: QuantLayout, *, mtp: str = "none"
) -> dict[str, Any]:
    """Header replica (sparse shards: real names, dtypes, shapes and offsets, no data blocks),
    config, generation config and tokenizer. For engines started with ``--load-format dummy``,
    which draw random weights on the GPU and never read the shards; servelab inspects the
    headers exactly as it would a real export's."""
    t0 = time.perf_counter()
    plan = write_replica(out, config, layout, mtp=mtp)
    cfg = json.loads((out / "config.json").read_text())
    n_tok = write_generation_files(out, cfg)
    return {
        "tensors": len(plan.tensors),
        "bytes": plan.total_bytes,
        "sparse": True,
        "mtp": mtp,
        "tokenizer_size": n_tok,
        "total_s": round(time.perf_counter() - t0, 2),
        "layout": layout.kind,
        "model_type": cfg["model_type"],
        "num_hidden_layers": text_config(cfg)["num_hidden_layers"],
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: see the module docstring."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    ap.add_argument("--layout", choices=("fp8-block", "fp8-channel", "bf16"), default="fp8-block")
    ap.add_argument("--layers", type=int, default=None, help="number of decoder layers")
    ap.add_argument("--device", default="cuda", help="where to draw the weights (cuda|cpu)")
    ap.add_argument("--shard-gb", type=float, default=4.0, help="shard size, GB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="small dimensions (CPU self-test)")
    ap.add_argument("--arch", choices=sorted(ARCHS), default="qwen3-30b-a3b")
    ap.add_argument(
        "--sparse",
        action="store_true",
        help="header replica only (serve with --load-format dummy); no weights are drawn",
    )
    ap.add_argument(
        "--mtp",
        choices=("none", "fused", "per-expert"),
        default="none",
        help="ship a Qwen3.5 MTP head (sparse replicas of qwen3.6-35b-a3b only)",
    )
    args = ap.parse_args(argv)
    cfg = json.loads(json.dumps(ARCHS[args.arch]))
    if args.tiny:
        text_config(cfg).update(TINY_OVERRIDES)
    if args.layers is not None:
        set_layers(cfg, args.layers)
    layout = QuantLayout(args.layout, quantize=TEXT_LINEARS if args.layout != "bf16" else ())
    if args.sparse:
        summary = write_sparse_checkpoint(args.out, cfg, layout, mtp=args.mtp)
        (args.out / "servelab-gen.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps(summary), flush=True)
        return 0
    summary = write_checkpoint(
        args.out,
        cfg,
        layout,
        device=args.device,
        shard_bytes=int(args.shard_gb * 1e9),
        seed=args.seed,
    )
    (args.out / "servelab-gen.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
