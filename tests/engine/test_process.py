"""Process lifecycle paths that need no real vLLM (fast)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from servelab.engines.facts import Phase
from servelab.errors import EngineNotFoundError, EngineStartupError
from servelab.redact import REDACTED
from servelab.serve.process import (
    LaunchSpec,
    group_alive,
    pick_free_port,
    port_is_free,
    start_engine,
)

STUBBORN = Path(__file__).parent / "servers" / "stubborn_engine.py"


def _spec(tmp_path: Path, argv: list[str], port: int, **kw: float) -> LaunchSpec:
    return LaunchSpec(
        argv=tuple(argv),
        host="127.0.0.1",
        port=port,
        log_path=tmp_path / "engine.log",
        served_model_name="m",
        **kw,  # type: ignore[arg-type]
    )


def test_sigterm_ignoring_engine_gets_sigkill_and_the_group_is_gone(tmp_path: Path) -> None:
    port = pick_free_port()
    spec = _spec(
        tmp_path,
        [sys.executable, str(STUBBORN), str(port), "m"],
        port,
        startup_timeout_s=30.0,
        stop_grace_s=1.0,
    )
    phases: list[Phase] = []
    eng = start_engine(spec, on_phase=lambda p, _s: phases.append(p))
    try:
        assert phases[0] is Phase.STARTING and phases[-1] is Phase.READY
        assert Phase.KV_ALLOCATION in phases
        assert eng.facts.kv_pool_tokens == 1000
        assert not port_is_free("127.0.0.1", port)
    finally:
        t0 = time.monotonic()
        rc = eng.stop()
    assert rc == -9  # SIGTERM was ignored, SIGKILL ended it
    assert time.monotonic() - t0 < 20
    assert not group_alive(eng.pgid)  # the forked grandchild too
    assert port_is_free("127.0.0.1", port)
    assert eng.stop() == -9  # idempotent


def test_early_exit_shows_the_engines_error(tmp_path: Path) -> None:
    script = (
        "import sys; print('INFO 01-01 00:00:00 [a.py:1] Starting to load model x', flush=True);"
        "print('ValueError: No available memory for the cache blocks.', flush=True); sys.exit(3)"
    )
    port = pick_free_port()
    spec = _spec(tmp_path, [sys.executable, "-c", script], port)
    with pytest.raises(EngineStartupError) as info:
        start_engine(spec)
    msg = str(info.value)
    assert "exited early with status 3" in msg
    assert "engine error: ValueError: No available memory for the cache blocks." in msg
    assert msg.startswith(str(tmp_path / "engine.log"))
    assert "Starting to load model" in (tmp_path / "engine.log").read_text()


def test_missing_executable(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [str(tmp_path / "no" / "python"), "-m", "vllm"], pick_free_port())
    with pytest.raises(EngineNotFoundError, match="does not exist"):
        start_engine(spec)
    spec = _spec(tmp_path, ["servelab-no-such-engine"], pick_free_port())
    with pytest.raises(EngineNotFoundError, match="not on PATH"):
        start_engine(spec)


def test_pick_free_port_in_range() -> None:
    port = pick_free_port(start=18390, end=18399)
    assert 18390 <= port <= 18399 and port_is_free("127.0.0.1", port)


def test_secrets_never_reach_the_log_or_the_error(tmp_path: Path) -> None:
    script = (
        "import os, sys; print('args', sys.argv, flush=True);"
        "print('token', os.environ['HF_TOKEN'], flush=True); sys.exit(1)"
    )
    spec = LaunchSpec(
        argv=(
            sys.executable,
            "-c",
            script,
            "--api-key",
            "sk-very-secret-1",
            "--hf-token=hf_abcdef12",
        ),
        host="127.0.0.1",
        port=pick_free_port(),
        log_path=tmp_path / "engine.log",
        served_model_name="m",
        env={"HF_TOKEN": "hf_env_secret_99"},
    )
    with pytest.raises(EngineStartupError) as info:
        start_engine(spec)
    log = (tmp_path / "engine.log").read_text()
    for secret in ("sk-very-secret-1", "hf_abcdef12", "hf_env_secret_99"):
        assert secret not in log and secret not in str(info.value)
    assert REDACTED in log
