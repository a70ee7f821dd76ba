"""Quantization scheme detection and effective bits, on real configs and real files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servelab.checkpoint.quant import (
    IGNORE_EXACT_OR_RE,
    IGNORE_GLOB,
    IGNORE_SUBSTRING,
    compile_ignore,
    detect_quant,
    ignore_matches,
)
from servelab.checkpoint.report import inspect_checkpoint
from servelab.errors import ConfigError

Variant = Callable[[str], Path]


def _cfg(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def test_unquantized() -> None:
    q = detect_quant({"model_type": "llama"})
    assert (q.method, q.is_quantized, q.label, q.weight_bits) == (
        "none",
        False,
        "unquantized",
        None,
    )


def test_compressed_tensors_fp8_written_by_the_library(variant_checkpoint: Variant) -> None:
    q = detect_quant(_cfg(variant_checkpoint("fp8-channel")))
    assert q.method == "compressed-tensors" and q.format == "float-quantized"
    w, a = q.weights, q.input_activations
    assert w is not None and (w.num_bits, w.type, w.strategy) == (8, "float", "channel")
    assert a is not None and (a.strategy, a.dynamic) == ("token", True)
    assert "lm_head" in q.ignore and q.ignores("lm_head")
    assert q.ignores("model.layers.0.mlp.gate")
    assert not q.ignores("model.layers.0.mlp.experts.0.up_proj")
    assert q.label.startswith("compressed-tensors float-quantized: W 8-bit float channel")


def test_compressed_tensors_nvfp4_written_by_the_library(variant_checkpoint: Variant) -> None:
    q = detect_quant(_cfg(variant_checkpoint("nvfp4")))
    assert (q.method, q.format) == ("compressed-tensors", "nvfp4-pack-quantized")
    assert q.weights is not None and (q.weights.num_bits, q.weights.group_size) == (4, 16)
    assert q.input_activations is None  # NVFP4A16: weight-only
    assert q.packing_factor("U8") == 2 and q.packing_factor("F8_E4M3") == 1


def test_modelopt_prefers_hf_quant_config(variant_checkpoint: Variant) -> None:
    d = variant_checkpoint("modelopt-nvfp4")
    hf = json.loads((d / "hf_quant_config.json").read_text())
    q = detect_quant(_cfg(d), hf)
    assert (q.method, q.format, q.declared_in) == ("modelopt", "NVFP4", "hf_quant_config.json")
    assert q.ignore_style == IGNORE_GLOB
    # Only config.json (quant_method: modelopt) still detects ModelOpt.
    q2 = detect_quant(_cfg(d))
    assert (q2.method, q2.format) == ("modelopt", "NVFP4")


def test_fine_grained_fp8_block() -> None:
    # The shape of DeepSeek-V3 / Qwen3-*-FP8 config.json quantization_config.
    q = detect_quant(
        {
            "quantization_config": {
                "quant_method": "fp8",
                "activation_scheme": "dynamic",
                "fmt": "e4m3",
                "weight_block_size": [128, 128],
                "modules_to_not_convert": ["lm_head", "mlp.gate"],
            }
        }
    )
    assert (q.method, q.format) == ("fp8", "block")
    assert q.weights is not None and q.weights.block_structure == (128, 128)
    assert q.ignore_style == IGNORE_SUBSTRING
    assert q.ignores("model.layers.3.mlp.gate") and not q.ignores("model.layers.3.mlp.experts.1")


def test_gptq_awq_mxfp4_bnb_and_nested_text_config() -> None:
    gptq = detect_quant(
        {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}}
    )
    assert gptq.method == "gptq" and gptq.weights is not None
    assert (gptq.weights.num_bits, gptq.weights.group_size) == (4, 128)
    assert gptq.packing_factor("I32") == 8
    awq = detect_quant(
        {
            "quantization_config": {
                "quant_method": "awq",
                "w_bit": 4,
                "q_group_size": 64,
                "version": "gemm",
            }
        }
    )
    assert awq.method == "awq" and awq.weights is not None and awq.weights.group_size == 64
    assert awq.format == "gemm"
    mx = detect_quant(
        {
            "quantization_config": {
                "quant_method": "mxfp4",
                "modules_to_not_convert": ["model.layers.*.self_attn"],
            }
        }
    )
    assert mx.method == "mxfp4" and mx.packing_factor("U8") == 2
    bnb = detect_quant(
        {
            "quantization_config": {
                "quant_method": "bitsandbytes",
                "load_in_4bit": True,
                "bnb_4bit_quant_type": "nf4",
            }
        }
    )
    assert (bnb.method, bnb.format, bnb.weight_bits) == ("bitsandbytes", "nf4", 4)
    nested = detect_quant({"text_config": {"quantization_config": {"quant_method": "fp8"}}})
    assert nested.method == "fp8" and nested.declared_in.endswith("text_config.quantization_config")
    other = detect_quant({"quantization_config": {"quant_method": "hqq"}})
    assert (other.method, other.format) == ("other", "hqq")


def test_malformed_quantization_config_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must be an object"):
        detect_quant({"quantization_config": [1, 2]})
    with pytest.raises(ConfigError, match="config_groups"):
        detect_quant(
            {"quantization_config": {"quant_method": "compressed-tensors", "config_groups": [1]}}
        )


@pytest.mark.parametrize(
    ("pattern", "module", "style", "expected"),
    [
        ("lm_head", "lm_head", IGNORE_EXACT_OR_RE, True),
        ("lm_head", "model.lm_head", IGNORE_EXACT_OR_RE, False),
        ("re:.*mlp.gate$", "model.layers.1.mlp.gate", IGNORE_EXACT_OR_RE, True),
        ("re:.*mlp.gate$", "model.layers.1.mlp.gate_proj", IGNORE_EXACT_OR_RE, False),
        ("re:visual.*", "model.visual.blocks.0.attn.qkv", IGNORE_EXACT_OR_RE, False),  # re.match
        ("re:[", "anything", IGNORE_EXACT_OR_RE, False),  # a broken regex matches nothing
        ("*self_attn*", "model.layers.0.self_attn.q_proj", IGNORE_GLOB, True),
        ("lm_head", "model.layers.0.self_attn.q_proj", IGNORE_GLOB, False),
        ("mlp.gate", "model.layers.0.mlp.gate", IGNORE_SUBSTRING, True),
    ],
)
def test_ignore_matching(pattern: str, module: str, style: str, expected: bool) -> None:
    assert ignore_matches(pattern, module, style) is expected
    assert compile_ignore([pattern], style)(module) is expected


def test_effective_bits_of_routed_experts(variant_checkpoint: Variant) -> None:
    # Tiny experts: gate/up [32, 64], down [64, 32] = 2048 weights each.
    # NVFP4: packed U8 [out, in/2] = 1024 B + F8 scales [out, in/16] = 128 B + F32 global
    # scale 4 B = 1156 B per 2048 weights -> 1156 * 8 / 2048 = 4.515625 bits.
    nv = inspect_checkpoint(variant_checkpoint("nvfp4"))
    assert nv.routed_expert_bits == pytest.approx(1156 * 8 / 2048)
    # ModelOpt NVFP4 adds a F32 input_scale: 1160 B per 2048 weights.
    mo = inspect_checkpoint(variant_checkpoint("modelopt-nvfp4"))
    assert mo.routed_expert_bits == pytest.approx(1160 * 8 / 2048)
    # FP8 channel: 2048 B + BF16 scale [out, 1]: gate/up 64 B, down 128 B.
    fp8 = inspect_checkpoint(variant_checkpoint("fp8-channel"))
    assert fp8.routed_expert_bits == pytest.approx((2112 * 2 + 2176) * 8 / (3 * 2048))
    # FP8 block 128x128 on 32x64 weights: one F32 scale per tensor.
    blk = inspect_checkpoint(variant_checkpoint("fp8-block"))
    assert blk.routed_expert_bits == pytest.approx(2052 * 8 / 2048)
    # Logical params survive packing: same as the unquantized model.
    assert nv.total_params == fp8.total_params == blk.total_params == mo.total_params


def _entries(specs: list[tuple[str, str, list[int]]]) -> dict[str, Any]:
    bits = {"U8": 8, "I32": 32, "F16": 16, "BF16": 16, "F32": 32}
    header: dict[str, Any] = {}
    off = 0
    for name, dtype, shape in specs:
        n = 1
        for s in shape:
            n *= s
        size = n * bits[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
        off += size
    return header


def test_gpt_oss_mxfp4_fused_experts(tmp_path: Path, write_safetensors: Callable[..., Any]) -> None:
    # gpt-oss layout: fused experts as *_blocks U8 [E, out, in/32, 16] (two FP4 per byte) and
    # *_scales U8 [E, out, in/32] (one E8M0 exponent per 32) -> 4 + 8/32 = 4.25 bits/weight.
    e, h, i = 4, 64, 64
    p = "model.layers.0.mlp.experts"
    header = _entries(
        [
            (f"{p}.gate_up_proj_blocks", "U8", [e, 2 * i, h // 32, 16]),
            (f"{p}.gate_up_proj_scales", "U8", [e, 2 * i, h // 32]),
            (f"{p}.down_proj_blocks", "U8", [e, h, i // 32, 16]),
            (f"{p}.down_proj_scales", "U8", [e, h, i // 32]),
            ("model.layers.0.mlp.router.weight", "BF16", [e, h]),
        ]
    )
    write_safetensors(tmp_path / "model.safetensors", header)
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "gpt_oss",
                "num_hidden_layers": 1,
                "num_local_experts": e,
                "num_experts_per_tok": 2,
                "quantization_config": {
                    "quant_method": "mxfp4",
                    "modules_to_not_convert": ["model.layers.*.self_attn"],
                },
            }
        )
    )
    r = inspect_checkpoint(tmp_path)
    assert (r.expert_layout, r.num_experts, r.quant.method) == ("fused", e, "mxfp4")
    assert r.routed_expert_bits == pytest.approx(4.25)
    assert r.params_by_role["routed_expert"] == e * (2 * i * h + h * i)


def test_gptq_int4_group_128(tmp_path: Path, write_safetensors: Callable[..., Any]) -> None:
    # GPTQ: qweight I32 [in/8, out], scales F16 [in/128, out], qzeros I32 [in/128, out/8],
    # g_idx I32 [in]. For 2048x2048: (2,097,152 + 65,536 + 16,384 + 8,192) B x 8 / 4,194,304
    # weights = 4.171875 bits per weight.
    n = 2048
    p = "model.layers.0.mlp.experts.0.down_proj"
    header = _entries(
        [
            (f"{p}.qweight", "I32", [n // 8, n]),
            (f"{p}.scales", "F16", [n // 128, n]),
            (f"{p}.qzeros", "I32", [n // 128, n // 8]),
            (f"{p}.g_idx", "I32", [n]),
        ]
    )
    write_safetensors(tmp_path / "model.safetensors", header)
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen3_moe",
                "num_hidden_layers": 1,
                "num_experts": 1,
                "num_experts_per_tok": 1,
                "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128},
            }
        )
    )
    r = inspect_checkpoint(tmp_path)
    assert r.params_by_role["routed_expert"] == n * n
    assert r.routed_expert_bits == pytest.approx(4.171875)
    assert r.role("quant_scale").tensors == 3


def _rel_err(a: Any, b: Any) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("variant", ["fp8-channel", "nvfp4", "fp8-block", "modelopt-nvfp4"])
def test_quantized_values_dequantize_to_the_original_weights(
    variant: str, variant_checkpoint: Variant, tiny_checkpoint: Callable[..., Path]
) -> None:
    """The variants hold real quantizations: dequantized (by compressed-tensors itself for
    its formats) they give back the tiny model's BF16 weights within FP8/FP4 error."""
    import torch
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
    from safetensors.torch import load_file

    orig = load_file(str(tiny_checkpoint("qwen3_5_moe_text") / "model.safetensors"))
    q = load_file(str(variant_checkpoint(variant) / "model.safetensors"))
    mod = "model.layers.0.mlp.experts.3.down_proj"
    w = orig[f"{mod}.weight"]
    local = {k[len(mod) + 1 :]: v for k, v in q.items() if k.startswith(mod + ".")}
    if variant in ("fp8-channel", "nvfp4"):
        preset, fmt = (
            ("FP8_DYNAMIC", "float-quantized")
            if variant == "fp8-channel"
            else ("NVFP4A16", "nvfp4-pack-quantized")
        )
        scheme = QuantizationScheme(targets=["Linear"], **PRESET_SCHEMES[preset])
        back = BaseCompressor.get_value_from_registry(fmt).decompress(local, scheme)["weight"]
    elif variant == "fp8-block":
        s = local["weight_scale_inv"]
        back = (
            local["weight"].float()
            * s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: w.shape[0], : w.shape[1]]
        )
    else:
        vals = unpack_fp4_from_uint8(local["weight"], w.shape[0], w.shape[1]).float()
        scale = local["weight_scale"].float().repeat_interleave(16, 1) * local["weight_scale_2"]
        back = vals * scale
    err = _rel_err(back, w)
    # E4M3 keeps 3 mantissa bits (~3% rms); E2M1 with per-16 FP8 scales ~10-15%.
    assert err < (0.06 if "fp8" in variant else 0.2), err
    assert err > 0  # they really are quantized
    assert torch.isfinite(back).all()


def test_mixed_config_groups_nvfp4_experts_fp8_attention() -> None:
    # llm-compressor recipes with two groups (e.g. NVFP4 experts + FP8 attention/shared).
    q = detect_quant(
        {
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "format": "mixed-precision",
                "config_groups": {
                    "group_0": {
                        "targets": ["re:.*mlp.experts.*"],
                        "format": "nvfp4-pack-quantized",
                        "weights": {
                            "num_bits": 4,
                            "type": "float",
                            "strategy": "tensor_group",
                            "group_size": 16,
                        },
                    },
                    "group_1": {
                        "targets": ["re:.*self_attn.*"],
                        "format": "float-quantized",
                        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                        "input_activations": {
                            "num_bits": 8,
                            "type": "float",
                            "strategy": "token",
                            "dynamic": True,
                        },
                    },
                },
                "ignore": ["lm_head"],
            }
        }
    )
    assert q.weight_bits == 4
    assert q.packing_factor("U8") == 2 and q.packing_factor("F8_E4M3") == 1
    assert {"U8", "F8_E4M3"} <= q.expected_weight_dtypes()
    assert "W 4-bit float tensor_group g16, A16" in q.label
    assert "W 8-bit float channel, A 8-bit float token dynamic" in q.label


@pytest.mark.parametrize("variant", ["fp8-channel", "nvfp4"])
def test_replica_config_reads_like_the_librarys(variant: str, variant_checkpoint: Variant) -> None:
    # The replica writes compressed-tensors configs by hand; servelab must read them exactly
    # as it reads the ones compressed-tensors itself writes.
    from servelab.synth.replica import (
        EXPERTS_AND_ATTENTION,
        QuantLayout,
        quantization_config,
        replica_tensors,
    )

    d = variant_checkpoint(variant)
    lib_cfg = _cfg(d)
    layout = QuantLayout(variant, EXPERTS_AND_ATTENTION, fp4_activations=False)
    mine = quantization_config(layout, replica_tensors(lib_cfg, layout))
    a = detect_quant(lib_cfg)
    b = detect_quant({"quantization_config": mine})
    assert (a.method, a.format, a.label) == (b.method, b.format, b.label)
    assert set(a.ignore) == set(b.ignore)
