"""GGUF (llama.cpp) files: written from a real tiny HF checkpoint, read back as a report.

The GGUF files are written by servelab's converter with the ``gguf`` package's writer and
read with its reader; the report's numbers are checked against the HF checkpoint they
came from (same parameters, same roles) and against GGML's block sizes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import gguf
import pytest

from servelab.checkpoint.report import build_report, inspect_checkpoint
from servelab.checkpoint.sources import load_checkpoint
from servelab.cli.app import main
from servelab.errors import HeaderError, UsageError
from servelab.synth.gguf import write_gguf

TinyFactory = Callable[..., Path]


@pytest.fixture(scope="module")
def ggufs(
    tiny_checkpoint: TinyFactory, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    hf = tiny_checkpoint("llama")
    out = tmp_path_factory.mktemp("gguf")
    return {q: write_gguf(hf, out / f"tiny-{q}.gguf", qtype=q) for q in ("F16", "Q8_0")}


def test_report_matches_the_hf_checkpoint(
    ggufs: dict[str, Path], tiny_checkpoint: TinyFactory
) -> None:
    hf = inspect_checkpoint(tiny_checkpoint("llama"))
    f16 = inspect_checkpoint(ggufs["F16"])
    assert f16.tensor_count == hf.tensor_count
    assert f16.total_params == hf.total_params
    assert f16.num_layers == hf.num_layers == 2
    assert f16.quant.label == "gguf F16"
    # bf16 → F16 keeps two bytes per weight; norms are F32 in GGUF (four bytes).
    norm_params = f16.role("norm").params
    assert f16.total_bytes == hf.total_bytes + 2 * norm_params
    for role in ("attention", "mlp", "embedding", "lm_head", "norm"):
        assert f16.role(role).params == hf.role(role).params, role
    assert f16.findings == ()


def test_q8_0_bytes_follow_the_ggml_block_size(ggufs: dict[str, Path]) -> None:
    report = inspect_checkpoint(ggufs["Q8_0"])
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0]  # 32 weights, 34 B
    q8 = next(d for d in report.dtypes if d.dtype == "Q8_0")
    assert q8.bytes == q8.elements // block * size
    assert report.quant.label == "gguf Q8_0"
    assert report.role("attention").effective_bits == pytest.approx(8.5)
    # Decode reads every weight once, but only one row of the embedding table.
    emb = report.role("embedding")
    vocab = int(report.text_config["vocab_size"])
    assert report.decode_bytes_per_token == report.total_bytes - emb.bytes + emb.bytes // vocab


def test_config_comes_from_the_gguf_metadata(ggufs: dict[str, Path]) -> None:
    src = load_checkpoint(ggufs["Q8_0"])
    cfg = dict(src.config or {})
    assert cfg["model_type"] == "llama"
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_key_value_heads"]) == (2, 64, 2)
    assert cfg["tie_word_embeddings"] is False
    shapes = {t.name: t.shape for t in src.tensors}
    assert shapes["token_embd.weight"] == (1024, 64)  # outermost first, as in PyTorch


def test_cli_json_and_a_directory_holding_one_gguf(
    ggufs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["inspect", str(ggufs["Q8_0"]), "--json"])
    assert exc.value.code == 0
    data = json.loads(capsys.readouterr().out)
    assert data == inspect_checkpoint(ggufs["Q8_0"]).to_json_dict()
    one = tmp_path / "one"
    one.mkdir()
    (one / "m.gguf").write_bytes(ggufs["F16"].read_bytes())
    assert build_report(load_checkpoint(one)).total_bytes == (
        inspect_checkpoint(ggufs["F16"]).total_bytes
    )
    (one / "n.gguf").write_bytes(ggufs["F16"].read_bytes())
    with pytest.raises(UsageError, match="2 GGUF files"):
        load_checkpoint(one)


def test_a_truncated_gguf_is_a_header_error(ggufs: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(ggufs["F16"].read_bytes()[:200])
    with pytest.raises(HeaderError) as info:
        load_checkpoint(bad)
    assert str(bad) in str(info.value)


def test_moe_experts_are_stacked_planes(tiny_checkpoint: TinyFactory, tmp_path: Path) -> None:
    hf_dir = tiny_checkpoint("qwen3_moe")
    hf = inspect_checkpoint(hf_dir)
    report = inspect_checkpoint(write_gguf(hf_dir, tmp_path / "moe.gguf", qtype="Q8_0"))
    assert (report.num_experts, report.experts_per_token) == (8, 2)
    assert report.expert_layout == "fused"  # blk.N.ffn_gate_exps: [experts, out, in]
    assert report.routed_fraction == hf.routed_fraction == 2 / 8
    for role in ("routed_expert", "router", "attention", "embedding", "lm_head"):
        assert report.role(role).params == hf.role(role).params, role
    assert report.role("router").dtypes == {"F32": report.role("router").bytes}
    assert report.findings == ()
