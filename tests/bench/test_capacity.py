"""Capacity search: the pure bisection on known thresholds, and `servelab capacity` end to
end against the synthetic server whose decode slows with load (true capacity known)."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.bench.cli import servelab

from servelab.bench.capacity import SearchSpec, grid, search
from servelab.testing.synthetic_server import SyntheticConfig, SyntheticServer


def _run(spec: SearchSpec, passes: object) -> tuple[float | None, float | None, int]:
    async def measure(v: float, purpose: str) -> bool:
        return bool(passes(v, purpose))  # type: ignore[operator]

    out = asyncio.run(search(spec, measure))
    return out.capacity, out.bracket_high, len(out.history)


@pytest.mark.parametrize("true_cap", [0.4, 3.3, 13.7, 200.0])
def test_rate_search_brackets_within_tolerance_in_fewer_probes_than_a_grid(
        true_cap: float) -> None:
    spec = SearchSpec(variable="rate", low=0.25, high=256, tolerance=0.05, confirm=2)
    cap, hi, probes = _run(spec, lambda v, _: v <= true_cap)
    assert cap is not None and hi is not None
    assert true_cap / 1.05 <= cap <= true_cap < hi <= cap * 1.05
    assert probes < len(grid(spec)) / 5


def test_a_failed_confirmation_moves_the_answer_down() -> None:
    seen: set[float] = set()

    def lucky_once(v: float, purpose: str) -> bool:  # 10..12 passes only the first time
        first = v not in seen
        seen.add(v)
        return v <= 10 or (v <= 12 and first and purpose == "search")

    spec = SearchSpec(variable="rate", low=1, high=64, tolerance=0.05, confirm=2)
    cap, _, _ = _run(spec, lucky_once)
    assert cap is not None and 10 / 1.05 <= cap <= 10


def test_nothing_passes_and_everything_passes() -> None:
    spec = SearchSpec(variable="concurrency", low=1, high=16, confirm=1)
    assert _run(spec, lambda v, _: False)[:2] == (None, 1.0)
    cap, hi, _ = _run(spec, lambda v, _: True)
    assert (cap, hi) == (16.0, None)
    cap, hi, probes = _run(spec, lambda v, _: v <= 5)
    assert (cap, hi) == (5.0, 6.0) and probes <= 8


@pytest.mark.timeout(240)
def test_cli_finds_the_known_concurrency_capacity() -> None:
    # TPOT = 5 ms + 10 ms × (streams in flight − 1): 25 ms at 3 streams, 35 ms at 4; the SLO
    # sits 5 ms (half a stream) from both, wider than a loaded box's jitter over 31 gaps.
    cfg = SyntheticConfig(ttft_s=0.005, itl_s=0.005, itl_per_running_s=0.010)
    with SyntheticServer(cfg) as srv:
        r = servelab("capacity", srv.base_url, "--slo", "tpot_p50=30", "--variable",
                     "concurrency", "--low", "1", "--high", "32", "--prompt-len", "16",
                     "--output-len", "32", "--json", timeout=230)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "servelab.capacity/1" and d["slo_label"] == "tpot_p50<=30ms"
    assert d["capacity"] == 3 and d["bracket"] == [3, 4]
    confirms = [p for p in d["probes"] if p["purpose"] == "confirm"]
    assert len(confirms) == 2 and all(p["met"] and p["value"] == 3 for p in confirms)
    by_value = {p["value"]: p["slo"]["terms"][0]["value_ms"] for p in d["probes"]}
    assert by_value[3] == pytest.approx(25, rel=0.08)
    assert by_value[4] == pytest.approx(35, rel=0.08)
    assert d["requests"] == sum(p["requests"] for p in d["probes"])


@pytest.mark.timeout(300)
def test_cli_finds_one_capacity_per_prompt_length() -> None:
    # E2E = 5 ms + 0.5 ms × prompt tokens + 15 gaps × (5 + 10 × (streams − 1)) ms:
    # 16 tokens: 88 / 238 / 388 ms at 1 / 2 / 3 streams; 256 tokens: 208 / 358 ms at 1 / 2.
    # Under e2el_p50=300 the capacity is 2 streams at 16 tokens and 1 at 256 (>= 48 ms off).
    cfg = SyntheticConfig(ttft_s=0.005, itl_s=0.005, itl_per_running_s=0.010,
                          prefill_s_per_token=0.0005)
    with SyntheticServer(cfg) as srv:
        r = servelab("capacity", srv.base_url, "--slo", "e2el_p50=300", "--variable",
                     "concurrency", "--low", "1", "--high", "4", "--prompt-lens", "16,256",
                     "--output-len", "16", "--confirm", "1", "--json", timeout=290)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "servelab.capacities/1"
    assert [(c["prompt_len"], c["capacity"]) for c in d["capacities"]] == [(16, 2), (256, 1)]
    assert [c["bracket"] for c in d["capacities"]] == [[2, 3], [1, 2]]
    assert [x["prompt_len"] for x in d["results"]] == [16, 256]
    assert all(x["schema"] == "servelab.capacity/1" for x in d["results"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("profile", "why"), [("ramp", "no single rate"),
                                              ("trace", "no request rate to search")])
def test_cli_refuses_profiles_without_a_rate_to_search(profile: str, why: str) -> None:
    r = servelab("capacity", "http://127.0.0.1:9", "--slo", "ttft_p99=500", "--profile",
                 profile)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and why in r.stderr, r.stderr
