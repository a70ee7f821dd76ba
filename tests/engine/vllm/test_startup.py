"""The plan foresees vLLM's "max_num_seqs exceeds available Mamba cache blocks" refusal.

Measured on an H200 (vLLM 0.26.0): Qwen3.6-35B-A3B with a 16 GiB pool at 40,960 tokens and
the default max_num_seqs died with "max_num_seqs (1024) exceeds available Mamba cache
blocks (794)"; the committed plan of that build predicted the 794 blocks. No engine here.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tests.cli_checks import assert_one_line_errors
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.engines import get_engine
from servelab.engines.vllm.kv import plan_kv_pool
from servelab.engines.vllm.recipe import VllmFlags
from servelab.engines.vllm.startup import check_mamba_blocks, effective_max_num_seqs
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import HardwareProfile
from servelab.serve.recipe import parse_recipe
from servelab.sizing.layout import ParallelLayout
from servelab.sizing.startup import StartupOptions
from servelab.synth.replica_presets import QWEN3_6_35B_A3B
from servelab.units import GIB

REPO = Path(__file__).resolve().parents[3]
H200_BUILD = REPO / "benchmarks/gpu/results/calibration-2026-12-03-pm/qwen3.6-35b-a3b-bf16-h200"
H200_ARGS = ["--hardware", "h200", "--engine-version", "0.26.0", "--max-model-len", "40960",
             "--kv-cache-memory-bytes", "16GiB", "--no-store"]
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32,
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
}
runner = CliRunner()


def test_the_h200_refusal_is_foreseen_at_the_default_and_not_at_64() -> None:
    kv = plan_kv_pool(QWEN3_6_35B_A3B, kv_cache_memory_bytes=16 * GIB, max_model_len=40_960,
                      engine_version="0.26.0", platform="cuda")
    committed = json.loads((H200_BUILD / "plan.json").read_text())["kv_pool"]["num_blocks"]
    assert kv.num_blocks == committed == 794
    h200 = get_profile("h200")
    seqs = effective_max_num_seqs(h200, "cuda", ParallelLayout(), StartupOptions())
    assert seqs.value == 1024 and "70 GiB" in seqs.source
    finding = check_mamba_blocks(kv, seqs, StartupOptions(), h200)
    assert finding is not None
    assert (finding.max_num_seqs, finding.mamba_blocks, finding.conditional) == (1024, 794, False)
    assert "--max-num-seqs <= 794" in finding.fix
    # the pool that would hold 1,024 blocks: 1,024 x bytes per block, rounded up
    need = math.ceil(1024 * kv.bytes_per_block / GIB * 100) / 100
    assert f"at least {need:.2f} GiB per GPU (1,024 blocks x {kv.bytes_per_block:,} bytes)" \
        in finding.fix
    assert need * GIB >= 1024 * kv.bytes_per_block > 16 * GIB
    for ok in (64, 794):
        opts = StartupOptions(max_num_seqs=ok)
        assert check_mamba_blocks(
            kv, effective_max_num_seqs(h200, "cuda", ParallelLayout(), opts), opts, h200
        ) is None
    opts = StartupOptions(max_num_seqs=795)
    over = check_mamba_blocks(
        kv, effective_max_num_seqs(h200, "cuda", ParallelLayout(), opts), opts, h200)
    assert over is not None and over.max_num_seqs_source == "--max-num-seqs"


def test_graph_flags_decide_and_unknown_hardware_is_conditional() -> None:
    kv = plan_kv_pool(QWEN3_6_35B_A3B, kv_cache_memory_bytes=16 * GIB, max_model_len=40_960,
                      engine_version="0.26.0", platform="cuda")
    rtx = get_profile("rtx-pro-6000")  # 96 GiB: vLLM's default is 1024, graph mode unseen
    seqs = effective_max_num_seqs(rtx, "cuda", ParallelLayout(), StartupOptions())
    unknown = check_mamba_blocks(kv, seqs, StartupOptions(), rtx)
    assert unknown is not None and unknown.conditional
    assert "if it captures FULL decode CUDA graphs (it did on the H200" in unknown.message
    spark = check_mamba_blocks(kv, seqs, StartupOptions(), get_profile("dgx-spark"))
    assert spark is not None and spark.conditional and "PIECEWISE" in spark.message
    full = check_mamba_blocks(kv, seqs, StartupOptions(cudagraph_mode="full_decode_only"), rtx)
    assert full is not None and not full.conditional
    for off in (StartupOptions(enforce_eager=True), StartupOptions(cudagraph_mode="PIECEWISE"),
                StartupOptions(optimization_level=0)):
        assert check_mamba_blocks(kv, seqs, off, rtx) is None


def test_defaults_follow_vllms_batch_defaults() -> None:
    h200 = get_profile("h200")

    def seqs(hw: HardwareProfile, opts: StartupOptions | None = None,
             platform: str = "cuda", layout: ParallelLayout | None = None) -> int:
        return effective_max_num_seqs(hw, platform, layout or ParallelLayout(),
                                      opts or StartupOptions()).value

    assert seqs(get_profile("rtx-5090")) == 256  # 32 GiB
    assert seqs(replace(h200, name="a100-80gb", description="NVIDIA A100 80GB")) == 256
    assert seqs(h200, StartupOptions(max_num_batched_tokens=512)) == 512  # capped by it
    assert seqs(h200, StartupOptions(max_num_seqs=2048, max_num_batched_tokens=512)) == 2048
    assert seqs(h200, StartupOptions(performance_mode="throughput")) == 2048
    assert seqs(h200, StartupOptions(max_num_seqs=8, performance_mode="throughput")) == 8
    # CPU: 128 x TP x PP (one replica's ranks; DP replicas each have their own)
    assert seqs(h200, platform="cpu", layout=ParallelLayout(tensor=2, data=2)) == 256


def test_a_dense_model_and_a_cpu_never_fire() -> None:
    h200 = get_profile("h200")
    opts = StartupOptions(max_num_seqs=1_000_000)
    seqs = effective_max_num_seqs(h200, "cuda", ParallelLayout(), opts)
    dense = plan_kv_pool(LLAMA3_8B, kv_cache_memory_bytes=GIB, max_model_len=131_072,
                         engine_version="0.26.0", platform="cuda")
    assert dense.num_blocks < seqs.value
    assert check_mamba_blocks(dense, seqs, opts, h200) is None
    cpu_pool = plan_kv_pool(QWEN3_6_35B_A3B, kv_cache_memory_bytes=GIB, max_model_len=40_960,
                            engine_version="0.32.0", platform="cpu")
    assert cpu_pool.num_blocks < seqs.value
    cpu = replace(h200, name="cpu-box", platform="cpu")
    assert check_mamba_blocks(cpu_pool, seqs, opts, cpu) is None


def test_recipe_flags_and_extra_feed_the_check() -> None:
    f = VllmFlags(max_num_seqs=512)
    assert f.startup().max_num_seqs == 512
    # extra comes after the named flags on vLLM's command line, so it wins
    f = VllmFlags(max_num_seqs=512, extra=("--max-num-seqs=64", "--enforce-eager"))
    assert (f.startup().max_num_seqs, f.startup().enforce_eager) == (64, True)
    f = VllmFlags(extra=("-cc", '{"cudagraph_mode": "PIECEWISE"}', "-O0"))
    assert (f.startup().cudagraph_mode, f.startup().optimization_level) == ("PIECEWISE", 0)
    f = VllmFlags(extra=("--compilation-config.cudagraph_mode", "FULL",
                         "--performance-mode", "throughput"))
    assert (f.startup().cudagraph_mode, f.startup().performance_mode) == ("FULL", "throughput")
    # the committed H200 recipe passes --max-num-seqs 64 in extra (after the refusal)
    rec = parse_recipe((H200_BUILD / "recipe.toml").read_text(),
                       source=H200_BUILD / "recipe.toml")
    knobs = get_engine("vllm").plan_knobs(rec.engine)
    assert knobs.startup.max_num_seqs == 64


def test_servelab_plan_warns_with_the_numbers_and_the_fix(qwen36_bf16: Path) -> None:
    res = runner.invoke(app, ["plan", str(qwen36_bf16), *H200_ARGS, "--fits"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "warning: max_num_seqs 1,024" in text and "794 mamba cache blocks" in text
    assert "--max-num-seqs <= 794" in text
    doc = json.loads(runner.invoke(app, ["plan", str(qwen36_bf16), *H200_ARGS, "--json"]).output)
    assert doc["kv_pool"]["num_blocks"] == 794
    assert doc["startup"]["max_num_seqs"]["value"] == 1024
    [finding] = doc["startup"]["findings"]
    assert (finding["mamba_blocks"], finding["predicted"]) == (794, True)
    md = runner.invoke(app, ["plan", str(qwen36_bf16), *H200_ARGS, "--markdown"]).output
    assert "**Warning (predicted):** max_num_seqs 1,024" in md
    for quiet in (["--max-num-seqs", "64"], ["--enforce-eager"]):
        ok = runner.invoke(app, ["plan", str(qwen36_bf16), *H200_ARGS, *quiet, "--json"])
        assert ok.exit_code == 0, ok.output
        assert json.loads(ok.output)["startup"]["findings"] == []


def _recipe(folder: Path, model: Path, flags: str = "") -> Path:
    path = folder / "q36.toml"
    path.write_text(
        f'name = "q36-h200"\nhardware = "h200"\n[model]\npath = "{model}"\n'
        '[engine]\nexecutable = "/bin/false"\nversion = "==0.26.0"\nstartup_timeout_s = 30\n'
        '[engine.flags]\nmax_model_len = 40960\nkv_cache_memory_bytes = "16GiB"\n' + flags
    )
    return path


def test_plan_of_a_recipe_reads_its_max_num_seqs(
    qwen36_bf16: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warned = runner.invoke(app, ["plan", str(_recipe(tmp_path, qwen36_bf16)), "--no-store",
                                 "--json"])
    assert warned.exit_code == 0, warned.output
    assert json.loads(warned.output)["startup"]["findings"][0]["mamba_blocks"] == 794
    quiet = _recipe(tmp_path, qwen36_bf16, 'extra = ["--max-num-seqs", "64"]\n')
    res = runner.invoke(app, ["plan", str(quiet), "--no-store", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["startup"] == {"max_num_seqs": {"value": 64, "source": "--max-num-seqs"},
                              "graph_capture": {"max_tokens": 128, "source":
                                                "vLLM: min(2 x max_num_seqs 64, 512)"},
                              "memory": None,  # the H200 profile states no free memory
                              "findings": []}
    assert_one_line_errors([(["plan", str(quiet), "--max-num-seqs", "8"],
                             "--max-num-seqs: a recipe sets its engine's flags")], capsys)


def test_servelab_run_warns_before_the_engine_starts(qwen36_bf16: Path, tmp_path: Path) -> None:
    # The engine here is /bin/false (no GPU on this box): the warning must come before the
    # start step, and the run must still go on to try the start (it never blocks).
    recipe = _recipe(tmp_path, qwen36_bf16)
    proc = subprocess.run(
        [sys.executable, "-m", "servelab", "run", str(recipe), "--db", str(tmp_path / "r.db"),
         "--runs-dir", str(tmp_path / "runs"), "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    err = " ".join(proc.stderr.split())
    assert "warning: max_num_seqs 1,024" in err and "--max-num-seqs <= 794" in err
    # the run's document pairs the planned CUDA graph size with the log's (none: no start)
    doc = json.loads(proc.stdout)
    assert doc["cuda_graph_max_tokens"] == {"predicted": 512, "engine": None}
    assert doc["mamba_cache_blocks"] == {"predicted": 794, "engine": None}
    assert doc["reason"].startswith("start:")  # it did try to start the engine
    assert [w["mamba_blocks"] for w in doc["warnings"]] == [794]


def test_a_pool_without_one_mamba_block_is_not_fixed_by_zero_seqs() -> None:
    # a pool too small for one mamba block: the fix is a larger pool, never --max-num-seqs <= 0
    kv = plan_kv_pool(QWEN3_6_35B_A3B, kv_cache_memory_bytes=1 << 20, max_model_len=4096,
                      engine_version="0.26.0", platform="cuda")
    assert kv.num_blocks == 0
    h200 = get_profile("h200")
    seqs = effective_max_num_seqs(h200, "cuda", ParallelLayout(), StartupOptions())
    finding = check_mamba_blocks(kv, seqs, StartupOptions(), h200)
    assert finding is not None
    assert "<= 0" not in finding.fix and finding.fix.startswith("give a KV pool of at least")
