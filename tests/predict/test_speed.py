"""Roofline prediction: decode bytes over bandwidth, prefill FLOPs over compute."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.plan.inputs import plan_of, planning_inputs

from servelab.errors import UsageError
from servelab.families import model_dims
from servelab.hardware.profiles import BUILTIN
from servelab.predict.calibration import calibration_for
from servelab.predict.roofline import roofline_decode_tok_s
from servelab.predict.speed import predict_speed
from servelab.sizing.weights import Weights
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

GIB = 1 << 30
SPARK = BUILTIN["dgx-spark"]
DIMS = model_dims(QWEN3_6_35B_A3B)


def _weights(decode_bytes: int, scheme: str = "bf16") -> Weights:
    return Weights(
        name="w", resident_bytes=40 * GIB, decode_bytes_per_token=decode_bytes,
        routed_expert_bytes=30 * GIB, active_params=3_000_000_000,
        total_params=35_000_000_000, scheme=scheme, quant_label="", num_experts=256,
        experts_per_token=8, routed_expert_bits=8.0, mtp_tensors=0, mtp_bytes=0,
        vision_bytes=0, source="test",
    )


@settings(max_examples=60, deadline=None)
@given(
    a=st.integers(min_value=1 << 20, max_value=100 * GIB),
    extra=st.integers(min_value=1, max_value=10 * GIB),
    ctx=st.integers(min_value=1, max_value=262_144),
)
def test_predicted_decode_falls_as_bytes_per_token_grow(a: int, extra: int, ctx: int) -> None:
    small = predict_speed(_weights(a), DIMS, SPARK, prompt_lens=[ctx])
    big = predict_speed(_weights(a + extra), DIMS, SPARK, prompt_lens=[ctx])
    assert big.decode[0].roofline_tok_s < small.decode[0].roofline_tok_s
    assert big.decode[0].bytes_per_token - small.decode[0].bytes_per_token == extra


@settings(max_examples=40, deadline=None)
@given(b=st.floats(min_value=1.0, max_value=1e12), bw=st.floats(min_value=1e9, max_value=1e13))
def test_roofline_is_bandwidth_over_bytes(b: float, bw: float) -> None:
    assert roofline_decode_tok_s(b, bw) == pytest.approx(bw / b)
    assert roofline_decode_tok_s(b * 2, bw) < roofline_decode_tok_s(b, bw)


def test_decode_reads_more_kv_at_longer_contexts() -> None:
    pred = predict_speed(_weights(4 * GIB), DIMS, SPARK, prompt_lens=[512, 2048, 8192])
    kv = [d.kv_bytes for d in pred.decode]
    # 10 full-attention layers x 2 x 2 KV heads x 256 x 2 B = 20 KiB per context token.
    assert kv == [512 * 20480, 2048 * 20480, 8192 * 20480]
    speeds = [d.roofline_tok_s for d in pred.decode]
    assert speeds == sorted(speeds, reverse=True)
    assert all(d.predicted for d in pred.decode)


def test_prefill_is_bandwidth_bound_short_and_compute_bound_long() -> None:
    pred = predict_speed(_weights(4 * GIB, "fp8"), DIMS, SPARK, prompt_lens=[16, 16384])
    short, long = pred.prefill
    assert short.bound == "bandwidth" and long.bound == "compute"
    # the profile's path for FP8 on a GB10, calibrated under the name its priors carry
    assert (pred.kernel_path.name, pred.kernel_path.key) == ("TRITON W8A8", "TRITON Fp8 W8A8")
    assert pred.compute_precision == "fp8"


def test_weight_only_fp4_moe_on_spark_prefills_at_bf16_rate_not_fp4() -> None:
    nv = predict_speed(_weights(4 * GIB, "nvfp4a16"), DIMS, SPARK, prompt_lens=[16384])
    assert nv.kernel_path.name == "MARLIN W4A16"
    assert nv.compute_rate == SPARK.compute["bf16"]
    # NVFP4 with FP4 activations takes a native FP4 MoE backend on SM12x (vLLM's NvFp4
    # oracle), so its prefill computes at the FP4 rate
    w4a4 = predict_speed(_weights(4 * GIB, "nvfp4"), DIMS, SPARK, prompt_lens=[16384])
    assert (w4a4.kernel_path.name, w4a4.compute_rate) == ("FLASHINFER_CUTLASS W4A4",
                                                          SPARK.compute["fp4"])
    b200 = predict_speed(_weights(4 * GIB, "nvfp4"), DIMS, BUILTIN["b200"], prompt_lens=[16384])
    assert b200.compute_precision == "fp4"


def test_mtp_speedup_grows_with_acceptance_length() -> None:
    w = dataclasses.replace(_weights(4 * GIB), mtp_tensors=19, mtp_bytes=int(1.573 * GIB))
    pred = predict_speed(
        w, DIMS, SPARK, prompt_lens=[2048], acceptance_lengths=[1.0, 2.0, 3.0, 4.0],
        draft_tokens=3, calibration=calibration_for([], SPARK, w),
    )
    ups = [m.speedup for m in pred.mtp]
    assert all(u is not None for u in ups)
    assert ups == sorted(ups) and ups[0] < 1.0 < ups[-1]  # type: ignore[operator]
    # The step verifies 4 tokens and drafts 3: it reads more than one token's bytes.
    assert all(m.step_bytes > pred.decode[0].bytes_per_token for m in pred.mtp)
    assert all(m.predicted_low is not None and m.predicted_high is not None for m in pred.mtp)
    uncalibrated = predict_speed(w, DIMS, SPARK, prompt_lens=[2048], acceptance_lengths=[2.0],
                                 draft_tokens=3)
    assert uncalibrated.mtp[0].predicted_tok_s is None  # no calibration: a bound, no prediction
    with pytest.raises(UsageError, match="acceptance length"):
        predict_speed(w, DIMS, SPARK, acceptance_lengths=[5.0], draft_tokens=3)


def test_fp8_build_plan_on_spark(qwen36_fp8: Path) -> None:
    config, weights = planning_inputs(qwen36_fp8)
    plan = plan_of(
        config, weights, SPARK, max_model_len=262_144,
        kv_cache_memory_bytes=6 * GIB, engine_version="0.24.0",
    )
    d = plan.to_dict()
    assert d["predicted"] is True and d["speed"]["predicted"] is True
    assert all(p["predicted"] for p in d["speed"]["decode"] + d["speed"]["prefill"])
    assert d["kv_pool"]["tokens"] == 308_955
    assert d["fits"]["fits"] is True
    assert d["fits"]["largest_context_at_concurrency_1"] == 262_144
    assert any("ships no mtp" in n for n in d["notes"])
    # Pure roofline is an upper bound on the seed's measured 38.27 tok/s at 2,048.
    assert plan.speed.decode[1].roofline_tok_s > 38.27


def test_a_35_gib_build_does_not_fit_a_32_gb_card(qwen36_fp8: Path) -> None:
    config, weights = planning_inputs(qwen36_fp8)
    plan = plan_of(config, weights, BUILTIN["rtx-5090"], max_model_len=32768)
    assert plan.memory.kv_pool_bytes == 0 and not plan.memory.fits
    assert plan.memory.headroom_bytes < 0
    assert plan.largest_context_c1 == 0 and plan.kv.tokens == 0
    assert plan.to_dict()["fits"]["fits"] is False
    roomy = plan_of(config, weights, BUILTIN["rtx-pro-6000"], max_model_len=262_144)
    assert roomy.memory.fits and roomy.largest_context_c1 == 262_144
