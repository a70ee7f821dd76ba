"""``servelab plan --concurrency/--request-rate/--slo``: load predictions end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.errors import UsageError

runner = CliRunner()
BASE = ["--hardware", "host", "--max-model-len", "4096", "--kv-cache-memory-bytes", "256MiB",
        "--no-store", "--prompt-lens", "512,2048", "--output-len", "16"]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from servelab.synth.tiny import make_tiny_model

    return make_tiny_model("llama", tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def qwen36_bf16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A header replica of Qwen3.6-35B-A3B BF16: a family the H200's shipped priors hold."""
    from servelab.synth.replica import write_replica
    from servelab.synth.replica_presets import QWEN3_6_35B_A3B

    out = tmp_path_factory.mktemp("replica") / "qwen3.6-bf16"
    write_replica(out, QWEN3_6_35B_A3B)
    return out


H200 = ["--hardware", "h200", "--max-model-len", "40960", "--no-store",
        "--prompt-lens", "512,2048", "--output-len", "16"]


def test_plan_predicts_each_load_point_and_the_slo_capacity(qwen36_bf16: Path) -> None:
    res = runner.invoke(app, ["plan", str(qwen36_bf16), *H200, "--concurrency", "1,4,64",
                              "--slo", "tpot_p50=50", "--json"])
    assert res.exit_code == 0, res.output
    load = json.loads(res.output)["load"]
    assert load["predicted"] is True and load["no_prediction"] is None
    pts = load["points"]["points"]
    assert [(p["prompt_len"], p["concurrency"]) for p in pts] == [
        (512, 1), (512, 4), (512, 64), (2048, 1), (2048, 4), (2048, 64)]
    for p in pts:
        assert p["predicted"] is True
        assert p["requests"] == max(3, 2 * p["concurrency"])  # as servelab bench sends
        assert p["tpot_s"]["low"] <= p["tpot_s"]["value"] <= p["tpot_s"]["high"]
    assert load["points"]["max_num_batched_tokens"] == 8192  # vLLM's default on the H200
    assert [c["prompt_len"] for c in load["capacity"]] == [512, 2048]
    text = runner.invoke(app, ["plan", str(qwen36_bf16), *H200, "--request-rate", "2"])
    assert text.exit_code == 0, text.output
    assert "Under load (predicted" in text.output and "2/s" in text.output


def test_a_fit_too_uncertain_to_print_gives_no_load_prediction(tiny_llama: Path) -> None:
    """On this CPU the single-stream intervals pass 4x (issue 30's refusal): a load forecast
    built on them would be a number without an interval, so there is none, with the reason."""
    res = runner.invoke(app, ["plan", str(tiny_llama), *BASE, "--concurrency", "1,4",
                              "--json"])
    assert res.exit_code == 0, res.output
    load = json.loads(res.output)["load"]
    why = load["no_prediction"]
    assert why is not None and "no load prediction" in why
    assert "the interval would span more than 4x" in why


@pytest.mark.parametrize("args, message", [
    (["--concurrency", "0"], "--concurrency levels must be at least 1"),
    (["--slo", "tpot=abc"], "--slo: cannot read"),
    (["--concurrency", "4", "--output-len", "0"], "--output-len must be at least 1"),
])
def test_bad_load_options_are_one_clear_line(tiny_llama: Path, args: list[str],
                                             message: str) -> None:
    res = runner.invoke(app, ["plan", str(tiny_llama), *BASE, *args])
    assert res.exit_code != 0
    # the CLI's error table turns a UsageError into one line (tests/cli_checks.py)
    assert isinstance(res.exception, UsageError) and message in str(res.exception)


ROOT = Path(__file__).resolve().parents[2]
H200_SWEEPS = ROOT / "benchmarks" / "load" / "results" / "h200-2026-12-05" / "load" / "runs.json"
# the 2026-12-02 Qwen3-30B-A3B FP8 sweep: its plan predates stored step costs
OLD_SWEEP = ROOT / "benchmarks" / "gpu" / "results" / "run-h200-qwen3-30b-a3b-fp8.json"


def test_a_stored_sweep_left_out_of_the_batched_width_is_named(qwen36_bf16: Path,
                                                                tmp_path: Path) -> None:
    """A store's sweep the batched form cannot predict again (here: a plan from before step
    costs were stored) is not in the width a load prediction carries; the plan says which
    and why instead of printing the narrower width as if it were all the store holds
    (`calibration report --replica` gets ±96 % with it, `plan` ±33 % without:
    benchmarks/RESULTS.md)."""
    db = str(tmp_path / "three.db")
    for export in (H200_SWEEPS, OLD_SWEEP):
        res = runner.invoke(app, ["runs", "import", str(export), "--db", db])
        assert res.exit_code == 0, res.output
    [old] = [r["run_id"] for r in json.loads(OLD_SWEEP.read_text())["runs"]]
    args = ["plan", str(qwen36_bf16), *[a for a in H200 if a != "--no-store"], "--db", db,
            "--concurrency", "4,16"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    notes = json.loads(res.output)["load"]["points"]["notes"]
    [note] = [n for n in notes if "not in the batched form's measured error" in n]
    assert note.startswith("1 stored sweep on h200 not in the batched form's measured error")
    assert f"{old} (" in note and "its plan predates stored step costs" in note
    text = runner.invoke(app, args, terminal_width=250)
    assert text.exit_code == 0, text.output
    assert f"{old} (" in " ".join(text.output.split())
    # the two sweeps alone: every sweep is in the width, no such note
    two = str(tmp_path / "two.db")
    assert runner.invoke(app, ["runs", "import", str(H200_SWEEPS), "--db", two]).exit_code == 0
    res = runner.invoke(app, [*args[:-4], "--db", two, "--concurrency", "4,16", "--json"])
    assert res.exit_code == 0, res.output
    assert not [n for n in json.loads(res.output)["load"]["points"]["notes"]
                if "not in the batched form" in n]
