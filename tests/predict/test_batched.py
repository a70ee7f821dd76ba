"""The batched step model and the scheduler replay, pinned on synthetic inputs (no timing)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.plan.inputs import plan_of

from servelab.errors import InputError, UsageError
from servelab.families import model_dims, presets
from servelab.hardware.profiles import BUILTIN
from servelab.plan.load import (
    BatchedError,
    LoadRequest,
    MeasuredCapacity,
    _search,
    answer,
    predict_load,
)
from servelab.predict.batched import StepCosts, StepModel, kv_curve, step_costs
from servelab.predict.costs import attention_flops, kv_read_bytes
from servelab.predict.form import Coefficients
from servelab.predict.levels import Calibration, Fit, Target
from servelab.predict.schedule import Limits, Load, requests_admitted, simulate, stats
from servelab.predict.speed import predict_speed
from servelab.sizing.startup import BatchedTokens
from servelab.sizing.weights import Weights
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

GIB = 1 << 30
H200 = BUILTIN["h200"]
DIMS = model_dims(QWEN3_6_35B_A3B)


def _weights() -> Weights:
    return Weights(
        name="w", resident_bytes=40 * GIB, decode_bytes_per_token=4 * GIB,
        routed_expert_bytes=30 * GIB, active_params=3_000_000_000,
        total_params=35_000_000_000, scheme="bf16", quant_label="", num_experts=256,
        experts_per_token=8, routed_expert_bits=16.0, mtp_tensors=0, mtp_bytes=0,
        vision_bytes=0, source="test", lm_head_params=500_000_000,
        routed_expert_params=15 * (1 << 30),
    )


def _fit(kind: str, theta: tuple[float, ...], rel: float = 0.1) -> Fit:
    return Fit(kind=kind, theta=Coefficients(kind, theta), level="test", source="synthetic fit",
               models=("a", "b"), n_samples=6, rel_error=rel, error_basis="synthetic")


DECODE = _fit("decode", (1 / 4.0e12, 20e-6, 1e-8, 0.0, 2e-3), 0.05)
PREFILL = _fit("prefill", (1 / 6e14, 1 / 3e14, 1 / 4.0e12, 20e-6, 1e-8,
                           40e-6, 60e-6, 1e-3, 2e-6, 10e-3), 0.2)


def _model(graph_tokens: int | None = 512) -> StepModel:
    return StepModel(costs=step_costs(_weights(), DIMS, 2), decode=DECODE, prefill=PREFILL,
                     platform="cuda", graph_tokens=graph_tokens)


def test_one_request_is_the_single_stream_prediction() -> None:
    cal = Calibration(Target("vllm", "bf16", "h200"), DECODE, PREFILL)
    single = predict_speed(_weights(), DIMS, H200, prompt_lens=[512, 2048, 8192],
                           calibration=cal, graph_tokens=512)
    m = _model()
    for d in single.decode:
        assert m.decode_step([d.context_len]) == pytest.approx(1.0 / d.predicted_tok_s, rel=1e-6)
    for p in single.prefill:
        assert m.mixed_step([], [(0, p.prompt_len)]) == pytest.approx(
            p.prompt_len / p.predicted_tok_s, rel=1e-6)


def test_a_step_reads_the_weights_once_and_each_requests_kv() -> None:
    m = _model()
    # one 2,048-token request adds 2,048 x 10 full layers x 2 x 2 heads x 256 x 2 B of KV
    assert m.curve.read(2048) == 2048 * 20480
    assert m.routed_bytes(1) == pytest.approx(30 * GIB * 8 / 256)
    # distinct experts of B top-8 draws out of 256: 1 - (1 - 8/256)^B
    for b in (2, 16, 64):
        assert m.routed_bytes(b) == pytest.approx(30 * GIB * (1 - (1 - 8 / 256) ** b))
    # more requests: never faster a step, and much less than B single steps
    one = m.decode_step([2048])
    steps = [m.decode_step([2048] * b) for b in (1, 4, 16, 64)]
    assert steps == sorted(steps)
    assert steps[-1] < 64 * one / 4


@pytest.mark.parametrize("name", ["gemma-3-27b", "gpt-oss-20b", "deepseek-v3", "llama-4-scout",
                                  "nemotron-nano-9b-v2", "mistral-7b"])
def test_kv_curve_reads_what_single_stream_reads_by_layer_kind(name: str) -> None:
    _, preset = presets()[name]
    dims = model_dims(preset.config())
    curve = kv_curve(dims, 2)
    for c in (1, 127, 128, 1024, 5000, 8192, 9000, 131_072):
        assert curve.read(c) == kv_read_bytes(dims, c, 2)


@pytest.mark.parametrize("name", ["gemma-3-27b", "gpt-oss-20b", "deepseek-v3", "llama-4-scout",
                                  "nemotron-nano-9b-v2", "mistral-7b"])
def test_step_costs_stored_and_read_back_price_steps_alike(name: str) -> None:
    # a stored run is re-predicted from its plan document: the costs it holds must give the
    # same attention FLOPs as the dims, and the same steps after a JSON round trip
    _, preset = presets()[name]
    dims = model_dims(preset.config())
    costs = step_costs(_weights(), dims, 2)
    for n in (1, 127, 1024, 5000, 131_072):
        assert costs.attention_flops(n) == pytest.approx(attention_flops(dims, n), rel=1e-12)
    back = StepCosts.from_dict(json.loads(json.dumps(costs.to_dict())))
    assert back == costs
    a = StepModel(costs=costs, decode=DECODE, prefill=PREFILL, platform="cuda")
    b = StepModel(costs=back, decode=DECODE, prefill=PREFILL, platform="cuda")
    assert a.mixed_step([512] * 3, [(1024, 700)]) == b.mixed_step([512] * 3, [(1024, 700)])


def test_unreadable_step_costs_are_an_input_error() -> None:
    d = step_costs(_weights(), DIMS, 2).to_dict()
    del d["kv"]
    with pytest.raises(InputError, match="step costs"):
        StepCosts.from_dict(d)


def test_long_prompts_beside_decoders_make_their_steps_longer() -> None:
    m = _model()
    alone = m.decode_step([512] * 15)
    beside = [m.mixed_step([512] * 15, [(0, n)]) for n in (512, 2048, 8192 - 15)]
    assert alone < beside[0] < beside[1] < beside[2]


def _const(step_s: float = 1.0, per_token: float = 0.0):  # type: ignore[no-untyped-def]
    def cost(contexts, chunks):  # type: ignore[no-untyped-def]
        return step_s + per_token * sum(n for _, n in chunks)
    return cost


def test_one_stream_gets_a_token_a_step_after_its_prompt() -> None:
    t = simulate(_const(), Load(100, 10, 1, concurrency=1), Limits(8192, 256, 1000))
    assert [(x.ttft, x.finish) for x in t] == [(1.0, 10.0)]
    assert t[0].tpot == 1.0 and not t[0].queued


def test_a_prompt_longer_than_the_budget_is_chunked_beside_the_decoders() -> None:
    seen: list[tuple[int, tuple[tuple[int, int], ...]]] = []

    def cost(contexts, chunks):  # type: ignore[no-untyped-def]
        seen.append((len(contexts), tuple(chunks)))
        return 1.0

    # two clients, 20-token prompts, a budget of 8 tokens a step
    simulate(cost, Load(20, 5, 2, concurrency=2), Limits(8, 256, 1000))
    assert seen[:4] == [
        (0, ((0, 8),)),
        (0, ((8, 8),)),
        (0, ((16, 4), (0, 4))),  # the first prompt ends; the second starts with what is left
        (1, ((4, 7),)),  # one decode token, then the second prompt's next chunk
    ]


def test_beyond_the_kv_pool_requests_queue_and_ttft_includes_the_wait() -> None:
    t = simulate(_const(), Load(10, 5, 4, concurrency=4), Limits(8192, 256, 2))
    first, waited = t[:2], t[2:]
    assert all(x.ttft == 1.0 and not x.queued for x in first)
    # the two admitted finish after 5 steps; the others start then
    assert all(x.queued and x.admitted == 5.0 and x.ttft == 6.0 for x in waited)
    s = stats(t, Load(10, 5, 4, concurrency=4))
    assert s.queued == 2 and s.ttft_p50_s == pytest.approx(3.5)


def test_closed_loop_clients_send_again_when_a_request_ends() -> None:
    load = Load(10, 4, 6, concurrency=2)
    t = simulate(_const(), load, Limits(8192, 256, 1000))
    assert len(t) == 6
    assert [x.arrival for x in t] == [0.0, 0.0, 4.0, 4.0, 8.0, 8.0]
    s = stats(t, load)
    # Little's law: 2 clients x 4 tokens / 4 s mean E2E
    assert s.output_tok_s == pytest.approx(2.0)


def test_closed_loop_waves_stay_together_as_vllm_schedules_a_step_ahead() -> None:
    """Four clients start together; a step with a prompt chunk costs 10 s, a decode-only step
    1 s; the budget (20 tokens) holds two 10-token prompts a step, so the first wave's prompts
    queue: TTFT 10, 10, 20, 30 s. vLLM schedules step k + 1 while step k runs, and a client's
    next request goes out once its last token does (after step k + 1 was launched), so it is
    first scheduled in step k + 3: the rest of the first wave ends on decode-only steps (no
    prompt beside it), and the second wave's prompts arrive within those steps and queue
    behind each other as the first wave's did."""
    def cost(contexts, chunks):  # type: ignore[no-untyped-def]
        return 10.0 if chunks else 1.0

    load = Load(10, 20, 8, concurrency=4)
    t = simulate(cost, load, Limits(20, 256, 1000))
    first, second = t[:4], t[4:]
    assert [x.ttft for x in first] == [10.0, 10.0, 20.0, 30.0]
    ends = [x.finish for x in first]
    assert max(ends) - min(ends) == 2.0  # two decode steps apart, no prompt step between
    # the first client's next request: two decode steps after its end, then its prompt step
    assert second[0].arrival == ends[0] and second[0].first_token == ends[0] + 1 + 1 + 10
    ttft = [x.ttft for x in second]
    assert ttft == sorted(ttft) and ttft[-1] - ttft[0] > 10.0  # a wave again: it queues
    # a scheduler that sees each request at the next step lets the waves come apart: each
    # client's next prompt runs beside the first wave's decoders, which it holds up
    old = simulate(cost, load, Limits(20, 256, 1000), ahead=False)
    old_ends = [x.finish for x in old[:4]]
    assert max(old_ends) - min(old_ends) >= 2 * 10.0
    assert old[-1].ttft - old[4].ttft < 10.0


def test_constant_rate_arrivals_are_evenly_spaced() -> None:
    t = simulate(_const(0.1), Load(10, 3, 5, rate=2.0), Limits(8192, 256, 1000))
    assert [x.arrival for x in t] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert all(x.ttft == pytest.approx(0.1) for x in t)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 4000), budget=st.integers(16, 8192), c=st.integers(1, 8),
       o=st.integers(1, 20))
def test_every_request_finishes_with_its_tokens(p: int, budget: int, c: int, o: int) -> None:
    load = Load(p, o, 2 * c, concurrency=c)
    t = simulate(_const(1.0, 1e-4), load, Limits(budget, 256, 1000))
    assert len(t) == 2 * c
    steps_of_prompt = math.ceil(p / budget)
    assert all(x.first_token >= x.admitted + steps_of_prompt - 1e-9 for x in t)
    assert all(x.finish - x.first_token >= o - 1 - 1e-9 for x in t)


def test_load_and_limits_are_checked() -> None:
    with pytest.raises(UsageError):
        Load(10, 1, 1)
    with pytest.raises(UsageError):
        Load(10, 1, 1, concurrency=2, rate=1.0)
    with pytest.raises(UsageError):
        Limits(8192, 256, 0)


def test_capacity_search_finds_the_edge() -> None:
    assert _search(lambda x: x <= 37, "concurrency", 1024) == 37
    assert _search(lambda x: x <= 0, "concurrency", 1024) is None
    assert _search(lambda x: True, "concurrency", 64) == 64
    r = _search(lambda x: x <= 3.3, "rate", 1024)
    assert r is not None and 3.3 / 1.011 <= r <= 3.3


def _plan():  # type: ignore[no-untyped-def]
    from servelab.synth.replica_presets import QWEN3_6_35B_A3B as config

    cal = Calibration(Target("vllm", "bf16", "h200"), DECODE, PREFILL)
    return plan_of(dict(config), _weights(), H200, max_model_len=40960,
                      kv_cache_memory_bytes=16 * GIB, engine_version="0.26.0", calibration=cal)


def test_admission_follows_the_pools_own_concurrency() -> None:
    plan = _plan()
    kv = plan.kv
    assert requests_admitted(kv, kv.max_model_len) == math.floor(kv.max_concurrency)
    assert requests_admitted(kv, 2048 + 128) >= requests_admitted(kv, 8192 + 128)


def test_intervals_mix_decode_and_prefill_by_their_share_of_the_time() -> None:
    plan = _plan()
    loads = [Load(512, 64, 3, concurrency=1), Load(8192, 64, 32, concurrency=16)]
    lp = predict_load(plan, loads, BatchedTokens(8192, "test"))
    short, long = lp.points
    for pt in lp.points:
        assert pt.rel_error == pytest.approx(0.05 * (1 - pt.prefill_share)
                                             + 0.2 * pt.prefill_share)
        assert pt.tpot_s.low < pt.tpot_s.value < pt.tpot_s.high
        assert pt.stream_tok_s.low < pt.stream_tok_s.value < pt.stream_tok_s.high
    assert long.prefill_share > short.prefill_share
    assert long.tpot_s.value > short.tpot_s.value
    assert lp.to_dict()["predicted"] is True


def test_on_a_gpu_more_requests_stream_inside_the_layers_latency() -> None:
    m = _model()
    s_byte, s_layer, s_slot, _, _ = DECODE.theta
    layers, slots = DIMS.num_layers, DIMS.num_layers * DIMS.num_experts
    one = (m.costs.fixed_bytes + m.routed_bytes(1) + m.curve.read(512)
           + m.state_bytes)
    latency = layers * s_layer + one * s_byte
    for b in (2, 8, 64):
        streamed = (m.costs.fixed_bytes + m.routed_bytes(b)
                    + b * (m.curve.read(512) + m.state_bytes)) * s_byte
        dense, expert = m.s_per_flop
        extra = 2.0 * (b - 1) * ((m.costs.active_params - m.costs.active_routed_params)
                                 * dense + m.costs.active_routed_params * expert)
        assert m.decode_step([512] * b) == pytest.approx(
            max(max(latency, streamed) + slots * s_slot + extra, DECODE.theta.get("s_fixed")))


def test_on_a_cpu_every_term_adds() -> None:
    m = StepModel(costs=step_costs(_weights(), DIMS, 2),
                  decode=_fit("decode", (1e-10, 1e-4, 0.0, 0.0, 1e-3)), prefill=PREFILL,
                  platform="cpu")
    one, four = m.decode_step([512]), m.decode_step([512] * 4)
    extra_bytes = (m.routed_bytes(4) - m.routed_bytes(1)
                   + 3 * (m.curve.read(512) + m.state_bytes))
    dense, expert = m.s_per_flop
    extra_flops_s = 2.0 * 3 * ((m.costs.active_params - m.costs.active_routed_params) * dense
                               + m.costs.active_routed_params * expert)
    assert four - one == pytest.approx(extra_bytes * 1e-10 + extra_flops_s)


def test_a_gpu_load_with_many_prompt_tokens_in_flight_names_the_measured_stall() -> None:
    plan = _plan()
    tokens = BatchedTokens(8192, "test")
    few = predict_load(plan, [Load(2048, 8, 8, concurrency=4)], tokens)
    many = predict_load(plan, [Load(2048, 8, 32, concurrency=16)], tokens)
    assert not any("stalled" in n for n in few.notes)
    assert any("stalled" in n for n in many.notes)


def test_a_run_stores_its_recipes_sweep_as_predicted_under_load() -> None:
    from servelab.pipeline.run import load_prediction
    from servelab.serve.recipe import Recipe

    recipe = Recipe.model_validate({
        "name": "t", "model": {"path": "/nowhere"},
        "bench": {"prompt_tokens": [512], "output_tokens": 16, "concurrency": [1, 4],
                  "repetitions": 8, "max_repetitions": 8},
    })
    doc = load_prediction(recipe, _plan())
    assert doc["predicted"] is True and doc["no_prediction"] is None
    pts = doc["points"]["points"]
    assert [(p["concurrency"], p["requests"]) for p in pts] == [(1, 8), (4, 8)]
    assert doc["points"]["max_num_batched_tokens"] == 8192  # the H200's default


def test_the_batched_forms_measured_error_widens_and_can_refuse_the_intervals() -> None:
    # issue 31: where stored sweeps measured the batched form's held-out error, an interval
    # is no narrower than it (a level with less evidence never replaces one with more); one
    # over the 4x rule is no prediction, and the label names the source
    plan = _plan()
    tokens = BatchedTokens(8192, "test")
    loads = [Load(512, 16, 8, concurrency=4), Load(2048, 16, 32, concurrency=16)]
    alone = predict_load(plan, loads, tokens)
    assert all(0.05 <= p.rel_error <= 0.2 for p in alone.points)  # the fits' mix
    assert any("batched form's own error is not in" in n for n in alone.notes)
    measured = BatchedError("h200", 0.5, 0.55, 2, 12, "two stored sweeps")
    wider = predict_load(plan, loads, tokens, measured)
    for a, w in zip(alone.points, wider.points, strict=True):
        assert w.tpot_s.value == a.tpot_s.value  # the same simulation
        assert w.rel_error == max(a.rel_error, 0.5)
        assert w.tpot_s.high == pytest.approx(w.tpot_s.value * 1.5)
        assert w.ttft_s.low == pytest.approx(w.ttft_s.value * 0.45)
        assert w.output_tok_s_per_gpu.low == pytest.approx(w.output_tok_s_per_gpu.value / 1.5)
        assert not w.no_prediction  # 1.55 / 0.45 = 3.4x: still a prediction
    assert "batched form's ±50% (TTFT ±55%): two stored sweeps" in wider.error_basis
    refused = predict_load(plan, loads, tokens,
                           BatchedError("h200", 0.5, 0.61, 2, 12, "two stored sweeps"))
    assert all(p.no_prediction for p in refused.points)  # 1.61 / 0.39 = 4.1x
    assert any("no prediction" in n for n in refused.notes)


def test_a_cpu_step_charges_a_requests_fixed_cost_once_in_the_corrected_form() -> None:
    # issue 31: the pre-registered CPU form prices a step holding a prompt chunk with the
    # prefill form of the whole step (its fixed part and the decoders' bytes at the prefill
    # fit's per-byte rate); the corrected form is the decoders' decode step plus what the
    # chunk adds to an empty prefill, and a lone chunk is still the single-stream prefill
    decode = _fit("decode", (1e-10, 1e-4, 0.0, 0.0, 1e-3))
    prefill = _fit("prefill", (1e-12, 2e-12, 3e-8, 0.0, 0.0, 0.0, 0.0, 0.0, 1e-6, 5e-3))
    old = StepModel(costs=step_costs(_weights(), DIMS, 2), decode=decode, prefill=prefill,
                    platform="cpu", cpu_step_fixed="prefill")
    new = StepModel(costs=step_costs(_weights(), DIMS, 2), decode=decode, prefill=prefill,
                    platform="cpu", cpu_step_fixed="decode")
    assert new.mixed_step([], [(0, 512)]) == old.mixed_step([], [(0, 512)])
    c = new.costs
    chunk = [(1024, 700)]
    attention = c.attention_flops(1724) - c.attention_flops(1024)
    flops = (2.0 * (c.active_params - c.lm_head_params) * 700 + 2.0 * c.lm_head_params
             + attention + c.state_flops_per_token * 700)  # logits of the chunk's last token
    nbytes = (c.fixed_bytes + new.routed_bytes(700) + c.kv_write_per_token * 700
              + new.curve.read(1024))
    theta = prefill.theta.as_dict()
    # a CPU row counts the routed experts' FLOPs with the rest (predict.form)
    added = ((nbytes - c.fixed_bytes) * theta["s_per_byte"] + flops * theta["s_per_flop"]
             + 700 * theta["s_per_prompt_token"])
    contexts = [512] * 3
    assert new.mixed_step(contexts, chunk) == pytest.approx(new.decode_step(contexts) + added)
    assert old.mixed_step(contexts, chunk) > new.mixed_step(contexts, chunk)
    with pytest.raises(UsageError, match="cpu_step_fixed"):
        StepModel(costs=c, decode=decode, prefill=prefill, platform="cpu", cpu_step_fixed="x")


def test_a_stored_capacity_sits_beside_the_prediction_of_the_same_search() -> None:
    plan = _plan()
    req = LoadRequest((512, 2048), 16, slo="tpot_p50=40")
    same = MeasuredCapacity("tpot_p50<=40ms", "concurrency", 512, 16, 12.0, "run-a")
    other_slo = MeasuredCapacity("tpot_p50<=30ms", "concurrency", 512, 16, 9.0, "run-b")
    other_len = MeasuredCapacity("tpot_p50<=40ms", "concurrency", 512, 32, 7.0, "run-c")
    ans = answer(plan, req, measured=[same, other_slo, other_len])
    doc = ans.to_dict()
    by_len = {c["prompt_len"]: c for c in doc["capacity"]}
    assert [m["run_id"] for m in by_len[512]["measured"]] == ["run-a"]
    assert by_len[2048]["measured"] == []
    assert len(doc["measured_capacity"]) == 3
    assert by_len[512]["capacity"] is not None and by_len[512]["predicted"] is True
