"""Where ``plan``, ``choose`` and ``run`` print their answer: a terminal at its own width, or
a pipe at a sane one.

In a terminal every line fits the terminal: tables fold their cells, sentences wrap at word
boundaries. Into a pipe or a file there is no width to fit, and two needs pull apart: a
table must keep a readable width (a 1,000-column console had centred ``choose``'s title at
column 218 and padded its lines past 250 columns), and a sentence read by ``grep`` should
stay on one line. So a pipe gets tables at :data:`PIPE_COLUMNS` columns (``$COLUMNS`` when
set; ``--wide``: their natural width) and sentences unwrapped; trailing spaces (a title
padded to its table's width) are dropped.
"""

from __future__ import annotations

import os

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.text import Text

PIPE_COLUMNS = 80
"""Width of tables written into a pipe or a file (``$COLUMNS`` overrides it)."""
WIDE_COLUMNS = 1000
"""Width of ``--wide`` tables written into a pipe: their natural width."""


def _pipe_width(wide: bool) -> int:
    if wide:
        return WIDE_COLUMNS
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_COLUMNS


class Screen:
    """The console of a result view, with the three things a view prints: a table (or any
    renderable), a sentence, and a heading."""

    def __init__(self, console: Console | None = None, *, wide: bool = False) -> None:
        if console is None:
            console = Console(highlight=False, soft_wrap=False)
            if not console.is_terminal:
                console = Console(highlight=False, soft_wrap=False, width=_pipe_width(wide))
        self.console = console

    @property
    def terminal(self) -> bool:
        """Whether the output is a terminal (sentences wrap to its width)."""
        return self.console.is_terminal

    @property
    def width(self) -> int:
        """The width tables are drawn at."""
        return self.console.width

    def show(self, renderable: RenderableType) -> None:
        """A table or another renderable; in a pipe without the trailing spaces rich pads a
        line with."""
        if self.terminal:
            self.console.print(renderable)
            return
        with self.console.capture() as cap:
            self.console.print(renderable)
        lines = cap.get().split("\n")
        self.console.file.write("\n".join(line.rstrip() for line in lines))
        self.console.file.flush()

    def say(self, text: str | Text, style: str | None = None, *, markup: bool = False) -> None:
        """A sentence: wrapped at words in a terminal, one line in a pipe. ``text`` is plain
        unless ``markup`` (then rich markup, escaped by the caller)."""
        body = text if isinstance(text, Text) else Text.from_markup(text) if markup else Text(
            text)
        if style:
            body.stylize(style)
        self.console.print(body, soft_wrap=not self.terminal)

    def heading(self, text: str) -> None:
        """A section heading of the details, after a blank line."""
        self.console.print()
        self.console.print(Text(text, style="bold underline"), soft_wrap=not self.terminal)

    def blank(self) -> None:
        """An empty line."""
        self.console.print()


def labelled(label: str, text: str, style: str = "yellow") -> Text:
    """``label: text`` with the label styled (a note, a warning) and the text plain."""
    return Text.assemble((f"{label}:", style), " ", text)


__all__ = ["PIPE_COLUMNS", "Screen", "escape", "labelled"]
