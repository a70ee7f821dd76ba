"""From a recipe to a running engine: resolve model, interpreter and port, then start.

:func:`prepare_launch` is the planning step (no engine started; builds a recipe's tiny
``synth`` model when asked); :func:`launch` starts the engine from it and writes the
parsed log facts next to the log in the run directory.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from servelab.engines import get_engine
from servelab.engines.base import ServeTarget
from servelab.errors import EngineError, EngineNotFoundError
from servelab.outfile import atomic_dir, write_json
from servelab.redact import redact_args
from servelab.serve.home import runs_dir, synth_models_dir
from servelab.serve.install import (
    EngineInstall,
    build_spec,
    engine_root,
    find_engine,
    launcher_versions,
)
from servelab.serve.process import (
    EngineProcess,
    LaunchSpec,
    PhaseCallback,
    pick_free_port,
    start_engine,
)
from servelab.serve.recipe import Recipe

__all__ = [
    "engine_argv",
    "ensure_synth_model",
    "launch",
    "new_run_dir",
    "prepare_launch",
    "resolve_launcher",
    "synth_model_dir",
]

LOG_NAME = "engine.log"
FACTS_NAME = "engine-facts.json"


def synth_model_dir(
    arch: str, overrides: dict[str, object] | None = None, *, mtp: bool = False
) -> Path:
    """Deterministic cache directory of a tiny generated model (``mtp``: with an MTP head)."""
    spec: dict[str, object] = {"arch": arch, "overrides": overrides or {}}
    if mtp:  # the key of a model without a head stays what it always was
        spec["mtp"] = True
    key = json.dumps(spec, sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return synth_models_dir() / f"{arch}-{digest}"


def ensure_synth_model(
    arch: str, overrides: dict[str, object] | None = None, *, mtp: bool = False
) -> Path:
    """Build the tiny model once (atomically: temp dir, then rename) and return its dir;
    ``mtp``: the same weights plus a random MTP head (:func:`servelab.synth.quantize.
    add_mtp_head`)."""
    target = synth_model_dir(arch, overrides, mtp=mtp)
    if (target / "config.json").exists():
        return target
    from servelab.synth.tiny import make_tiny_model

    base = ensure_synth_model(arch, overrides) if mtp else None
    try:
        with atomic_dir(target) as tmp:
            if base is not None:
                from servelab.synth.quantize import add_mtp_head

                tmp.rmdir()  # add_mtp_head makes its output directory itself
                add_mtp_head(base, tmp)
            else:
                make_tiny_model(arch, tmp, overrides=overrides)
    except OSError:
        if not (target / "config.json").exists():  # someone else won the race if it exists
            raise
    return target


def new_run_dir(recipe: Recipe, parent: Path | None = None) -> Path:
    """A fresh, unique run directory ``<parent>/<UTC stamp>-<recipe name>``."""
    base = parent if parent is not None else runs_dir()
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(tempfile.mkdtemp(dir=base, prefix=f"{stamp}-{recipe.name}-"))


def resolve_launcher(recipe: Recipe) -> tuple[list[str], EngineInstall | None]:
    """The launcher argv prefix and the install it comes from (when known).

    Order: ``engine.executable``, ``engine.python`` (resolved relative to the recipe),
    the build's interpreter variable (``$SERVELAB_VLLM_PYTHON``), then the
    ``servelab engine install`` of ``engine.build``.
    """
    eng = recipe.engine
    if eng.executable is not None:
        exe = eng.executable
        if "/" in exe:
            exe = str((recipe.base_dir / Path(exe).expanduser()).absolute())
        return [exe], None
    python = recipe.engine_python()
    if python is not None:
        if not python.exists():
            raise EngineNotFoundError("engine.python does not exist", path=python)
        return [str(python)], None
    install = find_engine(eng.build)
    return [str(install.executable or install.python)], install


def display_launcher(recipe: Recipe) -> tuple[list[str], bool]:
    """Like :func:`resolve_launcher` but never fails: ``(argv prefix, installed?)``.

    Used by ``recipe check`` to show the command on machines without the engine.
    """
    try:
        argv, _ = resolve_launcher(recipe)
        return argv, True
    except EngineNotFoundError:
        if recipe.engine.python is not None:
            return [str(recipe.engine_python())], False
        root = engine_root(recipe.engine.build)
        builder = build_spec(recipe.engine.build).builder
        if builder is not None:
            return [str(builder.target(root))], False
        return [str(root / "venv" / "bin" / "python")], False


def resolve_model(recipe: Recipe, *, build: bool = True) -> tuple[str, Path | None]:
    """``(model argument, local path)``; checks a local path exists, builds ``synth``.

    The local path is what the engine loads (:meth:`~servelab.engines.base.Engine.
    local_model`): the checkpoint directory for vLLM, a GGUF file for llama.cpp.
    """
    m = recipe.model
    engine = get_engine(recipe.engine.name)
    if m.synth is not None:
        overrides = dict(m.synth_overrides)
        path = (
            ensure_synth_model(m.synth, overrides, mtp=m.synth_mtp)
            if build
            else synth_model_dir(m.synth, overrides, mtp=m.synth_mtp)
        )
        path = engine.local_model(recipe.engine, path, synth=True, build=build)
        return str(path), path
    local = recipe.model_path()
    if local is not None:
        local = engine.local_model(recipe.engine, local, synth=False, build=build)
        return str(local), local
    assert m.repo is not None
    return m.repo, None


def engine_argv(recipe: Recipe, *, launcher: Sequence[str], model: str, port: int) -> list[str]:
    """The argv of the recipe's engine: its ``[engine]`` table plus the resolved target
    (launcher prefix, model argument, served name, port, revision)."""
    target = ServeTarget(
        launcher=tuple(launcher),
        model=model,
        served_name=recipe.served_model_name(),
        port=port,
        revision=recipe.model.revision,
    )
    return get_engine(recipe.engine.name).argv(recipe.engine, target)


def check_engine_version(
    recipe: Recipe, install: EngineInstall | None, launcher: list[str]
) -> str | None:
    """Enforce ``engine.version``; returns the engine's version when it is known."""
    version = install.engine_version if install is not None else None
    if version is None and recipe.engine.executable is None:
        versions = launcher_versions(Path(launcher[0]), build=recipe.engine.build)
        version = versions.get(build_spec(recipe.engine.build).version_key)
    want = recipe.engine.version
    if want is None or version is None:
        return version
    try:
        ok = Version(version) in SpecifierSet(want)
    except InvalidVersion:
        ok = version.split("+")[0] in SpecifierSet(want)
    if not ok:
        raise EngineError(
            f"recipe needs {recipe.engine.name} {want} but the engine at {launcher[0]} is {version}"
        )
    return version


def prepare_launch(
    recipe: Recipe,
    *,
    run_dir: Path,
    port: int | Literal["auto"] | None = None,
    build_model: bool = True,
) -> LaunchSpec:
    """Resolve everything a launch needs; ``port`` overrides the recipe's (``"auto"``: free)."""

    launcher, _install = resolve_launcher(recipe)
    model_arg, model_dir = resolve_model(recipe, build=build_model)
    host = recipe.engine.host
    if port == "auto":
        chosen = pick_free_port(host if host not in ("0.0.0.0", "::") else "127.0.0.1")
    elif port is None:
        chosen = recipe.engine.port
    else:
        chosen = port
    engine = get_engine(recipe.engine.name)
    argv = engine_argv(recipe, launcher=launcher, model=model_arg, port=chosen)
    auto_env = engine.auto_env(recipe.engine)
    return LaunchSpec(
        argv=tuple(argv),
        host=host,
        port=chosen,
        log_path=run_dir / LOG_NAME,
        served_model_name=recipe.served_model_name(),
        env={**auto_env, **recipe.engine.env},
        auto_env=auto_env,
        model_dir=model_dir,
        startup_timeout_s=recipe.engine.startup_timeout_s,
        stop_grace_s=recipe.engine.stop_grace_s,
        cwd=run_dir,
        engine=engine.name,
    )


def launch(
    recipe: Recipe,
    *,
    run_dir: Path,
    port: int | Literal["auto"] | None = None,
    on_phase: PhaseCallback | None = None,
) -> EngineProcess:
    """Start the recipe's engine and wait until it serves; writes ``engine-facts.json``.

    On any failure the engine is stopped before the error propagates.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    launcher, install = resolve_launcher(recipe)
    check_engine_version(recipe, install, launcher)
    spec = prepare_launch(recipe, run_dir=run_dir, port=port)
    engine = start_engine(spec, on_phase)
    try:
        write_facts(engine, run_dir / FACTS_NAME)
    except BaseException:
        engine.stop()
        raise
    return engine


def write_facts(engine: EngineProcess, path: Path) -> None:
    """Write the engine's facts (plus pid, URL, ready time) as JSON, atomically."""
    data = {
        "base_url": engine.base_url,
        "served_model_name": engine.served_model_name,
        "argv": redact_args(engine.spec.argv),
        "ready_s": engine.ready_s,
        "auto_env": dict(engine.spec.auto_env),
        "facts": engine.facts.to_dict(),
    }
    write_json(path, data, indent=2, default=str)
