"""Build llama.cpp's ``llama-server`` from the source the pinned ``llama-cpp-python`` ships.

Steps (each logged to the engine's ``install.log``): ``pip download`` the
``llama-cpp-python`` source distribution (PyPI; the ordinary client, no binary), unpack
it, configure its vendored llama.cpp with CMake (CPU backend, ``-march=native``, static
libraries, no tests/examples/curl/OpenSSL), build only the ``llama-server`` target with
as many jobs as there are cores, and install the one binary as
``<engine dir>/bin/llama-server``. The source and build trees are removed afterwards.

**No AMX.** On an x86 CPU with AMX (Sapphire Rapids and newer Xeons) ``-march=native``
turns on ggml's AMX backend, which moves Q4_0/Q4_1/Q8_0/K-quant weights into an "AMX"
buffer. This llama.cpp's AMX matrix multiply crashes with SIGSEGV at the server's first
decode (its warm-up) on such a host: ``ldtilecfg`` in ``ggml_backend_amx_mul_mat`` faults
(si_code SI_KERNEL) on a 2-core Xeon VM, for every model type tried (tiny llama and
qwen3_moe, Q8_0), while the same CPU runs AMX tile code of its own and the same binary
serves with ``--no-repack`` (benchmarks/RESULTS.md, 2026-12-05; reported upstream as
ggml-org/llama.cpp#20824, closed without a fix; ollama dropped its Sapphire Rapids build for
the same crashes). So on x86 servelab compiles with ``-mno-amx-tile -mno-amx-int8
-mno-amx-bf16`` after ``-march=native``: the build is native for every other extension
(AVX-512, VNNI, BF16), keeps llama.cpp's CPU_REPACK path, and is the same on AMX,
AVX-512-only and AVX2-only CPUs (on those the flags change nothing). The run records the
CPU paths llama.cpp reports (``system_info``: no ``AMX_INT8``).
"""

from __future__ import annotations

import os
import platform
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
#: Compiler flags that keep ggml's AMX backend out of an x86 build (see the module docs).
NO_AMX = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")


def cmake_options(machine: str) -> tuple[str, ...]:
    """The configure options for a build on ``machine`` (``platform.machine()``): on x86,
    the AMX extensions are switched off after ``-march=native`` (GCC and Clang apply an
    explicit ``-mno-…`` whatever the order)."""
    if machine.lower() not in ("x86_64", "amd64"):
        return _CMAKE_OPTIONS
    flags = " ".join(NO_AMX)
    return (*_CMAKE_OPTIONS, f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}")


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
                ["cmake", "-S", str(src), "-B", str(build), *generator,
                 *cmake_options(platform.machine())],
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
