"""Decode bytes per token per layer kind, and prefill attention FLOPs, on synthetic dims."""

from __future__ import annotations

from tests.plan.kv_dims import chunked, full, make_dims, sliding

from servelab.families import LINEAR, MAMBA, MLA, LinearAttentionDims, Mamba2Dims, MlaDims
from servelab.predict.costs import (
    attended_pairs,
    attention_flops,
    kv_read_bytes,
    kv_write_bytes,
    state_traffic_bytes,
)

PER_TOKEN = 2 * 64 * 2 * 2  # 2 KV heads x (64 + 64) x bf16


def test_a_sliding_layer_reads_at_most_its_window() -> None:
    dims = make_dims([sliding(128), full()], dtype="bfloat16")
    assert kv_read_bytes(dims, 100, 2) == 2 * 100 * PER_TOKEN
    assert kv_read_bytes(dims, 4096, 2) == (128 + 4096) * PER_TOKEN
    # every token is still written to both layers
    assert kv_write_bytes(dims, 4096, 2) == 2 * 4096 * PER_TOKEN


def test_a_chunked_layer_reads_at_most_its_chunk() -> None:
    dims = make_dims([chunked(8192), chunked(8192), full()], dtype="bfloat16")
    assert kv_read_bytes(dims, 131072, 2) == (2 * 8192 + 131072) * PER_TOKEN


def test_an_mla_layer_reads_the_latent_of_every_token() -> None:
    mla = MlaDims(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                  v_head_dim=128, q_lora_rank=None)
    dims = make_dims([MLA] * 3, dtype="bfloat16", mla=mla, heads=128)
    assert kv_read_bytes(dims, 1000, 2) == 3 * 576 * 2 * 1000
    assert kv_read_bytes(dims, 1000, 1) == 3 * 576 * 1000  # an fp8 cache


def test_state_layers_read_and_write_their_state() -> None:
    gdn = LinearAttentionDims(num_key_heads=16, num_value_heads=32, key_head_dim=128,
                              value_head_dim=128, conv_kernel=4)
    gdn_dims = make_dims([LINEAR, LINEAR, full()], dtype="bfloat16", linear=gdn)
    gdn_state = 3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4
    assert state_traffic_bytes(gdn_dims, "float32") == 2 * 2 * gdn_state
    m2 = Mamba2Dims(num_heads=128, head_dim=64, n_groups=8, state_size=128, conv_kernel=4,
                    intermediate_size=8192)
    m2_dims = make_dims([MAMBA, full()], dtype="bfloat16", mamba=m2)
    m2_state = 3 * (8192 + 2 * 8 * 128) * 2 + 128 * 64 * 128 * 2
    assert state_traffic_bytes(m2_dims, "bfloat16") == 2 * m2_state
    # the KV of a state layer is not read per token
    assert kv_read_bytes(m2_dims, 1000, 2) == 1000 * PER_TOKEN


def test_prefill_attention_pairs_shrink_with_windows_and_chunks() -> None:
    assert attended_pairs(1000) == 500_000
    assert attended_pairs(1000, window=4096) == 500_000
    assert attended_pairs(1000, window=100) == 1000 * 100 - 100 * 100 / 2
    assert attended_pairs(1000, chunk=300) == 3 * 300 * 300 / 2 + 100 * 100 / 2
    dims = make_dims([sliding(100), full()], dtype="bfloat16", heads=8)
    # 2 x pairs x 8 query heads x (64 + 64)
    assert attention_flops(dims, 1000) == 2 * (95_000 + 500_000) * 8 * 128
