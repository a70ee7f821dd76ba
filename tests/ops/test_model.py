"""A model's operators, read from its header-replica layout and grouped as vLLM groups them."""

from __future__ import annotations

import json

from servelab.families import FULL, LINEAR
from servelab.ops.model import step_model
from servelab.synth.replica import TEXT_LINEARS, QuantLayout
from servelab.synth.replica_presets import QWEN3_6_35B_A3B, preset_config


def _cfg(name: str) -> dict:
    return json.loads(json.dumps(preset_config(name)))


def test_dense_llama_family_fuses_qkv_and_gate_up() -> None:
    m = step_model(_cfg("mistral-7b"))
    names = {g.name: (g.n, g.k, g.fmt) for g in m.layers[0].gemms}
    assert names == {
        "self_attn.qkv_proj": (4096 + 2 * 1024, 4096, "bf16"),
        "self_attn.o_proj": (4096, 4096, "bf16"),
        "mlp.gate_up_proj": (2 * 14336, 4096, "bf16"),
        "mlp.down_proj": (4096, 14336, "bf16"),
    }
    assert (m.lm_head.n, m.lm_head.k) == (32000, 4096)
    assert m.layers[0].moe is None


def test_fp8_layout_leaves_routers_and_gates_bf16() -> None:
    m = step_model(json.loads(json.dumps(QWEN3_6_35B_A3B)),
                   QuantLayout("fp8-block", TEXT_LINEARS))
    gdn = m.layers[0]
    assert gdn.kind == LINEAR and gdn.gdn is not None
    by = {g.name: g for g in gdn.gemms}
    # Qwen3.5's split projections are the fused in_proj_qkvz / in_proj_ba vLLM builds
    assert by["linear_attn.in_proj_qkvz"].n == 8192 + 4096
    assert by["linear_attn.in_proj_ba"].n == 64 and by["linear_attn.in_proj_ba"].fmt == "bf16"
    assert by["mlp.gate"].role == "router" and by["mlp.gate"].fmt == "bf16"
    assert by["mlp.shared_expert_gate"].role == "router"
    assert by["mlp.shared_expert.gate_up_proj"].fmt == "fp8-block"
    assert gdn.moe is not None and (gdn.moe.experts, gdn.moe.topk, gdn.moe.inter) == (256, 8, 512)
    full = m.layers[3]
    assert full.kind == FULL and full.qk_norm and full.attention is not None
    assert {g.name for g in full.gemms} >= {"self_attn.qkv_proj", "self_attn.o_proj"}


def test_mxfp4_experts_and_sinks_of_gpt_oss() -> None:
    m = step_model(_cfg("gpt-oss-20b"))
    layer = m.layers[0]
    assert layer.moe is not None and layer.moe.fmt == "mxfp4"
    assert (layer.moe.experts, layer.moe.hidden, layer.moe.inter) == (32, 2880, 2880)
    assert layer.attention is not None and layer.attention.sinks
    assert layer.attention.window == 128


def test_gemm_shapes_lists_every_distinct_shape() -> None:
    m = step_model(_cfg("qwen2.5-7b"))
    assert (3584 + 2 * 512, 3584, "bf16") in m.gemm_shapes
    assert (m.lm_head.n, m.lm_head.k, "bf16") in m.gemm_shapes
