"""Fuzzing the header parser: no input raises anything but HeaderError, nothing hangs.

A few hundred generated inputs per property keep the suite fast; the benchmark-sized
campaign belongs to issue 8.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.checkpoint import DTYPE_BITS, parse_header
from servelab.checkpoint.safetensors_format import (
    MAX_JSON_DEPTH,
    JsonProblem,
    _no_duplicate_keys_in,
    _py_depth,
    json_shape,
    loads_strict_json,
)
from servelab.errors import HeaderError

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

pytestmark = pytest.mark.timeout(120)


def _valid_file() -> bytes:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for i, (dtype, shape) in enumerate(
        [("BF16", [4, 8]), ("F8_E4M3", [8, 8]), ("F32", [8]), ("U8", [4, 2]), ("F4", [2, 4])]
    ):
        nbytes = math.prod(shape) * DTYPE_BITS[dtype] // 8
        header[f"model.layers.{i}.weight"] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [off, off + nbytes],
        }
        off += nbytes
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body + b"\0" * off


VALID = _valid_file()


def _parse(raw: bytes, size: int | None) -> None:
    try:
        parse_header(raw, file="fuzz.safetensors", file_size=size)
    except HeaderError as exc:
        assert exc.rule and "fuzz.safetensors" in str(exc)


def test_valid_seed_parses() -> None:
    assert len(parse_header(VALID, file="v", file_size=len(VALID)).tensors) == 5


@FUZZ
@given(st.binary(max_size=512), st.one_of(st.none(), st.integers(0, 2**64)))
def test_arbitrary_bytes(raw: bytes, size: int | None) -> None:
    _parse(raw, size)


@FUZZ
@given(st.binary(max_size=256))
def test_arbitrary_header_body(body: bytes) -> None:
    raw = struct.pack("<Q", len(body)) + body
    _parse(raw, len(raw))
    _parse(raw, None)


@FUZZ
@given(
    st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255), st.sampled_from("rid")),
        min_size=1,
        max_size=8,
    )
)
def test_mutated_valid_file(edits: list[tuple[int, int, str]]) -> None:
    raw = bytearray(VALID)
    for pos, byte, op in edits:
        pos = min(pos, len(raw) - 1)
        if op == "r":
            raw[pos] = byte
        elif op == "i":
            raw.insert(pos, byte)
        elif len(raw) > 1:
            del raw[pos]
    _parse(bytes(raw), len(raw))


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.sampled_from('ab{}[]:,"\\ é'), max_size=6),
)
json_keys = st.text(alphabet=st.sampled_from('ab{}:"\\'), max_size=3)


def _render(value: Any) -> str:
    """Render a generated tree: objects are lists of (key, value) pairs, maybe repeating."""
    if isinstance(value, tuple) and value and value[0] == "obj":
        return "{" + ",".join(f"{json.dumps(k)}:{_render(v)}" for k, v in value[1]) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_render(v) for v in value) + "]"
    return json.dumps(value)


def _has_duplicates(value: Any) -> bool:
    if isinstance(value, tuple) and value and value[0] == "obj":
        keys = [k for k, _ in value[1]]
        return len(keys) != len(set(keys)) or any(_has_duplicates(v) for _, v in value[1])
    if isinstance(value, list):
        return any(_has_duplicates(v) for v in value)
    return False


def _depth(value: Any) -> int:
    if isinstance(value, tuple) and value and value[0] == "obj":
        return 1 + max((_depth(v) for _, v in value[1]), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


json_trees = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(st.just("obj"), st.lists(st.tuples(json_keys, children), max_size=4)),
    ),
    max_leaves=30,
)


@FUZZ
@given(json_trees)
def test_duplicate_keys_found_exactly(tree: Any) -> None:
    """The fast no-duplicates proof agrees with a per-object check on every input."""
    text = _render(tree).encode()
    assert json_shape(text).depth == _py_depth(text.decode()) == _depth(tree)
    if _depth(tree) <= MAX_JSON_DEPTH and _no_duplicate_keys_in(json.loads(text), json_shape(text)):
        assert not _has_duplicates(tree)  # the large-input proof is sound
    if _depth(tree) > MAX_JSON_DEPTH:
        with pytest.raises(JsonProblem) as info:
            loads_strict_json(text)
        assert info.value.rule == "json-too-deep"
    elif _has_duplicates(tree):
        with pytest.raises(JsonProblem) as info:
            loads_strict_json(text)
        assert info.value.rule == "duplicate-key"
    else:
        assert loads_strict_json(text) == json.loads(text)
