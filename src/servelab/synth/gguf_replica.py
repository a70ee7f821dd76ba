"""Full-dimension GGUF header replicas of the llama.cpp builds behind published
llama-bench figures in the priors table: real GGUF headers (llama.cpp's metadata keys as its
converter writes them, every tensor with its shape and GGML type), sparse zero data.

servelab reads them like any GGUF (``load_checkpoint``), so the priors' cost columns (bytes
read per token, FLOPs, layers) are servelab's own arithmetic on the build's header, not
numbers typed in. Each replica's total tensor bytes is checked against the model size
llama-bench printed beside the published figure (``SIZES``): a wrong type mix shows there.

Which GGML type each tensor gets is :func:`servelab.synth.gguf_types.tensor_type` (llama.cpp's
``llama_tensor_get_type``), the rule servelab's own GGUF writer follows too.

``benchmarks/priors/gguf_replicas.py`` prints each replica's size beside llama-bench's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servelab.synth.gguf_types import tensor_type


@dataclass(frozen=True)
class Arch:
    """The dimensions of one published model, as its GGUF metadata states them."""

    name: str  # llama.cpp architecture
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    context: int
    rope_base: float
    rms_eps: float
    head_dim: int = 0  # 0: hidden / heads
    qkv_bias: bool = False
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0
    window: int = 0

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads


#: Llama-2-7B (the model of llama.cpp's Apple-silicon scoreboard, discussion #4167).
LLAMA2_7B = Arch("llama", 32, 4096, 32, 32, 11008, 32000, 4096, 10000.0, 1e-5)
#: CodeLlama-7B (llama; the RTX 4090 llama-bench table of ggml-org/llama.cpp PR #4766): Llama-2-7B's
#: shape with 16 more vocabulary rows (32,016), a 16,384-token context and RoPE base 1e6 (its
#: config.json, huggingface.co/codellama/CodeLlama-7b-hf: vocab_size 32016,
#: max_position_embeddings 16384, rope_theta 1000000).
CODELLAMA_7B = Arch("llama", 32, 4096, 32, 32, 11008, 32016, 16384, 1_000_000.0, 1e-5)
#: Llama-3-8B (llama; "llama 8B", 8.03 B parameters, in the llama-bench tables of llama.cpp's
#: CUDA pull requests): its config.json (huggingface.co/meta-llama/Meta-Llama-3-8B:
#: num_key_value_heads 8, intermediate_size 14336, vocab_size 128256,
#: max_position_embeddings 8192, rope_theta 500000, untied output).
LLAMA3_8B = Arch("llama", 32, 4096, 32, 8, 14336, 128256, 8192, 500_000.0, 1e-5)
#: Qwen2.5-Coder-7B (qwen2; the DGX Spark llama-bench page's dense model).
QWEN25_CODER_7B = Arch(
    "qwen2", 28, 3584, 28, 4, 18944, 152064, 32768, 1_000_000.0, 1e-6, qkv_bias=True
)
#: gpt-oss-20b (OpenAI's config: 24 layers, 32 experts top-4, 64 heads of 64, window 128).
GPT_OSS_20B = Arch(
    "gpt-oss", 24, 2880, 64, 8, 2880, 201088, 131072, 150000.0, 1e-5, head_dim=64,
    qkv_bias=True, experts=32, experts_used=4, expert_ffn=2880, window=128,
)

#: llama-bench's "size" column beside the published figures (GiB), per (model, file type).
SIZES = {
    ("llama2-7b", "F16"): 12.55,  # ggml-org/llama.cpp discussion #4167
    ("llama2-7b", "Q8_0"): 6.67,
    ("llama2-7b", "Q4_0"): 3.56,
    ("gpt-oss-20b", "MXFP4_MOE"): 11.27,  # DGX Spark llama-bench page (b6767)
    ("codellama-7b", "F16"): 12.55,  # ggml-org/llama.cpp PR #4766 (RTX 4090, 2024-01-10)
    ("codellama-7b", "Q8_0"): 6.67,
    ("codellama-7b", "Q4_0"): 3.56,
    ("llama3-8b", "Q4_0"): 4.33,  # "llama 8B Q4_0 4.33 GiB 8.03 B" in llama-bench tables
}


def tensors(a: Arch) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(name, shape outermost first) of every tensor llama.cpp's converter writes."""
    yield "token_embd.weight", (a.vocab, a.hidden)
    yield "output_norm.weight", (a.hidden,)
    yield "output.weight", (a.vocab, a.hidden)
    q, kv = a.heads * a.hd, a.kv_heads * a.hd
    for i in range(a.layers):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (a.hidden,)
        yield b + "attn_q.weight", (q, a.hidden)
        yield b + "attn_k.weight", (kv, a.hidden)
        yield b + "attn_v.weight", (kv, a.hidden)
        yield b + "attn_output.weight", (a.hidden, q)
        if a.qkv_bias:
            yield b + "attn_q.bias", (q,)
            yield b + "attn_k.bias", (kv,)
            yield b + "attn_v.bias", (kv,)
        if a.experts:
            yield b + "attn_output.bias", (a.hidden,)
            yield b + "attn_sinks.weight", (a.heads,)
            yield b + "post_attention_norm.weight", (a.hidden,)
            yield b + "ffn_gate_inp.weight", (a.experts, a.hidden)
            yield b + "ffn_gate_inp.bias", (a.experts,)
            for p in ("gate", "up"):
                yield b + f"ffn_{p}_exps.weight", (a.experts, a.expert_ffn, a.hidden)
                yield b + f"ffn_{p}_exps.bias", (a.experts, a.expert_ffn)
            yield b + "ffn_down_exps.weight", (a.experts, a.hidden, a.expert_ffn)
            yield b + "ffn_down_exps.bias", (a.experts, a.hidden)
        else:
            yield b + "ffn_norm.weight", (a.hidden,)
            yield b + "ffn_gate.weight", (a.ffn, a.hidden)
            yield b + "ffn_up.weight", (a.ffn, a.hidden)
            yield b + "ffn_down.weight", (a.hidden, a.ffn)


def _aligned(n: int, align: int = 32) -> int:
    """``n`` rounded up to GGUF's default alignment."""
    return (n + align - 1) // align * align


def add_metadata(w: Any, a: Arch, file_type: str, name: str) -> None:
    """llama.cpp's architecture keys for ``a`` (as its converter writes them) and the file
    type, on the ``gguf.GGUFWriter`` ``w``; the tokenizer is the caller's."""
    import gguf

    w.add_name(name)
    w.add_block_count(a.layers)
    w.add_context_length(a.context)
    w.add_embedding_length(a.hidden)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_freq_base(a.rope_base)
    w.add_layer_norm_rms_eps(a.rms_eps)
    if a.head_dim:
        w.add_key_length(a.head_dim)
        w.add_value_length(a.head_dim)
    if a.experts:
        w.add_expert_count(a.experts)
        w.add_expert_used_count(a.experts_used)
        w.add_expert_feed_forward_length(a.expert_ffn)
    if a.window:
        w.add_sliding_window(a.window)
    w.add_file_type(getattr(gguf.LlamaFileType, f"MOSTLY_{file_type}"))


def write_replica(a: Arch, file_type: str, out: Path) -> Path:
    """Write the sparse GGUF replica of ``a`` at ``file_type`` to ``out``."""
    import gguf

    qt = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(str(out), a.name)
    add_metadata(w, a, file_type, f"{a.name} replica")
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(a.vocab)])
    sizes = []
    for name, shape in tensors(a):
        t = qt[tensor_type(name, len(shape), file_type, a.layers)]
        block, size = gguf.GGML_QUANT_SIZES[t]
        n = int(np.prod(shape)) // block * size
        w.add_tensor_info(name, shape, np.dtype(np.float32), n, raw_dtype=t)
        sizes.append(n)
    w.write_header_to_file(out)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    data = sum(_aligned(n) for n in sizes)  # GGUF aligns every tensor's data
    with out.open("r+b") as fh:
        fh.truncate(_aligned(out.stat().st_size) + data)  # sparse: the data reads as zeros
    return out


BUILDS: dict[str, tuple[Arch, tuple[str, ...]]] = {
    "llama2-7b": (LLAMA2_7B, ("F16", "Q8_0", "Q4_0")),
    "codellama-7b": (CODELLAMA_7B, ("F16", "Q8_0", "Q4_0")),
    "llama3-8b": (LLAMA3_8B, ("Q4_0",)),
    "qwen2.5-coder-7b": (QWEN25_CODER_7B, ("Q8_0",)),
    "gpt-oss-20b": (GPT_OSS_20B, ("MXFP4_MOE",)),
}
