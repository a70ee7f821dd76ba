"""Operator rooflines: bytes and FLOPs per operator, the device's ceilings, the kernel path's
precision from the hardware profile."""

from __future__ import annotations

import pytest

from servelab.errors import UsageError
from servelab.hardware.lookup import get_profile
from servelab.ops.roofline import (
    attn_decode_work,
    attn_prefill_work,
    device,
    expected_touched,
    gemm_work,
    kernel_precision,
    moe_work,
    weight_bits,
)


def test_stored_bits_per_weight_include_block_scales() -> None:
    assert weight_bits("gguf:Q4_0") == pytest.approx(4.5)
    assert weight_bits("gguf:Q8_0") == pytest.approx(8.5)
    assert weight_bits("mxfp4") == pytest.approx(4.25)
    with pytest.raises(UsageError, match="q3_xx"):
        weight_bits("q3_xx")


def test_a_gemm_reads_its_weight_once_and_computes_2mnk() -> None:
    w = gemm_work(4, 1024, 512, "bf16")
    assert w.bytes == 1024 * 512 * 2 + 2 * 4 * (1024 + 512)
    assert w.flops == 2 * 4 * 1024 * 512 and w.key == "gemm:bf16"
    assert gemm_work(4, 1024, 512, "gguf:Q4_0").bytes < w.bytes / 3


def test_moe_reads_only_the_experts_its_tokens_touch() -> None:
    one = moe_work(1, 128, 8, 2048, 768, "bf16")
    assert one.detail["experts_touched"] == pytest.approx(8.0)
    many = moe_work(4096, 128, 8, 2048, 768, "bf16")
    assert many.detail["experts_touched"] == pytest.approx(128.0, rel=1e-6)
    assert expected_touched(128, 8, 2) == pytest.approx(128 * (1 - (120 / 128) ** 2))


def test_a_sliding_window_caps_the_keys_read_and_attended() -> None:
    full = attn_decode_work(1, 8192, 32, 8, 128)
    slid = attn_decode_work(1, 8192, 32, 8, 128, window=1024)
    assert slid.bytes < full.bytes / 7 and slid.flops == full.flops / 8
    pre = attn_prefill_work(4096, 0, 32, 8, 128)
    pre_w = attn_prefill_work(4096, 0, 32, 8, 128, window=128)
    # 4096 queries attend at most 128 keys each (the first 128 fewer)
    assert pre_w.flops == pytest.approx(4 * 32 * 128 * (128 * 129 / 2 + (4096 - 128) * 128))
    assert pre.flops == pytest.approx(4 * 32 * 128 * 4096 * 4097 / 2)


def test_the_device_and_kernel_path_come_from_the_hardware_profile() -> None:
    spark = get_profile("dgx-spark")
    dev = device(spark)
    assert dev.bandwidth == pytest.approx(273e9) and dev.peak("fp8") == pytest.approx(250e12)
    assert kernel_precision(spark, "fp8-channel", moe=True) == ("TRITON Fp8 W8A8", "fp8")
    # NVFP4 with FP4 activations: FlashInfer's CUTLASS FP4 MoE on SM12x (issue 40: only the
    # weight-only NVFP4A16 falls back to Marlin, which dequantizes to BF16)
    assert kernel_precision(spark, "nvfp4", moe=True) == ("FLASHINFER_CUTLASS W4A4", "fp4")
    assert kernel_precision(spark, "nvfp4a16", moe=True) == ("MARLIN W4A16", "bf16")
    assert kernel_precision(spark, "gguf:Q4_K", moe=False)[1] == "bf16"
    t_mem, t_comp = gemm_work(1, 4096, 4096, "bf16").times(dev)
    assert t_mem == pytest.approx((4096 * 4096 * 2 + 2 * 8192) / 273e9 * 1e3)
    assert t_comp < t_mem
