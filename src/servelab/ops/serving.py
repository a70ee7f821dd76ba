"""A loaded server's steady state from step times: ``N`` clients each sending a prompt of
``P`` tokens and reading ``O`` output tokens, one request after another (a closed loop, as
``vllm bench serve --max-concurrency N`` runs).

vLLM schedules each step as every running sequence's next token plus prefill chunks of
waiting prompts within a token budget (``max_num_batched_tokens``). A request spends ``k``
steps in prefill (its prompt in chunks of at most the budget) and ``O - 1`` in decode; over
the ``k + O - 1`` steps in which every client completes one request, the steps carry on
average ``d = N (O - 1) / (k + O - 1)`` decoding sequences and ``N`` prompts' worth of prefill
chunks. With a step's time affine in the prefill tokens it carries (what the operator sum
gives at these sizes), one request's latency is

    L = (k + O - 1) * S_decode(d) + N * dP

with ``S_decode(d)`` a decode-only step of ``d`` sequences at the mean context ``P + O/2`` and
``dP`` what one prompt's chunks add to the steps that carry them (each chunk read over the
prefix of the chunks before it). Then: output tokens per second ``N O / L``; time to first
token ``k`` steps carrying the prompt's chunks plus half a step of waiting for a step boundary
plus the per-request host time (tokenizing, scheduling, returning: ``request_ms``); time per
output token ``(L - TTFT) / (O - 1)``. One client (``N = 1``): its prefill steps carry no
decode and nothing waits.

Assumptions said in every result's notes: uniform MoE routing (the step's), every client
admitted at once (the KV cache holds ``N (P + O)`` tokens: :func:`closed_loop` says the
tokens needed), no prefix caching, no speculative decoding.

Pure: a step-time function in, frozen dataclasses out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from servelab.ops.step import SeqGroup, StepShape

#: vLLM's default token budget per step on a large GPU (``max_num_batched_tokens``, the
#: OpenAI server's default for GPUs with >= 70 GiB in vLLM 0.2x; 2,048 below).
BUDGET = 8192


@dataclass(frozen=True)
class Serving:
    """One concurrency level's steady state."""

    concurrency: int
    prompt: int
    output: int
    tpot_ms: float
    ttft_ms: float
    latency_ms: float
    output_tok_s: float
    decode_step_ms: float
    kv_tokens: int
    notes: tuple[str, ...]


def chunks(prompt: int, budget: int) -> list[tuple[int, int]]:
    """(tokens, prefix) of each chunk a prompt is prefilled in."""
    out, done = [], 0
    while done < prompt:
        n = min(budget, prompt - done)
        out.append((n, done))
        done += n
    return out


def closed_loop(step_ms: Callable[[StepShape], float], concurrency: int, prompt: int,
                output: int, *, budget: int = BUDGET, request_ms: float = 0.0) -> Serving:
    """The steady state of ``concurrency`` clients at ``prompt`` / ``output`` tokens;
    ``step_ms``: one step's predicted time (the engine's per-step overhead included)."""
    if concurrency < 1 or prompt < 1 or output < 2:
        raise ValueError("concurrency, prompt >= 1 and output >= 2")
    ctx = prompt + output // 2
    parts = chunks(prompt, max(1, budget - concurrency))
    k = len(parts)
    d = max(1, round(concurrency * (output - 1) / (k + output - 1)))
    s_dec = step_ms(StepShape.decode(d, ctx))
    if concurrency == 1:  # one client: its prefill steps carry no decode, nothing waits
        pre = sum(step_ms(StepShape.prefill(n, prefix)) for n, prefix in parts)
        latency = pre + (output - 1) * s_dec + request_ms
        ttft = pre + request_ms
    else:
        dp = 0.0
        for n, prefix in parts:
            mixed = StepShape((SeqGroup(d, ctx, 1), SeqGroup(1, prefix, n)))
            dp += step_ms(mixed) - s_dec
        dp = max(dp, 0.0)
        steps = (k + output - 1) * s_dec + concurrency * dp
        latency = steps + request_ms
        ttft = min(k * s_dec + dp + 0.5 * steps / (k + output - 1) + request_ms, latency)
    tpot = (latency - min(ttft, latency)) / (output - 1)
    notes = (
        f"closed loop: {concurrency} clients, {prompt} -> {output} tokens, {k} prefill "
        f"chunk(s) of <= {budget - concurrency} tokens, {d} sequences decoding per step on "
        "average",
        "every client admitted at once (KV cache large enough), uniform MoE routing, no "
        "prefix caching",
    )
    return Serving(concurrency, prompt, output, tpot, ttft, latency,
                   concurrency * output / latency * 1e3, s_dec,
                   concurrency * (prompt + output), notes)


def decode_tok_s(step: float) -> float:
    """Tokens per second of one stream at ``step`` ms per token."""
    return 1e3 / step if step > 0 else math.inf
