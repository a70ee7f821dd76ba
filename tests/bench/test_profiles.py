"""Load profiles: pure schedules with the statistics each profile promises."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest

from servelab.bench.profiles import LoadProfile, load_trace
from servelab.errors import InputError, UsageError


def _gaps(p: LoadProfile, n: int = 4000, seed: int = 7) -> list[float]:
    ts = [a.t_s for a in p.schedule(n, seed)]
    assert ts[0] == 0.0 and ts == sorted(ts)
    return [b - a for a, b in itertools.pairwise(ts)]


def test_constant_is_exactly_periodic() -> None:
    g = _gaps(LoadProfile("constant", rate=8.0), n=50)
    assert all(x == pytest.approx(0.125) for x in g)


@pytest.mark.parametrize(("kind", "burst", "cv"), [
    ("poisson", 1.0, 1.0), ("gamma", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)])
def test_mean_rate_and_burstiness(kind: str, burst: float, cv: float) -> None:
    g = _gaps(LoadProfile(kind, rate=20.0, burstiness=burst))  # type: ignore[arg-type]
    mean = statistics.fmean(g)
    assert mean == pytest.approx(1 / 20, rel=0.08)
    # Gamma gaps with shape k have coefficient of variation 1/sqrt(k).
    assert statistics.stdev(g) / mean == pytest.approx(cv, rel=0.1)


def test_same_seed_same_schedule_other_seed_other() -> None:
    p = LoadProfile("poisson", rate=5.0)
    assert p.schedule(20, 1) == p.schedule(20, 1)
    assert p.schedule(20, 1) != p.schedule(20, 2)


def test_ramp_rate_rises_from_start_to_end() -> None:
    g = _gaps(LoadProfile("ramp", rate=2.0, ramp_end_rate=50.0), n=3000)
    first, last = statistics.fmean(g[:300]), statistics.fmean(g[-300:])

    def expected(idx: range) -> float:  # mean of 1/rate over those requests
        return statistics.fmean(1 / (2.0 + 48.0 * i / 2999) for i in idx)

    assert first == pytest.approx(expected(range(1, 301)), rel=0.12)
    assert last == pytest.approx(expected(range(2700, 3000)), rel=0.12)
    assert first > 10 * last


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"kind": "ramp", "rate": 1.0}, "end rate"), ({"kind": "gamma", "burstiness": 0.0},
                                                  "burstiness"),
    ({"kind": "zipf"}, "unknown load profile"), ({"kind": "trace"}, "trace file")])
def test_bad_profiles_are_usage_errors(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        LoadProfile(**kwargs)  # type: ignore[arg-type]


def test_trace_replays_times_and_lengths(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 1000, "input_length": 40, "output_length": 5}\n\n'
                 '{"timestamp": 1250, "input_length": 80, "hash_ids": [1, 2]}\n'
                 '{"timestamp": 3000}\n')
    tr = load_trace(p)
    assert [(a.t_s, a.prompt_len, a.output_len) for a in tr.arrivals] == [
        (0.0, 40, 5), (0.25, 80, None), (2.0, None, None)]
    assert tr.mean_rate == pytest.approx(1.0)
    prof = LoadProfile("trace", trace=tr)
    assert prof.schedule(2, 0) == tr.arrivals[:2]
    assert prof.schedule(10, 0) == tr.arrivals


@pytest.mark.parametrize(("text", "needle"), [
    ('{"timestamp": 1}\nnope\n', "line 2: not JSON"),
    ('{"input_length": 3}\n', "line 1: timestamp"),
    ('{"timestamp": 5}\n{"timestamp": 1}\n', "must not decrease"),
    ('{"timestamp": 5, "input_length": 0}\n', "line 1: input_length"),
    ("", "no requests")])
def test_bad_traces_name_the_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(InputError, match=needle) as ei:
        load_trace(p)
    assert "bad.jsonl" in str(ei.value)
