"""Fuzzing index files and config files: parse, or a ServelabError; nothing else."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.checkpoint import load_checkpoint, parse_header
from servelab.checkpoint.configs import parse_json_object
from servelab.checkpoint.shard_index import check_index, parse_index
from servelab.errors import ConfigError, ServelabError, ShardIndexError

pytestmark = pytest.mark.timeout(120)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _shard(file: str, names: list[str]) -> bytes:
    header = {n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
              for i, n in enumerate(names)}  # fmt: skip
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body + b"\0" * (4 * len(names))


SHARDS = {"a.safetensors": ["x", "y"], "b.safetensors": ["z"]}
HEADERS = tuple(
    parse_header(_shard(f, n), file=f, file_size=len(_shard(f, n))) for f, n in SHARDS.items()
)

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda c: st.one_of(
        st.lists(c, max_size=3), st.dictionaries(st.text(max_size=4), c, max_size=3)
    ),
    max_leaves=10,
)
names = st.sampled_from(["x", "y", "z", "w", "", "x.weight"])
files = st.sampled_from(["a.safetensors", "b.safetensors", "c.safetensors", "../a", "/a", ""])


@FUZZ
@given(st.binary(max_size=300))
def test_config_bytes(raw: bytes) -> None:
    try:
        assert isinstance(parse_json_object(raw, file="config.json"), dict)
    except ConfigError as exc:
        assert "config.json" in str(exc)


@FUZZ
@given(st.dictionaries(st.sampled_from(["weight_map", "metadata", "other"]), json_values))
def test_index_documents(doc: dict[str, Any]) -> None:
    try:
        wm, _ = parse_index(doc, file="i.json")
    except ShardIndexError as exc:
        assert exc.rule.startswith("index-")
    else:
        assert wm and all(isinstance(v, str) for v in wm.values())


@FUZZ
@given(
    st.dictionaries(names, files, max_size=5),
    st.one_of(st.none(), st.integers(-1, 20), st.text(max_size=3)),
)
def test_index_against_shards(weight_map: dict[str, str], total: Any) -> None:
    try:
        warnings = check_index(weight_map, {"total_size": total}, HEADERS, file="i.json")
    except ShardIndexError as exc:
        assert exc.rule in ("index-missing-tensor", "index-wrong-shard")
    else:
        assert all(w.code.startswith("index-") for w in warnings)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
def test_directory_with_fuzzed_index(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for f, n in SHARDS.items():
            (d / f).write_bytes(_shard(f, n))
        (d / "model.safetensors.index.json").write_bytes(raw)
        try:
            load_checkpoint(d)
        except ServelabError as exc:
            assert "\n" not in str(exc)
