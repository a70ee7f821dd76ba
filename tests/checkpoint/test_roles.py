"""Tensor name → role, over the naming schemes of the architectures servelab meets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.checkpoint.roles import (
    Role,
    RoleClassifier,
    classify_tensor,
    is_fused_expert_name,
    is_scale_name,
)

R = Role

CASES: list[tuple[str, Role, Role]] = [
    # (name, primary role, base role)
    # Qwen3.5-MoE multimodal export
    ("model.language_model.embed_tokens.weight", R.EMBEDDING, R.EMBEDDING),
    ("lm_head.weight", R.LM_HEAD, R.LM_HEAD),
    ("model.language_model.norm.weight", R.NORM, R.NORM),
    ("model.language_model.layers.0.input_layernorm.weight", R.NORM, R.NORM),
    ("model.language_model.layers.0.post_attention_layernorm.weight", R.NORM, R.NORM),
    (
        "model.language_model.layers.0.linear_attn.in_proj_qkv.weight",
        R.LINEAR_ATTENTION,
        R.LINEAR_ATTENTION,
    ),
    (
        "model.language_model.layers.0.linear_attn.in_proj_z.weight",
        R.LINEAR_ATTENTION,
        R.LINEAR_ATTENTION,
    ),
    (
        "model.language_model.layers.0.linear_attn.in_proj_b.weight",
        R.LINEAR_ATTENTION,
        R.LINEAR_ATTENTION,
    ),
    (
        "model.language_model.layers.0.linear_attn.in_proj_a.weight",
        R.LINEAR_ATTENTION,
        R.LINEAR_ATTENTION,
    ),
    (
        "model.language_model.layers.0.linear_attn.conv1d.weight",
        R.LINEAR_ATTENTION,
        R.LINEAR_ATTENTION,
    ),
    ("model.language_model.layers.0.linear_attn.A_log", R.LINEAR_ATTENTION, R.LINEAR_ATTENTION),
    ("model.language_model.layers.0.linear_attn.dt_bias", R.LINEAR_ATTENTION, R.LINEAR_ATTENTION),
    (
        "model.language_model.layers.0.linear_attn.norm.weight",
        R.LINEAR_ATTENTION,
        R.LINEAR_ATTENTION,
    ),
    (
        "model.language_model.layers.0.linear_attn.out_proj.weight",
        R.LINEAR_ATTENTION,
        R.LINEAR_ATTENTION,
    ),
    ("model.language_model.layers.3.self_attn.q_proj.weight", R.ATTENTION, R.ATTENTION),
    ("model.language_model.layers.3.self_attn.q_norm.weight", R.ATTENTION, R.ATTENTION),
    ("model.language_model.layers.3.self_attn.o_proj.weight_scale", R.QUANT_SCALE, R.ATTENTION),
    ("model.language_model.layers.0.mlp.gate.weight", R.ROUTER, R.ROUTER),
    ("model.language_model.layers.0.mlp.shared_expert_gate.weight", R.ROUTER, R.ROUTER),
    (
        "model.language_model.layers.0.mlp.shared_expert.up_proj.weight",
        R.SHARED_EXPERT,
        R.SHARED_EXPERT,
    ),
    (
        "model.language_model.layers.0.mlp.experts.17.down_proj.weight",
        R.ROUTED_EXPERT,
        R.ROUTED_EXPERT,
    ),
    (
        "model.language_model.layers.0.mlp.experts.17.down_proj.weight_scale",
        R.QUANT_SCALE,
        R.ROUTED_EXPERT,
    ),
    ("model.language_model.layers.0.mlp.experts.gate_up_proj", R.ROUTED_EXPERT, R.ROUTED_EXPERT),
    ("model.language_model.layers.0.mlp.experts.down_proj", R.ROUTED_EXPERT, R.ROUTED_EXPERT),
    ("model.visual.blocks.3.attn.qkv.weight", R.VISION, R.VISION),
    ("model.visual.merger.linear_fc2.bias", R.VISION, R.VISION),
    ("model.visual.patch_embed.proj.weight", R.VISION, R.VISION),
    ("mtp.fc.weight", R.MTP, R.MTP),
    ("mtp.layers.0.mlp.experts.3.gate_proj.weight", R.MTP, R.MTP),
    ("mtp.pre_fc_norm_hidden.weight", R.MTP, R.MTP),
    # Qwen3-Next fused linear-attention projections
    ("model.layers.0.linear_attn.in_proj_qkvz.weight", R.LINEAR_ATTENTION, R.LINEAR_ATTENTION),
    ("model.layers.0.linear_attn.in_proj_ba.weight", R.LINEAR_ATTENTION, R.LINEAR_ATTENTION),
    # Llama (HF and original naming)
    ("model.layers.1.mlp.gate_proj.weight", R.MLP, R.MLP),
    ("model.layers.1.self_attn.k_proj.weight", R.ATTENTION, R.ATTENTION),
    ("tok_embeddings.weight", R.EMBEDDING, R.EMBEDDING),
    ("output.weight", R.LM_HEAD, R.LM_HEAD),
    # Mixtral
    ("model.layers.2.block_sparse_moe.gate.weight", R.ROUTER, R.ROUTER),
    ("model.layers.2.block_sparse_moe.experts.5.w1.weight", R.ROUTED_EXPERT, R.ROUTED_EXPERT),
    # DeepSeek-V3
    ("model.layers.5.mlp.shared_experts.down_proj.weight", R.SHARED_EXPERT, R.SHARED_EXPERT),
    ("model.layers.5.mlp.gate.e_score_correction_bias", R.ROUTER, R.ROUTER),
    ("model.layers.5.mlp.experts.9.up_proj.weight_scale_inv", R.QUANT_SCALE, R.ROUTED_EXPERT),
    # gpt-oss MXFP4
    ("model.layers.0.mlp.router.weight", R.ROUTER, R.ROUTER),
    ("model.layers.0.mlp.experts.gate_up_proj_blocks", R.ROUTED_EXPERT, R.ROUTED_EXPERT),
    ("model.layers.0.mlp.experts.gate_up_proj_scales", R.QUANT_SCALE, R.ROUTED_EXPERT),
    ("model.layers.0.mlp.experts.gate_up_proj_bias", R.ROUTED_EXPERT, R.ROUTED_EXPERT),
    ("model.layers.0.self_attn.sinks", R.ATTENTION, R.ATTENTION),
    # GPTQ / AWQ
    ("model.layers.0.mlp.experts.2.up_proj.qweight", R.ROUTED_EXPERT, R.ROUTED_EXPERT),
    ("model.layers.0.mlp.experts.2.up_proj.qzeros", R.QUANT_SCALE, R.ROUTED_EXPERT),
    ("model.layers.0.mlp.experts.2.up_proj.scales", R.QUANT_SCALE, R.ROUTED_EXPERT),
    ("model.layers.0.self_attn.q_proj.g_idx", R.QUANT_SCALE, R.ATTENTION),
    # compressed-tensors / ModelOpt NVFP4
    ("model.layers.0.mlp.experts.2.up_proj.weight_packed", R.ROUTED_EXPERT, R.ROUTED_EXPERT),
    ("model.layers.0.mlp.experts.2.up_proj.weight_global_scale", R.QUANT_SCALE, R.ROUTED_EXPERT),
    ("model.layers.0.mlp.experts.2.up_proj.weight_scale_2", R.QUANT_SCALE, R.ROUTED_EXPERT),
    ("model.layers.0.mlp.experts.2.up_proj.input_scale", R.QUANT_SCALE, R.ROUTED_EXPERT),
    ("model.layers.0.self_attn.k_scale", R.QUANT_SCALE, R.ATTENTION),
    # Mamba
    ("backbone.layers.4.mixer.in_proj.weight", R.LINEAR_ATTENTION, R.LINEAR_ATTENTION),
    # Llava-style vision
    ("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", R.VISION, R.VISION),
    ("multi_modal_projector.linear_1.weight", R.VISION, R.VISION),
    # nothing known
    ("model.rotary_emb.inv_freq", R.UNKNOWN, R.UNKNOWN),
    ("some.custom.thing", R.UNKNOWN, R.UNKNOWN),
]


@pytest.mark.parametrize(("name", "role", "base"), CASES, ids=[c[0] for c in CASES])
def test_classify(name: str, role: Role, base: Role) -> None:
    got = classify_tensor(name)
    assert (got.role, got.base) == (role, base)
    assert got.is_scale == (role is Role.QUANT_SCALE)


def test_layer_and_expert_indices() -> None:
    r = classify_tensor("model.language_model.layers.12.mlp.experts.201.up_proj.weight")
    assert (r.layer, r.expert) == (12, 201)
    # Indices of non-expert tensors carry no expert number.
    r = classify_tensor("model.layers.3.self_attn.q_proj.weight")
    assert (r.layer, r.expert) == (3, None)


def test_layer_past_the_last_decoder_layer_is_mtp() -> None:
    # DeepSeek-V3 appends its MTP layer as model.layers.61 of a 61-layer model.
    name = "model.layers.61.mlp.experts.0.down_proj.weight"
    assert classify_tensor(name).base is Role.ROUTED_EXPERT
    assert classify_tensor(name, num_hidden_layers=61).base is Role.MTP
    assert classify_tensor("model.layers.60.mlp.gate.weight", num_hidden_layers=61).base is (
        Role.ROUTER
    )


def test_scale_names_and_fused_experts() -> None:
    assert is_scale_name("x.weight_scale_inv")
    assert is_scale_name("x.experts.down_proj_scales")
    assert not is_scale_name("x.weight")
    assert not is_scale_name("x.norm.scale")  # a norm parameter called "scale" is a weight
    assert is_fused_expert_name("model.layers.0.mlp.experts.gate_up_proj")
    assert not is_fused_expert_name("model.layers.0.mlp.experts.0.gate_proj.weight")


@given(
    st.lists(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", max_size=12),
        min_size=1,
        max_size=8,
    )
)
def test_any_dotted_name_classifies_consistently(parts: list[str]) -> None:
    name = ".".join(parts)
    one = classify_tensor(name, num_hidden_layers=4)
    shared = RoleClassifier(4)
    shared("model.layers.0.mlp.experts.0.up_proj.weight")  # warm a shared module cache
    assert shared(name) == one
    assert one.role in Role and one.base in Role
    assert one.is_scale == (one.role is Role.QUANT_SCALE)
