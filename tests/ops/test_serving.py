"""A loaded server's steady state from step times (closed loop)."""

from __future__ import annotations

import pytest

from servelab.ops.serving import chunks, closed_loop
from servelab.ops.step import StepShape


def linear_step(shape: StepShape) -> float:
    """1 ms per step plus 0.01 ms per decoding sequence and 0.001 ms per prefill token."""
    dec = sum(g.count for g in shape.groups if g.new_tokens == 1)
    pre = sum(g.count * g.new_tokens for g in shape.groups if g.new_tokens > 1)
    return 1.0 + 0.01 * dec + 0.001 * pre


def test_a_long_prompt_is_prefilled_in_budget_sized_chunks() -> None:
    assert chunks(20000, 8192) == [(8192, 0), (8192, 8192), (3616, 16384)]


def test_one_client_pays_its_prefill_then_one_decode_step_per_token() -> None:
    s = closed_loop(linear_step, 1, 1000, 101, request_ms=5.0)
    assert s.ttft_ms == pytest.approx(1.0 + 1.0 + 5.0)
    assert s.tpot_ms == pytest.approx(1.01)
    assert s.latency_ms == pytest.approx(2.0 + 100 * 1.01 + 5.0)
    assert s.output_tok_s == pytest.approx(101 / s.latency_ms * 1e3)


def test_more_clients_share_steps_and_each_prompt_adds_its_tokens() -> None:
    s = closed_loop(linear_step, 16, 1000, 101)
    d = round(16 * 100 / 101)  # sequences decoding per step on average
    steps = 101 * (1.0 + 0.01 * d) + 16 * 1000 * 0.001
    assert s.latency_ms == pytest.approx(steps)
    assert s.output_tok_s > closed_loop(linear_step, 1, 1000, 101).output_tok_s * 10
    assert s.tpot_ms > 1.0 + 0.01 * d  # prompts' chunks ride in the decode steps
