"""``servelab plan`` on hardware without operator tables (issue 39 item 4, the DGX Spark):
where the top-down model has no prefill prediction, each operator's roofline over the
efficiencies fitted to the hardware's published vLLM points predicts it, chunked at the engine's
step budget, with the held-out interval; the load model prices prompt chunks on the same
rooflines beside the decode prediction's steps, so ``plan --concurrency --slo`` answers. Real
header replicas at published dimensions, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.engines import get_engine
from servelab.hardware.lookup import get_profile
from servelab.hardware.topology import topology_for
from servelab.ops.efficiency import interval
from servelab.ops.fitted import predict, predict_prefill, shipped_fits
from servelab.ops.model import step_model
from servelab.ops.step import StepShape
from servelab.pipeline.planning import plan_checkpoint
from servelab.plan.build import Plan
from servelab.plan.load import step_model as load_step_model
from servelab.plan.request import PlanRequest, StoreChoice
from servelab.predict.ops_fitted import LEVEL, RooflinePrefillSteps
from servelab.synth.replica import write_replica
from servelab.synth.replica_presets import preset_config, preset_layout

runner = CliRunner()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("spark-replicas")
    out = {}
    for name in ("gpt-oss-120b", "qwen2.5-7b"):
        write_replica(root / name, preset_config(name), preset_layout(name, None, None))
        out[name] = root / name
    name = "qwen3.6-nvfp4"  # NVFP4 weights: the operator model has no such layout
    write_replica(root / name, preset_config("qwen3.6-35b-a3b"),
                  preset_layout("qwen3.6-35b-a3b", "nvfp4", None))
    out[name] = root / name
    return out


def _plan(path: Path, hw: str, *extra: str) -> tuple[int, dict[str, Any]]:
    res = runner.invoke(app, ["plan", str(path), "-H", hw, "--json", "--no-store", *extra])
    assert res.exit_code in (0, 1), res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return res.exit_code, doc


def _spark() -> object:
    return get_profile("dgx-spark")


def test_spark_prefill_from_the_fitted_rooflines(replicas: dict[str, Path]) -> None:
    """Each prefill point is the fitted rooflines' chunked prefill of the build's operators
    (8,192-token steps), its interval the shipped fit's held-out prefill errors on the
    Spark; the fit names its level, source and basis; decode is left as it was."""
    _, doc = _plan(replicas["gpt-oss-120b"], "dgx-spark", "--prompt-lens", "1024,16384")
    sp = doc["speed"]
    fit = sp["prefill_fit"]
    assert fit["level"] == LEVEL
    assert "roofline on dgx-spark over efficiencies fitted to" in fit["label"], fit["label"]
    assert "held-out vllm prefill points on dgx-spark" in fit["label"]
    config = json.loads((replicas["gpt-oss-120b"] / "config.json").read_text())
    model = step_model(config, None)
    for p in sp["prefill"]:
        pr = predict_prefill(model, p["prompt_len"], 8192, _spark(), "vllm")
        assert p["predicted_tok_s"] == pytest.approx(p["prompt_len"] / pr.ms * 1e3)
        assert pr.interval.low_ms is not None and pr.interval.high_ms is not None
        assert p["predicted_low"] == pytest.approx(
            min(p["prompt_len"] / pr.interval.high_ms * 1e3, p["roofline_tok_s"]))
        assert p["predicted_low"] < p["predicted_tok_s"] <= p["predicted_high"]
    assert sp["decode_fit"]["level"] != LEVEL
    assert any("decode keeps its own prediction" in n for n in sp["notes"])


def test_long_prompt_is_the_sum_of_its_chunks() -> None:
    """A prompt of two budgets is two steps, the second over the first's prefix; the
    interval is the fit's held-out width around the sum."""
    model = step_model(preset_config("qwen2.5-7b"), None)
    spark = _spark()
    whole = predict_prefill(model, 4096, 2048, spark, "vllm")
    a = predict(model, StepShape.prefill(2048, 0), spark, "vllm")
    b = predict(model, StepShape.prefill(2048, 2048), spark, "vllm")
    assert whole.ms == pytest.approx(a.ms + b.ms)
    assert b.ms > a.ms  # the second chunk attends over the first
    errs = shipped_fits()["vllm"][1]
    want = interval(a.ms + b.ms, errs, "dgx-spark", "vllm", "prefill")
    assert whole.interval == want


def test_load_prices_chunks_beside_the_decode_steps(replicas: dict[str, Path]) -> None:
    """A lone prompt's step is its single-stream prefill; a step with decoders costs their
    decode step plus the chunk's marginal time, less than the two apart (the weights are
    read once); decode-only steps are the decode prediction's batched form."""
    code, doc = _plan(replicas["gpt-oss-120b"], "dgx-spark", "--prompt-lens", "1024",
                      "--concurrency", "1,16")
    assert code == 0
    pre = doc["speed"]["prefill"][0]
    ones = [p for p in doc["load"]["points"]["points"] if p["concurrency"] == 1]
    assert ones[0]["ttft_s"]["value"] == pytest.approx(1024 / pre["predicted_tok_s"], rel=0.05)
    plan = _built(replicas["gpt-oss-120b"])
    m = load_step_model(plan)
    assert isinstance(m, RooflinePrefillSteps)
    alone = m.mixed_step([], [(0, 1024)])
    assert alone * 1e3 == pytest.approx(1024 / pre["predicted_tok_s"] * 1e3, rel=1e-6)
    dec = m.mixed_step([2048] * 8, [])
    both = m.mixed_step([2048] * 8, [(0, 1024)])
    assert dec < both < dec + alone
    assert dec == pytest.approx(m.decode_step([2048] * 8))


def _built(path: Path) -> Plan:
    """The plan ``servelab plan PATH -H dgx-spark --no-store --prompt-lens 1024`` builds."""
    arithmetic = get_engine("vllm").kv_arithmetic()
    assert arithmetic is not None
    spark = get_profile("dgx-spark")
    return plan_checkpoint(PlanRequest(
        str(path), spark, topology_for(spark.name), arithmetic,
        startup_rules=get_engine("vllm").startup_rules, prompt_lens=(1024,),
        store=StoreChoice(use=False)))


def test_slo_answer_on_the_spark(replicas: dict[str, Path]) -> None:
    """``plan --concurrency 1,16,64 --slo`` answers on the Spark with an interval, its load
    source naming both steps' evidence."""
    code, doc = _plan(replicas["qwen2.5-7b"], "dgx-spark", "--prompt-lens", "1024",
                      "--concurrency", "1,16,64", "--slo", "tpot_p99=100,ttft_p99=3000")
    assert code == 0
    load = doc["load"]
    cap = load["capacity"][0]
    assert cap["capacity"] is not None and cap["low"] is not None and cap["high"] is not None
    assert cap["low"] <= cap["capacity"] <= cap["high"]
    assert "held-out vllm prefill points on dgx-spark" in load["points"]["error_basis"]


def test_not_used_where_it_does_not_apply(replicas: dict[str, Path]) -> None:
    """Hardware with operator tables keeps them; a format the operator model has no layout
    for keeps "no prediction" with the reason in one note; llama.cpp is not this fit's."""
    _, h200 = _plan(replicas["qwen2.5-7b"], "h200", "--prompt-lens", "1024")
    assert h200["speed"]["prefill_fit"]["level"] != LEVEL
    _, nv = _plan(replicas["qwen3.6-nvfp4"], "dgx-spark", "--prompt-lens", "1024")
    assert nv["speed"]["prefill_fit"]["level"] != LEVEL
    why = [n for n in nv["speed"]["notes"]
           if n.startswith(f"prefill: {LEVEL} not used on dgx-spark")]
    assert len(why) == 1 and "nvfp4" in why[0], nv["speed"]["notes"]
