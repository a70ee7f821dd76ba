"""CheckpointReport on real tiny checkpoints, checked against sums computed here from the raw
headers (independently of servelab's classification code)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servelab.checkpoint.report import SCHEMA, build_report, inspect_checkpoint
from servelab.checkpoint.sources import load_checkpoint

Variant = Callable[[str], Path]


def _raw(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h: dict[str, Any] = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def _size(v: dict[str, Any]) -> int:
    b, e = v["data_offsets"]
    return int(e - b)


def test_qwen3_5_moe_text_numbers_from_the_raw_header(tiny_checkpoint: Callable[..., Path]) -> None:
    d = tiny_checkpoint("qwen3_5_moe_text")
    h = _raw(d / "model.safetensors")
    r = inspect_checkpoint(d)
    assert r.tensor_count == len(h)
    assert r.total_bytes == sum(_size(v) for v in h.values())
    routed = sum(_size(v) for k, v in h.items() if ".mlp.experts." in k)
    embed = sum(_size(v) for k, v in h.items() if "embed_tokens" in k)
    assert r.bytes_by_role["routed_expert"] == routed
    assert r.bytes_by_role["embedding"] == embed
    assert sum(r.bytes_by_role.values()) == r.total_bytes
    # Decode: everything but the routed experts and the embedding table, plus 2/8 of the
    # experts (top-2 of 8) and one embedding row (vocab 1024 rows).
    rest = r.total_bytes - routed - embed
    assert r.routed_fraction == 2 / 8
    assert r.decode_bytes_per_token == rest + routed * 2 // 8 + embed // 1024
    assert sum(r.decode_bytes_by_role.values()) == r.decode_bytes_per_token
    # Params: BF16, so bytes / 2; active by the same rule as decode.
    assert r.total_params == r.total_bytes // 2
    assert r.active_params == r.decode_bytes_per_token // 2
    assert (r.num_layers, r.num_experts, r.experts_per_token) == (4, 8, 2)
    assert r.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert r.layer_types_from_tensors == r.layer_types
    assert (r.expert_layout, r.has_shared_expert) == ("per-expert", True)
    assert r.bytes_by_dtype == {"BF16": r.total_bytes}
    assert r.elements_by_dtype == {"BF16": r.total_bytes // 2}
    assert r.text_config["hidden_size"] == 64


def test_llama_dense_has_no_expert_fields(tiny_checkpoint: Callable[..., Path]) -> None:
    r = inspect_checkpoint(tiny_checkpoint("llama"))
    assert (r.num_experts, r.experts_per_token, r.expert_layout, r.routed_fraction) == (
        None,
        None,
        None,
        None,
    )
    assert r.bytes_by_role["mlp"] > 0
    assert r.layer_types == ("full_attention", "full_attention")


def test_sharded_equals_single_file(tiny_checkpoint: Callable[..., Path]) -> None:
    single = inspect_checkpoint(tiny_checkpoint("qwen3_moe"))
    sharded = inspect_checkpoint(tiny_checkpoint("qwen3_moe", max_shard_size="200KB"))
    assert sharded.source.shards > 1
    a, b = single.to_json_dict(), sharded.to_json_dict()
    for doc in (a, b):
        doc.pop("source")
    assert a == b


def test_fused_experts_layout(tmp_path: Path, tiny_checkpoint: Callable[..., Path]) -> None:
    from servelab.synth.replica import replica_tensors
    from servelab.synth.safetensors_set import write_safetensors_set

    cfg = json.loads((tiny_checkpoint("qwen3_5_moe_text") / "config.json").read_text())
    plan = replica_tensors(cfg, fused_experts=True)
    write_safetensors_set(tmp_path, plan.tensors)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = inspect_checkpoint(tmp_path)
    assert (r.expert_layout, r.num_experts) == ("fused", 8)
    per_expert = inspect_checkpoint(tiny_checkpoint("qwen3_5_moe_text"))
    assert r.bytes_by_role == per_expert.bytes_by_role
    assert r.decode_bytes_per_token == per_expert.decode_bytes_per_token


def test_quantized_report_splits_scales(variant_checkpoint: Variant) -> None:
    r = inspect_checkpoint(variant_checkpoint("nvfp4"))
    routed = r.role("routed_expert")
    assert routed.dtypes == {"U8": routed.bytes}  # scales live under quant_scale ...
    assert r.bytes_by_role["quant_scale"] > 0
    # ... and are folded back in: incl.-scales sums still add up to the total.
    assert sum(r.bytes_by_role_incl_scales.values()) == r.total_bytes
    assert routed.bytes_incl_scales > routed.bytes
    # decode reads top-k/E of the routed bytes *including* their scales
    assert r.decode_bytes_by_role["routed_expert"] == round(routed.bytes_incl_scales * 2 / 8)
    assert r.quant.label.startswith("compressed-tensors nvfp4-pack-quantized")


def test_json_schema_is_stable_and_serialisable(variant_checkpoint: Variant) -> None:
    doc = inspect_checkpoint(variant_checkpoint("fp8-channel")).to_json_dict()
    assert doc["schema"] == SCHEMA == "servelab.inspect/1"
    assert set(doc) >= {
        "schema",
        "source",
        "model",
        "tensor_count",
        "total_bytes",
        "total_gib",
        "params",
        "dtypes",
        "roles",
        "layers",
        "experts",
        "quant",
        "decode",
        "mtp",
        "vision",
        "tie_word_embeddings",
        "findings",
    }
    assert set(doc["source"]) == {
        "location",
        "kind",
        "revision",
        "commit",
        "header_sha256",
        "bytes_fetched",
        "shards",
    }
    assert set(doc["roles"][0]) == {
        "role",
        "tensors",
        "bytes",
        "gib",
        "bytes_incl_scales",
        "gib_incl_scales",
        "params",
        "effective_bits",
        "dtypes",
        "decode_bytes",
    }
    assert doc["quant"]["groups"][0]["weights"]["strategy"] == "channel"
    assert json.loads(json.dumps(doc)) == doc


def test_markdown(variant_checkpoint: Variant) -> None:
    md = inspect_checkpoint(variant_checkpoint("mtp-declared")).to_markdown()
    assert md.startswith("## Checkpoint `")
    assert "| dtype | tensors | size | elements |" in md
    assert "| routed_expert |" in md
    assert "`mtp-declared-missing`" in md


def test_build_report_is_pure_over_a_loaded_source(tiny_checkpoint: Callable[..., Path]) -> None:
    src = load_checkpoint(tiny_checkpoint("qwen3_next"))
    assert build_report(src) == build_report(src)
    assert build_report(src).source.header_sha256 == src.header_sha256
