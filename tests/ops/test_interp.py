"""Log-space interpolation of measured latencies, and honesty about extrapolation."""

from __future__ import annotations

import math

import pytest

from servelab.ops.interp import grid_rows, interp1, interp2


def test_measured_points_come_back_exactly() -> None:
    xs, ys = [1.0, 4.0, 16.0], [2.0, 3.0, 9.0]
    for x, y in zip(xs, ys, strict=True):
        r = interp1(xs, ys, x)
        assert r.ms == y and not r.extrapolated


def test_between_points_is_linear_in_log_log() -> None:
    r = interp1([1.0, 4.0], [2.0, 8.0], 2.0)
    assert r.ms == pytest.approx(math.exp((math.log(2) + math.log(8)) / 2))
    assert not r.extrapolated


def test_above_range_scales_linearly_and_says_so() -> None:
    r = interp1([1.0, 10.0], [1.0, 5.0], 40.0)
    assert r.ms == pytest.approx(20.0)
    assert r.extrapolated and "largest measured" in r.note


def test_below_range_holds_the_smallest_point_and_says_so() -> None:
    r = interp1([4.0, 8.0], [3.0, 5.0], 1.0)
    assert r.ms == 3.0 and r.extrapolated


def test_two_dimensional_reads_each_axis() -> None:
    grid = {(1.0, 0.0): 1.0, (4.0, 0.0): 4.0, (1.0, 99.0): 2.0, (4.0, 99.0): 8.0}
    assert interp2(grid, 4.0, 99.0).ms == pytest.approx(8.0)
    mid = interp2(grid, 2.0, 0.0)
    assert mid.ms == pytest.approx(2.0) and not mid.extrapolated
    far = interp2(grid, 4.0, 999.0)
    assert far.extrapolated and far.ms > 8.0


def test_a_grid_split_once_reads_the_same() -> None:
    """A caller that splits a grid once (grid_rows, as the cost tables do for thousands of
    reads of one attention series) reads exactly what the unsplit grid gives: inside, on a
    measured point, above both axes and at a zero prefix."""
    grid = {(a, b): 0.01 * a + 0.002 * b + 0.5 for a in (1.0, 8.0, 64.0, 512.0)
            for b in (0.0, 1024.0, 8192.0)}
    grid[(2048.0, 0.0)] = 30.0  # a ragged row
    rows = grid_rows(grid)
    assert [r[0] for r in rows] == [0.0, 1024.0, 8192.0]
    assert all(r[1] == sorted(r[1]) for r in rows)
    for a, b in ((3.0, 500.0), (64.0, 1024.0), (4096.0, 20000.0), (100.0, 0.0)):
        assert interp2(grid, a, b, rows=rows) == interp2(grid, a, b)
