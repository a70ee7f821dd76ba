"""The H200's stored sweep (2026-12-02), whose plan predates stored step costs, re-predicted in
``servelab calibration report`` from a header replica of its build (``--replica``).

The replica is written here exactly as ``benchmarks/gpu/gen_checkpoint.py --sparse`` writes it
on the device (Qwen3-30B-A3B's published config, Qwen's FP8 block layout); the run's own
checkpoint was a full random-weight one of the same layout, whose headers hash differently, so
the check is the run's stored inspect report and plan. A replica of another build is refused.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.cli_checks import assert_one_line_errors
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.pipeline.replan import replan_stored
from servelab.store.exchange import run_from_dict
from servelab.synth.replica import TEXT_LINEARS, QuantLayout, write_replica

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "gpu" / "results"
SWEEP = RESULTS / "run-h200-qwen3-30b-a3b-fp8.json"
# the same build run once more (single stream) from a sparse replica made on the device
NIGHT = RESULTS / "calibration-2026-12-03-night" / "runs-h200-calibration.json"
RUN_ID = "20261202-163820-7e7aff"
runner = CliRunner()


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_checkpoint", ROOT / "benchmarks" / "gpu" / "gen_checkpoint.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _replica(out: Path, layers: int | None = None) -> Path:
    gen = _gen()
    cfg = json.loads(json.dumps(gen.QWEN3_30B_A3B))
    if layers is not None:
        gen.set_layers(cfg, layers)
    write_replica(out, cfg, QuantLayout("fp8-block", quantize=TEXT_LINEARS))
    return out


def _run(path: Path, index: int = 0) -> dict[str, Any]:
    run: dict[str, Any] = json.loads(path.read_text())["runs"][index]
    return run


def test_the_replica_is_the_runs_build_and_gives_its_step_costs(tmp_path: Path) -> None:
    ckpt = _replica(tmp_path / "q30")
    stored = _run(SWEEP)
    night = _run(NIGHT)
    got = replan_stored(run_from_dict(stored), str(ckpt))
    # the replica's headers are those of the sparse replica the device served on 2026-12-03
    # (same script), not the full random checkpoint the sweep ran: the dims were checked
    assert night["model_id"] == stored["model_id"]
    assert night["checkpoint_header_hash"][:12] in got.how
    assert stored["checkpoint_header_hash"][:12] in got.how
    c = got.costs
    # a decode token reads the non-routed weights and k of E routed experts: the bytes per
    # token the run's stored plan recorded for its decode points
    [weight_bytes] = {p["weight_bytes"] for p in stored["prediction"]["speed"]["decode"]}
    assert c.fixed_bytes + c.routed_expert_bytes * c.experts_per_token // c.num_experts == (
        weight_bytes)
    pool = stored["prediction"]["kv_pool"]
    assert c.kv_write_per_token == pool["kv_bytes_per_token"]["full_attention"]
    assert (c.num_layers, c.num_experts, c.linear_layers, c.state_bytes) == (48, 128, 0, 0)


def test_h200_sweep_in_the_report_from_its_replica(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _replica(tmp_path / "q30")
    db = str(tmp_path / "h200.db")
    res = runner.invoke(app, ["runs", "import", str(SWEEP), "--db", db])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["calibration", "report", "--db", db, "--json",
                              "--replica", f"{RUN_ID}={ckpt}"])
    assert res.exit_code == 0, res.output
    load = json.loads(res.output)["load"]
    assert load["skipped"] == []
    run = _run(SWEEP)
    rows = load["rows"]
    assert sorted((r["prompt_len"], r["concurrency"]) for r in rows) == [
        (p, c) for p in (512, 2048, 8192) for c in (1, 4, 16)]
    for r in rows:
        assert r["run_id"] == RUN_ID and r["hardware"] == "h200"
        assert str(ckpt) in r["replanned"]
        done = [s for s in run["samples"] if s["error"] is None
                and s["point"] == f"p{r['prompt_len']}-c{r['concurrency']}"]
        assert r["requests"] == len(done) == 16
        tpot = [s["tpot_s"] for s in done]
        assert r["tpot_s"]["measured"] == pytest.approx(sum(tpot) / len(tpot))
        assert r["output_tok_s_per_gpu"]["measured"] == pytest.approx(
            r["concurrency"] * 256 * len(done) / sum(s["e2e_s"] for s in done))
        for k in ("tpot_s", "ttft_s", "stream_tok_s", "output_tok_s_per_gpu"):
            m = r[k]
            rate = k in ("stream_tok_s", "output_tok_s_per_gpu")
            want = m["measured"] / m["predicted"] if rate else m["predicted"] / m["measured"]
            assert m["error"] == pytest.approx(want - 1)
            assert m["inside"] == (m["low"] <= m["measured"] <= m["high"])
    # one model's sweep on the H200: no batched-form error there, and the report says why
    assert load["batched_error"] == [] and load["too_few_models"] == {"h200": 1}
    md = runner.invoke(app, ["calibration", "report", "--db", db, "--markdown",
                             "--replica", f"{RUN_ID}={ckpt}"])
    assert "under load on h200: no batched-form error" in md.output
    assert f"(run {RUN_ID}): step costs re-planned from {ckpt}" in md.output
    # another build (47 layers) is refused with one line naming it; so is a malformed option
    other = _replica(tmp_path / "q30-47l", layers=47)
    assert_one_line_errors([
        (["calibration", "report", "--db", db, "--replica", f"{RUN_ID}={other}"],
         f"not run {RUN_ID}'s build: tensor_count is"),
        (["calibration", "report", "--db", db, "--replica", "nothing"],
         "--replica must be RUN_ID=CHECKPOINT"),
        (["calibration", "report", "--db", db, "--replica", f"no-such-run={ckpt}"],
         "--replica: no stored run no-such-run"),
    ], capsys)
