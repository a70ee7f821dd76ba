"""SIGTERM treated as Ctrl-C while a command holds something to clean up."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["interrupt_on_sigterm"]


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Inside the block SIGTERM raises :class:`KeyboardInterrupt`, so the ``finally`` clauses
    that stop an engine or remove a half-built install run for a ``kill`` as for Ctrl-C
    (Python's default for SIGTERM ends the process without them). Only the main thread
    can take signals; elsewhere the block changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
