"""vLLM's KV arithmetic at real dimensions, per version rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.checkpoint.sources import load_checkpoint
from servelab.engines.vllm.kv import largest_context, plan_kv_pool, plan_kv_pool_dims
from servelab.engines.vllm.kv.rules import TOKENS_PER_GROUP_SHARE, engine_rules, parse_version
from servelab.errors import ConfigError, UsageError
from servelab.families import model_dims
from servelab.sizing.kvpool import KvOptions
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

GIB = 1 << 30
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("version", ["0.24.0", "0.26.0"])
def test_seed_qwen36_pool_at_262144_with_6_gib_matches_the_seed_log(version: str) -> None:
    # The seed recipe: "KV pool 308,955 tokens / 1.18x" on a Spark, vLLM 0.24.0 and 0.26.0.
    plan = plan_kv_pool(
        QWEN3_6_35B_A3B,
        kv_cache_memory_bytes=6 * GIB,
        max_model_len=262_144,
        engine_version=version,
        platform="cuda",
    )
    assert plan.tokens == 308_955
    assert f"{plan.max_concurrency:.2f}" == "1.18"
    assert plan.block_size == 1056  # 16 x cdiv(mamba page, 16 x 2,048 B)
    assert plan.mamba_page_bytes == 3 * 8192 * 2 + 32 * 128 * 128 * 4  # conv bf16 + ssm fp32
    assert plan.num_blocks == 297 and plan.blocks_per_request == 252
    assert [len(g.layers) for g in plan.groups] == [10, 10, 10, 10]
    assert plan.log_line == (
        "GPU KV cache size: 308,955 tokens, Maximum concurrency for 262,144 tokens per "
        "request: 1.18x"
    )


def test_seed_pool_from_the_fp8_header_replica_config(qwen36_fp8: Path) -> None:
    config = load_checkpoint(qwen36_fp8).config
    assert config is not None
    plan = plan_kv_pool(
        config, kv_cache_memory_bytes=6 * GIB, max_model_len=262_144, engine_version="0.26.0",
        platform="cuda",
    )
    assert (plan.tokens, f"{plan.max_concurrency:.2f}") == (308_955, "1.18")


def test_version_0_32_uses_align_mode_two_state_blocks_per_group() -> None:
    plan = plan_kv_pool(
        QWEN3_6_35B_A3B, kv_cache_memory_bytes=6 * GIB, max_model_len=262_144,
        engine_version="0.32.0", platform="cuda",
    )
    assert plan.mamba_cache_mode == "align"
    assert plan.blocks_per_request == 249 + 3 * 2
    off = plan_kv_pool(
        QWEN3_6_35B_A3B, kv_cache_memory_bytes=6 * GIB, max_model_len=262_144,
        engine_version="0.32.0", platform="cuda", enable_prefix_caching=False,
    )
    assert off.blocks_per_request == 252


def test_old_versions_report_the_per_group_share_as_tokens() -> None:
    plan = plan_kv_pool(
        QWEN3_6_35B_A3B, kv_cache_memory_bytes=6 * GIB, max_model_len=262_144,
        engine_version="0.19.0", platform="cuda",
    )
    assert engine_rules("0.19.0", "cuda").tokens_rule == TOKENS_PER_GROUP_SHARE
    assert plan.tokens == 297 // 4 * 1056
    assert len(plan.log_lines) >= 2 and plan.log_lines[-2] == "GPU KV cache size: 78,144 tokens"


def test_dense_llama_at_real_dimensions_on_cuda() -> None:
    plan = plan_kv_pool(
        LLAMA3_8B, kv_cache_memory_bytes=16 * GIB, max_model_len=8192, engine_version="0.26.0",
        platform="cuda",
    )
    # 32 layers x 2 x 8 heads x 128 x 2 B = 128 KiB per token; 16-token blocks.
    assert plan.kv_bytes_per_token == {"full_attention": 131072}
    assert plan.bytes_per_block == 16 * 131072
    assert plan.num_blocks == 8192
    assert plan.blocks_per_request == 512
    assert plan.tokens == 131072 and plan.max_concurrency == 16.0


def test_fp8_kv_cache_halves_the_page_and_doubles_the_pool() -> None:
    bf16 = plan_kv_pool(LLAMA3_8B, kv_cache_memory_bytes=8 * GIB, max_model_len=4096,
                        platform="cuda", engine_version="0.26.0")
    fp8 = plan_kv_pool(LLAMA3_8B, kv_cache_memory_bytes=8 * GIB, max_model_len=4096,
                       platform="cuda", engine_version="0.26.0", kv_cache_dtype="fp8")
    assert fp8.tokens == 2 * bf16.tokens


def test_largest_context_at_concurrency_one_is_the_fit_boundary() -> None:
    dims = model_dims(LLAMA3_8B)
    opts = KvOptions(max_model_len=131072, engine_version="0.32.0", platform="cuda")
    pool = 2 * GIB
    best = largest_context(dims, pool, opts)
    assert 0 < best < 131072
    fits = plan_kv_pool_dims(dims, pool, KvOptions(**{**opts.__dict__, "max_model_len": best}))
    over = plan_kv_pool_dims(
        dims, pool, KvOptions(**{**opts.__dict__, "max_model_len": best + 1})
    )
    assert fits.fits_one_request and not over.fits_one_request
    # 2 GiB / 2 MiB blocks = 1024 blocks, one held back as vLLM's null block.
    assert best == 1023 * 16


def test_padding_layers_when_layer_counts_do_not_divide() -> None:
    cfg = dict(QWEN3_6_35B_A3B["text_config"])
    cfg["num_hidden_layers"] = 8
    cfg["layer_types"] = ["linear_attention"] * 5 + ["full_attention"] * 3
    plan = plan_kv_pool(cfg, kv_cache_memory_bytes=GIB, max_model_len=4096, platform="cpu")
    assert plan.padding_layers == 1
    assert any("Add 1 padding layers, may waste at most 20.00%" in ln for ln in plan.log_lines)


def test_bad_inputs_are_clear_errors() -> None:
    with pytest.raises(UsageError, match="platform"):
        plan_kv_pool(LLAMA3_8B, kv_cache_memory_bytes=GIB, max_model_len=1, platform="tpu")
    with pytest.raises(UsageError, match="engine version"):
        parse_version("latest")
    with pytest.raises(UsageError, match="kv-cache-dtype"):
        plan_kv_pool(LLAMA3_8B, kv_cache_memory_bytes=GIB, max_model_len=8, kv_cache_dtype="x")
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        plan_kv_pool({"model_type": "llama"}, kv_cache_memory_bytes=GIB, max_model_len=8)
    with pytest.raises(ConfigError, match="MLA"):
        plan_kv_pool({**LLAMA3_8B, "kv_lora_rank": 512}, kv_cache_memory_bytes=GIB,
                     max_model_len=8)
