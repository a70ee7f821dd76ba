"""The safetensors file format: dtype table, header parsing and validation.

A safetensors file is an unsigned 64-bit little-endian header length ``N``, ``N`` bytes
of UTF-8 JSON (an object, possibly space-padded), then the data buffer. Each JSON entry
is ``{"dtype", "shape", "data_offsets": [begin, end]}`` with offsets relative to the
buffer; the optional ``__metadata__`` entry maps strings to strings.

This module is pure: it takes bytes and sizes and returns frozen dataclasses. Every
rule the reference reader enforces is checked here, and each violation raises
:class:`~servelab.errors.HeaderError` naming the file and a stable ``rule`` id:

=====================  ==============================================================
rule                   meaning
=====================  ==============================================================
too-short              fewer than 8 bytes: no header length
lfs-pointer            the file is a Git LFS pointer (``git lfs pull`` was not run)
header-too-large       ``N`` above the cap (100,000,000 local, 25,000,000 remote)
header-beyond-file     ``8 + N`` is past the end of the file
header-start           the header does not start with ``{``
utf8                   the header is not valid UTF-8
json                   the header is not valid JSON
json-too-deep          JSON nesting deeper than :data:`MAX_JSON_DEPTH`
duplicate-key          a JSON object repeats a key (e.g. a tensor name)
bad-metadata           ``__metadata__`` is not an object of strings to strings
bad-entry              an entry lacks ``dtype``/``shape``/``data_offsets: [b, e]``
bad-dtype              unknown dtype name
bad-shape              shape is not a list of non-negative integers
end-before-begin       ``data_offsets`` end < begin
size-not-byte-aligned  elements × bits is not a whole number of bytes
size-mismatch          ``end - begin`` differs from elements × bits / 8
offsets-overlap        two tensors share bytes
offsets-gap            bytes between tensors (or before the first) belong to none
buffer-not-covered     the last tensor's end is not where the file ends
=====================  ==============================================================
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import operator
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from servelab.errors import HeaderError

#: Bits per element of every dtype the safetensors format defines.
DTYPE_BITS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "F4": 4,
        "F6_E2M3": 6,
        "F6_E3M2": 6,
        "BOOL": 8,
        "U8": 8,
        "I8": 8,
        "F8_E5M2": 8,
        "F8_E4M3": 8,
        "F8_E8M0": 8,
        "F8_E4M3FNUZ": 8,
        "F8_E5M2FNUZ": 8,
        "I16": 16,
        "U16": 16,
        "F16": 16,
        "BF16": 16,
        "I32": 32,
        "U32": 32,
        "F32": 32,
        "I64": 64,
        "U64": 64,
        "F64": 64,
        "C64": 64,
    }
)

#: The reference reader's cap on ``N`` for local files.
MAX_HEADER_LOCAL: Final = 100_000_000
#: huggingface_hub's cap on ``N`` for remote reads.
MAX_HEADER_REMOTE: Final = 25_000_000
#: A valid header nests three deep (object → entry → shape); anything past this is hostile.
MAX_JSON_DEPTH: Final = 16

HEADER_LEN_BYTES: Final = 8
METADATA_KEY: Final = "__metadata__"
_ENTRY_KEYS: Final = frozenset(("dtype", "shape", "data_offsets"))


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor as its header describes it; offsets are relative to the data buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int
    shard: str

    @property
    def nbytes(self) -> int:
        """Bytes the tensor occupies in the file (validated against shape × dtype)."""
        return self.end - self.begin

    @property
    def numel(self) -> int:
        """Stored elements: the product of the shape (1 for a scalar)."""
        return math.prod(self.shape)

    @property
    def bits(self) -> int:
        """Bits per stored element of this tensor's dtype."""
        return DTYPE_BITS[self.dtype]


@dataclass(frozen=True, slots=True)
class ShardHeader:
    """The parsed, validated header of one safetensors file."""

    file: str
    header_len: int
    file_size: int | None
    metadata: Mapping[str, str]
    tensors: tuple[TensorEntry, ...]
    sha256: str = ""
    """Hex SHA-256 of the ``N`` raw header bytes (the file's identity without its data)."""

    @property
    def data_bytes(self) -> int:
        """Size of the data buffer the header describes."""
        return max((t.end for t in self.tensors), default=0)


class JsonProblem(Exception):
    """Raised by :func:`loads_strict_json`; callers map it to their own ServelabError."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        self.message = message
        super().__init__(message)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonProblem("duplicate-key", f"duplicate JSON key {key!r}")
            seen.add(key)
    return obj


@dataclass(frozen=True, slots=True)
class JsonShape:
    """Structure of JSON text counted outside strings (see :func:`json_shape`)."""

    depth: int
    objects: int
    colons: int


def json_shape(raw: bytes) -> JsonShape:
    """Nesting depth, ``{`` count and ``:`` count of JSON text ``raw``, outside strings.

    Vectorised with numpy so that a multi-megabyte header costs milliseconds. It runs
    before :func:`json.loads` so that hostile nesting never reaches the recursive parser,
    and its counts let :func:`loads_strict_json` prove "no duplicate keys" without a
    per-object Python hook: in valid JSON every ``:`` outside strings separates one key
    from its value. Only meaningful for text that is otherwise JSON.
    """
    buf = np.frombuffer(raw, dtype=np.uint8)
    quotes = np.flatnonzero(buf == 0x22)
    if quotes.size and 0x5C in raw:  # drop escaped quotes: preceded by an odd backslash run
        keep = np.ones(quotes.size, dtype=bool)
        for i in np.flatnonzero(buf[np.maximum(quotes - 1, 0)] == 0x5C):
            pos = int(quotes[i]) - 1
            run = 0
            while pos >= 0 and raw[pos] == 0x5C:
                run += 1
                pos -= 1
            if run % 2:
                keep[i] = False
        quotes = quotes[keep]

    def outside(positions: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        kept: np.ndarray[Any, Any] = positions[(np.searchsorted(quotes, positions) & 1) == 0]
        return kept

    curly = outside(np.flatnonzero(buf == 0x7B))
    square = outside(np.flatnonzero(buf == 0x5B))
    closes = outside(np.flatnonzero((buf == 0x7D) | (buf == 0x5D)))
    colons = int(outside(np.flatnonzero(buf == 0x3A)).size)
    if curly.size + square.size + closes.size == 0:
        return JsonShape(0, 0, colons)
    where = np.concatenate((curly, square, closes))
    step = np.concatenate(
        (np.ones(curly.size + square.size, dtype=np.int64), -np.ones(closes.size, dtype=np.int64))
    )
    depth = int(np.cumsum(step[np.argsort(where, kind="stable")]).max())
    return JsonShape(max(depth, 0), int(curly.size), colons)


def _no_duplicate_keys_in(doc: Any, shape: JsonShape) -> bool:
    """True when the decoded ``doc`` provably had no duplicate keys.

    Counts the objects and keys reachable within two levels; if they account for every
    ``{`` and ``:`` in the text, no key was repeated (a repeat would leave a ``:`` with
    no key of its own). Deeper objects: unknown, so ``False`` (callers re-check slowly).
    """
    if type(doc) is not dict:
        return shape.objects == 0
    children = [v for v in doc.values() if type(v) is dict]
    objects = 1 + len(children)
    keys = len(doc) + sum(map(len, children))
    return objects == shape.objects and keys == shape.colons


_SMALL_JSON: Final = 65_536
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _py_depth(text: str) -> int:
    """Nesting depth of small JSON text, outside strings (pure Python)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    return max(0, max(accumulate(1 if c in "[{" else -1 for c in brackets)))


def loads_strict_json(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Decode UTF-8 JSON bytes, rejecting duplicate keys and nesting beyond ``max_depth``.

    Raises :class:`JsonProblem` with rule ``utf8``, ``json``, ``json-too-deep`` or
    ``duplicate-key``; never anything else.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonProblem("utf8", f"not valid UTF-8 at byte {exc.start}") from None
    small = len(raw) <= _SMALL_JSON
    shape = None if small else json_shape(raw)
    depth = _py_depth(text) if shape is None else shape.depth
    if depth > max_depth:
        raise JsonProblem("json-too-deep", f"JSON nests {depth} deep (limit {max_depth})")
    try:
        if shape is None:  # small: a per-object hook costs less than numpy's set-up
            doc = json.loads(text, object_pairs_hook=_no_duplicates)
        else:
            doc = json.loads(text)
            if not _no_duplicate_keys_in(doc, shape):
                doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise JsonProblem("json", f"invalid JSON: {exc.msg} at char {exc.pos}") from None
    except RecursionError:  # unreachable after the depth check; kept as a last guard
        raise JsonProblem("json-too-deep", "JSON nests too deep") from None
    except ValueError as exc:  # e.g. integer strings longer than Python's digit limit
        raise JsonProblem("json", f"invalid JSON: {exc}") from None
    return doc


LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def is_lfs_pointer(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes; 8 are enough to suspect it) starts a Git LFS
    pointer file: a clone without ``git lfs`` has these in place of the weights."""
    n = min(len(head), len(LFS_POINTER))
    return n >= HEADER_LEN_BYTES and head[:n] == LFS_POINTER[:n]


def lfs_pointer_error(file: str) -> HeaderError:
    """The error for a Git LFS pointer given as a weights file."""
    return HeaderError("this is a Git LFS pointer, not the file's content; run "
                       "'git lfs pull' in its repository", path=file, rule="lfs-pointer")


def read_header_len(prefix: bytes, *, file: str, max_header: int = MAX_HEADER_LOCAL) -> int:
    """Decode and bound-check ``N`` from the first 8 bytes of a safetensors file."""
    if is_lfs_pointer(prefix):
        raise lfs_pointer_error(file)
    if len(prefix) < HEADER_LEN_BYTES:
        raise HeaderError(
            f"file has {len(prefix)} bytes, fewer than the 8-byte header length",
            path=file,
            rule="too-short",
        )
    (n,) = struct.unpack("<Q", prefix[:HEADER_LEN_BYTES])
    if n > max_header:
        raise HeaderError(
            f"header length {n:,} bytes exceeds the {max_header:,}-byte limit",
            path=file,
            rule="header-too-large",
        )
    return int(n)


def _fail(file: str, rule: str, message: str) -> HeaderError:
    return HeaderError(message, path=file, rule=rule)


def _check_metadata(value: Any, file: str) -> Mapping[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _fail(file, "bad-metadata", "__metadata__ must be an object of string to string")
    return value


def parse_header(
    raw: bytes,
    *,
    file: str,
    file_size: int | None,
    max_header: int = MAX_HEADER_LOCAL,
) -> ShardHeader:
    """Parse and validate a safetensors header.

    ``raw`` is the start of the file: at least ``8 + N`` bytes (more is ignored).
    ``file`` names the shard (relative name; used in errors and in each entry's
    ``shard``). ``file_size`` is the whole file's size, or ``None`` when unknown (then
    the "buffer covered" and "header beyond file" rules cannot be checked).

    Raises :class:`~servelab.errors.HeaderError` with a stable ``rule`` on any violation.
    """
    n = read_header_len(raw, file=file, max_header=max_header)
    if file_size is not None and HEADER_LEN_BYTES + n > file_size:
        raise _fail(
            file,
            "header-beyond-file",
            f"header length {n:,} + 8 runs past the end of the {file_size:,}-byte file",
        )
    body = raw[HEADER_LEN_BYTES : HEADER_LEN_BYTES + n]
    if len(body) < n:
        raise _fail(
            file, "header-beyond-file", f"header length {n:,} but only {len(body):,} bytes follow"
        )
    if not body.startswith(b"{"):
        raise _fail(file, "header-start", "header does not start with '{'")
    # Hundreds of thousands of containers are born here and all survive: pausing the
    # cyclic GC (nothing here makes cycles) halves the time of a 60k-tensor header.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _parse_body(body, n, file=file, file_size=file_size)
    finally:
        if paused:
            gc.enable()


def _parse_body(body: bytes, n: int, *, file: str, file_size: int | None) -> ShardHeader:
    try:
        doc = loads_strict_json(body)
    except JsonProblem as exc:
        raise _fail(file, exc.rule, f"header: {exc.message}") from None
    if not isinstance(doc, dict):
        raise _fail(file, "not-object", "header JSON is not an object")

    metadata: Mapping[str, str] = {}
    meta_value = doc.pop(METADATA_KEY, None)
    if meta_value is not None:
        metadata = _check_metadata(meta_value, file)

    tensors, begins, ends = _entries_fast(doc, file) or _entries(doc, file)
    _check_offsets(tensors, begins, ends, file)
    data_end = max(ends, default=0)
    if file_size is not None and HEADER_LEN_BYTES + n + data_end != file_size:
        have = file_size - HEADER_LEN_BYTES - n
        raise _fail(
            file,
            "buffer-not-covered",
            f"tensors cover {data_end:,} data bytes but the file holds {have:,}",
        )
    return ShardHeader(
        file=file,
        header_len=n,
        file_size=file_size,
        metadata=metadata,
        tensors=tensors,
        sha256=hashlib.sha256(body).hexdigest(),
    )


_ENTRY_FIELDS: Final = operator.itemgetter("dtype", "shape", "data_offsets")
_INT: Final = frozenset((int,))
_LIST: Final = frozenset((list,))
_DICT: Final = frozenset((dict,))
_STR: Final = frozenset((str,))


def _entries_fast(
    doc: dict[str, Any], file: str
) -> tuple[tuple[TensorEntry, ...], list[int], list[int]] | None:
    """Validate all entries column-wise (C-level loops); ``None`` if any check fails.

    On ``None`` the caller re-runs :func:`_entries`, which walks entry by entry and
    raises the precise error for the first bad one. Valid headers never take that path.
    """
    names = list(doc)
    entries = list(doc.values())
    if not entries:
        return (), [], []
    if set(map(type, entries)) != _DICT:
        return None
    try:
        dtypes, shapes, offsets = zip(*map(_ENTRY_FIELDS, entries), strict=True)
    except KeyError:
        return None
    if set(map(type, dtypes)) != _STR or not set(dtypes) <= DTYPE_BITS.keys():
        return None
    if set(map(type, shapes)) != _LIST or set(map(type, offsets)) != _LIST:
        return None
    dims = list(chain.from_iterable(shapes))
    if dims and (not set(map(type, dims)) <= _INT or min(dims) < 0):
        return None
    if set(map(len, offsets)) != {2}:
        return None
    begins = [o[0] for o in offsets]
    ends = [o[1] for o in offsets]
    if set(map(type, begins)) != _INT or set(map(type, ends)) != _INT or min(begins) < 0:
        return None
    bits = list(map(DTYPE_BITS.__getitem__, dtypes))
    total_bits = list(map(operator.mul, map(math.prod, shapes), bits))
    if any(map((7).__and__, total_bits)):
        return None
    if list(map(operator.sub, ends, begins)) != list(map((3).__rrshift__, total_bits)):
        return None  # covers end < begin and size mismatches
    tensors = tuple(map(TensorEntry, names, dtypes, map(tuple, shapes), begins, ends, repeat(file)))
    return tensors, begins, ends


def _entries(
    doc: dict[str, Any], file: str
) -> tuple[tuple[TensorEntry, ...], list[int], list[int]]:
    bits_of = DTYPE_BITS
    entry_keys = _ENTRY_KEYS
    prod = math.prod
    out: list[TensorEntry] = []
    begins: list[int] = []
    ends: list[int] = []
    for name, entry in doc.items():
        if type(entry) is not dict or not entry_keys <= entry.keys():
            raise _fail(
                file,
                "bad-entry",
                f"tensor {name!r}: entry must be an object with dtype, shape and data_offsets",
            )
        dtype = entry["dtype"]
        shape = entry["shape"]
        offsets = entry["data_offsets"]
        bits = bits_of.get(dtype) if type(dtype) is str else None
        if bits is None:
            raise _fail(file, "bad-dtype", f"tensor {name!r}: unknown dtype {dtype!r}")
        if type(shape) is not list:
            raise _fail(file, "bad-shape", f"tensor {name!r}: shape must be a list")
        for d in shape:
            if type(d) is not int or d < 0:
                raise _fail(
                    file, "bad-shape", f"tensor {name!r}: shape must be non-negative integers"
                )
        if (
            type(offsets) is not list
            or len(offsets) != 2
            or type(offsets[0]) is not int
            or type(offsets[1]) is not int
            or offsets[0] < 0
        ):
            raise _fail(
                file,
                "bad-entry",
                f"tensor {name!r}: data_offsets must be two non-negative integers",
            )
        begin, end = offsets
        if end < begin:
            raise _fail(
                file, "end-before-begin", f"tensor {name!r}: data_offsets end {end} < begin {begin}"
            )
        total_bits = prod(shape) * bits
        if total_bits % 8:
            raise _fail(
                file,
                "size-not-byte-aligned",
                f"tensor {name!r}: {prod(shape)} × {bits} bits is not a whole number of bytes",
            )
        if end - begin != total_bits >> 3:
            raise _fail(
                file,
                "size-mismatch",
                f"tensor {name!r}: {dtype} {shape} needs {total_bits >> 3:,} bytes, "
                f"data_offsets span {end - begin:,}",
            )
        out.append(TensorEntry(name, dtype, tuple(shape), begin, end, file))
        begins.append(begin)
        ends.append(end)
    return tuple(out), begins, ends


def _check_offsets(
    tensors: tuple[TensorEntry, ...], begins: list[int], ends: list[int], file: str
) -> None:
    """Offsets, sorted once, must tile ``[0, last_end)`` exactly."""
    if not tensors:
        return
    if max(ends) >= 2**63:  # keep numpy in int64 range; such a file cannot exist anyway
        raise _fail(file, "bad-entry", "data_offsets beyond 2**63")
    b = np.asarray(begins, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    order = np.lexsort((e, b))
    b = b[order]
    e = e[order]
    if b[0] != 0:
        t = tensors[int(order[0])]
        raise _fail(file, "offsets-gap", f"first tensor {t.name!r} starts at {b[0]:,}, not 0")
    prev_end = e[:-1]
    nxt = b[1:]
    bad = np.flatnonzero(nxt != prev_end)
    if bad.size:
        i = int(bad[0])
        a, c = tensors[int(order[i])], tensors[int(order[i + 1])]
        if nxt[i] < prev_end[i]:
            raise _fail(
                file,
                "offsets-overlap",
                f"tensors {a.name!r} [{a.begin}, {a.end}) and {c.name!r} "
                f"[{c.begin}, {c.end}) overlap",
            )
        raise _fail(
            file,
            "offsets-gap",
            f"{int(nxt[i] - prev_end[i]):,} bytes between {a.name!r} (ends {a.end:,}) "
            f"and {c.name!r} (begins {c.begin:,}) belong to no tensor",
        )
