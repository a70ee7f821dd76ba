"""The shell blocks of the documentation, read from its Markdown (tests/docs/test_docs.py).

A block is marked by an HTML comment right above its fence (invisible on the page)::

    <!-- test: run; expect "fits: yes"; exit 0 -->
    ```bash
    servelab plan oss120 -H dgx-spark
    ```

Directives, separated by ``;``:

- ``run``: run the block with bash (``-euo pipefail``) in the page's working folder, after
  every block above it on the same page; ``exit N`` (default 0) is its exit status;
  ``expect "TEXT"`` (repeatable) a fact its output (stdout and stderr) must hold;
  ``expect-re "REGEX"`` the same as a regular expression; ``timeout N`` seconds (default 300);
- ``skip: WHY`` (last: the reason runs to the end of the comment): not run (it needs the
  Hub, a GPU or a real engine install); every ``servelab`` command in it must still parse
  against the CLI as it is now;
- ``file NAME``: the block (any language) is written to NAME in the working folder first.

Every ``bash``/``console``/``sh`` block of the docs and the README carries ``run`` or
``skip``: a shell block nobody runs is a block that rots.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

SHELL = ("bash", "sh", "console", "shell")
_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.S | re.M)
_MARK = re.compile(r"<!--\s*test:(?P<spec>(?:(?!-->).)*)-->\s*\Z", re.S)
_QUOTED = r'"((?:[^"\\]|\\.)*)"'


@dataclass(frozen=True)
class Block:
    """One fenced block and what its marker asks."""

    page: Path
    line: int
    lang: str
    body: str
    action: str | None = None  # "run", "skip", "file" or None (no marker)
    why: str = ""
    file: str = ""
    exit: int = 0
    timeout: float = 300
    expect: tuple[str, ...] = ()
    expect_re: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"

    def commands(self) -> list[list[str]]:
        """The block's command lines, continuation lines joined, comments dropped, split as
        the shell splits them (a line with a pipe or a substitution is one command's
        words up to it)."""
        text = re.sub(r"\\\n", " ", self.body)
        out = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            words = shlex.split(line, comments=True)
            cut = next((i for i, w in enumerate(words) if w in ("|", "&&", ";", ">", "2>")),
                       len(words))
            out.append(words[:cut])
        return out


@dataclass
class _Spec:
    action: str | None = None
    why: str = ""
    file: str = ""
    exit: int = 0
    timeout: float = 300
    expect: list[str] = field(default_factory=list)
    expect_re: list[str] = field(default_factory=list)


def _parse_spec(spec: str, where: str) -> _Spec:
    out = _Spec()
    spec, skip, why = spec.partition("skip:")  # a reason may hold ";": it runs to the end
    if skip:
        out.action, out.why = "skip", why.strip()
    for part in (p.strip() for p in re.split(r';(?=(?:[^"]*"[^"]*")*[^"]*$)', spec)):
        if not part:
            continue
        if part == "run":
            out.action = "run"
        elif part.startswith("file "):
            out.action, out.file = "file", part[5:].strip()
        elif m := re.fullmatch(rf"expect {_QUOTED}", part):
            out.expect.append(m.group(1).replace('\\"', '"'))
        elif m := re.fullmatch(rf"expect-re {_QUOTED}", part):
            out.expect_re.append(m.group(1).replace('\\"', '"'))
        elif m := re.fullmatch(r"exit (\d+)", part):
            out.exit = int(m.group(1))
        elif m := re.fullmatch(r"timeout (\d+)", part):
            out.timeout = float(m.group(1))
        else:
            raise ValueError(f"{where}: unknown test directive {part!r}")
    if out.action is None:
        raise ValueError(f"{where}: a test marker needs run, skip: WHY or file NAME")
    if out.action == "skip" and not out.why:
        raise ValueError(f"{where}: skip needs a reason")
    return out


_OUTER = re.compile(r"^(````+)[^\n]*\n.*?^\1[ \t]*$", re.S | re.M)


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order, with its marker's directives (blocks shown
    inside a four-backtick fence are an example's text, not blocks)."""
    text = _OUTER.sub(lambda m: "\n" * m.group(0).count("\n"),
                      page.read_text(encoding="utf-8"))
    out = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        where = f"{page.name}:{line}"
        mark = _MARK.search(text[max(0, m.start() - 2000):m.start()])
        spec = _parse_spec(mark.group("spec"), where) if mark else _Spec()
        body = "\n".join(ln[len(m.group("indent")):] for ln in m.group("body").splitlines())
        out.append(Block(page, line, m.group("lang"), body + "\n", spec.action, spec.why,
                         spec.file, spec.exit, spec.timeout, tuple(spec.expect),
                         tuple(spec.expect_re)))
    return out


__all__ = ["SHELL", "Block", "blocks"]
