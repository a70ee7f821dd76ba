"""A recipe resolved once: what ``servelab run``, ``plan RECIPE`` and ``serve`` read of it.

:func:`resolve_recipe` finds the recipe's launcher (the engine's executable or interpreter,
and the install it comes from) once; the other parts are resolved the first time they are
read and kept: the model the engine loads (a ``synth`` model built, a GGUF converted), the
engine's version (checked against the recipe's requirement), the version whose rules a plan
follows, the hardware profile and the software around the engine. Each part fails where it
is read, so a run records a failure at the step that read it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from servelab.engines import get_engine
from servelab.engines.base import Engine
from servelab.errors import EngineError, EngineNotFoundError, ServelabError, UsageError
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import HardwareProfile
from servelab.outfile import atomic_dir
from servelab.serve.environment import EngineEnvironment, environment_of
from servelab.serve.home import synth_models_dir
from servelab.serve.install import (
    EngineInstall,
    build_spec,
    engine_root,
    find_engine,
    launcher_versions,
)
from servelab.serve.recipe import Recipe

__all__ = ["DEFAULT_HARDWARE", "ResolvedRecipe", "check_engine_version", "display_launcher",
           "engine_environment", "ensure_synth_model", "launcher_resolutions", "resolve_launcher",
           "resolve_model", "resolve_recipe", "synth_model_dir"]

DEFAULT_HARDWARE = "host"


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


_RESOLUTIONS = [0]


def launcher_resolutions() -> int:
    """How many times :func:`resolve_launcher` has resolved a launcher in this process (a
    run resolves its recipe's once: tests count it)."""
    return _RESOLUTIONS[0]


def resolve_launcher(recipe: Recipe) -> tuple[list[str], EngineInstall | None]:
    """The launcher argv prefix and the install it comes from (when known); counted
    (:func:`launcher_resolutions`).

    Order: ``engine.executable``, ``engine.python`` (resolved relative to the recipe),
    the build's interpreter variable (``$SERVELAB_VLLM_PYTHON``), then the
    ``servelab engine install`` of ``engine.build``.
    """
    _RESOLUTIONS[0] += 1
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


def check_engine_version(
    recipe: Recipe, install: EngineInstall | None, launcher: list[str],
    versions: Mapping[str, str] | None = None,
) -> str | None:
    """Enforce ``engine.version``; returns the engine's version when it is known
    (``versions``: what the launcher reports, when already asked)."""
    version = install.engine_version if install is not None else None
    if version is None and recipe.engine.executable is None:
        if versions is None:
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


class ResolvedRecipe:
    """One recipe and everything servelab resolved for it (see the module docs)."""

    def __init__(self, recipe: Recipe, launcher: tuple[str, ...] | None,
                 install: EngineInstall | None, missing: ServelabError | None, *,
                 hardware: HardwareProfile | None = None, hardware_name: str | None = None,
                 hardware_files: Iterable[str | Path] = ()) -> None:
        self.recipe = recipe
        self._launcher = launcher
        self.install = install
        """The ``servelab engine install`` the launcher comes from (``None``: a recipe's own
        executable or interpreter)."""
        self.missing = missing
        """Why there is no launcher (the engine is not installed here), when there is none."""
        self._hardware = hardware
        self._hardware_name = hardware_name
        self._hardware_files = tuple(hardware_files)

    @property
    def engine(self) -> Engine:
        """The recipe's engine."""
        return get_engine(self.recipe.engine.name)

    @property
    def launcher(self) -> tuple[str, ...]:
        """The argv prefix that starts the engine; :class:`EngineNotFoundError` when it is
        not installed here."""
        if self._launcher is None:
            assert self.missing is not None
            raise self.missing
        return self._launcher

    @cached_property
    def model(self) -> tuple[str, Path | None]:
        """``(model argument, local path)`` the engine loads; a ``synth`` model built."""
        return resolve_model(self.recipe)

    @cached_property
    def _versions(self) -> dict[str, str]:
        """Versions the launcher reports (asked once, and only when needed)."""
        if self.recipe.engine.executable is not None:
            return {}
        return launcher_versions(Path(self.launcher[0]), build=self.recipe.engine.build)

    @cached_property
    def engine_version(self) -> str | None:
        """The engine's version when it is known, checked against the recipe's
        ``engine.version`` (:class:`~servelab.errors.EngineError` when it does not meet it)."""
        return check_engine_version(self.recipe, self.install, list(self.launcher),
                                    versions=self._versions)

    @cached_property
    def plan_version(self) -> str:
        """The version whose rules a plan follows: the installed engine's, else the
        recipe's ``==`` requirement (a UsageError when neither tells)."""
        version = self.engine_version
        if version:
            return version.split("+")[0]
        want = self.recipe.engine.version or ""
        if want.startswith("=="):
            return want[2:]
        raise UsageError(
            "cannot tell the engine's version (no install manifest, no '==' requirement in the "
            "recipe); plan needs it to follow the right KV arithmetic"
        )

    def plan_version_or_default(self) -> str:
        """:attr:`plan_version`, or the version the recipe's engine pins when it cannot be
        told here (``servelab plan RECIPE`` on a machine without the engine)."""
        try:
            return self.plan_version
        except ServelabError:
            return self.engine.default_version

    @cached_property
    def hardware(self) -> HardwareProfile:
        """The hardware profile: the one given, else the one named (by the caller, else the
        recipe, else ``host``)."""
        if self._hardware is not None:
            return self._hardware
        name = self._hardware_name or self.recipe.hardware or DEFAULT_HARDWARE
        return get_profile(name, files=self._hardware_files)

    @cached_property
    def environment(self) -> EngineEnvironment:
        """Software around the engine (torch, its CUDA build, the driver), read without
        starting it; unknown parts stay ``None``."""
        if self.install is not None:
            return environment_of(self.install.versions.get("torch"))
        try:
            return environment_of(self._versions.get("torch"))
        except ServelabError:
            return environment_of(None)


def engine_environment(recipe: Recipe) -> EngineEnvironment:
    """What can be learnt about the recipe's engine without starting it."""
    return resolve_recipe(recipe, require_engine=False).environment


def resolve_recipe(recipe: Recipe, *, require_engine: bool = True,
                   hardware: HardwareProfile | None = None, hardware_name: str | None = None,
                   hardware_files: Iterable[str | Path] = ()) -> ResolvedRecipe:
    """Resolve ``recipe``'s launcher once (:class:`EngineNotFoundError` when its engine is
    not installed here, unless ``require_engine`` is false: a plan can do without it). The
    hardware is ``hardware`` when given, else the profile named ``hardware_name`` (default:
    the recipe's, else ``host``) among ``hardware_files`` and the built-in ones."""
    try:
        argv, install = resolve_launcher(recipe)
    except ServelabError as exc:
        if require_engine:
            raise
        return ResolvedRecipe(recipe, None, None, exc, hardware=hardware,
                              hardware_name=hardware_name, hardware_files=hardware_files)
    return ResolvedRecipe(recipe, tuple(argv), install, None, hardware=hardware,
                          hardware_name=hardware_name, hardware_files=hardware_files)


