"""How many bytes a GGUF file needs, by walking its header: the check behind a clear
"truncated" error.

The ``gguf`` package's reader maps the file and builds numpy views over it; a file cut short
(an interrupted download or copy) fails there with numpy's words ("cannot reshape array of
size 44 into shape (8,8)", "index 0 is out of bounds"). :func:`gguf_extent` walks the same
layout with bounds checks — header, key/value metadata, tensor infos, aligned data — and
says where the file ends too early, or returns the size the file must have.

Layout (GGUF v2/v3, little-endian): ``GGUF``, version u32, tensor count u64, metadata count
u64; each metadata entry a string key, a u32 type and a value (arrays: element type u32,
count u64, elements); each tensor a string name, u32 dims, u64 × dims, u32 GGML type, u64
offset; then the data, aligned to ``general.alignment`` (32 by default).
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

__all__ = ["Truncated", "gguf_extent"]

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_DEFAULT_ALIGNMENT = 32


class Truncated(Exception):
    """The file ends before ``what`` does (at byte ``need`` of a ``size``-byte file)."""

    def __init__(self, what: str, need: int, size: int) -> None:
        self.what, self.need, self.size = what, need, size
        super().__init__(f"truncated: the file ends at byte {size:,}, before {what} "
                         f"(needs {need:,} bytes; an interrupted download or copy?)")


class _Walk:
    def __init__(self, buf: bytes | mmap.mmap, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0

    def take(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > self.size:
            raise Truncated(what, start + max(n, 0), self.size)
        self.pos += n
        return start

    def u32(self, what: str) -> int:
        return int(struct.unpack_from("<I", self.buf, self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(struct.unpack_from("<Q", self.buf, self.take(8, what))[0])

    def string(self, what: str) -> bytes:
        n = self.u64(what)
        start = self.take(n, what)
        return bytes(self.buf[start:start + n])

    def value(self, vtype: int, what: str) -> int | None:
        """Skip one value; return it when it is an unsigned integer (for the alignment)."""
        if vtype in _SCALAR:
            start = self.take(_SCALAR[vtype], what)
            if vtype in (4, 10):
                return int.from_bytes(self.buf[start:start + _SCALAR[vtype]], "little")
            return None
        if vtype == _STRING:
            self.string(what)
            return None
        if vtype == _ARRAY:
            etype = self.u32(what)
            count = self.u64(what)
            if etype in _SCALAR:
                self.take(_SCALAR[etype] * count, what)
            else:
                for _ in range(count):
                    self.value(etype, what)
            return None
        raise ValueError(f"unknown GGUF value type {vtype} in {what}")


def _tensor_bytes(ggml_type: int, dims: list[int], name: str) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise ValueError(f"tensor {name!r} has unknown GGML type {ggml_type}") from None
    n = 1
    for d in dims:
        n *= d
    return n // block * size


def gguf_extent(path: Path) -> int:
    """The number of bytes ``path`` must have by its own header.

    Raises :class:`Truncated` when the file ends inside its header or before its last
    tensor's data, ``ValueError`` for a header that is not GGUF v2/v3.
    """
    size = path.stat().st_size
    if size == 0:
        raise Truncated("the GGUF magic", 4, 0)
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        w = _Walk(buf, size)
        if bytes(buf[w.take(4, "the GGUF magic"):4]) != b"GGUF":
            raise ValueError("no GGUF magic")
        version = w.u32("the header")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} (servelab reads 2 and 3)")
        n_tensors = w.u64("the header")
        n_kv = w.u64("the header")
        alignment = _DEFAULT_ALIGNMENT
        for i in range(n_kv):
            what = f"metadata entry {i + 1} of {n_kv}"
            key = w.string(what)
            value = w.value(w.u32(what), f"{what} ({key.decode(errors='backslashreplace')})")
            if key == b"general.alignment" and value:
                alignment = value
        tensors: list[tuple[str, int, int]] = []
        for i in range(n_tensors):
            what = f"tensor info {i + 1} of {n_tensors}"
            name = w.string(what).decode(errors="backslashreplace")
            dims = [w.u64(what) for _ in range(w.u32(what))]
            ggml_type = w.u32(what)
            offset = w.u64(what)
            tensors.append((name, offset, _tensor_bytes(ggml_type, dims, name)))
        data = -(-w.pos // alignment) * alignment
        need = data
        last = "the tensor data"
        for name, offset, n in tensors:
            if data + offset + n > need:
                need, last = data + offset + n, f"the data of tensor {name!r}"
        if need > size:
            raise Truncated(last, need, size)
        return need
