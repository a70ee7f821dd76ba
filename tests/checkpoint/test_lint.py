"""Lint findings on real tiny checkpoints and their variants (edited configs, real files)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servelab.checkpoint.report import CheckpointReport, inspect_checkpoint

Variant = Callable[[str], Path]


def _codes(r: CheckpointReport) -> set[str]:
    return {f.code for f in r.findings}


def _finding(r: CheckpointReport, code: str) -> Any:
    return next(f for f in r.findings if f.code == code)


def _edit_config(d: Path, fn: Callable[[dict[str, Any]], None]) -> Path:
    cfg = json.loads((d / "config.json").read_text())
    fn(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_clean_tiny_models_have_no_findings(tiny_checkpoint: Callable[..., Path]) -> None:
    for arch in ("llama", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text"):
        assert inspect_checkpoint(tiny_checkpoint(arch)).findings == (), arch


def test_mtp_declared_but_not_shipped(variant_checkpoint: Variant) -> None:
    r = inspect_checkpoint(variant_checkpoint("mtp-declared"))
    f = _finding(r, "mtp-declared-missing")
    assert f.severity == "warning"
    assert "mtp_num_hidden_layers: 1" in f.message and f"{r.tensor_count:,} tensors" in f.message


def test_mtp_shipped_and_declared_is_clean(variant_checkpoint: Variant) -> None:
    r = inspect_checkpoint(variant_checkpoint("mtp-shipped"))
    assert not {"mtp-declared-missing", "mtp-undeclared"} & _codes(r)
    assert r.mtp_tensors > 0


def test_mtp_shipped_but_not_declared(variant_checkpoint: Variant) -> None:
    r = inspect_checkpoint(variant_checkpoint("mtp-undeclared"))
    f = _finding(r, "mtp-undeclared")
    assert f.count == r.mtp_tensors == 19  # fused layout: Unsloth's 19-tensor MTP head
    assert all(e.startswith("mtp.") for e in f.examples)


def test_ignore_list_is_reported(variant_checkpoint: Variant) -> None:
    r = inspect_checkpoint(variant_checkpoint("fp8-channel"))
    f = _finding(r, "quant-ignored")
    assert f.severity == "info"
    # 4 layers: router + shared_expert_gate each, 3 linear-attn layers x 5 projections, lm_head
    assert f.count == 4 * 2 + 3 * 5 + 1
    assert "linear_attention" in f.message and "router" in f.message


def test_module_in_ignore_list_yet_quantized(
    variant_checkpoint: Variant, copy_checkpoint: Callable[[Path], Path]
) -> None:
    d = copy_checkpoint(variant_checkpoint("fp8-channel"))
    _edit_config(
        d,
        lambda c: c["quantization_config"]["ignore"].append("model.layers.0.mlp.experts.0.up_proj"),
    )
    f = _finding(inspect_checkpoint(d), "ignored-but-quantized")
    assert f.examples == ("model.layers.0.mlp.experts.0.up_proj",)


def test_declared_fp8_but_weights_are_bf16(
    tiny_checkpoint: Callable[..., Path],
    variant_checkpoint: Variant,
    copy_checkpoint: Callable[[Path], Path],
) -> None:
    qc = json.loads((variant_checkpoint("fp8-channel") / "config.json").read_text())
    d = copy_checkpoint(tiny_checkpoint("qwen3_5_moe_text"))
    _edit_config(d, lambda c: c.update(quantization_config=qc["quantization_config"]))
    r = inspect_checkpoint(d)
    f = _finding(r, "dtype-scheme-mismatch")
    assert f.severity == "error" and "BF16" in f.message
    assert r.findings[0].code == "dtype-scheme-mismatch"  # errors sort first


def test_quantized_weights_without_declaration(
    variant_checkpoint: Variant, copy_checkpoint: Callable[[Path], Path]
) -> None:
    d = copy_checkpoint(variant_checkpoint("fp8-channel"))
    _edit_config(d, lambda c: c.pop("quantization_config"))
    f = _finding(inspect_checkpoint(d), "dtype-scheme-mismatch")
    assert "no quantization is declared" in f.message


def test_tied_embeddings(tiny_checkpoint: Callable[..., Path]) -> None:
    r = inspect_checkpoint(tiny_checkpoint("llama", overrides={"tie_word_embeddings": True}))
    assert "tied-embeddings" in _codes(r)
    assert r.role("lm_head").tensors == 0
    # The lm_head reads the whole (tied) embedding table each token, plus one row in.
    emb = r.role("embedding").bytes
    assert r.decode_bytes_by_role["lm_head"] == emb
    assert r.decode_bytes_by_role["embedding"] == emb // 1024


def test_tied_but_lm_head_ships(
    tiny_checkpoint: Callable[..., Path], copy_checkpoint: Callable[[Path], Path]
) -> None:
    d = copy_checkpoint(tiny_checkpoint("llama"))
    _edit_config(d, lambda c: c.update(tie_word_embeddings=True))
    assert "tied-but-lm-head-ships" in _codes(inspect_checkpoint(d))


def test_unknown_roles_and_orphan_scales(
    tmp_path: Path, write_safetensors: Callable[..., Path]
) -> None:
    header = {
        "model.layers.0.self_attn.q_proj.weight": {
            "dtype": "BF16",
            "shape": [4, 4],
            "data_offsets": [0, 32],
        },
        "model.layers.0.self_attn.k_proj.weight_scale": {
            "dtype": "F32",
            "shape": [4, 1],
            "data_offsets": [32, 48],
        },
        "frobnicator.table": {"dtype": "F32", "shape": [2], "data_offsets": [48, 56]},
    }
    path = write_safetensors(tmp_path / "model.safetensors", header)
    r = inspect_checkpoint(path)
    unk = _finding(r, "unknown-role")
    assert unk.examples == ("frobnicator.table",)
    assert r.decode_bytes_by_role["unknown"] == 8  # counted as read every token
    assert _finding(r, "scale-without-weight").examples == (
        "model.layers.0.self_attn.k_proj.weight_scale",
    )
    assert "dtype-scheme-mismatch" in _codes(r)  # scales ship, nothing declared


def test_structure_mismatches(
    tiny_checkpoint: Callable[..., Path], copy_checkpoint: Callable[[Path], Path]
) -> None:
    d = copy_checkpoint(tiny_checkpoint("qwen3_5_moe_text"))

    def edit(c: dict[str, Any]) -> None:
        c["num_experts"] = 16
        c["layer_types"] = list(reversed(c["layer_types"]))

    r = inspect_checkpoint(_edit_config(d, edit))
    assert {"experts-mismatch", "layer-types-mismatch"} <= _codes(r)
    assert "layer 0" in _finding(r, "layer-types-mismatch").message

    d2 = copy_checkpoint(tiny_checkpoint("qwen3_moe"))
    r2 = inspect_checkpoint(
        _edit_config(d2, lambda c: (c.pop("num_experts_per_tok"), c.update(num_hidden_layers=3)))
    )
    assert "layers-mismatch" in _codes(r2)
    # a missing top-k is Qwen3MoeConfig's default, as vLLM reads it: not unknown
    assert "moe-topk-unknown" not in _codes(r2) and r2.experts_per_token == 8
    # Without top-k every expert byte counts: an upper bound, flagged above.
    assert r2.decode_bytes_by_role["routed_expert"] == r2.role("routed_expert").bytes


def test_findings_json_shape(variant_checkpoint: Variant) -> None:
    r = inspect_checkpoint(variant_checkpoint("mtp-declared"))
    for f in r.to_json_dict()["findings"]:
        assert set(f) == {"code", "severity", "message", "count", "examples"}
        assert f["severity"] in ("error", "warning", "info")
