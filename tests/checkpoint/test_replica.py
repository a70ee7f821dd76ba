"""Header replicas: names/shapes/dtypes equal to real exports; the Qwen3.6-35B-A3B seed check."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servelab.checkpoint.report import inspect_checkpoint
from servelab.checkpoint.sources import load_checkpoint
from servelab.errors import UsageError
from servelab.sizing.weights import weights_from_report
from servelab.synth.replica import (
    EXPERTS_AND_ATTENTION,
    NVFP4_FAST_FP4,
    NVFP4_FAST_FP8,
    TEXT_LINEARS,
    QuantLayout,
    replica_tensors,
    write_replica,
)
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

GIB = 1 << 30
Variant = Callable[[str], Path]


def _header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    with path.open("rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: (v["dtype"], tuple(v["shape"])) for k, v in h.items()}


def _plan_map(
    config: dict[str, Any], layout: QuantLayout | None = None, **kw: Any
) -> dict[str, tuple[str, tuple[int, ...]]]:
    plan = replica_tensors(config, layout, **kw)
    return {t.name: (t.dtype, t.shape) for t in plan.tensors}


@pytest.mark.parametrize(
    "arch", ["llama", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text"]
)
def test_replica_equals_a_real_transformers_export(
    arch: str, tiny_checkpoint: Callable[..., Path]
) -> None:
    d = tiny_checkpoint(arch)
    config = json.loads((d / "config.json").read_text())
    assert _plan_map(config) == _header(d / "model.safetensors")


def test_replica_equals_real_multimodal_qwen3_5_moe(tmp_path: Path) -> None:
    # The full model with a (tiny) vision tower, saved by transformers itself.
    import torch
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

    from servelab.synth.tiny import make_config_dict

    text = make_config_dict("qwen3_5_moe_text")
    text.pop("model_type")
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "num_position_embeddings": 16,
        "patch_size": 4,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
    }
    torch.manual_seed(0)
    model = Qwen3_5MoeForConditionalGeneration(
        Qwen3_5MoeConfig(text_config=text, vision_config=vision)
    ).to(torch.bfloat16)
    model.save_pretrained(str(tmp_path))
    config = json.loads((tmp_path / "config.json").read_text())
    assert _plan_map(config) == _header(tmp_path / "model.safetensors")
    # inspect reads the multimodal layout: text under model.language_model, vision apart.
    r = inspect_checkpoint(tmp_path)
    assert r.vision_tensors == 3 + 2 * 12 + 6
    assert "vision" not in r.decode_bytes_by_role and r.findings == ()
    assert (r.num_layers, r.num_experts, r.model_type) == (4, 8, "qwen3_5_moe")


@pytest.mark.parametrize(
    ("variant", "layout"),
    [
        ("fp8-channel", QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION)),
        ("nvfp4", QuantLayout("nvfp4", EXPERTS_AND_ATTENTION, fp4_activations=False)),
        ("fp8-block", QuantLayout("fp8-block", EXPERTS_AND_ATTENTION)),
        ("modelopt-nvfp4", QuantLayout("modelopt-nvfp4", EXPERTS_AND_ATTENTION)),
    ],
)
def test_quantized_replica_equals_quantized_files(
    variant: str, layout: QuantLayout, variant_checkpoint: Variant
) -> None:
    # The compressed-tensors variants were written by the library itself; the replica's
    # hand-written layout must agree tensor for tensor.
    d = variant_checkpoint(variant)
    config = json.loads((d / "config.json").read_text())
    assert _plan_map(config, layout) == _header(d / "model.safetensors")


def test_seed_qwen3_6_35b_a3b_fp8(tmp_path: Path) -> None:
    """Qwen/Qwen3.6-35B-A3B-FP8 as the seed page describes it: compressed-tensors
    float-quantized, channel-wise F8_E4M3 weights + BF16 weight_scale [out, 1], routed +
    shared experts and full-attention q/k/v/o quantized; linear attention, routers,
    shared-expert gates, embeddings, lm_head and vision BF16; per-expert layout; no MTP.

    Derivation (H = 2048, 40 layers: 30 Gated DeltaNet + 10 full attention, E = 256,
    I = 512, vocab 248,320; vision: 27 blocks of width 1152):

    * routed experts: 40 × 256 × 3 × 512 × 2048 = 32,212,254,720 B F8 (30.000 GiB);
      scales 40 × 256 × (512 + 512 + 2048) × 2 B = 62,914,560 → 32,275,169,280 B
      = 30.0586 GiB incl. scales (seed: 30.06);
    * shared experts: 40 × 3 × 512 × 2048 = 125,829,120 B F8;
    * full attention: 10 × (8192×2048 [gated q] + 2 × 512×2048 + 2048×4096)
      = 272,629,760 B F8;
    * F8_E4M3 total: 32,610,713,600 B = 30.3711 GiB (seed: 30.37);
    * tensors: 61,440 expert (6 each) + 40 × 10 (2 norms, router, shared gate, 3 shared
      weights + 3 scales) + 30 × 9 linear-attn + 10 × 10 attention + 3 (embed, norm,
      lm_head) + 333 vision (3 + 27 × 12 + 6) = 62,546 (seed: 62,546);
    * total 37,667,035,872 B = 35.0802 GiB (seed: 35.08); BF16 = total − F8
      = 5,056,322,272 B = 4.7091 GiB (seed: 4.71).
    * decode bytes per token: non-expert text weights 3,481,605,376 (shared experts
      126,074,880 + routers 42,106,880 + attention 272,865,280 + linear attention
      2,023,107,840 + norms 331,776 + lm_head 1,017,118,720) + 8/256 of routed
      32,275,169,280 = 1,008,599,040 + one embedding row 2048 × 2 = 4,096
      → 4,490,208,512 B.
    """
    out = tmp_path / "qwen3.6-35b-a3b-fp8"
    write_replica(out, QWEN3_6_35B_A3B, QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION))
    shards = sorted(out.glob("model-*.safetensors"))
    assert len(shards) == 10  # "~36 GB, 10 shards"
    # Sparse: 37.7 GB described, a few MB allocated.
    allocated = sum(p.stat().st_blocks * 512 for p in out.iterdir())
    assert allocated < 64 * 2**20
    assert sum(p.stat().st_size for p in shards) > 37_000_000_000

    r = inspect_checkpoint(out)
    assert r.tensor_count == 62_546
    assert r.bytes_by_dtype == {"F8_E4M3": 32_610_713_600, "BF16": 5_056_322_272}
    assert r.total_bytes == 37_667_035_872
    assert r.bytes_by_role_incl_scales["routed_expert"] == 32_275_169_280
    assert round(r.bytes_by_dtype["F8_E4M3"] / GIB, 2) == 30.37
    assert round(r.bytes_by_dtype["BF16"] / GIB, 2) == 4.71
    assert round(r.bytes_by_role_incl_scales["routed_expert"] / GIB, 2) == 30.06
    assert round(r.total_gib, 2) == 35.08
    assert r.decode_bytes_per_token == 4_490_208_512
    assert r.routed_expert_bits == pytest.approx(8 + 6144 * 8 / (3 * 512 * 2048))
    assert (r.num_layers, r.num_experts, r.experts_per_token, r.expert_layout) == (
        40,
        256,
        8,
        "per-expert",
    )
    assert r.layer_types.count("full_attention") == 10
    assert r.layer_types == r.layer_types_from_tensors
    assert r.mtp_tensors == 0 and r.mtp_declared_layers == 1
    assert (r.vision_tensors, r.vision_bytes) == (333, 893_142_496)
    assert "vision" not in r.decode_bytes_by_role  # text decode never reads the vision tower
    assert {f.code for f in r.findings} == {"mtp-declared-missing", "quant-ignored"}
    # "routed experts are 86% of the checkpoint"
    assert round(r.bytes_by_role_incl_scales["routed_expert"] / r.total_bytes, 2) == 0.86


def test_block_fp8_with_linear_attention_quantized_does_not_match_the_seed() -> None:
    # A fine-grained FP8 export that also quantizes in_proj_qkv/in_proj_z/out_proj (as some
    # third-party pages describe the official format) would carry 90 more scale tensors,
    # 31.31 GiB F8 and 34.09 GiB total: the seed's 62,546 / 30.37 / 35.08 rule it out.
    plan = replica_tensors(
        QWEN3_6_35B_A3B, QuantLayout("fp8-block", TEXT_LINEARS, scale_dtype="BF16")
    )
    f8 = sum(t.nbytes for t in plan.tensors if t.dtype == "F8_E4M3")
    assert len(plan.tensors) == 62_636
    assert round(f8 / GIB, 2) == 31.31
    assert round(plan.total_bytes / GIB, 2) == 34.09


def test_bf16_with_fused_mtp_head(tmp_path: Path) -> None:
    # The BF16 export is "67 GiB"; an MTP head in the fused layout is 19 tensors, 1.573 GiB
    # (the seed's Unsloth NVFP4-Fast head): fc 2048×4096 + attention + 256 fused experts
    # (2 × 256 × 1024×2048... = 1,610,612,736 B) + shared expert, router, norms.
    out = tmp_path / "bf16-mtp"
    write_replica(out, QWEN3_6_35B_A3B, QuantLayout("bf16"), mtp="fused")
    r = inspect_checkpoint(out)
    assert (r.mtp_tensors, r.mtp_bytes) == (19, 1_689_281_536)
    assert round(r.mtp_bytes / GIB, 3) == 1.573
    assert round(r.total_gib) == 67
    assert r.quant.method == "none" and not r.findings
    assert r.decode_bytes_by_role.get("mtp", 0) == 0  # MTP is not read by text decode


def test_replica_headers_pass_validation_and_index_is_consistent(tmp_path: Path) -> None:
    out = tmp_path / "nvfp4"
    plan = write_replica(
        out, QWEN3_6_35B_A3B, QuantLayout("nvfp4", EXPERTS_AND_ATTENTION), max_shard_bytes=2 * GIB
    )
    src = load_checkpoint(out)  # A1's reader validates every safetensors rule
    assert len(src.tensors) == len(plan.tensors)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == plan.total_bytes
    r = inspect_checkpoint(out)
    # 4 bits + F8 scale per 16 (0.5 bit) + one F32 global and one input scale per matrix.
    assert r.routed_expert_bits == pytest.approx(4.5 + 64 / (512 * 2048), abs=1e-9)
    assert r.quant.format == "nvfp4-pack-quantized"


def test_text_only_fp8_dynamic_matches_a_published_llm_compressor_export() -> None:
    # xega-ai/Qwen3.5-35B-A3B-FP8-Dynamic (llm-compressor FP8_DYNAMIC, text only, linear
    # attention / routers / lm_head ignored) publishes "FP8 tensors: 30,880 (32.61 GB);
    # BF16 tensors: 31,333 (4.16 GB)": the seed layout minus the 333-tensor vision tower.
    cfg = {k: v for k, v in QWEN3_6_35B_A3B.items() if k != "vision_config"}
    plan = replica_tensors(cfg, QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION))
    f8 = [t for t in plan.tensors if t.dtype == "F8_E4M3"]
    bf16 = [t for t in plan.tensors if t.dtype == "BF16"]
    assert (len(f8), round(sum(t.nbytes for t in f8) / 1e9, 2)) == (30_880, 32.61)
    assert (len(bf16), round(sum(t.nbytes for t in bf16) / 1e9, 2)) == (31_333, 4.16)


def test_per_expert_mtp_head_has_785_tensors() -> None:
    # Third-party exports that keep Qwen3.5's MTP head per expert list 785 mtp.* keys:
    # 256 experts x 3 + fc, 2 pre-fc norms, final norm, 2 layer norms, 6 attention,
    # router, 3 shared-expert weights, shared-expert gate = 768 + 17.
    plan = replica_tensors(QWEN3_6_35B_A3B, mtp="per-expert")
    assert sum(t.name.startswith("mtp.") for t in plan.tensors) == 785


def _files_gb(tensors: Any) -> tuple[float, float, float]:
    """(language model, MTP head, vision tower) GB, as the exports split their files."""
    split = [0, 0, 0]
    for t in tensors:
        split[1 if t.name.startswith("mtp.") else 2 if ".visual." in t.name else 0] += t.nbytes
    return split[0] / 1e9, split[1] / 1e9, split[2] / 1e9


def test_unsloth_nvfp4_fast_as_published(tmp_path: Path) -> None:
    # unsloth/Qwen3.6-35B-A3B-NVFP4-Fast (revision 11fb65d6): NVFP4 routed and shared experts,
    # FP8 attention / Gated DeltaNet projections / lm_head, BF16 MTP layer; 23.63 GB of
    # safetensors (the Hugging Face API: 23.7 GB). With a BF16 lm_head it would be 24.14 GB.
    out = tmp_path / "fast"
    layout = QuantLayout("nvfp4", NVFP4_FAST_FP4, fp8=NVFP4_FAST_FP8)
    write_replica(out, QWEN3_6_35B_A3B, layout, mtp="fused")
    src = load_checkpoint(out)
    assert round(sum(t.nbytes for t in src.tensors) / 1e9, 2) == 23.63
    head = {t.name: t.dtype for t in src.tensors if t.name.startswith("lm_head.")}
    assert head == {"lm_head.weight": "F8_E4M3", "lm_head.weight_scale": "BF16"}
    r = inspect_checkpoint(out)
    w = weights_from_report(r)
    assert w.lm_head_bytes == 248_320 * 2048 + 248_320 * 2  # FP8 + one BF16 scale per row
    assert (r.mtp_tensors, r.mtp_bytes) == (19, 1_689_281_536)  # the seed's 1.573 GiB head
    assert w.scheme == "nvfp4" and len(r.quant.groups) == 2
    assert r.quant.format == "mixed-precision"
    assert not r.quant.ignores("lm_head") and r.quant.ignores("mtp.fc")
    assert r.quant.ignores("model.language_model.layers.0.linear_attn.in_proj_a")
    dtypes = {t.name: t.dtype for t in src.tensors}
    p = "model.language_model.layers"
    assert dtypes[f"{p}.0.linear_attn.in_proj_qkv.weight"] == "F8_E4M3"
    assert dtypes[f"{p}.3.self_attn.o_proj.weight"] == "F8_E4M3"
    assert dtypes[f"{p}.3.mlp.shared_expert.up_proj.weight_packed"] == "U8"
    assert dtypes[f"{p}.3.mlp.experts.7.down_proj.weight_packed"] == "U8"
    bf16_head = replica_tensors(
        QWEN3_6_35B_A3B, QuantLayout("nvfp4", NVFP4_FAST_FP4, fp8=NVFP4_FAST_FP8[:2]),
        mtp="fused",
    )
    assert round(bf16_head.total_bytes / 1e9, 2) == 24.14


def test_redhat_nvfp4_file_split_as_published() -> None:
    # RedHatAI/Qwen3.6-35B-A3B-NVFP4 (experts and full attention NVFP4; linear attention,
    # routers, lm_head, MTP, vision ignored) publishes model / model_mtp / model_visual
    # .safetensors of 22.46 / 1.69 / 0.89 GB.
    plan = replica_tensors(
        QWEN3_6_35B_A3B, QuantLayout("nvfp4", EXPERTS_AND_ATTENTION), mtp="fused"
    )
    text, mtp, vision = _files_gb(plan.tensors)
    assert text == pytest.approx(22.46, abs=0.02)
    assert (round(mtp, 2), round(vision, 2)) == (1.69, 0.89)


def test_fp8_beside_fp4_is_an_nvfp4_layout_only() -> None:
    with pytest.raises(UsageError, match="nvfp4"):
        QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION, fp8=NVFP4_FAST_FP8)
