"""Prompts from local dataset files: ShareGPT-format JSON and JSONL.

- ``*.json``: a ShareGPT list — objects with ``conversations`` (or ``conversation``), each
  a list of ``{"from": "human"|"user"|"gpt"|"assistant", "value": text}``; the first human
  turn is the prompt and the reply after it is the reference answer.
- ``*.jsonl``: one object per line with ``prompt`` (or ``text``) and optionally
  ``output_len`` (tokens) or ``completion`` (a reference answer).

Entries without a usable prompt are skipped and counted. Lengths are applied by the
workload: exactly the point's prompt length (the text is cut at a word boundary and, if
short, filled — :meth:`servelab.bench.prompts.PromptBuilder.fit`) or the text's natural
length; the output length is the point's, or the reference answer's as the server's
tokenizer counts it, or the line's ``output_len``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.bench.jsonl import positive_int, read_lines, read_text
from servelab.errors import InputError

_HUMAN = ("human", "user")
_BOT = ("gpt", "assistant", "bot", "chatgpt", "model")


@dataclass(frozen=True, slots=True)
class Entry:
    """One dataset prompt and what it says about the answer."""

    prompt: str
    reference: str | None = None
    output_len: int | None = None


@dataclass(frozen=True, slots=True)
class Dataset:
    """The usable entries of one file, in file order."""

    path: str
    entries: tuple[Entry, ...]
    skipped: int


def _sharegpt(obj: Any) -> Entry | None:
    if not isinstance(obj, dict):
        return None
    conv = obj.get("conversations", obj.get("conversation"))
    if not isinstance(conv, list):
        return None
    for i, turn in enumerate(conv):
        if (isinstance(turn, dict) and turn.get("from") in _HUMAN
                and isinstance(turn.get("value"), str) and turn["value"].strip()):
            ref = None
            if i + 1 < len(conv):
                nxt = conv[i + 1]
                if isinstance(nxt, dict) and nxt.get("from") in _BOT and isinstance(
                        nxt.get("value"), str) and nxt["value"].strip():
                    ref = nxt["value"]
            return Entry(turn["value"], ref)
    return None


def _line(obj: Any, path: Path, lineno: int) -> Entry | None:
    if not isinstance(obj, dict):
        raise InputError(f"line {lineno}: expected a JSON object", path=path)
    prompt = obj.get("prompt", obj.get("text"))
    if not isinstance(prompt, str) or not prompt.strip():
        return None
    out = positive_int(obj.get("output_len"), "output_len", path, lineno)
    ref = obj.get("completion")
    return Entry(prompt, ref if isinstance(ref, str) and ref.strip() else None, out)


def load_dataset(path: Path) -> Dataset:
    """Read a ShareGPT JSON or a JSONL file; InputError naming the file for bad input."""
    entries: list[Entry] = []
    skipped = 0
    if path.suffix.lower() == ".jsonl":
        found = [_line(obj, path, i) for i, obj in read_lines(path, "dataset")]
    else:
        try:
            data = json.loads(read_text(path, "dataset"))
        except ValueError as exc:
            raise InputError(f"not JSON ({exc})", path=path) from None
        if not isinstance(data, list):
            raise InputError("expected a ShareGPT list of conversations (or use .jsonl)",
                             path=path)
        found = [_sharegpt(obj) for obj in data]
    for e in found:
        if e is None:
            skipped += 1
        else:
            entries.append(e)
    if not entries:
        raise InputError(f"no usable prompt in the dataset ({skipped} entries skipped)",
                         path=path)
    return Dataset(str(path), tuple(entries), skipped)
