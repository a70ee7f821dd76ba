"""Stored runs come back as speed-model samples and calibrate the next prediction."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from servelab.evidence.runs import (
    checkpoint_names,
    ledger_for_runs,
    run_graph_tokens,
    samples_from_run,
    samples_from_runs,
)
from servelab.hardware.lookup import get_profile
from servelab.predict.calibration import calibration_for
from servelab.predict.ledger import LedgerRow
from servelab.predict.priors import PriorTable, load_priors
from servelab.sizing.weights import Weights
from servelab.store import open_store
from servelab.store.exchange import run_from_dict
from servelab.store.model import Metric, RunRecord

GB = 1e9
ROOT = Path(__file__).resolve().parents[2]
H200_RESULTS = ROOT / "benchmarks" / "gpu" / "results"


def _run(model: str, decode: float, nbytes: float, layers: int) -> RunRecord:
    speed = {
        "bandwidth": 4.8e12,
        "kernel_path": {"name": "TRITON Fp8 W8A8"},
        "compute_precision": "fp8",
        "decode": [{"context_len": 512, "bytes_per_token": int(nbytes), "weight_bytes":
                    int(nbytes)}],
        "prefill": [{"prompt_len": 512, "flops": 512 * 6.0e9, "bytes_read": int(30 * GB)}],
    }
    return RunRecord(
        started_at=datetime(2026, 12, 2, tzinfo=UTC), recipe_name=model, model_id=model,
        engine_name="vllm", engine_version="0.26.0", hardware="h200",
        prediction={"speed": speed, "dims": {"num_layers": layers}},
        metrics=(Metric("decode_tok_s", decode, "p512-c1", n=16, unit="tok/s"),
                 Metric("prefill_tok_s", 20_000.0, "p512-c1", n=16, unit="tok/s")),
    )


def _weights() -> Weights:
    return Weights(name="new", resident_bytes=int(30 * GB), decode_bytes_per_token=int(3 * GB),
                   routed_expert_bytes=int(28 * GB), active_params=3_000_000_000,
                   total_params=30_000_000_000, scheme="fp8", quant_label="fp8",
                   num_experts=128, experts_per_token=8, routed_expert_bits=8.0, mtp_tensors=0,
                   mtp_bytes=0, vision_bytes=0, source="test")


def test_stored_runs_calibrate_the_next_prediction(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "r.db")) as store:
        store.add_run(_run("a", 240.0, 3 * GB, 48))
        store.add_run(_run("b", 420.0, 1.6 * GB, 24))
        runs = store.list_runs()
    stored = [s for r in runs for s in samples_from_run(r)]
    assert {(s.name, s.kind) for s in stored} == {
        ("a [2,861.0 MiB/token]", "decode"), ("a [2,861.0 MiB/token]", "prefill"),
        ("b [1,525.9 MiB/token]", "decode"), ("b [1,525.9 MiB/token]", "prefill")}
    cal = calibration_for(samples_from_runs(runs), get_profile("h200"), _weights())
    # two stored builds against the shipped priors' eight on the path: one level of both
    # (a level with less evidence never replaces one with more)
    assert cal.decode.level == "stored runs with prior"
    assert {"a", "b"} < set(cal.decode.models) and len(cal.decode.models) >= 9
    assert cal.decode.rel_error is not None  # leave-one-model-out over all of them
    assert "fitted from stored runs (vllm / TRITON Fp8 W8A8 / h200)" in cal.decode.label()
    assert ", pooled with prior from" in cal.decode.label()


def test_one_stored_build_joins_the_priors_below_it(tmp_path: Path) -> None:
    # One stored build on h200 cannot be left out against itself, nor outweigh the shipped
    # H200 priors of its path: it joins them, and the interval is their leave-one-model-out.
    runs = [_run("a", 240.0, 3 * GB, 48)]
    cal = calibration_for(samples_from_runs(runs), get_profile("h200"), _weights())
    assert cal.decode.level == "stored runs with prior" and cal.decode.rel_error is not None
    assert "a" in cal.decode.models and "leave-one-model-out" in cal.decode.error_basis
    assert any("shipped priors table" in n for n in cal.notes)


def test_no_run_on_this_hardware_falls_back_to_the_shipped_priors() -> None:
    runs = [_run("a", 240.0, 3 * GB, 48)]
    cal = calibration_for(samples_from_runs(runs), get_profile("dgx-spark"), _weights())
    assert cal.decode.level.startswith("prior")
    assert any("shipped priors table" in n for n in cal.notes)


def test_the_committed_redacted_h200_export_still_calibrates() -> None:
    doc = json.loads((H200_RESULTS / "run-h200-qwen3-30b-a3b-fp8.json").read_text())
    (raw,) = doc["runs"]
    assert raw["prediction"]["speed"]["decode"][0]["bytes_per_token"] == "[REDACTED]"
    run = run_from_dict(raw)
    samples = samples_from_run(run)
    decode = {s.length: s for s in samples if s.kind == "decode"}
    point = raw["prediction"]["speed"]["decode"][0]
    assert decode[512].bytes_read == point["weight_bytes"] + point["kv_bytes"]
    assert decode[512].layers == 48 and decode[512].tok_s == pytest.approx(235.6, abs=0.1)
    assert {s.kind for s in samples} == {"decode", "prefill"} and len(samples) == 6
    # The export redacted the experts per token and predates the plan's dims; the routed
    # experts' FLOPs still come out as for the later run of the same build, which has both.
    assert raw["checkpoint_report"]["experts"]["per_token"] == "[REDACTED]"
    assert "dims" not in raw["prediction"]
    later = H200_RESULTS / "calibration-2026-12-03-night" / "runs-h200-calibration.json"
    again = [run_from_dict(r) for r in json.loads(later.read_text())["runs"]
             if r["model_id"] == raw["model_id"] and r["status"] == "ok"]
    assert again and again[0].prediction and again[0].prediction["dims"]["experts_per_token"] == 8
    first = {s.length: s.expert_flops for s in samples if s.kind == "prefill"}
    second = {s.length: s.expert_flops for s in samples_from_run(again[0]) if s.kind == "prefill"}
    assert first == second and first[512] == 2 * 48 * 8 * (3 * 2048 * 768) * 512


def test_every_h200_calibration_run_becomes_samples() -> None:
    doc = json.loads(
        (H200_RESULTS / "calibration-2026-12-03" / "runs-h200-calibration.json").read_text())
    runs = [run_from_dict(r) for r in doc["runs"]]
    samples = samples_from_runs(runs)
    models = {s.build.model for s in samples}
    assert models == {"llama-3.1-8b-bf16-random", "qwen3-30b-a3b-bf16-24l-random",
                      "qwen3-next-bf16-12l-random"}
    assert {s.kernel_path for s in samples} == {"bf16 dense (default)", "bf16 MoE (default)"}


def test_an_mtp_run_is_a_speculative_step_sample_and_an_ngram_run_is_none() -> None:
    """t_step = measured acceptance / measured tok/s, costed by the plan's stored step."""
    steps = [{"context_len": 512, "draft_tokens": 2, "step_bytes": int(4 * GB),
              "step_layers": 42, "expert_slots": 42 * 128}]

    def drafting(method: str) -> RunRecord:
        base = _run("m", 300.0, 3 * GB, 40)
        assert base.prediction is not None
        spec = json.dumps({"method": method, "num_speculative_tokens": 2})
        counters = {"spec_decode_num_drafts": 100.0, "spec_decode_num_draft_tokens": 200.0,
                    "spec_decode_num_accepted_tokens": 80.0}  # acceptance 1.8
        speed = {**base.prediction["speed"], "spec_steps": steps}
        return RunRecord(
            started_at=base.started_at, run_id="r-" + method, recipe_name="m", model_id="m",
            engine_name="vllm", hardware="h200", status="ok",
            engine_args=("python", "--speculative-config", spec),
            prediction={**base.prediction, "speed": speed}, metrics=base.metrics,
            extra={"bench": {"server_counters": counters}},
        )

    (s,) = samples_from_run(drafting("qwen3_next_mtp"))
    assert s.kind == "decode" and s.length == 512 and s.build.step == "mtp k=2"
    assert s.seconds == pytest.approx(1.8 / 300.0)
    assert (s.bytes_read, s.layers, s.expert_slots) == (4 * GB, 42, 42 * 128)
    assert "speculative step: mtp k=2, measured acceptance 1.80" in s.source
    assert (s.spec_method, s.draft_passes, s.is_step) == ("mtp", 2, True)
    # a plan from before the step's parts stored MTP steps only: its n-gram run gives none
    assert samples_from_run(drafting("ngram")) == []
    # a plan that stores the n-gram step's parts: one host lookup per step
    steps[0] = {**steps[0], "method": "ngram", "draft_passes": 1, "step_layers": 40}
    (n,) = samples_from_run(drafting("ngram"))
    assert (n.spec_method, n.draft_passes, n.layers) == ("ngram", 1, 40)
    assert n.build.step == "ngram k=2"


def _h200_session(name: str) -> dict[str, RunRecord]:
    doc = json.loads((H200_RESULTS / name / "runs-h200-calibration.json").read_text())
    runs = [run_from_dict(r, source=name) for r in doc["runs"]]
    return {r.recipe_name or "": r for r in runs if r.status == "ok"}


def _eager(run: RunRecord) -> dict[int, bool]:
    return {s.length: s.eager for s in samples_from_run(run) if s.kind == "prefill"}


def test_a_prefill_past_the_largest_cuda_graph_is_an_eager_sample() -> None:
    """The committed H200 runs: the afternoon's Llama-3.2-3B ran with --max-num-seqs 64 (graphs
    up to 128 tokens, the 512-token prompt eager), the evening's with vLLM's default (up to 512);
    their logs say 128 / 512 / 384 (MTP k=2), and the rule on their flags gives the same."""
    pm = _h200_session("calibration-2026-12-03-pm")
    eve = _h200_session("calibration-2026-12-03-eve")
    small, default = pm["llama-3.2-3b-bf16-h200"], eve["llama-3.2-3b-bf16-graphs512-h200"]
    assert run_graph_tokens(small) == 128 and run_graph_tokens(default) == 512
    assert run_graph_tokens(eve["qwen3.6-35b-a3b-bf16-mtp2-h200"]) == 384
    assert _eager(small) == {512: True, 2048: True, 8192: True}
    assert _eager(default) == {512: False, 2048: True, 8192: True}
    # what the engine's own log said wins over the rule
    facts = {**(default.engine_facts or {}), "cudagraph_capture_max": 4096}
    logged = replace(default, engine_facts=facts)
    assert run_graph_tokens(logged) == 4096
    assert _eager(logged) == {512: False, 2048: False, 8192: True}
    # and on a CPU there are no graphs: no eager column either
    assert all(s.features.amount("s_per_eager_layer") == 0.0
               and s.features.amount("s_per_expert_slot") == 0.0 for s in samples_from_run(replace(
        default, prediction={**(default.prediction or {}), "hardware": {"platform": "cpu"}}))
        if s.kind == "prefill")


def test_runs_of_one_checkpoint_are_left_out_together() -> None:
    """The Qwen3.6 MTP run was served under another name than the plain runs of the same
    checkpoint; leave-one-model-out must not fit its step from them: its rows come out the
    same whether or not the plain runs are stored."""
    runs = [*_h200_session("calibration-2026-12-03-pm").values(),
            *_h200_session("calibration-2026-12-03-eve").values()]
    names = dict(zip((r.recipe_name for r in runs), checkpoint_names(runs), strict=True))
    assert names["qwen3.6-35b-a3b-bf16-mtp2-h200"] == "qwen3.6-35b-a3b-bf16-random"
    assert names["qwen3.6-35b-a3b-bf16-h200"] == "qwen3.6-35b-a3b-bf16-random"
    assert names["qwen3-235b-a22b-fp8-16l-h200"] == "qwen3-235b-a22b-fp8-16l-random"

    def steps(rows: tuple[LedgerRow, ...]) -> list[tuple[int, float | None]]:
        return [(r.length, r.predicted_tok_s) for r in rows if r.model.endswith(" step]")]

    # The shipped priors name builds, not checkpoints: without the plain runs nothing ties
    # their Qwen3.6 rows (a decode profile among them) to the MTP run's own name, so they are
    # left out of both ledgers here.
    table = load_priors()
    kept = tuple(s for s in table.samples if not s.build.model.startswith("qwen3.6"))
    others = PriorTable(table.version, kept, table.origin)
    with_plain = steps(ledger_for_runs(runs, others))
    plain = {"qwen3.6-35b-a3b-bf16-h200", "qwen3.6-35b-a3b-bf16-mns256-h200"}
    without = steps(ledger_for_runs([r for r in runs if r.recipe_name not in plain], others))
    assert len(with_plain) == len(without) == 3
    for (n, got), (m, alone) in zip(with_plain, without, strict=True):
        assert n == m and got == pytest.approx(alone, rel=1e-4)  # least-squares rounding only
    assert all(r.startswith("qwen3.6-35b-a3b-bf16-random [") for r in
               {row.model for row in ledger_for_runs(runs) if row.model.endswith(" step]")})
