"""Build llama.cpp's ``llama-server`` from the source the pinned ``llama-cpp-python`` ships.

Steps (each logged to the engine's ``install.log``): ``pip download`` the
``llama-cpp-python`` source distribution (PyPI; the ordinary client, no binary), unpack
it, configure its vendored llama.cpp with CMake (CPU backend, ``-march=native``, static
libraries, no tests/examples/curl/OpenSSL), build only the ``llama-server`` target with
as many jobs as there are cores, and install the one binary as
``<engine dir>/bin/llama-server``. The source and build trees are removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from servelab.engines.builds import Step, run_logged
from servelab.errors import EngineError
from servelab.outfile import atomic_file

__all__ = ["BUILD_VERSION", "LLAMA_CPP_PYTHON", "LlamaServerBuilder"]

LLAMA_CPP_PYTHON = "0.3.36"  # the PyPI release whose vendored llama.cpp is built
# What that build reports (``llama-server --version``, its log): the sdist carries no git
# history, so llama.cpp's build number is 1 and the commit is the name set below.
BUILD_VERSION = f"b1-llama-cpp-python-{LLAMA_CPP_PYTHON}"
SERVER = "llama-server"

_CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    f"-DLLAMA_BUILD_COMMIT=llama-cpp-python-{LLAMA_CPP_PYTHON}",
)


class LlamaServerBuilder:
    """The llama.cpp build's :class:`~servelab.serve.install.Builder`."""

    def target(self, root: Path) -> Path:
        """Where the built server lives."""
        return root / "bin" / SERVER

    def build(self, root: Path, python: Path, log: Path, step: Step) -> Path:
        """Download, configure, compile and install ``llama-server``; return its path."""
        work = root / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            step(f"pip download llama-cpp-python=={LLAMA_CPP_PYTHON} (source)")
            run_logged(
                [
                    str(python), "-m", "pip", "download", "--disable-pip-version-check",
                    "--no-deps", "--no-binary", ":all:", "-d", str(work),
                    f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
                ],
                log,
                "pip download",
            )
            archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
            if not archives:
                raise EngineError("pip download gave no llama-cpp-python source", path=log)
            step("unpacking the source")
            with tarfile.open(archives[0]) as tar:
                tar.extractall(work, filter="data")
            src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"), None)
            if src is None:
                raise EngineError("the source has no vendor/llama.cpp", path=archives[0])
            build = work / "build"
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            step("configuring llama.cpp (cmake)")
            run_logged(
                ["cmake", "-S", str(src), "-B", str(build), *generator, *_CMAKE_OPTIONS],
                log,
                "cmake configure",
            )
            jobs = str(os.cpu_count() or 1)
            step(f"compiling llama-server ({jobs} jobs; several minutes)")
            run_logged(
                ["cmake", "--build", str(build), "--target", SERVER, "-j", jobs],
                log,
                "cmake build",
            )
            built = next(build.rglob(SERVER), None)
            if built is None or not built.is_file():
                raise EngineError("the build produced no llama-server", path=log)
            target = self.target(root)
            with atomic_file(target, mode=built.stat().st_mode & 0o7777) as tmp:
                shutil.copy2(built, tmp)
            return target
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def versions(self, executable: Path) -> dict[str, str] | None:
        """``{"llama.cpp": "<build> (<commit>)", "llama-cpp-python": ...}`` or ``None``."""
        if not executable.is_file():
            return None
        try:
            proc = subprocess.run(
                [str(executable), "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        from servelab.engines.llamacpp.logfacts import parse_version

        version = parse_version(proc.stdout + proc.stderr)
        if proc.returncode != 0 or version is None:
            return None
        return {"llama.cpp": version, "llama-cpp-python": LLAMA_CPP_PYTHON}
