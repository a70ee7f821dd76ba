"""A user's install: ``pip install .`` into a fresh venv, no dev extras and no torch (issue 41).

The suite's own venv has torch, pytest and the rest, so it never sees what such a user sees:
transformers' ``PyTorch was not found. Models won't be available …`` before every model
command, matplotlib's font-cache notice on a first site build. Here a venv of servelab's
declared dependencies alone runs the commands a new user runs first, and stderr must be empty
(or, for bad input, exactly servelab's one ``error:`` line).

The venv is slow to make (its dependencies: about a minute on two cores), so it is kept in
pytest's cache, keyed by the Python version and the ``dependencies`` of pyproject.toml; each
session reinstalls servelab itself into it (``--no-deps``, a few seconds), so the code under
test is always this checkout's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE = """\
name = "oss20-synthetic"
hardware = "host"
[model]
path = "oss20"
[engine]
name = "synthetic"
[engine.flags]
ttft_ms = 10
itl_ms = 1
[bench]
prompt_lens = [32]
output_len = 4
concurrency = [1]
requests = 2
max_repeats = 1
"""
# what the libraries' own stderr lines contain (a tqdm bar draws "%|")
THIRD_PARTY = ("warn", "[transformers]", "pytorch", "matplotlib", "huggingface", "%|")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _pip(venv: Path, *args: str) -> None:
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=840, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.fixture(scope="session")
def fresh_venv(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    key = hashlib.sha256(repr((sys.version_info[:2], sorted(deps))).encode()).hexdigest()[:12]
    cache = getattr(pytestconfig, "cache", None)  # None under -p no:cacheprovider
    parent = Path(cache.mkdir("fresh-install")) if cache is not None else (
        tmp_path_factory.mktemp("fresh-install"))
    venv = parent / f"venv-{key}"
    stamp = venv / ".deps-installed"
    if not stamp.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        _pip(venv, str(ROOT))
        stamp.touch()
    else:  # this checkout's servelab, over the cached dependencies
        _pip(venv, "--no-deps", "--force-reinstall", str(ROOT))
    return venv


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SERVELAB_", "TRANSFORMERS_", "HF_", "PYTHON", "MPL"))}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    # a user's first run: no matplotlib font cache yet, servelab's data dir empty
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"),
               XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local"),
               HF_HUB_OFFLINE="1", COLUMNS="80")
    return env


def _servelab(venv: Path, env: dict[str, str], cwd: Path,
              *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "servelab"), *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300, check=False)


def test_a_fresh_install_without_torch_prints_nothing_on_stderr(
    fresh_venv: Path, tmp_path: Path
) -> None:
    env = _env(tmp_path)
    (tmp_path / "synthetic.toml").write_text(RECIPE, encoding="utf-8")
    no_torch = subprocess.run([str(fresh_venv / "bin" / "python"), "-c", "import torch"],
                              capture_output=True, text=True, check=False)
    assert no_torch.returncode != 0, "the fresh venv must be a user's: servelab without torch"

    for args in (("synth", "replica", "oss120", "--model", "gpt-oss-120b"),
                 ("synth", "replica", "oss20", "--model", "gpt-oss-20b"),
                 ("plan", "oss120", "-H", "dgx-spark"),
                 ("inspect", "oss20"),
                 ("choose", "oss120", "oss20", "-H", "dgx-spark", "--no-store"),
                 ("run", "synthetic.toml"),  # served by servelab's synthetic engine
                 ("site", "build", "site")):  # matplotlib's first import: its font cache
        proc = _servelab(fresh_venv, env, tmp_path, *args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert proc.stdout.strip(), args
        if args[0] in ("run", "site"):  # progress goes to stderr, by design: servelab's only
            noise = [line for line in proc.stderr.splitlines()
                     if any(n in line.lower() for n in THIRD_PARTY)]
            assert noise == [], proc.stderr
        else:
            assert proc.stderr == "", (args, proc.stderr)

    plan = _servelab(fresh_venv, env, tmp_path, "plan", "oss120", "-H", "dgx-spark")
    assert "fits: yes" in plan.stdout

    # bad input: servelab's one line, and nothing from a library before it
    proc = _servelab(fresh_venv, env, tmp_path, "plan", "no-such-dir", "-H", "dgx-spark")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
