"""Reading the local JSON / JSONL inputs of a workload (traces, datasets) with errors that
name the file and the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.errors import InputError


def read_text(path: Path, what: str) -> str:
    """The file's text; InputError naming the file when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the {what}: {exc}", path=path) from exc


def read_lines(path: Path, what: str) -> list[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-blank line of a JSONL file."""
    out: list[tuple[int, Any]] = []
    for i, raw in enumerate(read_text(path, what).splitlines(), 1):
        if not raw.strip():
            continue
        try:
            out.append((i, json.loads(raw)))
        except ValueError as exc:
            raise InputError(f"line {i}: not JSON ({exc})", path=path) from None
    return out


def positive_int(v: object, key: str, path: Path, line: int) -> int | None:
    """An optional positive integer field of line ``line``; InputError otherwise."""
    if v is None:
        return None
    if type(v) is not int or v < 1:
        raise InputError(f"line {line}: {key} must be a positive integer, got {v!r}", path=path)
    return v
