"""llama.cpp on a CPU host: the priors table's llama-server rows from servelab's reference
box (issue 30, benchmarks/cpu/calibrate_llamacpp.sh) and what ``servelab plan`` makes of them.

The rows' costs (bytes read per token, prefill FLOPs, layers, kernel path) are recomputed
here from the GGUF files the calibration recipes make (random llama-, qwen2- and
Gemma-3-shaped models written at each GGUF type by servelab's converter); the tok/s are
measurements and are not asserted. A GGUF of one of those families planned with
``--engine llamacpp -H host`` gets a llama.cpp prediction with its interval and source, or
"no prediction" with the reason; so does one of a family the rows have not seen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.plan.inputs import assert_rows_are_the_plans
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.predict.form import Sample
from servelab.predict.priors import shipped_priors
from servelab.serve.recipe import load_recipe
from servelab.serve.resolved import resolve_model

runner = CliRunner()
CPU = Path(__file__).resolve().parents[2] / "benchmarks" / "cpu"
ROWS = [s for s in shipped_priors().samples if s.engine == "llamacpp" and s.hardware == "host"]


def _recipe(s: Sample) -> Path:
    """The recipe a row was measured with: ``calib-llama`` at ``gguf-q4_k_m`` ->
    benchmarks/cpu/llamacpp-llama-q4-k-m.toml."""
    ftype = s.kernel_path.split()[0].removeprefix("gguf-").replace("_", "-")
    return CPU / f"llamacpp-{s.build.model.removeprefix('calib-')}-{ftype}.toml"


def _plan(recipe: Path, *extra: str) -> dict[str, object]:
    resolve_model(load_recipe(recipe))  # the GGUF file, built once from the recipe
    res = runner.invoke(app, ["plan", str(recipe), "--json", "--no-store", *extra])
    assert res.exit_code in (0, 1), res.output
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_host_rows_name_their_script_and_one_model_per_family() -> None:
    assert ROWS, "no llama.cpp rows for host"
    # every GGUF type of one model under one name: leave-one-model-out leaves a family out
    assert {(s.build.model, s.build.family) for s in ROWS} == {
        ("calib-llama", "llama"), ("calib-qwen2", "qwen2"), ("calib-gemma3", "gemma3")}
    types = {m: {s.kernel_path.split()[0] for s in ROWS if s.build.model == m}
             for m in ("calib-llama", "calib-qwen2", "calib-gemma3")}
    calibrated = {"gguf-f16", "gguf-q8_0", "gguf-q6_k", "gguf-q4_k_m", "gguf-q4_0"}
    assert types["calib-llama"] == calibrated  # Q5_K_M stays a check of an unseen type
    assert types["calib-qwen2"] == types["calib-gemma3"] == calibrated | {"gguf-q5_k_m"}
    for s in ROWS:
        assert "benchmarks/cpu/calibrate_llamacpp.sh" in s.source
        assert s.platform == "cpu"


@pytest.mark.parametrize(("model", "path"), sorted({(s.build.model, s.kernel_path) for s in ROWS}))
def test_host_rows_costs_are_servelab_arithmetic_on_the_recipes_ggufs(model: str,
                                                                      path: str) -> None:
    group = [s for s in ROWS if s.build.model == model and s.kernel_path == path]
    assert {s.expert_slots for s in group} == {0}  # dense
    assert_rows_are_the_plans(group, _plan(_recipe(group[0])))


# The reference box's own probe before the calibration: a plan given it reads no live probe,
# so what these tests see does not move with how busy the machine running them is
# (tests/plan/test_host_probe_once.py).
PROBE = CPU / "results" / "probe-llamacpp-cpu.json"


def _host_plan_text(model: str) -> str:
    res = runner.invoke(app, ["plan", model, "--engine", "llamacpp", "-H", "host", "--no-store",
                              "-c", "2048", "--prompt-lens", "128,512", "--probe", str(PROBE)],
                        terminal_width=250)
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


SOURCE = ("prior from servelab's own llama-server runs on its 2-core reference box's CPU "
          "(benchmarks/cpu/calibrate_llamacpp.sh")


MODELS = ["calib-gemma3", "calib-llama", "calib-qwen2"]
# three models are too few to bound a new build at 90 %: the interval is the larger of their own
# leave-one-model-out width and the host's leave-one-family-out one, with that one's reason
LENT = "3 models of 3 families on host: too few to bound a new build at 90 %: ±"


@pytest.mark.parametrize("fam", ["llama", "qwen2", "gemma3"])
def test_a_host_gguf_of_a_calibrated_family_gets_an_interval_from_three_models(fam: str) -> None:
    """Three llama.cpp models on host (llama-, qwen2- and Gemma-3-shaped): the decode interval
    is the wider of the host's own leave-one-model-out over them and its leave-one-family-out,
    printed with its source; prefill is printed with its interval or refused with the
    reason."""
    recipe = CPU / f"llamacpp-{fam}-q4-k-m.toml"
    model, _ = resolve_model(load_recipe(recipe))
    text = _host_plan_text(model)
    assert "no stored llama.cpp" not in text
    assert "(llamacpp / gguf-q4_k_m (default) / host)" in text
    assert f"decode predicted from {SOURCE}" in text
    assert "(leave-one-model-out over 3 models)" in text or f"({LENT}" in text
    assert (f"prefill predicted from {SOURCE}" in text
            or ("prefill: no prediction: the interval would span more than 4x (±" in text
                and ("leave-one-model-out over 3 models)" in text or LENT in text)
                and f"(fit from {SOURCE}" in text))
    speed = _plan(recipe, "--probe", str(PROBE))["speed"]
    assert isinstance(speed, dict)
    fit = speed["decode_fit"]
    assert fit["models"] == MODELS
    assert (fit["error_basis"] == "leave-one-model-out over 3 models"
            or fit["error_basis"].startswith(LENT))
    for row in speed["decode"]:  # printed: a number inside its interval
        assert row["predicted_low"] < row["predicted_tok_s"] < row["predicted_high"]
        assert row["predicted_high"] / row["predicted_low"] <= 4


def test_a_host_gguf_of_an_unseen_family_gets_the_fit_source_and_its_reason(
        tmp_path: Path) -> None:
    """A family the host's rows have not seen (gpt-oss, a tiny random one as GGUF Q8_0): its
    prediction comes from the llama.cpp rows with their source and never the roofline-only
    line of a hardware without llama.cpp data; its interval is at least the host's
    leave-one-family-out width, with that reason, and a kind that width cannot bound is
    refused with it."""
    from servelab.synth.gguf import write_gguf
    from servelab.synth.tiny import make_tiny_model

    gguf = write_gguf(make_tiny_model("gpt_oss", tmp_path / "hf"), tmp_path / "go.gguf",
                      qtype="Q8_0")
    text = _host_plan_text(str(gguf))
    assert "no stored llama.cpp" not in text
    assert "(llamacpp / gguf-q8_0 (default) / host)" in text
    reason = "no model of family gpt_oss on host: ±"
    for kind in ("decode", "prefill"):
        assert (f"{kind} predicted from {SOURCE}" in text
                or (f"{kind}: no prediction: the interval would span more than 4x (" in text
                    and f"(fit from {SOURCE}" in text)), kind
    assert reason in text


def test_a_recipe_plan_uses_the_priors_file_given(tmp_path: Path) -> None:
    """``servelab plan RECIPE --priors FILE`` calibrates from FILE (it was ignored for a
    recipe); the note names the file by its name, never its directory."""
    shipped = (Path(__file__).resolve().parents[2] / "src" / "servelab" / "predict"
               / "priors.toml").read_text(encoding="utf-8")
    own = tmp_path / "my-priors.toml"
    own.write_text(shipped.replace(f'version = "{shipped_priors().version}"',
                                   'version = "mine-1"', 1), encoding="utf-8")
    recipe = _recipe(ROWS[0])
    given = json.dumps(_plan(recipe, "--priors", str(own)))
    assert "priors table mine-1 (file my-priors.toml, not the shipped one)" in given
    assert str(tmp_path) not in given
    assert f"shipped priors table {shipped_priors().version}" in json.dumps(_plan(recipe))
