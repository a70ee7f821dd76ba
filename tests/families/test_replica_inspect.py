"""Full-size header replicas of the family presets, read back by ``servelab inspect``:
layer kinds, experts, MTP, quantization and the bytes of each role, computed here from the
published dimensions."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.checkpoint.report import CheckpointReport, inspect_checkpoint
from servelab.cli.app import app
from servelab.families import presets
from servelab.synth.replica import write_replica
from servelab.synth.replica_presets import preset_config, preset_layout

BF16 = 2
Replica = Callable[[str], CheckpointReport]


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Replica:
    """Write (once per module) and inspect a preset's replica."""
    cache: dict[str, CheckpointReport] = {}

    def get(name: str) -> CheckpointReport:
        if name not in cache:
            out = tmp_path_factory.mktemp(name)
            write_replica(out, preset_config(name), preset_layout(name, None, ()))
            cache[name] = inspect_checkpoint(out)
        return cache[name]

    return get


def _kinds(r: CheckpointReport) -> dict[str, int]:
    return dict(Counter(r.layer_types))


def test_gemma_3_27b_tied_head_is_read_as_the_embedding(replica: Replica) -> None:
    r = replica("gemma-3-27b")
    assert _kinds(r) == {"sliding_attention": 52, "full_attention": 10}
    embed = 262208 * 5376 * BF16
    assert r.bytes_by_role["embedding"] == embed
    assert "lm_head" not in r.bytes_by_role and r.tie_word_embeddings
    assert r.decode_bytes_by_role["lm_head"] == embed
    # 62 layers of q (32x128), k and v (16x128), o: all attention, none unknown
    attn = 62 * (2 * 32 * 128 * 5376 + 2 * 16 * 128 * 5376 + 2 * 128) * BF16
    assert r.bytes_by_role["attention"] == attn
    assert r.bytes_by_role["mlp"] == 62 * 3 * 5376 * 21504 * BF16
    assert r.bytes_by_role["vision"] > 0 and "unknown" not in r.bytes_by_role


def test_gpt_oss_120b_mxfp4_experts_sinks_and_glob_ignore(replica: Replica) -> None:
    r = replica("gpt-oss-120b")
    assert _kinds(r) == {"sliding_attention": 18, "full_attention": 18}
    assert (r.num_experts, r.experts_per_token, r.expert_layout) == (128, 4, "fused")
    e, h, i = 128, 2880, 2880
    blocks = 36 * e * (2 * i * h + h * i) // 2
    scales = 36 * e * (2 * i * h + h * i) // 32
    bias = 36 * e * (2 * i + h) * BF16
    assert r.bytes_by_role["routed_expert"] == blocks + bias
    assert r.bytes_by_role_incl_scales["routed_expert"] == blocks + scales + bias
    assert r.quant.method == "mxfp4"
    # the glob ignore list covers attention, routers, embedding and head: nothing unlisted
    assert {f.code for f in r.findings} == {"quant-ignored"}
    ignored = next(f for f in r.findings if f.code == "quant-ignored")
    assert "144 attention, 36 router" in ignored.message
    sinks = 36 * 64 * BF16
    qkvo = 36 * ((64 * 64 + 2 * 8 * 64) * h + (64 * 64 + 2 * 8 * 64) + h * 64 * 64 + h) * BF16
    assert r.bytes_by_role["attention"] == qkvo + sinks


def test_nemotron_nano_mixer_tensors_take_their_layer_kind(replica: Replica) -> None:
    r = replica("nemotron-nano-9b-v2")
    assert _kinds(r) == {"mamba": 27, "full_attention": 4, "none": 25}
    h, nh, hd, g, s = 4480, 128, 80, 8, 128
    mi = nh * hd
    conv = mi + 2 * g * s
    mamba = (2 * mi + 2 * g * s + nh) * h + conv * 4 + conv + 3 * nh + mi + h * mi
    assert r.bytes_by_role["linear_attention"] == 27 * mamba * BF16
    assert r.bytes_by_role["attention"] == 4 * (2 * 40 * 128 * h + 2 * 8 * 128 * h) * BF16
    assert r.bytes_by_role["mlp"] == 25 * 2 * 15680 * h * BF16
    assert r.layer_types_from_tensors.count("linear_attention") == 27
    assert not any(f.code == "layer-types-mismatch" for f in r.findings)


def test_deepseek_v3_fp8_block_mla_and_mtp_layer(replica: Replica) -> None:
    r = replica("deepseek-v3")
    assert _kinds(r) == {"mla_attention": 61}
    assert (r.num_experts, r.experts_per_token, r.has_shared_expert) == (256, 8, True)
    assert r.quant.method == "fp8" and r.quant.format == "block"
    assert r.mtp_declared_layers == 1 and r.mtp_tensors > 0
    # layer 61 (== num_hidden_layers) is the MTP layer: its embedding and head included
    assert r.mtp_bytes > 2 * 129280 * 7168 * BF16
    assert r.routed_expert_bits is not None and 8.0 < r.routed_expert_bits < 8.01
    # MLA projections are attention: q_a/q_b, kv_a_proj_with_mqa, kv_b, o (FP8 + scales)
    mla = 61 * (1536 * 7168 + 128 * 192 * 1536 + 576 * 7168 + 128 * 256 * 512
                + 7168 * 128 * 128)
    assert r.bytes_by_role["attention"] == mla + 61 * (1536 + 512) * BF16
    assert r.findings == ()


def test_llama_4_scout_chunked_fused_experts_shared_expert(replica: Replica) -> None:
    r = replica("llama-4-scout")
    assert _kinds(r) == {"chunked_attention": 36, "full_attention": 12}
    assert (r.num_experts, r.experts_per_token, r.expert_layout) == (16, 1, "fused")
    assert r.bytes_by_role["routed_expert"] == 48 * 16 * 3 * 5120 * 8192 * BF16
    assert r.bytes_by_role["shared_expert"] == 48 * 3 * 5120 * 8192 * BF16
    assert r.bytes_by_role["vision"] > 0 and "unknown" not in r.bytes_by_role


@pytest.mark.parametrize(("name", "kinds", "experts", "params"), [
    ("mistral-7b", {"sliding_attention": 32}, None, 7_241_732_096),
    ("mixtral-8x7b", {"full_attention": 32}, 8, 46_702_792_704),
    ("qwen2.5-7b", {"full_attention": 28}, None, 7_615_616_512),
    ("phi-4", {"full_attention": 40}, None, 14_659_507_200),
])
def test_dense_and_mixtral_params_equal_the_published_counts(
    replica: Replica, name: str, kinds: dict[str, int], experts: int | None, params: int
) -> None:
    r = replica(name)
    assert _kinds(r) == kinds
    assert r.num_experts == experts
    assert r.total_params == params and r.total_bytes == params * BF16
    assert "unknown" not in r.bytes_by_role and r.findings == ()


def test_cli_writes_every_preset_name_and_refuses_a_foreign_layout(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["synth", "replica", str(tmp_path / "p"), "--model", "phi-4"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p" / "config.json").exists()
    res = runner.invoke(app, ["synth", "replica", str(tmp_path / "g"), "--model",
                              "gpt-oss-20b", "--layout", "nvfp4"])
    assert res.exit_code != 0 and "published storage (native)" in str(res.exception)
    res = runner.invoke(app, ["synth", "replica", str(tmp_path / "x"), "--model", "nope"])
    assert res.exit_code != 0 and "gpt-oss-120b" in str(res.exception)
    assert set(presets()) >= {"gpt-oss-120b", "gemma-3-27b", "deepseek-v3", "kimi-k2",
                              "glm-4.5", "glm-4.6", "llama-4-scout", "nemotron-nano-9b-v2",
                              "minimax-m2", "mixtral-8x7b", "mistral-7b", "qwen2.5-7b", "phi-4"}


def test_a_config_no_family_reads_is_a_finding_naming_it(tmp_path: Path) -> None:
    write_replica(tmp_path, preset_config("mistral-7b"))
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "falcon"}))
    r = inspect_checkpoint(tmp_path)
    unread = next(f for f in r.findings if f.code == "config-unread")
    assert "model_type 'falcon' is not a model family" in unread.message
    assert str(tmp_path) in unread.message
    assert r.layer_types == r.layer_types_from_tensors == ("full_attention",) * 32
