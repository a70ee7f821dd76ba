"""llama.cpp on this host's CPU: the priors table's llama-server rows (issue 30,
benchmarks/cpu/calibrate_llamacpp.sh) and what ``servelab plan`` makes of them.

The rows' costs (bytes read per token, prefill FLOPs, layers, kernel path) are recomputed
here from the GGUF files the calibration recipes make (a random llama-shaped model written
at each GGUF type by servelab's converter); the tok/s are measurements and are not asserted.
A GGUF of another family planned with ``--engine llamacpp -H host`` gets a llama.cpp
prediction with its interval and source, or "no prediction" with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.plan.inputs import assert_rows_are_the_plans
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.predict.form import Sample
from servelab.predict.priors import shipped_priors
from servelab.serve.launch import resolve_model
from servelab.serve.recipe import load_recipe

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
    assert {s.build.model for s in ROWS} == {"calib-llama"}  # every GGUF type of one model
    assert {s.build.family for s in ROWS} == {"llama"}
    types = {s.kernel_path.split()[0] for s in ROWS}
    assert types == {"gguf-f16", "gguf-q8_0", "gguf-q6_k", "gguf-q4_k_m", "gguf-q4_0"}
    for s in ROWS:
        assert "benchmarks/cpu/calibrate_llamacpp.sh" in s.source
        assert s.platform == "cpu"


@pytest.mark.parametrize("path", sorted({s.kernel_path for s in ROWS}))
def test_host_rows_costs_are_servelab_arithmetic_on_the_recipes_ggufs(path: str) -> None:
    group = [s for s in ROWS if s.kernel_path == path]
    assert {s.expert_slots for s in group} == {0}  # dense
    assert_rows_are_the_plans(group, _plan(_recipe(group[0])))


def test_a_qwen2_gguf_on_host_gets_a_llamacpp_prediction_or_a_reason() -> None:
    """A family the host's llama.cpp rows have not seen: its decode line is predicted from
    those rows with an interval and its source, or refused with the reason; never the
    roofline-only line of a hardware without llama.cpp data."""
    recipe = CPU / "llamacpp-qwen2-q4-k-m.toml"
    model, _ = resolve_model(load_recipe(recipe))
    res = runner.invoke(app, ["plan", model, "--engine", "llamacpp", "-H", "host", "--no-store",
                              "-c", "2048", "--prompt-lens", "128,512"], terminal_width=250)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "no stored llama.cpp" not in text
    source = ("prior from servelab's own llama-server runs on this host's CPU "
              "(benchmarks/cpu/calibrate_llamacpp.sh")
    assert "(llamacpp / gguf-q4_k_m (default) / host)" in text
    for kind in ("decode", "prefill"):
        # predicted with its interval and source, or refused with the reason and the fit's
        # source (one llama.cpp model on host: the width comes from the families left out)
        assert (f"{kind} predicted from {source}" in text
                or (f"{kind}: no prediction: the interval would span more than 4x (" in text
                    and f"(fit from {source}" in text)), kind
    doc = _plan(recipe)
    speed = doc["speed"]
    assert isinstance(speed, dict)
    fit = speed["decode_fit"]
    assert fit["level"] != "roofline"
    for row in speed["decode"]:
        if fit["rel_error"] is not None and fit["rel_error"] < 0.6:  # printed: an interval
            assert row["predicted_low"] < row["predicted_tok_s"] <= row["predicted_high"]
        else:  # refused: no number printed as a prediction
            assert row["predicted_tok_s"] is None


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
