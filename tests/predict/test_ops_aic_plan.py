"""``servelab plan`` on GPUs where servelab has no operator tables but AIConfigurator has
(issue 39: H100, B200): decode, prefill and load from servelab's composition over
AIConfigurator's tables with the H200-fitted transfer, through the CLI on real header
replicas of stored builds; a build the tables cannot express, and a machine without the
optional extra, keep the fitted prediction with one note saying why."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.ops import aicgpu
from servelab.ops.model import step_model
from servelab.ops.step import EngineSteps, StepShape, step_time
from servelab.predict.ops_source import runs_doc
from servelab.synth.replica import write_replica
from servelab.synth.replica_presets import preset_config, preset_layout

pytestmark = pytest.mark.skipif(not __import__("servelab.ops.aic", fromlist=["x"]).available(),
                                reason="needs the aiconfigurator extra (scripts/lib.sh)")
runner = CliRunner()
BUILDS = runs_doc("h200-vllm-0.26.0")["builds"]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("aic-replicas")
    out = {}
    for name in ("llama-3.1-8b-bf16-random", "qwen3-30b-a3b-bf16-random"):
        write_replica(root / name, BUILDS[name]["config"])
        out[name] = root / name
    name = "nemotron-nano-9b-v2"  # Mamba2 layers: AIConfigurator timed no such kernel
    write_replica(root / name, preset_config(name), preset_layout(name, None, None))
    out[name] = root / name
    return out


def _plan(path: Path, hw: str, *extra: str) -> dict[str, Any]:
    res = runner.invoke(app, ["plan", str(path), "-H", hw, "--json", "--no-store",
                              "--prompt-lens", "512,2048", *extra])
    assert res.exit_code in (0, 1), res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


@pytest.mark.parametrize(("build", "hw"), [("llama-3.1-8b-bf16-random", "h100"),
                                           ("qwen3-30b-a3b-bf16-random", "b200")])
def test_plan_predicts_from_aiconfigurator_tables(replicas: dict[str, Path], build: str,
                                                  hw: str) -> None:
    """Decode and prefill are the operator model's, each the package's composition over
    AIConfigurator's tables for this GPU plus the transfer's overhead (one step at the
    context; a prompt of one step pays the prefill overhead once), with the H200 held-out
    interval x exp(±w) carried as is, and a source naming the tables."""
    sp = _plan(replicas[build], hw)["speed"]
    tr = aicgpu.transfer()
    costs = aicgpu.costs_for(hw)
    model = step_model(BUILDS[build]["config"], None)
    for kind, points in (("decode", sp["decode"]), ("prefill", sp["prefill"])):
        fit = sp[f"{kind}_fit"]
        assert fit["level"] == "operator model"
        assert (f"composition over aiconfigurator-core 0.12.0's {hw.upper()} kernel tables"
                in fit["label"]), fit["label"]
        assert "measured under vLLM 0.24.0" in fit["label"]
        assert f"H200's held-out interval, carried to the {hw.upper()} as is" in fit["label"]
        assert [p.get("context_len", p.get("prompt_len")) for p in points] == [512, 2048]
        w = tr.half_width_log[kind]
        for p in points:
            tok, lo, hi = p["predicted_tok_s"], p["predicted_low"], p["predicted_high"]
            assert lo == pytest.approx(min(tok * math.exp(-w), p["roofline_tok_s"]))
            assert hi == pytest.approx(min(tok * math.exp(w), p["roofline_tok_s"]))
            if kind == "decode":
                want = aicgpu.predict(model, hw, StepShape.decode(1, p["context_len"]),
                                      costs, tr).ms
                assert 1e3 / tok == pytest.approx(want, rel=1e-9)
            else:
                n = p["prompt_len"]
                want = aicgpu.predict(model, hw, StepShape.prefill(n), costs, tr).ms
                assert n / tok * 1e3 == pytest.approx(want, rel=1e-9)
    assert sp["notes"] == [n for n in sp["notes"] if "roofline only" not in n]


def test_long_prompt_is_chunked_at_the_engines_budget(replicas: dict[str, Path]) -> None:
    """A prompt longer than one step is prefilled in chunks of the step token budget vLLM
    starts with on that GPU (its start-up default: 16,384 on a B200 with >= 160 GiB, 8,192 on
    an H100), as the load simulator's steps are, not a fixed budget."""
    n = 16384
    tr = aicgpu.transfer()
    model = step_model(BUILDS["llama-3.1-8b-bf16-random"]["config"], None)
    for hw, chunk in (("b200", 16384), ("h100", 8192)):
        res = runner.invoke(app, ["plan", str(replicas["llama-3.1-8b-bf16-random"]), "-H", hw,
                                  "--json", "--no-store", "--prompt-lens", str(n)])
        assert res.exit_code in (0, 1), res.output
        (p,) = json.loads(res.stdout)["speed"]["prefill"]
        costs = aicgpu.costs_for(hw)
        eng = EngineSteps(cuda_graph_max=0, isolation_frac=tr.isolation_frac,
                          isolation_cap_ms=tr.isolation_cap_ms)
        ops = sum(step_time(model, costs, StepShape.prefill(min(chunk, n - s), s),
                            eng).total_ms for s in range(0, n, chunk))
        want = ops + tr.overhead_ms["prefill"]
        assert n / p["predicted_tok_s"] * 1e3 == pytest.approx(want, rel=1e-6), hw


def test_plan_answer_names_the_tables(replicas: dict[str, Path]) -> None:
    """The answer block prints a decode and prefill prediction with an interval and says
    where they come from (not "no run of vLLM on h100 yet")."""
    res = runner.invoke(app, ["plan", str(replicas["llama-3.1-8b-bf16-random"]), "-H", "h100",
                              "--no-store", "--prompt-lens", "1024", "--brief"])
    assert res.exit_code in (0, 1), res.output
    text = " ".join(res.output.split())
    assert "decode" in text and "tok/s (" in text and ") predicted, one stream" in text
    assert "prefill" in text and "predicted for a 1,024-token prompt" in text
    assert "basis AIConfigurator's h100 kernel timings composed by servelab" in text
    assert "no run of vLLM on h100" not in text


def test_tables_lacking_a_kernel_keep_the_fitted_prediction(
        replicas: dict[str, Path]) -> None:
    """Nemotron-Nano-9B-v2's Mamba2 layers: AIConfigurator timed no Mamba2 kernel for them,
    so the plan keeps its fitted (here: roofline) prediction and says why in one note."""
    doc = _plan(replicas["nemotron-nano-9b-v2"], "h100")
    assert doc["speed"]["decode_fit"]["level"] != "operator model"
    notes = [n for n in (*doc["notes"], *doc["speed"]["notes"]) if "operator model" in n]
    assert len(notes) == 1, notes
    assert notes[0].startswith("operator model not used (AIConfigurator's H100 tables): no "
                               "mamba generation measurement"), notes


def test_without_the_extra_one_note_and_the_fitted_prediction(
        replicas: dict[str, Path]) -> None:
    """Where the aiconfigurator extra is not installed (marked unimportable, as Python does
    for a missing module), the plan does not fail: one note says what to install."""
    code = ("import sys; sys.modules['aiconfigurator_core'] = None; "
            "from servelab.cli.app import main; main()")
    res = subprocess.run([sys.executable, "-c", code, "plan",
                          str(replicas["llama-3.1-8b-bf16-random"]), "-H", "h100", "--json",
                          "--no-store", "--prompt-lens", "1024"],
                         capture_output=True, text=True, check=False)
    assert res.returncode in (0, 1), res.stderr
    doc = json.loads(res.stdout)
    assert doc["speed"]["decode_fit"]["level"] == "roofline"
    notes = [n for n in (*doc["notes"], *doc["speed"]["notes"]) if "operator model" in n]
    assert notes == ["operator model not used (AIConfigurator's H100 tables): AIConfigurator's "
                     "tables need the optional extra: pip install 'servelab[aiconfigurator]'; "
                     "the fitted prediction is shown"], notes


def test_load_from_the_same_composition(replicas: dict[str, Path]) -> None:
    """``plan --concurrency`` on the H100 simulates steps priced by the same composition: its
    source names AIConfigurator's tables, one stream's TPOT is the single-stream decode step
    over the contexts it decodes at, and 16 streams share each step (several times one
    stream's output rate, though each of their prompts still takes its own prefill)."""
    doc = _plan(replicas["llama-3.1-8b-bf16-random"], "h100", "--concurrency", "1,16",
                "--output-len", "64")
    load = doc["load"]["points"]
    assert load["source"].startswith("batched step model over operator model: servelab's "
                                     "composition over aiconfigurator-core"), load["source"]
    ones = [p for p in load["points"] if p["concurrency"] == 1]
    sixteens = [p for p in load["points"] if p["concurrency"] == 16]
    assert ones and sixteens
    for one, sixteen in zip(ones, sixteens, strict=True):
        assert not one["no_prediction"] and not sixteen["no_prediction"]
        dec = next(d for d in doc["speed"]["decode"] if d["context_len"] == one["prompt_len"])
        tpot = one["tpot_s"]["value"]
        assert tpot == pytest.approx(1.0 / dec["predicted_tok_s"], rel=0.02)
        assert one["tpot_s"]["low"] < tpot < one["tpot_s"]["high"]
        assert sixteen["tpot_s"]["value"] > tpot
        assert (sixteen["output_tok_s_per_gpu"]["value"] >
                4 * one["output_tok_s_per_gpu"]["value"])


def test_fitted_prediction_with_more_evidence_is_kept() -> None:
    """A fitted decode prediction from runs or published points of this GPU whose own interval
    is no wider than the H200's interval carried to it keeps its place (a level with less
    evidence never replaces one with more); a wider one, the roofline, or a refused fit give
    way to the tables; servelab's own H200 tables (not carried) are never second to a fit."""
    from servelab.predict.form import Coefficients
    from servelab.predict.levels import Fit
    from servelab.predict.ops_aic import aic_tables
    from servelab.predict.ops_source import shipped_tables
    from servelab.predict.ops_speed import _more_evidence

    tables = aic_tables("h100")
    carried = math.tanh(tables.decode.log_width)
    theta = Coefficients.of("decode", s_per_byte=1e-12)

    def fit(level: str, rel: float | None) -> Fit:
        return Fit("decode", theta, level, "stored runs", ("a", "b"), 12, rel, "held out")

    why = _more_evidence(fit("engine, kernel path, hardware", carried * 0.8), tables)
    assert why is not None and "rests on runs of this hardware" in why
    assert _more_evidence(fit("engine, kernel path, hardware", carried * 1.2), tables) is None
    assert _more_evidence(fit("roofline", None), tables) is None
    assert _more_evidence(fit("engine, kernel path, hardware", 0.9), tables) is None  # refused
    own = shipped_tables("h200")
    assert own is not None
    assert _more_evidence(fit("engine, kernel path, hardware", 0.01), own) is None


def test_h200_kernel_its_own_tables_lack_comes_from_aiconfigurators(tmp_path: Path) -> None:
    """gpt-oss-120b on the H200: servelab's own H200 tables timed no MXFP4 fused MoE, so the
    plan composes its steps over AIConfigurator's H200 tables (which time OpenAI's Triton
    MXFP4 experts), says why in one note, keeps the interval the composition has on the
    H200 (not "carried"), and answers under load."""
    write_replica(tmp_path / "gpt-oss-120b", preset_config("gpt-oss-120b"),
                  preset_layout("gpt-oss-120b", None, None))
    doc = _plan(tmp_path / "gpt-oss-120b", "h200", "--concurrency", "1,16")
    sp = doc["speed"]
    for kind in ("decode", "prefill"):
        fit = sp[f"{kind}_fit"]
        assert fit["level"] == "operator model"
        assert "aiconfigurator-core 0.12.0's H200 kernel tables" in fit["label"], fit["label"]
        assert "on the H200: 90th percentile" in fit["label"]
        assert "carried" not in fit["label"]
    why = [n for n in sp["notes"] if n.startswith("operator model over AIConfigurator's H200 "
                                                   "tables, since H200 kernel tables: no "
                                                   "fused-MoE table for mxfp4 experts")]
    assert len(why) == 1, sp["notes"]
    points = doc["load"]["points"]
    assert points["source"].startswith("batched step model over operator model"), points
    for p in points["points"]:
        assert not p["no_prediction"]
        assert p["tpot_s"]["low"] < p["tpot_s"]["value"] < p["tpot_s"]["high"]
