"""Third-party libraries speak to the user only through servelab (issue 41).

transformers, huggingface_hub and matplotlib write to stderr on their own: log records
through handlers they install on import (transformers' ``PyTorch was not found. Models won't
be available …`` before every model command in a venv without torch; matplotlib's font-cache
notice), Python warnings (deprecations, ``UserWarning``), and tqdm progress bars. None of it
is something a servelab user can act on, and it came before the one line servelab prints.

:func:`quiet_libraries` is the context the ``servelab`` command runs in: log records below
ERROR are dropped (``logging.disable``: it holds for every logger, including those whose
library installed its own handler, which a root handler cannot reach; servelab itself does
not log, it prints), Python warnings are ignored, and code that would draw a library's tqdm
bar turns it off first (:func:`no_progress_bars`: the libraries' own switches).
``SERVELAB_DEBUG=1`` leaves all of it as the libraries have it, with the traceback
:mod:`servelab.cli.errors` re-raises. Leaving the context restores the log and warning
settings (the test suite calls the CLI in-process).

Nothing here touches ``os.environ``: an engine servelab starts inherits the environment, and
its own log is the engine's to write.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

DEBUG_ENV = "SERVELAB_DEBUG"

_active = False


def debugging() -> bool:
    """Whether ``SERVELAB_DEBUG`` asks for the libraries' own output and tracebacks."""
    return bool(os.environ.get(DEBUG_ENV))


def active() -> bool:
    """Whether the caller runs inside :func:`quiet_libraries` (the ``servelab`` command)."""
    return _active


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Drop third-party warnings and log records below ERROR while the block runs."""
    global _active
    if debugging():
        yield
        return
    before_disable = logging.root.manager.disable
    before_active = _active
    _active = True
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before_disable)
        _active = before_active


@contextmanager
def logging_enabled() -> Iterator[None]:
    """Log records flow again while the block runs (for code that collects a library's
    records with a handler of its own, as :mod:`servelab.families.base` does with
    transformers' config notes)."""
    before = logging.root.manager.disable
    logging.disable(logging.NOTSET)
    try:
        yield
    finally:
        logging.disable(before)


def no_progress_bars() -> None:
    """Inside :func:`quiet_libraries`, turn off the tqdm bars of transformers and
    huggingface_hub (whichever is imported): ``save_pretrained`` draws "Writing model shards"
    even for a one-shard tiny model. The switch is theirs and stays off for the process."""
    if not _active:
        return
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils.tqdm import disable_progress_bars

        disable_progress_bars()


__all__ = ["DEBUG_ENV", "active", "debugging", "logging_enabled", "no_progress_bars",
           "quiet_libraries"]
