"""Progress that also reaches a log: a spinner on a terminal, plain lines elsewhere.

Rich draws spinners and bars only on a terminal; into a pipe, a CI log or ``| tee`` it
prints nothing until the end, so a first ``servelab demo`` (installing the engines) was
silent for a quarter of an hour (issue 33). :func:`status` gives the spinner on a terminal
and one line per change of message elsewhere; :class:`LineTicker` prints a progress line at
most every :data:`LINE_EVERY_S` seconds for counters that change on every request.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console
from rich.markup import escape

LINE_EVERY_S = 10.0


class Status(Protocol):
    def update(self, status: str) -> None: ...


class _Lines:
    """``status.update`` as printed lines (each distinct message once)."""

    def __init__(self, console: Console, first: str) -> None:
        self.console = console
        self.last = first
        console.print(first, highlight=False, soft_wrap=True)

    def update(self, status: str) -> None:
        if status != self.last:
            self.last = status
            self.console.print(status, highlight=False, soft_wrap=True)


@contextmanager
def status(console: Console, text: str) -> Iterator[Status]:
    """A spinner with ``text`` on a terminal; otherwise ``text`` and every update as lines."""
    if console.is_terminal:
        with console.status(text, spinner="dots") as st:
            yield st
    else:
        yield _Lines(console, text)


class LineTicker:
    """Progress lines for a log: ``tick(text)`` prints at most every ``every_s`` seconds,
    ``say(text)`` always; silent on a terminal (where a live display shows it)."""

    def __init__(self, console: Console, every_s: float = LINE_EVERY_S) -> None:
        self.console = console
        self.on = not console.is_terminal
        self.every_s = every_s
        self.last = 0.0

    def tick(self, text: str) -> None:
        now = time.monotonic()
        if self.on and now - self.last >= self.every_s:
            self.last = now
            self.console.print(escape(text), highlight=False, soft_wrap=True)

    def say(self, text: str) -> None:
        if self.on:
            self.last = time.monotonic()
            self.console.print(escape(text), highlight=False, soft_wrap=True)


__all__ = ["LINE_EVERY_S", "LineTicker", "Status", "status"]
