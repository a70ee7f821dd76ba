"""Calibration from measured runs, and explaining two builds ("bytes beat kernels")."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tests.plan.inputs import planning_inputs

from servelab.errors import InputError
from servelab.hardware.profiles import BUILTIN
from servelab.plan.build import Plan, build_plan
from servelab.plan.calibrate import (
    Measurement,
    fit_efficiencies,
    load_measurements,
    lookup,
)
from servelab.plan.explain import explain

GIB = 1 << 30
SPARK = BUILTIN["dgx-spark"]
# The seed recipe's measured single-stream decode of Qwen3.6-35B-A3B-FP8 on one Spark
# (tok/s at 512 / 2,048 / 8,192-token prompts), vLLM 0.24.0 and 0.26.0, TRITON Fp8 MoE.
SEED_DECODE = {"0.24.0": (38.63, 38.27, 37.42), "0.26.0": (38.97, 38.70, 37.76)}
LENS = (512, 2048, 8192)


def _plan(path: Path, **kw: object) -> Plan:
    config, weights = planning_inputs(path)
    return build_plan(config, weights, SPARK, max_model_len=262_144, kv_cache_memory_bytes=6 * GIB,
                      prompt_lens=LENS, **kw)  # type: ignore[arg-type]


def _seed_runs(plan: Plan) -> list[Measurement]:
    backend = plan.speed.kernel_path.name
    return [
        Measurement(
            engine="vllm", engine_version=v, backend=backend, hardware="dgx-spark",
            kind="decode", length=n, tok_s=tok_s, cost_per_token=d.bytes_per_token,
            label="seed recipe, Spark-1, 2026-07-28",
        )
        for v, speeds in SEED_DECODE.items()
        for n, tok_s, d in zip(LENS, speeds, plan.speed.decode, strict=True)
    ]


def test_fit_per_version_with_spread_and_calibrated_prediction(qwen36_fp8: Path) -> None:
    roof = _plan(qwen36_fp8, engine_version="0.24.0")
    fits = fit_efficiencies(_seed_runs(roof), lambda _: SPARK)
    assert len(fits) == 2
    eff = lookup(fits, engine="vllm", engine_version="0.24.0",
                 backend=roof.speed.kernel_path.name, hardware="dgx-spark", kind="decode")
    assert eff is not None and eff.n == 3 and eff.matched == "exact"
    assert 0 < eff.low <= eff.median <= eff.high < 1
    cal = _plan(qwen36_fp8, engine_version="0.24.0", decode_efficiency=eff)
    # One efficiency explains all three context lengths to within 3 %.
    for point, measured in zip(cal.speed.decode, SEED_DECODE["0.24.0"], strict=True):
        assert point.calibrated_tok_s is not None
        assert abs(point.calibrated_tok_s - measured) / measured < 0.03
        assert point.roofline_tok_s > point.calibrated_tok_s
    other = lookup(fits, engine="vllm", engine_version="0.25.0",
                   backend=roof.speed.kernel_path.name, hardware="dgx-spark", kind="decode")
    assert other is not None and other.matched == "any version" and other.n == 6
    assert lookup(fits, engine="vllm", engine_version="0.24.0", backend="x", hardware="h200",
                  kind="decode") is None


def test_calibration_json_round_trip_and_errors(tmp_path: Path, qwen36_fp8: Path) -> None:
    runs = _seed_runs(_plan(qwen36_fp8, engine_version="0.24.0"))
    f = tmp_path / "runs.json"
    f.write_text(json.dumps([dataclasses.asdict(m) for m in runs]))
    assert load_measurements(f) == runs
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"engine": "vllm"}]))
    with pytest.raises(InputError, match=r"bad\.json: run \[0\]: missing"):
        load_measurements(bad)
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_measurements(bad)
    neg = dataclasses.asdict(runs[0]) | {"tok_s": -1}
    bad.write_text(json.dumps([neg]))
    with pytest.raises(InputError, match="positive"):
        load_measurements(bad)


def test_explain_fp8_vs_nvfp4a16_says_bytes_beat_kernels(
    qwen36_fp8: Path, qwen36_nvfp4a16: Path
) -> None:
    fp8 = _plan(qwen36_fp8, engine_version="0.26.0")
    nv = _plan(qwen36_nvfp4a16, engine_version="0.26.0")
    e = explain(fp8, nv, context_index=1)
    assert e.a.kernel_path == "TRITON Fp8 W8A8" and e.b.kernel_path == "MARLIN W4A16"
    assert e.bytes_ratio < 1  # the FP4 build reads fewer bytes per token
    assert e.speed_ratio == pytest.approx(e.bytes_ratio * e.efficiency_ratio)
    assert e.verdict.startswith("Bytes beat kernels")
    assert e.a.routed_expert_bits is not None and e.a.routed_expert_bits > 8
    assert e.b.routed_expert_bits is not None and e.b.routed_expert_bits == pytest.approx(4.5, 0.01)
    assert e.to_dict()["predicted"] is True

