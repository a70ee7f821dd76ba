"""Local safetensors header parsing: servelab vs huggingface_hub vs safetensors, side by side.

Usage::

    .venv/bin/python benchmarks/header_parse.py [--repeats 15] [--markdown]

Cases (built fresh in a temp dir, data regions sparse so no weight bytes hit the disk):

* ``62,546 tensors`` — one file with the tensor count of the Qwen3.6-35B-A3B FP8 export
  (per-expert FP8 ``weight`` + ``weight_scale`` for 40 layers × 256 experts × 3
  projections, the rest attention / linear attention / norms / vision), ~8 MB of header;
* ``same, 14 shards`` — those tensors split over 14 files with an index;
* ``tiny llama`` — the weights file of a real tiny checkpoint from
  :func:`servelab.synth.tiny.make_tiny_model` (copied alone, so no config is read).

Peers, each given the same files and asked for the same facts (every tensor's name,
dtype, shape and offsets, plus ``__metadata__``):

* ``huggingface_hub.parse_local_safetensors_file_metadata`` / ``get_local_safetensors_metadata``
  — hf's own local header reader (``json.loads`` + dataclasses; it checks no offsets,
  sizes or duplicate keys);
* ``safetensors.safe_open`` — the reference Rust reader (validates every rule, like
  servelab), then ``keys()`` / ``get_slice(k).get_shape()/get_dtype()`` per tensor.

servelab runs :func:`servelab.checkpoint.load_checkpoint`, i.e. read + every validation
rule + frozen dataclasses. Runs are interleaved, the median of ``--repeats`` is reported,
and the ratio is ``peer median / servelab median`` of wall time (> 1: servelab is
faster). CPU time is printed too: on a shared, loaded machine it is the steadier figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from huggingface_hub import get_local_safetensors_metadata, parse_local_safetensors_file_metadata
from safetensors import safe_open

from servelab.checkpoint import DTYPE_BITS, load_checkpoint

TARGET_TENSORS = 62_546


def _qwen36_like_tensors() -> list[tuple[str, str, list[int]]]:
    """62,546 (name, dtype, shape) in the naming and shapes of the Qwen3.6-35B-A3B FP8 export."""
    out: list[tuple[str, str, list[int]]] = []
    h, inter, experts = 2048, 512, 256

    def fp8(name: str, o: int, i: int) -> None:
        out.append((f"{name}.weight", "F8_E4M3", [o, i]))
        out.append((f"{name}.weight_scale", "BF16", [o, 1]))

    for layer in range(40):
        p = f"model.language_model.layers.{layer}"
        for e in range(experts):
            fp8(f"{p}.mlp.experts.{e}.gate_proj", inter, h)
            fp8(f"{p}.mlp.experts.{e}.up_proj", inter, h)
            fp8(f"{p}.mlp.experts.{e}.down_proj", h, inter)
        for proj, o, i in (("gate_proj", inter, h), ("up_proj", inter, h), ("down_proj", h, inter)):
            out.append((f"{p}.mlp.shared_expert.{proj}.weight", "BF16", [o, i]))
        out.append((f"{p}.mlp.gate.weight", "BF16", [experts, h]))
        out.append((f"{p}.mlp.shared_expert_gate.weight", "BF16", [1, h]))
        out.append((f"{p}.input_layernorm.weight", "BF16", [h]))
        out.append((f"{p}.post_attention_layernorm.weight", "BF16", [h]))
        if (layer + 1) % 4 == 0:
            for proj, o, i in (("q_proj", 8192, h), ("k_proj", 512, h), ("v_proj", 512, h),
                               ("o_proj", h, 4096)):  # fmt: skip
                fp8(f"{p}.self_attn.{proj}", o, i)
            out.append((f"{p}.self_attn.q_norm.weight", "BF16", [256]))
            out.append((f"{p}.self_attn.k_norm.weight", "BF16", [256]))
        else:
            la = f"{p}.linear_attn"
            out.append((f"{la}.in_proj_qkvz.weight", "BF16", [12288, h]))
            out.append((f"{la}.in_proj_ba.weight", "BF16", [64, h]))
            out.append((f"{la}.conv1d.weight", "BF16", [8192, 1, 4]))
            out.append((f"{la}.A_log", "F32", [32]))
            out.append((f"{la}.dt_bias", "F32", [32]))
            out.append((f"{la}.norm.weight", "F32", [128]))
            out.append((f"{la}.out_proj.weight", "BF16", [h, 4096]))
    out.append(("model.language_model.embed_tokens.weight", "BF16", [248320, h]))
    out.append(("model.language_model.norm.weight", "BF16", [h]))
    out.append(("lm_head.weight", "BF16", [248320, h]))
    block = 0
    while len(out) < TARGET_TENSORS:  # vision tower blocks fill up to the real count
        p = f"model.visual.blocks.{block // 12}.part{block % 12}"
        out.append((f"{p}.weight", "BF16", [1152, 1152]))
        block += 1
    return out[:TARGET_TENSORS]


def _write(path: Path, tensors: list[tuple[str, str, list[int]]]) -> None:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, dtype, shape in tensors:
        nbytes = math.prod(shape) * DTYPE_BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
        off += nbytes
    body = json.dumps(header, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(body)) + body)
        f.truncate(8 + len(body) + off)


def build_cases(root: Path) -> dict[str, Path]:
    """Write the benchmark's checkpoints under ``root``; returns case name → path."""
    tensors = _qwen36_like_tensors()
    one = root / "one"
    one.mkdir()
    _write(one / "model.safetensors", tensors)
    sharded = root / "sharded"
    sharded.mkdir()
    n_shards = 14
    per = -(-len(tensors) // n_shards)
    weight_map: dict[str, str] = {}
    total = 0
    for i in range(n_shards):
        part = tensors[i * per : (i + 1) * per]
        name = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        _write(sharded / name, part)
        weight_map.update({t[0]: name for t in part})
        total += sum(math.prod(t[2]) * DTYPE_BITS[t[1]] // 8 for t in part)
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    from servelab.synth.tiny import make_tiny_model

    tiny = make_tiny_model("llama", root / "tiny")
    alone = root / "tiny-header"  # the weights file alone: servelab reads no configs
    alone.mkdir()
    shutil.copy(tiny / "model.safetensors", alone / "model.safetensors")
    return {
        f"{TARGET_TENSORS:,} tensors, 1 file": one / "model.safetensors",
        f"{TARGET_TENSORS:,} tensors, 14 shards": sharded,
        "tiny llama, 1 file": alone / "model.safetensors",
    }


def _servelab(path: Path) -> int:
    return len(load_checkpoint(path).tensors)


def _hf(path: Path) -> int:
    if path.is_dir():
        meta = get_local_safetensors_metadata(path)
        return sum(len(f.tensors) for f in meta.files_metadata.values())
    return len(parse_local_safetensors_file_metadata(path).tensors)


def _safetensors(path: Path) -> int:
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    count = 0
    for file in files:
        with safe_open(str(file), framework="numpy") as f:
            f.metadata()
            for k in f.keys():  # noqa: SIM118
                s = f.get_slice(k)
                s.get_shape()
                s.get_dtype()
                count += 1
    return count


PEERS: dict[str, Callable[[Path], int]] = {
    "servelab": _servelab,
    "huggingface_hub": _hf,
    "safetensors (Rust)": _safetensors,
}


def measure(path: Path, repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall s, CPU s) per peer, runs interleaved; checks all peers count alike."""
    wall: dict[str, list[float]] = {k: [] for k in PEERS}
    cpu: dict[str, list[float]] = {k: [] for k in PEERS}
    counts = {k: fn(path) for k, fn in PEERS.items()}  # warm-up + agreement check
    if len(set(counts.values())) != 1:
        raise SystemExit(f"peers disagree on {path}: {counts}")
    for _ in range(repeats):
        for name, fn in PEERS.items():
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            fn(path)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in PEERS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=15, help="timed runs per peer and case")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    import huggingface_hub
    import safetensors

    print(
        f"python {sys.version.split()[0]}, huggingface_hub {huggingface_hub.__version__}, "
        f"safetensors {safetensors.__version__}, repeats {args.repeats}, "
        f"{os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}",
    )
    with tempfile.TemporaryDirectory() as tmp:
        cases = build_cases(Path(tmp))
        rows = [(case, measure(path, args.repeats)) for case, path in cases.items()]
    names = list(PEERS)
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    if args.markdown:
        head = " | ".join(f"{n} ms wall (CPU)" for n in names)
        print(f"| case | {head} | hf / servelab | safetensors / servelab |")
        print("|---" * (len(names) + 3) + "|")
    for case, med in rows:
        r_hf = med["huggingface_hub"][0] / med["servelab"][0]
        r_st = med["safetensors (Rust)"][0] / med["servelab"][0]
        if args.markdown:
            cells = " | ".join(f"{med[n][0] * 1e3:.2f} ({med[n][1] * 1e3:.2f})" for n in names)
            print(f"| {case} | {cells} | {r_hf:.2f}× | {r_st:.2f}× |")
        else:
            parts = ", ".join(
                f"{n} {med[n][0] * 1e3:.2f} ms (CPU {med[n][1] * 1e3:.2f})" for n in names
            )
            print(f"{case}: {parts}; hf/servelab {r_hf:.2f}x, safetensors/servelab {r_st:.2f}x")


if __name__ == "__main__":
    main()
