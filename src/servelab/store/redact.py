"""Remove secrets (tokens, API keys, Authorization values, passwords) before anything is stored.

Three rules, applied recursively to every string, list and dict of a record:

* a dict key that names a secret (``token``, ``api_key``, ``authorization``, ``password``,
  ``secret``, ``HF_TOKEN``, ``cookie``, ...) has its value replaced by ``[REDACTED]``;
* in an argument list, the value after a secret flag (``--api-key KEY``, ``--hf-token T``)
  and the value of ``--api-key=KEY`` are replaced;
* inside free text (logs, recipe text, args), well-known token shapes are replaced:
  ``hf_...``, ``sk-...``, ``ghp_...``/``github_pat_...``, ``Bearer ...``, ``NAME_TOKEN=...``
  style assignments, ``key = "..."`` TOML lines for secret keys, and URL passwords
  (``scheme://user:password@host``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

REDACTED = "[REDACTED]"

_SECRET_WORDS = (
    r"token|api[_-]?key|apikey|secret|passwd|password|authorization|auth[_-]?header|cookie|"
    r"credential|private[_-]?key|access[_-]?key"
)
_SECRET_KEY_LOOSE_RE = re.compile(rf"(?i){_SECRET_WORDS}")

# Keys that contain a secret word but hold counts, not secrets (e.g. "prompt_tokens").
_NOT_SECRET_KEYS = re.compile(
    r"(?i)(^|_)(prompt|completion|total|output|input|max|num|cached|generation|draft|accepted|"
    r"new|min|mean|spec|special|bos|eos|pad|unk)_?tokens?(_|$)|tokens?_(per|count|total|ids|s$)|"
    r"^tokens?$|tokenizer|^n_?tokens"
)

_NUMBER_RE = re.compile(r"^[+-]?\d[\d,._]*(?:[eE][+-]?\d+)?$")

_TEXT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Authorization: Bearer xyz / Basic xyz
    (
        re.compile(r"(?i)\b(authorization\s*[:=]\s*)(?:bearer|basic|token)?\s*[^\s'\",]+"),
        rf"\1{REDACTED}",
    ),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\1{REDACTED}"),
    # Hugging Face, OpenAI-style, GitHub, AWS, Slack tokens
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), REDACTED),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"), REDACTED),
    (
        re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"),
        REDACTED,
    ),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"), REDACTED),
    # ENV_TOKEN=value, HF_TOKEN: value, api_key = "value", --api-key=value
    (
        re.compile(
            rf"(?i)(\b[A-Za-z0-9_.-]*(?:{_SECRET_WORDS})[A-Za-z0-9_.-]*\s*[=:]\s*)"
            r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s,;'\"}\]]+)"
        ),
        rf"\1{REDACTED}",
    ),
    # --api-key value, --hf-token value (command lines inside text)
    (
        re.compile(rf"(?i)(--[A-Za-z0-9_-]*(?:{_SECRET_WORDS})[A-Za-z0-9_-]*\s+)([^\s-][^\s]*)"),
        rf"\1{REDACTED}",
    ),
    # scheme://user:password@host
    (re.compile(r"([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@"), rf"\1{REDACTED}@"),
)


def is_secret_key(key: str) -> bool:
    """True when a mapping key names a secret (``HF_TOKEN``, ``api_key``, ``Authorization``)."""
    if _NOT_SECRET_KEYS.search(key):
        return False
    return bool(_SECRET_KEY_LOOSE_RE.search(key))


def redact_text(text: str) -> str:
    """Replace token-shaped substrings and secret assignments in free text."""
    out = text
    for pattern, repl in _TEXT_PATTERNS:
        out = pattern.sub(functools.partial(_keep_counts, repl=repl), out)
    return out


def _keep_counts(m: re.Match[str], repl: str) -> str:
    # "prompt_tokens: 12" and "max_tokens=256" are counts, not secrets: keep them.
    name = m.group(1) if m.re.groups >= 1 and m.group(1) else ""
    key = name.strip().lstrip("-").rstrip("=: \t")
    if key and _NOT_SECRET_KEYS.search(key):
        return m.group(0)
    if m.re.groups >= 2 and m.group(2) is not None:
        value = m.group(2).strip("\"'")
        if value.startswith("[REDACTED") or not value or _NUMBER_RE.match(value):
            return m.group(0)
    return m.expand(repl)


def redact_args(args: Sequence[str]) -> tuple[str, ...]:
    """Redact an engine argument list: values of secret flags and token-shaped strings."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            hide_next = False
            if not arg.startswith("-"):
                out.append(arg if _NUMBER_RE.match(arg) else REDACTED)
                continue
        if arg.startswith("-"):
            flag, eq, _value = arg.partition("=")
            if is_secret_key(flag.lstrip("-")):
                if eq:
                    out.append(arg if _NUMBER_RE.match(_value) else f"{flag}={REDACTED}")
                else:
                    out.append(arg)
                    hide_next = True
                continue
        out.append(redact_text(arg))
    return tuple(out)


def redact(value: Any) -> Any:
    """Return a copy of a JSON-able value with every secret replaced by ``[REDACTED]``."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        result: dict[Any, Any] = {}
        for k, v in value.items():
            secret = isinstance(k, str) and is_secret_key(k)
            if secret and isinstance(v, str) and v and not _NUMBER_RE.match(v):
                result[k] = REDACTED
            else:
                result[k] = redact(v)
        return result
    if isinstance(value, (list, tuple)):
        items = [redact(v) for v in value]
        if all(isinstance(v, str) for v in value):
            items = list(redact_args([str(v) for v in value]))
        return items if isinstance(value, list) else tuple(items)
    return value
