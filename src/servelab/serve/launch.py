"""From a recipe to a running engine: its resolved launcher, model and port, then start.

:func:`prepare_launch` is the planning step (no engine started; builds a recipe's tiny
``synth`` model when asked); :func:`launch` starts the engine from it and writes the
parsed log facts next to the log in the run directory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from servelab.engines import get_engine
from servelab.engines.base import ServeTarget
from servelab.outfile import write_json
from servelab.redact import redact_args
from servelab.serve.home import runs_dir
from servelab.serve.process import (
    EngineProcess,
    LaunchSpec,
    PhaseCallback,
    pick_free_port,
    start_engine,
)
from servelab.serve.recipe import Recipe
from servelab.serve.resolved import ResolvedRecipe, resolve_model, resolve_recipe

__all__ = ["engine_argv", "launch", "new_run_dir", "prepare_launch"]

LOG_NAME = "engine.log"
FACTS_NAME = "engine-facts.json"


def new_run_dir(recipe: Recipe, parent: Path | None = None) -> Path:
    """A fresh, unique run directory ``<parent>/<UTC stamp>-<recipe name>``."""
    base = parent if parent is not None else runs_dir()
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(tempfile.mkdtemp(dir=base, prefix=f"{stamp}-{recipe.name}-"))


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


def prepare_launch(
    recipe: Recipe | ResolvedRecipe,
    *,
    run_dir: Path,
    port: int | Literal["auto"] | None = None,
    build_model: bool = True,
) -> LaunchSpec:
    """Everything a launch needs, from the recipe as resolved once (a bare recipe is resolved
    here); ``port`` overrides the recipe's (``"auto"``: free)."""
    resolved = recipe if isinstance(recipe, ResolvedRecipe) else resolve_recipe(recipe)
    rec = resolved.recipe
    launcher = resolved.launcher
    model_arg, model_dir = (resolved.model if build_model
                            else resolve_model(rec, build=False))
    host = rec.engine.host
    if port == "auto":
        chosen = pick_free_port(host if host not in ("0.0.0.0", "::") else "127.0.0.1")
    elif port is None:
        chosen = rec.engine.port
    else:
        chosen = port
    engine = resolved.engine
    argv = engine_argv(rec, launcher=launcher, model=model_arg, port=chosen)
    auto_env = engine.auto_env(rec.engine)
    return LaunchSpec(
        argv=tuple(argv),
        host=host,
        port=chosen,
        log_path=run_dir / LOG_NAME,
        served_model_name=rec.served_model_name(),
        env={**auto_env, **rec.engine.env},
        auto_env=auto_env,
        model_dir=model_dir,
        startup_timeout_s=rec.engine.startup_timeout_s,
        stop_grace_s=rec.engine.stop_grace_s,
        cwd=run_dir,
        engine=engine.name,
    )


def launch(
    recipe: Recipe | ResolvedRecipe,
    *,
    run_dir: Path,
    port: int | Literal["auto"] | None = None,
    on_phase: PhaseCallback | None = None,
) -> EngineProcess:
    """Start the recipe's engine and wait until it serves; writes ``engine-facts.json``.

    The recipe as resolved once (a bare recipe is resolved here): its launcher, its engine's
    version checked against the recipe's requirement, its model. On any failure the engine is
    stopped before the error propagates.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = recipe if isinstance(recipe, ResolvedRecipe) else resolve_recipe(recipe)
    _ = resolved.engine_version  # enforced before the engine starts
    spec = prepare_launch(resolved, run_dir=run_dir, port=port)
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
