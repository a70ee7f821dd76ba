"""Latency lookups over table sets: measured, interpolated, scaled, extrapolated."""

from __future__ import annotations

import pytest

from servelab.errors import UsageError
from servelab.ops.costs import Costs, expected_experts
from servelab.ops.tables import Provenance, Table, TableSet


def _set(**tables: list[dict]) -> TableSet:
    prov = Provenance("test", "G", "vllm", "1", "today")
    return TableSet("t", prov, {k: Table(k, tuple(v)) for k, v in tables.items()})


GEMM = [{"gemm_dtype": "bfloat16", "kernel_source": "torch.nn.functional.linear", "m": m,
         "n": 1024, "k": 512, "latency": 0.01 * m} for m in (1, 4, 16)]
GEMM += [{"gemm_dtype": "fp8_block", "kernel_source": "CutlassFp8BlockScaledMMKernel",
          "m": m, "n": 1024, "k": 512, "latency": 0.005 * m} for m in (1, 16)]


def test_a_measured_gemm_point_is_read_as_is() -> None:
    lk = Costs([_set(gemm=GEMM)]).gemm(4, 1024, 512, "bf16")
    assert lk.ms == pytest.approx(0.04) and lk.how == "measured"
    assert lk.kernel == "torch.nn.functional.linear" and lk.table == "t/gemm"


def test_fp8_block_falls_back_to_cutlass_when_deepgemm_was_not_measured() -> None:
    lk = Costs([_set(gemm=GEMM)]).gemm(16, 1024, 512, "fp8-block")
    assert lk.kernel == "CutlassFp8BlockScaledMMKernel" and lk.ms == pytest.approx(0.08)


def test_an_unmeasured_shape_is_scaled_and_says_from_what() -> None:
    lk = Costs([_set(gemm=GEMM)]).gemm(4, 2048, 512, "bf16")
    assert lk.how == "scaled" and lk.ms == pytest.approx(0.08)
    assert "1024x512" in lk.note


def test_beyond_the_measured_tokens_is_extrapolated() -> None:
    lk = Costs([_set(gemm=GEMM)]).gemm(64, 1024, 512, "bf16")
    assert lk.extrapolated and lk.ms == pytest.approx(0.64)


def test_a_format_without_measurements_is_refused() -> None:
    with pytest.raises(UsageError, match="w4a16"):
        Costs([_set(gemm=GEMM)]).gemm(4, 1024, 512, "w4a16")


def test_the_first_set_that_has_an_op_wins() -> None:
    other = [{**r, "latency": r["latency"] * 3} for r in GEMM]
    a = _set(gemm=GEMM)
    b = TableSet("b", Provenance("aic", "G", "vllm", "0", "d"),
                 {"gemm": Table("gemm", tuple(other))})
    assert Costs([a, b]).gemm(4, 1024, 512, "bf16").ms == pytest.approx(0.04)
    assert Costs([b, a]).gemm(4, 1024, 512, "bf16").ms == pytest.approx(0.12)


def test_expected_experts_under_uniform_routing() -> None:
    assert expected_experts(128, 8, 1) == pytest.approx(8.0)
    assert expected_experts(128, 8, 10_000) == pytest.approx(128.0)
    assert 8 < expected_experts(128, 8, 4) < 32
