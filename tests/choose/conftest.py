"""Fixtures for choose: header replicas of the seed page's four builds of Qwen3.6-35B-A3B
(BF16, FP8, NVFP4A16, Unsloth's NVFP4-Fast with its MTP head) and a GGUF build of the same
model.

The safetensors replicas are ``servelab.synth.replica``'s (real headers, sparse zero data).
The GGUF build is written with the ``gguf`` package's own writer: llama.cpp's ``qwen3next``
metadata at the model's published dimensions and a tensor table of Q4_K / Q6_K expert
planes, embeddings and head (norms and routers F32), its data region a sparse hole.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.synth.replica import (
    EXPERTS_AND_ATTENTION,
    NVFP4_FAST_FP4,
    NVFP4_FAST_FP8,
    QuantLayout,
    write_replica,
)
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

SEED_BUILDS = {
    "bf16": (QuantLayout("bf16"), "none"),
    "fp8": (QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION), "none"),
    "nvfp4a16": (QuantLayout("nvfp4", EXPERTS_AND_ATTENTION, fp4_activations=False), "none"),
    # Unsloth's mixed export: NVFP4 routed and shared experts; FP8 attention, linear
    # attention and lm_head (servelab synth replica --targets nvfp4-fast); its MTP head BF16
    "nvfp4-fast": (QuantLayout("nvfp4", NVFP4_FAST_FP4, fp8=NVFP4_FAST_FP8), "fused"),
}


def write_qwen36_gguf(path: Path) -> Path:
    """A GGUF Q4_K_M header replica of Qwen3.6-35B-A3B (about 20 GiB apparent, sparse)."""
    import gguf
    import numpy as np

    q = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(str(path), "qwen3next")
    w.add_block_count(40)
    w.add_context_length(262144)
    w.add_embedding_length(2048)
    w.add_head_count(16)
    w.add_head_count_kv(2)
    w.add_key_length(256)
    w.add_value_length(256)
    w.add_expert_count(256)
    w.add_expert_used_count(8)
    w.add_expert_feed_forward_length(512)
    w.add_expert_shared_feed_forward_length(512)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(248320)
    w.add_uint32("qwen3next.full_attention_interval", 4)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    table: list[tuple[str, tuple[int, ...], gguf.GGMLQuantizationType, int]] = []

    def tensor(name: str, shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType) -> None:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        table.append((name, shape, qtype, int(np.prod(shape)) // block * size))

    tensor("token_embd.weight", (248320, 2048), q.Q4_K)
    tensor("output.weight", (248320, 2048), q.Q6_K)
    tensor("output_norm.weight", (2048,), q.F32)
    for i in range(40):
        tensor(f"blk.{i}.attn_norm.weight", (2048,), q.F32)
        tensor(f"blk.{i}.ffn_gate_exps.weight", (256, 512, 2048), q.Q4_K)
        tensor(f"blk.{i}.ffn_up_exps.weight", (256, 512, 2048), q.Q4_K)
        tensor(f"blk.{i}.ffn_down_exps.weight", (256, 2048, 512), q.Q6_K)
        tensor(f"blk.{i}.ffn_gate_inp.weight", (256, 2048), q.F32)
    for name, shape, qtype, nbytes in table:
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()

    def aligned(n: int) -> int:
        return (n + 31) // 32 * 32

    with path.open("r+b") as f:  # the data region: a hole as long as the tensors
        f.truncate(aligned(path.stat().st_size) + sum(aligned(nb) for *_, nb in table))
    return path


@pytest.fixture(scope="session")
def seed_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"bf16", "fp8", "nvfp4a16", "nvfp4-fast", "gguf"}: paths of the five builds."""
    root = tmp_path_factory.mktemp("seed-builds")
    out: dict[str, Path] = {}
    for name, (layout, mtp) in SEED_BUILDS.items():
        (root / name).mkdir()
        write_replica(root / name, QWEN3_6_35B_A3B, layout, mtp=mtp)
        out[name] = root / name
    out["gguf"] = write_qwen36_gguf(root / "qwen3.6-35b-a3b-q4_k_m.gguf")
    return out
