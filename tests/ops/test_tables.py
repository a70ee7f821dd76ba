"""Operator table sets: CSV round trip, provenance, the shipped H200 set."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from servelab.errors import UsageError
from servelab.ops.tables import load_dir, parse_csv, shipped, write_csv


def test_csv_round_trip_keeps_numbers_and_text() -> None:
    rows = [{"gemm_dtype": "bfloat16", "m": 4, "n": 128, "k": 64, "latency": 0.0125},
            {"gemm_dtype": "fp8_block", "m": 8, "n": 128, "k": 64, "latency": 0.5}]
    t = parse_csv("gemm", write_csv(rows, ["gemm_dtype", "m", "n", "k", "latency"]))
    assert t.rows[0] == rows[0] and t.rows[1]["m"] == 8
    assert t.where(gemm_dtype="fp8_block")[0]["latency"] == 0.5


def test_a_directory_without_meta_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"meta\.json"):
        load_dir(tmp_path)


def test_a_set_reads_from_a_directory(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps(
        {"source": "servelab", "gpu": "G", "engine": "vllm", "engine_version": "1",
         "date": "d", "driver": "x"}))
    with gzip.open(tmp_path / "host.csv.gz", "wt") as fh:
        fh.write("kernel_source,kernels,mode,launch_ms,latency\nk,10,eager,0.06,0.07\n")
    ts = load_dir(tmp_path)
    assert ts.provenance.details["driver"] == "x"
    assert ts.table("host").rows[0]["launch_ms"] == 0.06
    assert ts.table("gemm").rows == ()


def test_the_shipped_h200_set_carries_its_provenance() -> None:
    ts = shipped()["h200-vllm-0.26.0"]
    p = ts.provenance
    assert p.source == "servelab" and p.gpu == "NVIDIA H200" and p.engine_version == "0.26.0"
    for key in ("driver", "torch", "commit", "script", "command", "timing"):
        assert p.details.get(key), key
    gemm = ts.table("gemm").rows
    assert len(gemm) > 1000 and all(r["latency"] > 0 for r in gemm)
    kernels = {r["kernel_source"] for r in gemm}
    assert {"torch.nn.functional.linear", "DeepGemmFp8BlockScaledMMKernel",
            "CutlassFp8BlockScaledMMKernel", "MacheteLinearKernel"} <= kernels
    assert {r["moe_dtype"] for r in ts.table("moe").rows} == {"bfloat16", "fp8_block"}
