"""The documentation cannot rot (issue 41).

- The site builds with ``mkdocs build --strict`` (every link and anchor resolves, every page
  is in the nav).
- Its CLI reference, generated from the Typer app at build time (docs/hooks.py), has a
  section for every command that lists exactly the options ``servelab COMMAND --help`` shows.
- Every shell block of the tutorials, the concepts and the README is marked (tests/docs/
  blocks.py): ``run`` blocks run here, page by page, in a fresh folder and results database,
  against header replicas (``servelab synth replica``) and servelab's synthetic engine, and
  their exit status and key facts are checked (not whole outputs: those change as servelab
  does); ``skip`` blocks (the Hub, a GPU) still parse against the CLI as it is now.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import typer
from tests.docs.blocks import SHELL, Block, blocks
from typer.testing import CliRunner

from servelab.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md"))
MARKED = [*PAGES, ROOT / "README.md"]
BIN = Path(sys.executable).parent


def _mkdocs() -> None:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:  # not a skip: CI installs the docs extra (scripts/lib.sh)
        pytest.fail("the docs need the 'docs' extra: pip install -e '.[docs]' "
                    "(scripts/lib.sh's ensure_dev_venv installs it)")


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _mkdocs()
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's end-of-life banner
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(ROOT / "mkdocs.yml"), "-d", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-6000:]
    return out


@pytest.mark.slow
def test_the_docs_build_strictly(site: Path) -> None:
    for page in ("index.html", "tutorials/which-build/index.html", "concepts/kv-pool/index.html",
                 "reference/cli/index.html"):
        assert (site / page).is_file(), page
    leaked = [p for p in site.rglob("*.html") if "/work/" in p.read_text(encoding="utf-8")
              or str(Path.home()) + "/" in p.read_text(encoding="utf-8")]
    assert leaked == []  # a page is shared with strangers: no local absolute paths


# --- the CLI reference ------------------------------------------------------------------------


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cmd
    if isinstance(cmd, click.Group) or hasattr(cmd, "list_commands"):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _commands(cmd.get_command(ctx, name), (*path, name))


def _help_options(path: tuple[str, ...]) -> tuple[str, set[str]]:
    """The summary line and the option names ``servelab PATH --help`` shows."""
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    lines = [ln.strip("│ ").rstrip() for ln in res.output.splitlines()]
    usage = next(i for i, ln in enumerate(lines) if ln.startswith("Usage:"))
    summary = next(ln.strip() for ln in lines[usage + 1:] if ln.strip())
    names = {tok.rstrip(",") for ln in res.output.splitlines() if ln.startswith("│ ")
             for tok in ln.strip("│ ").split()[:4] if re.fullmatch(r"--?[\w-]+,?", tok)}
    return summary, names


def _reference_sections(site: Path) -> dict[str, str]:
    """Section text of the built CLI reference by command (``servelab plan``), as shown."""
    page = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    parts = re.split(r"\n(servelab(?: [\w-]+)*|CLI reference)¶?\n", "\n" + text)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


@pytest.mark.slow
def test_the_cli_reference_matches_help_of_every_command(site: Path) -> None:
    sections = _reference_sections(site)
    walked = list(_commands(typer.main.get_command(app)))
    assert len(walked) >= 40
    for path, _ in walked:
        title = " ".join(("servelab", *path)) if path else "CLI reference"
        assert title in sections, f"no section for {title}"
        summary, names = _help_options(path)
        body = sections[title]
        plain = " ".join(summary.replace("`", "").split())  # ``x`` renders as code
        assert plain in " ".join(body.split()), (title, summary)
        documented = {n for n in re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", body.split(
            "Options:")[-1].split("Commands:")[0]) if n in names or n.startswith("--")}
        shown = {n for n in names if n.startswith("-")}
        assert shown <= documented | {"-h"}, (title, sorted(shown - documented))


# --- the blocks of the pages ------------------------------------------------------------------


def test_every_shell_block_is_run_or_says_why_not() -> None:
    unmarked = [b.where for page in MARKED for b in blocks(page)
                if b.lang in SHELL and b.action not in ("run", "skip")]
    assert unmarked == [], f"shell blocks without <!-- test: run --> or skip: {unmarked}"
    runs = [b for page in PAGES for b in blocks(page) if b.action == "run"]
    assert len(runs) >= 30  # the tutorials are made of commands that run


def _parses(words: list[str], where: str) -> None:
    """``servelab WORDS`` parses against the CLI (commands, options, value types) without
    running."""
    assert words[0] == "servelab", where
    cmd: Any = typer.main.get_command(app)
    args = words[1:]
    while isinstance(cmd, click.Group) and args and not args[0].startswith("-"):
        sub = cmd.get_command(click.Context(cmd), args[0])
        assert sub is not None, f"{where}: no command {args[0]!r} in {' '.join(words)}"
        cmd, args = sub, args[1:]
    try:
        cmd.make_context(words[0], list(args))
    except click.exceptions.Exit:
        pass
    except click.ClickException as exc:
        raise AssertionError(f"{where}: {' '.join(words)}: {exc.format_message()}") from exc


def test_blocks_not_run_still_parse() -> None:
    checked = 0
    for page in MARKED:
        for b in blocks(page):
            if b.action == "skip":
                for words in b.commands():
                    if words and words[0] == "servelab":
                        _parses(words, b.where)
                        checked += 1
    assert checked >= 3


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SERVELAB_", "PYTEST_", "COLUMNS"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
               SERVELAB_HOME=str(work / ".servelab"), HF_HUB_OFFLINE="1",
               HOME=str(work / ".home"))
    return env


RUNNABLE = [p for p in PAGES if any(b.action == "run" for b in blocks(p))]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(DOCS)))
def test_the_commands_of_a_page_run(page: Path, tmp_path: Path) -> None:
    env = _env(tmp_path)
    (tmp_path / ".home").mkdir()
    for b in blocks(page):
        if b.action == "file":
            (tmp_path / b.file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / b.file).write_text(b.body, encoding="utf-8")
        elif b.action == "run":
            _run(b, tmp_path, env)


def _run(b: Block, cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", b.body], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=b.timeout, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == b.exit, f"{b.where}: exit {proc.returncode}\n{b.body}\n{out[-4000:]}"
    for fact in b.expect:
        assert fact in out, f"{b.where}: {fact!r} not in the output of\n{b.body}\n{out[-4000:]}"
    for pattern in b.expect_re:
        assert re.search(pattern, out), f"{b.where}: /{pattern}/ not in\n{b.body}\n{out[-4000:]}"
