"""The third engine: servelab's synthetic server registered as ``[engine] name = "synthetic"``.

It took its folder (``engines/synthetic/``), its registry line and this test (README,
"Engines"). ``servelab recipe check`` shows its command line and ``servelab run`` starts it,
benchmarks it and records the run, through the same launch, readiness, log and store
code as vLLM and llama.cpp. A real server process on loopback; a run takes seconds.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.engines import get_engine
from servelab.errors import RecipeError
from servelab.serve.install import find_engine, list_engines
from servelab.serve.recipe import load_recipe, parse_recipe
from servelab.store import open_store
from servelab.store.model import RunRecord

RECIPE = """\
name = "tiny-llama-synthetic"
hardware = "host"
[model]
synth = "llama"
served_name = "tiny-synthetic"
[engine]
name = "synthetic"
stop_grace_s = 5
[engine.flags]
ttft_ms = 20
itl_ms = 2
[bench]
prompt_tokens = [32]
output_tokens = 8
concurrency = [1, 2]
repetitions = 2
max_repetitions = 2
warmup = 0
"""


def test_recipe_gives_its_own_argv_in_servelabs_interpreter(tmp_path: Path) -> None:
    rec = parse_recipe(RECIPE)
    install = find_engine("synthetic")
    assert install.python == Path(sys.executable) and install.versions["servelab"]
    assert list_engines(tmp_path) == []  # nothing to install: no manifest anywhere
    path = tmp_path / "r.toml"
    path.write_text(RECIPE, encoding="utf-8")
    res = CliRunner().invoke(app, ["recipe", "check", str(path), "--json", "--port", "9123"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["argv"] == [
        sys.executable, "-m", "servelab.testing.synthetic_server", "--host", "127.0.0.1",
        "--port", "9123", "--model", "tiny-synthetic", "--ttft-ms", "20.0", "--itl-ms", "2.0",
    ]  # fmt: skip
    assert get_engine("synthetic").kv_arithmetic(rec.engine) is None
    bad = RECIPE.replace("itl_ms = 2", "itl_ms = 2\nkv_cache_dtype = 'fp8'")
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(RecipeError, match=r"line 12: engine\.flags\.kv_cache_dtype: unknown key"):
        load_recipe(path)
    path.write_text(RECIPE.replace("stop_grace_s", "executable = 'x'\nstop_grace_s"))
    with pytest.raises(RecipeError, match=r"line 8: engine\.executable: .*give python instead"):
        load_recipe(path)

def _run(tmp_path: Path, text: str, *args: str) -> tuple[RunRecord, list[str]]:
    """``servelab run`` of the recipe ``text`` into ``tmp_path/results.db`` (a pipe of 80
    columns): the stored run and the lines printed on stdout."""
    recipe = tmp_path / "r.toml"
    recipe.write_text(text, encoding="utf-8")
    db = str(tmp_path / "results.db")
    res = CliRunner().invoke(
        app, ["run", str(recipe), "--db", db, "--runs-dir", str(tmp_path / "runs"), *args],
        env={"COLUMNS": "80"},
    )
    assert res.exit_code == 0, res.output
    with open_store(db) as store:
        [listed] = store.list_runs()
        return store.get_run(listed.run_id or ""), res.stdout.splitlines()


def _block(lines: list[str]) -> dict[str, str]:
    """The answer block's labelled lines (a wrapped text joined), by label."""
    found: dict[str, str] = {}
    label = ""
    for line in lines[1:]:
        if not line.strip():
            break
        if line.startswith(" "):
            found[label] += " " + line.strip()
            continue
        label, _, text = line.partition(" ")
        found[label] = text.strip()
    return found


@pytest.mark.timeout(300)
def test_servelab_run_starts_benchmarks_and_records_it(tmp_path: Path) -> None:
    run, out = _run(tmp_path, RECIPE)
    assert run.status == "ok" and run.engine_name == "synthetic"
    # issue 41: the answer first, in at most 10 lines of 80 columns, the tables after it
    assert out[0] == f"run {run.run_id} of tiny-llama-synthetic on host: ok (synthetic 0.1.0)"
    block = _block(out)
    assert len(out[:out.index("")]) <= 10 and max(len(line) for line in out) <= 80, out
    [row] = [r for r in (run.extra or {})["summary"] if r["kind"] == "decode"]
    if row["measured_tok_s"] is None:  # a run too short to time decode says nothing of it
        assert "decode" not in block, block
    else:
        assert re.fullmatch(rf"{row['measured_tok_s']:.1f} tok/s measured, one stream at a "
                            r"32-token prompt; no prediction, only its roofline bound "
                            r"[\d,.]+ tok/s", block["decode"]), block
    assert block["next"].startswith("publish it: servelab site build")
    assert "Details" in out and "measured (single stream)" in "\n".join(out)
    assert run.engine_args is not None and "--ttft-ms" in run.engine_args
    # repetitions = 2 measured requests per point (max_repetitions 2: one batch), at
    # concurrency 1 and 2; 32 prompt and 8 output tokens each, as the server's usage counts
    points = sorted(s.point for s in run.samples)
    assert points == ["p32-c1", "p32-c1", "p32-c2", "p32-c2"]
    assert {(s.prompt_tokens, s.completion_tokens, s.error) for s in run.samples} == {
        (32, 8, None)
    }
    # planned with vLLM's arithmetic, and the plan says so
    assert run.prediction is not None
    notes = " ".join(run.prediction.get("notes", []))
    assert "does not model synthetic's own KV pool" in notes
    [run_dir] = (tmp_path / "runs").iterdir()
    facts = json.loads((run_dir / "engine-facts.json").read_text())
    assert facts["facts"]["server_url"].startswith("http://127.0.0.1:")
    assert "synthetic server listening on" in (run_dir / "engine.log").read_text()


@pytest.mark.timeout(300)
def test_a_recipes_capacity_search_is_stored_with_its_run(tmp_path: Path) -> None:
    # issue 31: the measured SLO capacity is recorded with the run (checkpoint, hardware),
    # beside the capacity the plan predicted, so `plan --slo` can set the two side by side.
    # Each gap is 10 ms + 10 ms per other running request: at c streams TPOT is 10 c ms,
    # so tpot_p50=35 holds at 3 streams and not at 4.
    text = RECIPE.replace("itl_ms = 2", "itl_ms = 10\nitl_per_running_ms = 10") + (
        '[capacity]\nslo = "tpot_p50=35"\nprompt_lens = [32]\nhigh = 8\nconfirm = 1\n'
        "max_rounds = 1\nwarmup_requests = 0\n")
    run, out = _run(tmp_path, text, "--brief")
    # --brief: the answer block alone, the users the search found at the SLO in it
    assert _block(out)["users"] == "3 streams meet tpot_p50=35 at 32-token prompts (measured)"
    assert "Details" not in out and len(out) <= 10
    recipe, db = tmp_path / "r.toml", str(tmp_path / "results.db")
    cap = (run.extra or {})["capacity"]
    assert cap["schema"] == "servelab.capacities/1" and cap["slo"] == "tpot_p50=35"
    assert cap["variable"] == "concurrency" and cap["output_len"] == 8
    [row] = cap["capacities"]
    assert row["prompt_len"] == 32 and row["capacity"] == 3
    [run_dir] = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "capacity.json").read_text()) == cap
    # the plan of the same recipe under the same SLO finds it by checkpoint and hardware
    res = CliRunner().invoke(app, ["plan", str(recipe), "--db", db, "--slo", "tpot_p50=35",
                                   "--prompt-lens", "32", "--output-len", "8", "--json"])
    assert res.exit_code == 0, res.output
    [measured] = json.loads(res.stdout)["load"]["measured_capacity"]
    assert measured == {"slo": "tpot_p50<=35ms", "variable": "concurrency", "prompt_len": 32,
                        "output_len": 8, "capacity": 3.0, "run_id": run.run_id,
                        "measured": True}
    with pytest.raises(RecipeError, match=r"capacity: .*--slo"):
        parse_recipe(text.replace('"tpot_p50=35"', '"speed=3"'))
