"""Fuzz campaign over everything servelab parses from a checkpoint (issue 8).

Generated inputs (hypothesis) go through the header parser, the shard-index parser, the
config parser and the GGUF reader (broken copies of a small valid GGUF file, issue 33).
Every input must either parse or be rejected with a ``ServelabError``; any other exception
is a bug and is printed with its input. Each header input is also given to the reference
Rust reader (``safetensors``), and the two verdicts are compared.

Prints, per target: inputs, accepted, rejected (by rule), other exceptions, the slowest
input, the peak Python memory of the whole campaign, and — for headers — how often servelab
and the reference reader agree on accept/reject.

    .venv/bin/python benchmarks/fuzz_parsers.py --examples 12000 --markdown
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.checkpoint.configs import parse_json_object
from servelab.checkpoint.gguf_format import load_gguf
from servelab.checkpoint.safetensors_format import DTYPE_BITS, parse_header
from servelab.checkpoint.shard_index import parse_index
from servelab.errors import ServelabError
from servelab.testing.gguf_seed import gguf_mutations, write_seed_gguf
from servelab.testing.mutations import byte_mutations

TARGETS = ("header", "index", "config", "gguf")


@dataclass
class Tally:
    """Outcomes of one target."""

    inputs: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    agree: int = 0
    disagree: int = 0

    def run(self, fn: Callable[[], object]) -> bool:
        """Call ``fn``; True when it parsed. Records rule, crash and time."""
        self.inputs += 1
        t0 = time.perf_counter()
        ok = False
        try:
            fn()
            ok = True
            self.accepted += 1
        except ServelabError as exc:
            self.rejected[getattr(exc, "rule", type(exc).__name__)] += 1
        except Exception as exc:  # a bug: anything but ServelabError
            self.crashes.append(f"{type(exc).__name__}: {exc}"[:300])
        self.slowest_s = max(self.slowest_s, time.perf_counter() - t0)
        return ok


def _valid_header(n: int = 6) -> dict[str, Any]:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    dtypes = ["BF16", "F8_E4M3", "F32", "U8", "F4", "I32"]
    for i in range(n):
        dtype = dtypes[i % len(dtypes)]
        shape = [4, 8]
        nbytes = math.prod(shape) * DTYPE_BITS[dtype] // 8
        header[f"model.layers.{i}.mlp.experts.{i}.up_proj.weight"] = {
            "dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
        off += nbytes
    header["__data__"] = off
    return header


def _file(header: dict[str, Any], pad: int = 0) -> bytes:
    size = header.pop("__data__", 0)
    body = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(body)) + body + b"\0" * size


VALID = _file(_valid_header())

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                      st.floats(allow_nan=True), st.text(max_size=12))
json_value = st.recursive(
    json_leaf,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                              max_size=4),
    max_leaves=20,
)


@st.composite
def structured_header(draw: st.DrawFn) -> bytes:
    header = _valid_header(draw(st.integers(0, 8)))
    names = [k for k in header if not k.startswith("__")]
    for name in draw(st.lists(st.sampled_from(names), max_size=3)) if names else []:
        entry = header[name]
        if not isinstance(entry, dict):
            continue
        what = draw(st.sampled_from(["dtype", "shape", "offsets", "junk"]))
        if what == "dtype":
            entry["dtype"] = draw(st.sampled_from([*DTYPE_BITS, "F7", "", "bf16"]))
        elif what == "shape":
            entry["shape"] = draw(st.lists(st.integers(-2, 2**40), max_size=4))
        elif what == "offsets":
            entry["data_offsets"] = draw(st.lists(st.integers(-5, 2**40), max_size=3))
        else:
            header[name] = draw(json_value)
    return _file(header, pad=draw(st.integers(0, 8)))


@st.composite
def deep_json(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(1, 100_000))
    body = ("[" * depth + "]" * depth).encode() if draw(st.booleans()) else (
        '{"a":' * depth + "1" + "}" * depth).encode()
    return struct.pack("<Q", len(body)) + body


headers = st.one_of(st.binary(max_size=400), byte_mutations(VALID, field_anywhere=False),
                    structured_header(), deep_json())
index_docs = st.one_of(
    st.binary(max_size=300),
    json_value.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"metadata": st.one_of(json_value, st.fixed_dictionaries(
            {"total_size": st.one_of(st.integers(-1, 2**50), json_value)})),
         "weight_map": st.dictionaries(st.text(max_size=20), st.one_of(
             st.sampled_from(["model-00001-of-00002.safetensors", "../evil.safetensors",
                              "/etc/passwd", "a/b.safetensors", ""]), json_value),
             max_size=6)}).map(lambda d: json.dumps(d).encode()),
)
configs = st.one_of(st.binary(max_size=300), json_value.map(lambda v: json.dumps(v).encode()))


def reference_accepts(raw: bytes, scratch: str) -> bool | None:
    """The Rust reader's verdict on ``raw`` as a whole file (None if it is not installed)."""
    try:
        from safetensors import safe_open
    except ImportError:
        return None
    with open(scratch, "wb") as fh:
        fh.write(raw)
    try:
        with safe_open(scratch, framework="numpy") as f:
            for k in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                f.get_slice(k).get_shape()
        return True
    except Exception:  # any refusal counts as a reject
        return False


def campaign(examples: int, targets: tuple[str, ...] = TARGETS) -> dict[str, Tally]:
    """Run ``targets`` with ``examples`` inputs each."""
    tallies = {t: Tally() for t in targets}
    budget = settings(max_examples=examples, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
    scratch = os.path.join(tempfile.mkdtemp(prefix="servelab-fuzz-"), "f.safetensors")

    @budget
    @given(headers)
    def fuzz_header(raw: bytes) -> None:
        t = tallies["header"]
        ours = t.run(lambda: parse_header(raw, file="fuzz.safetensors", file_size=len(raw)))
        ref = reference_accepts(raw, scratch) if len(raw) < 1_000_000 else None
        if ref is not None:
            if ref == ours:
                t.agree += 1
            else:
                t.disagree += 1

    @budget
    @given(index_docs)
    def fuzz_index(raw: bytes) -> None:
        name = "model.safetensors.index.json"
        tallies["index"].run(lambda: parse_index(parse_json_object(raw, file=name), file=name))

    @budget
    @given(configs)
    def fuzz_config(raw: bytes) -> None:
        tallies["config"].run(lambda: parse_json_object(raw, file="config.json"))

    gguf_dir = tempfile.mkdtemp(prefix="servelab-fuzz-gguf-")
    seed = write_seed_gguf(Path(gguf_dir) / "seed.gguf").read_bytes()
    gguf_path = Path(gguf_dir) / "fuzz.gguf"

    @budget
    @given(gguf_mutations(seed))
    def fuzz_gguf(raw: bytes) -> None:
        gguf_path.write_bytes(raw)
        tallies["gguf"].run(lambda: load_gguf(gguf_path, str(gguf_path)))

    runs = {"header": fuzz_header, "index": fuzz_index, "config": fuzz_config,
            "gguf": fuzz_gguf}
    for t in targets:
        runs[t]()
    return tallies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=12_000, help="inputs per target")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help=f"comma-separated subset of {', '.join(TARGETS)}")
    args = ap.parse_args()
    targets = tuple(t for t in args.targets.split(",") if t)
    if not set(targets) <= set(TARGETS):
        ap.error(f"--targets: choose from {', '.join(TARGETS)}")
    tracemalloc.start()
    t0 = time.perf_counter()
    tallies = campaign(args.examples, targets)
    wall = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    rows = []
    for name, t in tallies.items():
        top = ", ".join(f"{r} {n}" for r, n in t.rejected.most_common(4))
        agree = (f"{t.agree}/{t.agree + t.disagree}" if t.agree + t.disagree else "n/a")
        rows.append((name, t.inputs, t.accepted, sum(t.rejected.values()), len(t.crashes),
                     f"{t.slowest_s * 1000:.1f}", agree, top))
    head = ("target", "inputs", "accepted", "rejected (ServelabError)", "other exceptions",
            "slowest ms", "agrees with Rust reader", "top rejection rules")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(str(c) for c in r) + " |")
    else:
        for r in rows:
            print("  ".join(f"{h}={c}" for h, c in zip(head, r, strict=True)))
    print(f"\nwall {wall:.1f} s, peak traced Python memory {peak / 2**20:.1f} MiB")
    crashes = [c for t in tallies.values() for c in t.crashes]
    for c in crashes[:10]:
        print("CRASH:", c)
    raise SystemExit(1 if crashes else 0)


if __name__ == "__main__":
    main()
