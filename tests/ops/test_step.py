"""A step's time as the sum of its operators, on the shipped H200 tables."""

from __future__ import annotations

import json

import pytest

from servelab.ops.costs import Costs
from servelab.ops.model import step_model
from servelab.ops.step import EngineSteps, SeqGroup, StepShape, step_time
from servelab.ops.tables import shipped
from servelab.synth.replica_presets import QWEN3_6_35B_A3B, preset_config


@pytest.fixture(scope="module")
def costs() -> Costs:
    return Costs([shipped()["h200-vllm-0.26.0"]])


def _model(name: str):  # type: ignore[no-untyped-def]
    return step_model(json.loads(json.dumps(preset_config(name))), name=name)


def test_decode_is_the_sum_of_its_items_with_a_source(costs: Costs) -> None:
    st = step_time(_model("qwen2.5-7b"), costs, StepShape.decode(1, 1024))
    assert st.device_ms == pytest.approx(sum(i.total_ms for i in st.items))
    assert st.graph and st.total_ms == max(st.device_ms, st.host_ms)
    ops = st.by_op()
    assert "gemm mlp.gate_up_proj" in ops and "attention (decode)" in ops
    assert all(i.lookup.table.startswith("h200-vllm-0.26.0/") for i in st.items)
    assert any("not included" in n for n in st.notes)


def test_longer_context_and_bigger_batches_cost_more(costs: Costs) -> None:
    m = _model("mistral-7b")
    short = step_time(m, costs, StepShape.decode(1, 512)).device_ms
    long = step_time(m, costs, StepShape.decode(1, 32768)).device_ms
    wide = step_time(m, costs, StepShape.decode(64, 512)).device_ms
    assert short < long and short < wide


def test_a_mixed_step_costs_at_least_its_prefill_alone(costs: Costs) -> None:
    m = _model("qwen2.5-7b")
    pre = step_time(m, costs, StepShape.prefill(2048), EngineSteps(cuda_graph_max=0))
    mixed = step_time(m, costs, StepShape((SeqGroup(2048 // 2048, 0, 2048),
                                           SeqGroup(32, 4096, 1))))
    assert mixed.device_ms > pre.device_ms
    assert not mixed.graph  # a step with a prefill is not replayed from a full graph


def test_moe_step_says_how_many_experts_it_touches(costs: Costs) -> None:
    m = step_model(json.loads(json.dumps(QWEN3_6_35B_A3B)))
    st = step_time(m, costs, StepShape.decode(4, 2048))
    note = next(n for n in st.notes if n.startswith("MoE"))
    assert "uniform routing" in note and "of 256 experts" in note
    assert "gated_deltanet (decode)" in st.by_op() and "fused_moe" in st.by_op()


def test_an_unmeasured_expert_format_is_refused_not_guessed(costs: Costs) -> None:
    from servelab.errors import UsageError

    with pytest.raises(UsageError, match="mxfp4"):
        step_time(_model("gpt-oss-20b"), costs, StepShape.decode(1, 512))


def test_the_shipped_set_measured_its_isolation_adjustment(costs: Costs) -> None:
    from servelab.ops.step import measured_isolation

    iso = measured_isolation(costs)
    assert iso is not None
    frac, cap, source = iso
    assert 0 < frac <= 1 and 0 < cap < 0.05 and source.endswith("compose.json")
    m = _model("qwen2.5-7b")
    raw = step_time(m, costs, StepShape.decode(1, 1024))
    adj = step_time(m, costs, StepShape.decode(1, 1024),
                    EngineSteps(isolation_frac=frac, isolation_cap_ms=cap))
    n = sum(i.count for i in raw.items)
    assert raw.device_ms - n * cap <= adj.device_ms < raw.device_ms
    assert any("back-to-back" in note for note in adj.notes)
