"""Sizes and number lists as people write them, and byte counts as people read them. Pure.

One parser for every place servelab reads a size (recipe ``kv_cache_memory_bytes``,
``plan --kv-cache-memory-bytes`` / ``--overhead``): ``6442450944``, ``"6GiB"``, ``"6G"``,
``"512 MiB"``, ``"1.5GB"``. Decimal units (``k``, ``M``, ``G``, ``T``, with or without ``B``)
are powers of 1000, binary ones (``KiB`` ... ``TiB``) powers of 1024; case does not matter.

The unit constants every module uses (:data:`GIB`, :data:`MIB`, :data:`GB`, ...) are defined here
and nowhere else.

One parser for comma-separated lists (``--prompt-lens 512,2048,8192``), and one formatter
that picks the unit that shows a byte count (``498.75 KiB`` rather than ``0.00 GiB``).
"""

from __future__ import annotations

import re
import struct

__all__ = ["GB", "GIB", "KIB", "MIB", "TERA", "TIB", "f32_mib", "format_bytes",
           "parse_float_list", "parse_int_list", "parse_size"]

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40
GB = 10**9  # decimal gigabytes (bandwidths: GB/s)
TERA = 10**12  # FLOP/s per TFLOP/s

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6,
    "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": KIB, "mib": MIB, "gib": GIB, "tib": TIB,
}  # fmt: skip
_EXAMPLE = 'bytes or e.g. "6GiB", "6G", "512MiB"'


def parse_size(value: int | str) -> int:
    """Bytes from an int or a size string; ``ValueError`` naming the value otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected a byte count ({_EXAMPLE})")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"not a byte count: {value} is negative")
        return value
    m = _SIZE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a byte count: {value!r} (use {_EXAMPLE})")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _parse_list(text: str, kind: type[int] | type[float], what: str) -> list[float]:
    try:
        values = [kind(x.strip().replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a comma-separated list of numbers") from None
    if not values:
        raise ValueError(f"{what}: empty list")
    return values


def parse_int_list(text: str, what: str) -> list[int]:
    """``"512,2048,8192"`` → ``[512, 2048, 8192]``; ``ValueError`` naming ``what``."""
    return [int(v) for v in _parse_list(text, int, what)]


def parse_float_list(text: str, what: str) -> list[float]:
    """``"1.5, 2.25"`` → ``[1.5, 2.25]``; ``ValueError`` naming ``what``."""
    return _parse_list(text, float, what)


def format_bytes(n: float, digits: int = 2) -> str:
    """A byte count in the binary unit that shows it: ``1.50 KiB``, ``35.28 GiB``, ``0 B``."""
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= size:
            return f"{n / size:,.{digits}f} {unit}"
    return f"{n:,.0f} B"


def f32_mib(n: int) -> float:
    """MiB as a C program computes ``(float) n / (1024.0f * 1024.0f)`` (llama.cpp's log)."""
    as_f32: float = struct.unpack("f", struct.pack("f", float(n)))[0]
    return as_f32 / 1048576.0
