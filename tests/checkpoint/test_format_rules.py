"""Every safetensors rule: real malformed files on disk, each rejected with its own rule id."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
import torch
from safetensors import safe_open
from safetensors.torch import save_file as save_torch

from servelab.checkpoint import DTYPE_BITS, MAX_HEADER_REMOTE, load_checkpoint, parse_header
from servelab.checkpoint.safetensors_format import loads_strict_json
from servelab.errors import HeaderError, InputError

F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


def entry(dtype: str, shape: list[Any], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def raw_file(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def frame(body: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(body)) + body + data


# (case id, rule, file bytes)
BYTE_CASES: list[tuple[str, str, bytes]] = [
    ("empty-file", "too-short", b""),
    ("five-bytes", "too-short", b"\x01\x02\x03\x04\x05"),
    ("length-over-100MB", "header-too-large", struct.pack("<Q", 100_000_001) + b"{}"),
    ("length-2**64-1", "header-too-large", b"\xff" * 8 + b"{}"),
    ("truncated-header", "header-beyond-file", struct.pack("<Q", 1000) + b'{"a": 1'),
    ("not-brace", "header-start", frame(b'[{"a": 1}]')),
    ("leading-space", "header-start", frame(b' {"a": 1}')),
    ("invalid-utf8", "utf8", frame(b'{"\xff\xfe": 1}')),
    ("invalid-json", "json", frame(b'{"a": {"dtype": "F32",')),
    ("nul-padding", "json", frame(b"{}\x00\x00")),
    ("deep-json", "json-too-deep", frame(b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}")),
    (
        "deep-objects",
        "json-too-deep",
        frame(b'{"a":' + b'{"b":' * 100 + b"1" + b"}" * 100 + b"}"),
    ),
    (
        "duplicate-tensor",
        "duplicate-key",
        frame(
            b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},'
            b' "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}',
            b"\0" * 16,
        ),
    ),
    (
        "duplicate-field",
        "duplicate-key",
        frame(
            b'{"a": {"dtype": "F32", "dtype": "F16", "shape": [2], "data_offsets": [0, 8]}}',
            b"\0" * 8,
        ),
    ),
]


def header_case(header: dict[str, Any], data_len: int) -> bytes:
    return frame(json.dumps(header).encode(), b"\0" * data_len)


DICT_CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("metadata-int", "bad-metadata", {"__metadata__": {"format": 1}, "a": F32x2}, 8),
    ("metadata-list", "bad-metadata", {"__metadata__": ["pt"], "a": F32x2}, 8),
    ("entry-list", "bad-entry", {"a": [1, 2]}, 0),
    ("entry-missing-offsets", "bad-entry", {"a": {"dtype": "F32", "shape": [2]}}, 8),
    ("offsets-three", "bad-entry", {"a": {**F32x2, "data_offsets": [0, 4, 8]}}, 8),
    ("offsets-negative", "bad-entry", {"a": entry("F32", [0], -4, -4)}, 0),
    ("offsets-float", "bad-entry", {"a": {**F32x2, "data_offsets": [0.0, 8]}}, 8),
    ("dtype-unknown", "bad-dtype", {"a": entry("F33", [2], 0, 8)}, 8),
    ("dtype-lowercase", "bad-dtype", {"a": entry("f32", [2], 0, 8)}, 8),
    ("dtype-number", "bad-dtype", {"a": {**F32x2, "dtype": 32}}, 8),
    ("shape-negative", "bad-shape", {"a": entry("F32", [-2], 0, 8)}, 8),
    ("shape-float", "bad-shape", {"a": entry("F32", [2.0], 0, 8)}, 8),
    ("shape-bool", "bad-shape", {"a": entry("F32", [True], 0, 4)}, 4),
    ("shape-string", "bad-shape", {"a": {**F32x2, "shape": "2"}}, 8),
    ("end-before-begin", "end-before-begin", {"a": entry("F32", [2], 8, 0)}, 8),
    ("f4-odd-count", "size-not-byte-aligned", {"a": entry("F4", [3], 0, 2)}, 2),
    ("f6-not-bytes", "size-not-byte-aligned", {"a": entry("F6_E2M3", [3], 0, 3)}, 3),
    ("wrong-size", "size-mismatch", {"a": entry("F32", [2], 0, 4)}, 4),
    ("wrong-size-bf16", "size-mismatch", {"a": entry("BF16", [4, 4], 0, 16)}, 16),
    (
        "overlap",
        "offsets-overlap",
        {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)},
        12,
    ),
    (
        "same-range",
        "offsets-overlap",
        {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 0, 8)},
        8,
    ),
    ("gap", "offsets-gap", {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 16, 24)}, 24),
    ("not-from-zero", "offsets-gap", {"a": entry("F32", [2], 8, 16)}, 16),
    ("trailing-bytes", "buffer-not-covered", {"a": F32x2}, 9),
    ("data-truncated", "buffer-not-covered", {"a": F32x2}, 7),
]


@pytest.mark.parametrize(("case", "rule", "content"), BYTE_CASES, ids=[c[0] for c in BYTE_CASES])
def test_malformed_bytes_rejected_with_rule(
    tmp_path: Path, case: str, rule: str, content: bytes
) -> None:
    path = raw_file(tmp_path / f"{case}.safetensors", content)
    with pytest.raises(HeaderError) as info:
        load_checkpoint(path)
    assert info.value.rule == rule
    message = str(info.value)
    assert str(path) in message and f"[rule: {rule}]" in message
    assert "\n" not in message
    assert isinstance(info.value, InputError) and info.value.exit_code == 2


@pytest.mark.parametrize(
    ("case", "rule", "header", "data_len"), DICT_CASES, ids=[c[0] for c in DICT_CASES]
)
def test_malformed_headers_rejected_with_rule(
    tmp_path: Path, case: str, rule: str, header: dict[str, Any], data_len: int
) -> None:
    path = raw_file(tmp_path / f"{case}.safetensors", header_case(header, data_len))
    with pytest.raises(HeaderError) as info:
        load_checkpoint(path)
    assert info.value.rule == rule, str(info.value)
    assert str(path) in str(info.value)


def test_safetensors_library_rejects_our_malformed_cases_too(tmp_path: Path) -> None:
    """Our rules are not stricter than the reference reader on these cases."""
    for case, _rule, header, data_len in DICT_CASES:
        if case in ("offsets-negative",):
            continue  # serde rejects negative u64 too, with a parse error
        path = raw_file(tmp_path / f"{case}.safetensors", header_case(header, data_len))
        with pytest.raises(Exception), safe_open(str(path), framework="numpy") as f:  # noqa: B017
            for key in f.keys():  # noqa: SIM118
                f.get_tensor(key)


def test_remote_cap_is_smaller(tmp_path: Path) -> None:
    raw = struct.pack("<Q", MAX_HEADER_REMOTE + 1) + b"{}"
    with pytest.raises(HeaderError) as info:
        parse_header(raw, file="x.safetensors", file_size=None, max_header=MAX_HEADER_REMOTE)
    assert info.value.rule == "header-too-large"
    assert "25,000,000" in str(info.value)


# --------------------------------------------------------------------------- valid files


def test_files_written_by_safetensors_parse_identically(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "f64": rng.random((3, 2)),
        "f32": rng.random((4,), dtype=np.float32),
        "f16": rng.random((2, 2, 2)).astype(np.float16),
        "i64": np.arange(5, dtype=np.int64),
        "i32": np.arange(6, dtype=np.int32).reshape(2, 3),
        "i16": np.arange(3, dtype=np.int16),
        "i8": np.arange(7, dtype=np.int8),
        "u8": np.arange(9, dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    path = tmp_path / "np.safetensors"
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "np", "k": "v"})
    src = load_checkpoint(path)
    (shard,) = src.shards
    assert shard.metadata == {"format": "np", "k": "v"}
    assert shard.file_size == path.stat().st_size
    with safe_open(str(path), framework="numpy") as f:
        ref = {k: f.get_slice(k) for k in f.keys()}  # noqa: SIM118
        assert {t.name for t in shard.tensors} == set(ref)
        for t in shard.tensors:
            assert list(t.shape) == ref[t.name].get_shape()
            assert t.dtype == ref[t.name].get_dtype()
            assert t.nbytes == arrays[t.name].nbytes
            assert t.numel == arrays[t.name].size
    by_name = {t.name: t for t in shard.tensors}
    assert by_name["scalar"].shape == () and by_name["scalar"].numel == 1
    assert by_name["empty"].nbytes == 0


def test_torch_low_precision_dtypes(tmp_path: Path) -> None:
    tensors = {
        "bf16": torch.zeros(3, 5, dtype=torch.bfloat16),
        "e4m3": torch.zeros(4, 4, dtype=torch.float8_e4m3fn),
        "e5m2": torch.zeros(2, 8, dtype=torch.float8_e5m2),
        "e8m0": torch.zeros(7, dtype=torch.float8_e8m0fnu),
    }
    path = tmp_path / "torch.safetensors"
    save_torch(tensors, str(path))
    got = {t.name: t for t in load_checkpoint(path).tensors}
    assert got["bf16"].dtype == "BF16" and got["bf16"].nbytes == 30
    assert got["e4m3"].dtype == "F8_E4M3" and got["e4m3"].nbytes == 16
    assert got["e5m2"].dtype == "F8_E5M2"
    assert got["e8m0"].dtype == "F8_E8M0" and got["e8m0"].nbytes == 7


def test_sub_byte_dtypes_and_padding(tmp_path: Path) -> None:
    header = {
        "__metadata__": {"format": "pt"},
        "f4": entry("F4", [4, 6], 0, 12),
        "f6a": entry("F6_E2M3", [4], 12, 15),
        "f6b": entry("F6_E3M2", [8], 15, 21),
        "fnuz": entry("F8_E4M3FNUZ", [3], 21, 24),
        "c64": entry("C64", [2], 24, 40),
    }
    body = json.dumps(header).encode()
    body += b" " * (-len(body) % 8)  # the writer's space padding to 8-byte alignment
    path = raw_file(tmp_path / "sub.safetensors", frame(body, b"\0" * 40))
    src = load_checkpoint(path)
    got = {t.name: t for t in src.tensors}
    assert got["f4"].nbytes == 12 and got["f4"].numel == 24 and got["f4"].bits == 4
    assert got["f6a"].nbytes == 3 and got["f6b"].bits == 6
    assert src.shards[0].header_len == len(body)
    assert src.shards[0].data_bytes == 40


def test_empty_header_is_valid(tmp_path: Path) -> None:
    src = load_checkpoint(raw_file(tmp_path / "e.safetensors", frame(b"{}")))
    assert src.tensors == () and src.shards[0].metadata == {}


def test_dtype_table_matches_the_format() -> None:
    assert DTYPE_BITS == {
        "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
        "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
        "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
        "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
        "I32": 32, "U32": 32, "F32": 32,
        "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    }  # fmt: skip


def test_header_hash_ignores_data_and_location(tmp_path: Path) -> None:
    header = json.dumps({"a": F32x2}).encode()
    one = load_checkpoint(raw_file(tmp_path / "m.safetensors", frame(header, b"\1" * 8)))
    (tmp_path / "b").mkdir()
    two = load_checkpoint(raw_file(tmp_path / "b" / "m.safetensors", frame(header, b"\2" * 8)))
    assert one.header_sha256 == two.header_sha256
    three = load_checkpoint(
        raw_file(tmp_path / "n.safetensors", frame(json.dumps({"b": F32x2}).encode(), b"\0" * 8))
    )
    assert three.header_sha256 != one.header_sha256


def test_strict_json_escapes_inside_strings() -> None:
    text = rb'{"a\"{[:": "x\\", "b": {"c\\\"": "]}:"}}'
    assert loads_strict_json(text) == json.loads(text)
    with pytest.raises(Exception) as info:
        loads_strict_json(rb'{"a\"": 1, "a\"": 2}')
    assert getattr(info.value, "rule", None) == "duplicate-key"


def test_62546_tensor_header(tmp_path: Path, write_safetensors: Any) -> None:
    """The seed checkpoint's tensor count parses, with every entry validated (timing is
    the benchmark's job: benchmarks/header_parse.py)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for i in range(62_546):
        layer, rest = divmod(i, 1536)
        expert, kind = divmod(rest, 6)
        name = f"model.language_model.layers.{layer}.mlp.experts.{expert}.p{kind // 2}"
        if kind % 2 == 0:
            header[f"{name}.weight"] = entry("F8_E4M3", [512, 2048], off, off + 512 * 2048)
            off += 512 * 2048
        else:
            header[f"{name}.weight_scale"] = entry("BF16", [512, 1], off, off + 1024)
            off += 1024
    path = write_safetensors(tmp_path / "model.safetensors", header)
    src = load_checkpoint(path)
    assert len(src.tensors) == 62_546
    assert sum(t.nbytes for t in src.tensors) == off == src.shards[0].data_bytes
    assert {t.dtype for t in src.tensors} == {"F8_E4M3", "BF16"}
    # One wrong size among 62,546 is still found and named.
    bad = dict(header)
    last = next(reversed(bad))
    bad[last] = {**bad[last], "shape": [512, 2]}
    path = write_safetensors(tmp_path / "bad" / "model.safetensors", bad)
    with pytest.raises(HeaderError) as info:
        load_checkpoint(path)
    assert info.value.rule == "size-mismatch" and last in str(info.value)


def test_duplicate_in_a_large_header(tmp_path: Path) -> None:
    """Large headers prove "no duplicates" from counts; a repeat must still be caught."""
    parts = [
        f'"t{i}": {{"dtype": "F32", "shape": [1], "data_offsets": [{4 * i}, {4 * i + 4}]}}'
        for i in range(2000)
    ]
    parts.append('"t7": {"dtype": "F32", "shape": [1], "data_offsets": [8000, 8004]}')
    body = ("{" + ", ".join(parts) + "}").encode()
    assert len(body) > 65_536
    path = raw_file(tmp_path / "dup.safetensors", frame(body, b"\0" * 8004))
    with pytest.raises(HeaderError) as info:
        load_checkpoint(path)
    assert info.value.rule == "duplicate-key" and "'t7'" in str(info.value)
