"""Broken copies of a valid file, for fuzzing parsers (test infrastructure; needs hypothesis,
a development dependency): bits flipped, the file cut, bytes inserted and 8-byte
little-endian length or count fields rewritten, one to six edits a copy."""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["byte_mutations"]

SPECIAL_U64 = (0, 1, 2**31, 2**32 + 1, 2**63, 2**64 - 1)
"""Counts and lengths that break readers: empty, one, and the edges of 32/64-bit integers."""


def byte_mutations(seed: bytes, *, field_anywhere: bool) -> Any:
    """A strategy of mutated copies of ``seed``. The rewritten u64 field is the first 8 bytes
    (a safetensors header length) or, with ``field_anywhere``, any 8 bytes (a GGUF count or
    string length), set to a random value or one of :data:`SPECIAL_U64`."""
    from hypothesis import strategies as st

    values = st.one_of(st.sampled_from(SPECIAL_U64), st.integers(0, 2**64 - 1))

    @st.composite
    def mutated(draw: st.DrawFn) -> bytes:
        raw = bytearray(seed)
        for _ in range(draw(st.integers(1, 6))):
            kind = draw(st.sampled_from(["flip", "cut", "insert", "field"]))
            pos = draw(st.integers(0, len(raw) - 1)) if raw else 0
            if kind == "flip" and raw:
                raw[pos] ^= 1 << draw(st.integers(0, 7))
            elif kind == "cut":
                del raw[pos:]
            elif kind == "insert":
                raw[pos:pos] = draw(st.binary(min_size=1, max_size=8))
            else:
                at = pos if field_anywhere else 0
                raw[at:at + 8] = struct.pack("<Q", draw(values))
        return bytes(raw)

    return mutated()
