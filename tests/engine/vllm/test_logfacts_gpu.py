"""Log facts from REAL vLLM 0.26.0 logs taken on a lent NVIDIA H200 (benchmarks/gpu/).

Both logs come from `servelab run benchmarks/gpu/qwen3-30b-a3b-fp8-h200.toml` on the device
(2026-12-02): Qwen3-30B-A3B dimensions, fine-grained FP8 (block 128x128), random weights.
The first is the engine log of the recorded run (HTTP access lines removed); the second is the
attempt before it, which died because vLLM's FlashInfer sampler was on while flashinfer was not
installed.
"""

from __future__ import annotations

import json
from pathlib import Path

from servelab.engines.facts import EngineFacts
from servelab.engines.vllm.logfacts import parse_log

LOGS = Path(__file__).resolve().parents[1] / "logs"
RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "results"


def _facts(name: str) -> EngineFacts:
    return parse_log((LOGS / name).read_text(encoding="utf-8"))


def test_h200_fp8_block_qwen3_moe_startup() -> None:
    f = _facts("gpu-h200-vllm-0.26.0-qwen3_moe-fp8-block.log")
    assert f.version == "0.26.0"
    assert f.architecture == "Qwen3MoeForCausalLM"
    assert f.max_model_len == 40960
    assert f.non_default_args["kv_cache_memory_bytes"] == 32 * 2**30
    assert f.non_default_args["served_model_name"] == ["qwen3-30b-a3b-fp8-random"]
    # Hopper, block-FP8: FlashAttention for attention, Triton for the FP8 experts.
    assert f.attention_backend == "FLASH_ATTN"
    assert (f.moe_backend, f.moe_quant) == ("TRITON", "Fp8")
    assert not f.marlin_fallback
    assert (f.weights_gib, f.weights_load_s) == (29.08, 22.274191)
    assert f.checkpoint_gib == 29.04
    assert (f.kv_device, f.kv_pool_tokens) == ("GPU", 349_520)
    assert (f.max_concurrency, f.concurrency_at_tokens) == (8.53, 40_960)
    # A plain-attention model: no hybrid block alignment or mamba padding lines.
    assert f.attention_block_size is None and f.mamba_padding_pct is None
    assert (f.graph_capture_s, f.graph_capture_gib) == (34.0, 0.84)
    assert f.init_engine_s == 322.7
    assert f.startup_s == 388.0  # 16:38:38 banner -> 16:45:06 "Starting vLLM server"
    assert f.server_url == "http://127.0.0.1:44665"
    assert [w.kind for w in f.warnings] == ["kv-profiling-skipped"]
    assert f.errors == ()
    # "reserved 32.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes"
    assert f.kv_available_gib == 32.0
    assert f.linear_kernel == "DeepGemmFp8BlockScaledMMKernel (Fp8LinearMethod)"
    assert f.flash_attn_version == 3
    assert f.compile_s == 61.25


def test_h200_kv_pool_is_what_plan_predicted() -> None:
    """vLLM's pool on the GPU equals what `servelab plan` printed on the device before serving."""
    f = _facts("gpu-h200-vllm-0.26.0-qwen3_moe-fp8-block.log")
    plan = json.loads((RESULTS / "plan-h200.json").read_text(encoding="utf-8"))
    assert plan["kv_pool"]["tokens"] == f.kv_pool_tokens
    assert round(plan["kv_pool"]["max_concurrency"], 2) == f.max_concurrency


def test_h200_kv_pool_arithmetic() -> None:
    """The same pool by hand: 96 KiB per token, 16-token blocks, vLLM>=0.20's token rule."""
    f = _facts("gpu-h200-vllm-0.26.0-qwen3_moe-fp8-block.log")
    # 48 layers x 2 (K, V) x 4 KV heads x 128 x 2 bytes = 96 KiB per token, 16-token blocks:
    per_block = 48 * 2 * 4 * 128 * 2 * 16
    blocks = (32 * 2**30) // per_block
    per_request = 40_960 // 16
    concurrency = blocks / per_request
    assert f.kv_pool_tokens == int(concurrency * 40_960)  # vllm>=0.20 token rule
    assert f.max_concurrency == round(concurrency, 2)


def test_h200_missing_flashinfer_sampler_is_the_error() -> None:
    f = _facts("gpu-h200-vllm-0.26.0-no-flashinfer-sampler.log")
    assert f.version == "0.26.0"
    assert f.architecture == "Qwen3MoeForCausalLM"
    # It died building the sampler, before loading weights or sizing the KV pool.
    assert f.kv_pool_tokens is None and f.weights_gib is None
    assert [(e.kind, e.text) for e in f.errors] == [
        ("exception", "ModuleNotFoundError: No module named 'flashinfer'")
    ]
