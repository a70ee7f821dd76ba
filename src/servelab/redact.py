"""The one secret masker: tokens, API keys, Authorization values and passwords never reach a
record, a log file, a page or the terminal. Every masked value reads ``[REDACTED]``.

Used by the results store (before anything is written), the site (every string a page
shows), the engine (displayed commands and environments, log lines) and ``servelab run``
(failure reasons, log tails).

Three rules, applied recursively to every string, list and dict of a record:

* a dict key that names a secret (``token``, ``api_key``, ``authorization``, ``password``,
  ``secret``, ``HF_TOKEN``, ``cookie``, ...) has its string value replaced by ``[REDACTED]``;
* in an argument list, the value after a secret flag (``--api-key KEY``, ``--hf-token T``)
  and the value of ``--api-key=KEY`` are replaced;
* inside free text (logs, recipe text, args), well-known token shapes are replaced:
  ``hf_...``, ``sk-...``, ``ghp_...``/``github_pat_...``, ``AKIA...``, ``xox?-...``,
  ``Bearer ...``, ``NAME_TOKEN=...`` / ``api_key: ...`` / ``password = "..."`` assignments,
  ``--api-key VALUE`` on command lines, and URL passwords (``scheme://user:pw@host``).

Keys about token *counts* are not secrets: anything with ``tokens`` (plural) in its name
(``prompt_tokens``, ``max_num_batched_tokens``), ``*_token_id``, ``bos_token``/``eos_token``/...,
``tokenizer*`` and units or rates per token (``bytes_per_token``,
``total_token_throughput``). Those keep their values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

REDACTED = "[REDACTED]"

_SECRET_WORDS = (
    r"token|api[_-]?key|apikey|secret|passwd|password|authorization|auth[_-]?header|cookie|"
    r"credential|private[_-]?key|access[_-]?key"
)
_SECRET_WORD_RE = re.compile(rf"(?i){_SECRET_WORDS}")
_COUNT_KEY_RE = re.compile(
    r"(?i)tokens|tokenizer|token_ids?\b|token_id_|(^|[_-])(bos|eos|pad|unk|sep|cls|mask|special)"
    r"[_-]?token|per[_-]?token|token[_-]?(throughput|count|rate|len)"
)

_TEXT_PATTERNS: tuple[re.Pattern[str], ...] = (
    # Authorization: Bearer xyz / Basic xyz
    re.compile(r"(?i)\b(authorization\s*[:=]\s*)((?:bearer|basic|token)\s+)?[^\s'\",]+"),
    re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    # Hugging Face, OpenAI-style, GitHub, AWS, Slack tokens
    re.compile(r"()\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"()\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"),
    re.compile(r"()\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|()\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"()\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"()\bxox[abpr]-[A-Za-z0-9-]{10,}"),
    # NAME_TOKEN=value, HF_TOKEN: value, api_key = "value", --api-key=value
    re.compile(
        rf"(?i)(\b[A-Za-z0-9_.-]*(?:{_SECRET_WORDS})[A-Za-z0-9_.-]*\s*[=:]\s*)"
        r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s,;'\"}\]]+)"
    ),
    # --api-key value, --hf-token value (command lines inside text)
    re.compile(rf"(?i)(--[A-Za-z0-9_-]*(?:{_SECRET_WORDS})[A-Za-z0-9_-]*\s+)((?!--)\S+)"),
    # scheme://user:password@host
    re.compile(r"([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+(?=@)"),
)


_BARE_KEY_RE = re.compile(r"(?i)(?:^|[_-])key$")  # OPENAI_KEY, --key (not "monkey")


def is_secret_key(key: str) -> bool:
    """True when a mapping key or flag names a secret (``HF_TOKEN``, ``api-key``, ...)."""
    if _BARE_KEY_RE.search(key.lstrip("-")):
        return True
    if not _SECRET_WORD_RE.search(key):
        return False
    # "prompt_tokens", "bos_token", "tokenizer": counts and vocabulary, unless a real secret
    # word is also present ("tokens_api_key" stays secret).
    if _COUNT_KEY_RE.search(key):
        rest = _COUNT_KEY_RE.sub("", key)
        return bool(_SECRET_WORD_RE.search(rest))
    return True


def _replace(m: re.Match[str]) -> str:
    prefix = m.group(1) or ""
    key = prefix.strip().lstrip("-").rstrip("=: \t")
    always = "://" in prefix or key.lower().startswith(("authorization", "bearer"))
    if key and not always and not is_secret_key(key):
        return m.group(0)
    value = m.group(m.re.groups) if m.re.groups >= 2 else None
    if value is not None and value.strip("\"'").startswith("[REDACTED"):
        return m.group(0)
    return f"{prefix}{REDACTED}"


def redact_text(text: str) -> str:
    """Replace token-shaped substrings and secret assignments in free text."""
    out = text
    for pattern in _TEXT_PATTERNS:
        out = pattern.sub(_replace, out)
    return out


def redact_args(args: Sequence[str]) -> tuple[str, ...]:
    """Redact an engine argument list: values of secret flags and token-shaped strings."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            hide_next = False
            if not arg.startswith("--"):
                out.append(REDACTED)
                continue
        if arg.startswith("-"):
            flag, eq, _value = arg.partition("=")
            if is_secret_key(flag.lstrip("-")):
                if eq:
                    out.append(f"{flag}={REDACTED}")
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
            if secret and isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "":
                result[k] = REDACTED
            else:
                result[k] = redact(v)
        return result
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            items: list[Any] = list(redact_args([str(v) for v in value]))
        else:
            items = [redact(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """An environment with the values of secret-named variables (``HF_TOKEN``) masked."""
    return {k: (REDACTED if is_secret_key(k) and v else v) for k, v in env.items()}


def secret_values(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The secret values an argument list and environment carry, longest first.

    For masking them wherever they might be echoed (an engine's log). Values shorter than
    six characters are left out: they would mask ordinary text and are not real secrets.
    """
    found: list[str] = []
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            continue
        name, eq, value = arg.partition("=")
        if is_secret_key(name.lstrip("-")):
            if eq:
                found.append(value)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                found.append(argv[i + 1])
    found += [v for k, v in (env or {}).items() if is_secret_key(k)]
    return tuple(sorted({v for v in found if len(v) >= 6}, key=len, reverse=True))
