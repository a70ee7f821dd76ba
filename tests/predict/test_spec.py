"""A speculative step from a checkpoint and its prediction (servelab.predict.spec), on
synthetic weights at the seed model's dimensions and hand-set coefficients."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.families import model_dims
from servelab.predict.form import Coefficients
from servelab.predict.levels import Fit
from servelab.predict.spec import SpecStep, check_method, model_bytes, predict_step, spec_step
from servelab.predict.specstep import DraftFit
from servelab.sizing.weights import Weights
from servelab.synth.replica_presets import preset_config

DIMS = model_dims(preset_config("qwen3.6-35b-a3b"))  # 40 layers, 256 experts top-8, 1 MTP layer
# 256 experts x 3 x 2048 x 512 parameters in each of 40 layers
ROUTED_PARAMS = 40 * 256 * 3 * 2048 * 512


def _weights(mtp_bytes: int, lm_head: int = 1_000_000_000) -> Weights:
    return Weights(
        name="m", resident_bytes=20 * 10**9, decode_bytes_per_token=2_600_000_000,
        routed_expert_bytes=18_000_000_000, active_params=1, total_params=1, scheme="nvfp4",
        quant_label="nvfp4", num_experts=256, experts_per_token=8, routed_expert_bits=4.5,
        mtp_tensors=19 if mtp_bytes else 0, mtp_bytes=mtp_bytes, vision_bytes=0, source="t",
        lm_head_bytes=lm_head, routed_expert_params=ROUTED_PARAMS,
    )


def test_the_head_splits_into_its_routed_experts_and_the_rest() -> None:
    # a BF16 head: one layer's 256 x 3 x 2048 x 512 routed parameters at 2 bytes
    one_layer = 256 * 3 * 2048 * 512 * 2
    mb = model_bytes(_weights(one_layer + 80_000_000), DIMS)
    assert (mb.head_routed, mb.head_non_routed, mb.head_layers) == (one_layer, 80_000_000, 1)
    # per token: the non-routed weights 2.6 GB - 18 GB x 8/256
    assert mb.non_routed == 2_600_000_000 - 18_000_000_000 * 8 // 256
    assert mb.lm_head == 1_000_000_000
    # a head smaller than one BF16 layer of experts (quantized): all of it counted as experts
    small = model_bytes(_weights(100), DIMS)
    assert (small.head_routed, small.head_non_routed) == (100, 0)


def test_spec_step_from_the_checkpoint() -> None:
    w = _weights(256 * 3 * 2048 * 512 * 2 + 80_000_000)
    st = spec_step(w, DIMS, 3, 2048, kv_bytes=40_000_000, state_bytes=120_000_000,
                   kv_dtype_bytes=2)
    assert (st.method, st.draft_tokens, st.draft_passes) == ("mtp", 3, 3)
    assert st.step_layers == 40 + 3 and st.expert_slots == (40 + 3) * 256
    assert st.step_bytes == st.verify_bytes + st.draft_bytes
    # three draft passes read the lm_head three times
    assert st.draft_bytes > 3 * 1_000_000_000
    ngram = spec_step(w, DIMS, 3, 2048, kv_bytes=40_000_000, state_bytes=120_000_000,
                      kv_dtype_bytes=2, method="ngram")
    assert (ngram.draft_bytes, ngram.draft_passes, ngram.verify_bytes) == (0, 1, st.verify_bytes)


def test_methods_servelab_cannot_predict_say_why() -> None:
    assert check_method("mtp", _weights(0)) is not None
    assert check_method("mtp", _weights(10)) is None
    assert "separate head checkpoint" in (check_method("eagle3", _weights(10)) or "")
    assert check_method("ngram", _weights(0)) is None


def _fit(rel: float | None) -> Fit:
    theta = Coefficients.of("decode", s_per_byte=1e-12, s_fixed=1e-3)
    return Fit("decode", theta, "stored runs", "synthetic", ("a",), 3, rel, "synthetic")


STEP = SpecStep(2048, 2, 10**10, 42, 0, "mtp", 9 * 10**9, 10**9, 2)


def test_a_step_is_the_form_plus_its_draft_passes() -> None:
    # device 10 GB x 1 ps = 10 ms (over the 1 ms host floor) + 2 passes x 1 ms = 12 ms;
    # 3 tokens per step: 250 tok/s
    draft = DraftFit("mtp", 1e-3, ("h",), 3, 0.5, "synthetic")
    tok, lo, hi = predict_step(_fit(0.25), draft, STEP, "cuda", 3.0, bound=1e9)
    assert tok == pytest.approx(250.0)
    # form 10 ms within 8 to 13.33 ms, draft 2 ms within 1 to 3 ms
    assert lo == pytest.approx(3.0 / (10e-3 / 0.75 + 3e-3))
    assert hi == pytest.approx(3.0 / 9e-3)
    # no measured step: the form alone, the draft term counted from none to none
    tok0, lo0, hi0 = predict_step(_fit(0.25), None, STEP, "cuda", 3.0, bound=1e9)
    assert tok0 == pytest.approx(300.0) and hi0 == pytest.approx(3.0 / 8e-3)
    assert lo0 == pytest.approx(3.0 / (10e-3 / 0.75))
    # a host-bound step: the 20 ms host floor hides 2 ms of draft passes
    slow_host = Fit("decode", Coefficients.of("decode", s_per_byte=1e-12, s_fixed=20e-3),
                    "stored runs", "synthetic", ("a",), 3, 0.25, "synthetic")
    tok_h, _, _ = predict_step(slow_host, draft, STEP, "cuda", 3.0, bound=1e9)
    assert tok_h == pytest.approx(3.0 / 20e-3)
    # on a CPU everything adds: 10 + 20 + 2 ms
    tok_c, _, _ = predict_step(slow_host, draft, STEP, "cpu", 3.0, bound=1e9)
    assert tok_c == pytest.approx(3.0 / 32e-3)
    # no decode interval, no step interval; no fit, no prediction
    assert predict_step(_fit(None), draft, STEP, "cuda", 3.0, bound=1e9)[1:] == (None, None)
    assert predict_step(None, draft, STEP, "cuda", 3.0, bound=1e9) == (None, None, None)


def test_plan_of_an_mtp_build_on_a_machine_without_a_measured_step(tmp_path: Path) -> None:
    """`servelab plan` of an NVFP4 Qwen3.6 replica with its BF16 MTP head on the DGX Spark,
    k=3 at a given acceptance: the step reads the lm_head once per draft pass, and its draft
    term is the H200's measured one, labelled as a fallback from another machine."""
    from servelab.engines import get_engine
    from servelab.hardware.lookup import get_profile
    from servelab.hardware.topology import topology_for
    from servelab.pipeline.planning import plan_checkpoint
    from servelab.plan.request import PlanRequest, Speculation, StoreChoice
    from servelab.sizing.knobs import EngineKnobs
    from servelab.synth.replica import TEXT_LINEARS, QuantLayout, write_replica
    from servelab.synth.replica_presets import QWEN3_6_35B_A3B

    path = tmp_path / "nvfp4-mtp"
    write_replica(path, QWEN3_6_35B_A3B, QuantLayout("nvfp4", TEXT_LINEARS), mtp="fused")
    arithmetic = get_engine("vllm").kv_arithmetic()
    assert arithmetic is not None
    spark = get_profile("dgx-spark")
    plan = plan_checkpoint(PlanRequest(
        str(path), spark, topology_for(spark.name), arithmetic,
        startup_rules=get_engine("vllm").startup_rules, engine_version="0.26.0",
        prompt_lens=(2048,), store=StoreChoice(use=False),
        knobs=EngineKnobs(max_model_len=262144, kv_cache_memory_bytes=6 * 2**30),
        speculation=Speculation(acceptance=(3.0, 4.0), method="mtp", draft_tokens=3)))
    assert plan.speculative is not None and plan.speculative.kind == "given"
    (step,) = plan.speed.spec_steps
    assert (step.method, step.draft_passes) == ("mtp", 3)
    lm_head = 248_320 * 2048 * 2  # BF16, read by every draft pass
    assert step.draft_bytes > 3 * lm_head
    three, four = plan.speed.mtp
    for m in (three, four):
        assert m.draft_pass_s is not None and m.draft_pass_s > 0
        assert "fallback: no mtp step measured on dgx-spark; from h200" in m.draft_source
        assert m.predicted_low is not None and m.predicted_high is not None
        assert m.predicted_tok_s is not None
        assert m.predicted_low < m.predicted_tok_s < m.predicted_high <= m.roofline_tok_s
    assert three.predicted_tok_s is not None
    assert four.predicted_tok_s == pytest.approx(three.predicted_tok_s * 4 / 3)  # one step
