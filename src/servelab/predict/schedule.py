"""Serving under load: vLLM's scheduler replayed step by step over a step model.

Each step has a token budget (``max_num_batched_tokens``). Running requests come first: each
decoding request takes one token, a request part-way through its prompt takes the next
chunk that fits; then waiting requests are admitted in arrival order while the budget, the
step's request limit (``max_num_seqs``) and the KV pool allow (``max_admitted``: how many
requests of this length the pool holds, :func:`requests_admitted`), each starting its prompt
with what budget is left. Beyond the pool requests queue, and their TTFT includes the wait.
A request's first token comes at the end of the step that finishes its prompt; each later
step gives it one more. Long prompts so slow the decoders beside them: every step that holds
a chunk costs what the prefill of that chunk costs.

Steps are scheduled one ahead, as vLLM 0.26's asynchronous scheduling does: a request that
arrives while a step runs is first scheduled in the step after the next one (an idle engine
takes what has arrived at once). So closed-loop clients that start together stay together, as
they do under ``servelab bench``: a wave's prompts queue for the step budget, its requests end
within a few decode steps of each other, and the next wave's prompts arrive together and queue
again, without holding up the rest of the wave's decoders.

Load is closed-loop (``concurrency`` clients, each sending its next request when the last one
ends, as ``servelab bench --concurrency`` does) or open-loop at a constant ``rate`` (requests
per second, evenly spaced). Pure: a step-cost function and numbers in, timings out.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servelab.bench.stats import percentile
from servelab.errors import UsageError
from servelab.families.layers import CHUNKED, SLIDING, STATE_KINDS
from servelab.sizing.kvpool import KvPoolPlan, cdiv

#: seconds of a step: (contexts of the decoding requests, prompt chunks (start, tokens))
StepCost = Callable[[Sequence[int], Sequence[tuple[int, int]]], float]

#: Steps one simulation may take before it is called runaway (a guard, not a limit users meet).
MAX_STEPS = 2_000_000


@dataclass(frozen=True)
class Load:
    """One load point: ``requests`` requests of ``prompt_len`` + ``output_len`` tokens, sent by
    ``concurrency`` closed-loop clients or at ``rate`` requests/s (exactly one of the two)."""

    prompt_len: int
    output_len: int
    requests: int
    concurrency: int | None = None
    rate: float | None = None

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise UsageError("a load point has a concurrency or a request rate, not both")
        if self.prompt_len < 1 or self.output_len < 1 or self.requests < 1:
            raise UsageError("prompt, output and request counts must be positive")
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise UsageError(f"request rate must be positive, got {self.rate}")


@dataclass(frozen=True)
class Limits:
    """The scheduler's limits: the step's token budget, its request limit, and how many
    requests of the load's length the KV pool holds at once."""

    max_num_batched_tokens: int
    max_num_seqs: int
    max_admitted: int

    def __post_init__(self) -> None:
        if min(self.max_num_batched_tokens, self.max_num_seqs) < 1:
            raise UsageError("the step's token budget and request limit must be positive")
        if self.max_admitted < 1:
            raise UsageError("the KV pool holds no request of this length")


@dataclass(frozen=True)
class Timing:
    """One simulated request: when it arrived, was admitted, got its first and last token."""

    arrival: float
    admitted: float
    first_token: float
    finish: float
    output_len: int
    queued: bool = False  # waited for admission: the KV pool or max_num_seqs was full

    @property
    def ttft(self) -> float:
        """Arrival to first token (the queue for admission included)."""
        return self.first_token - self.arrival

    @property
    def tpot(self) -> float:
        """(E2E - TTFT) / (output tokens - 1), as vLLM's and servelab's benches define it."""
        return (self.finish - self.first_token) / max(self.output_len - 1, 1)

    @property
    def e2e(self) -> float:
        """Arrival to last token."""
        return self.finish - self.arrival


@dataclass
class _Req:
    index: int
    arrival: float
    admitted: float = math.nan
    done: int = 0  # prompt tokens prefilled
    generated: int = 0
    first: float = math.nan
    queued: bool = False  # waited while the pool or max_num_seqs was full
    seen: bool = False  # in the scheduler's queue when the step being formed was scheduled


def requests_admitted(kv: KvPoolPlan, tokens: int) -> int:
    """Requests of ``tokens`` tokens the pool holds at once, by vLLM's own count: the pool's
    blocks over the blocks one such request takes in every group (a full or MLA group
    ``cdiv(tokens, block)``; a sliding or chunked group no more than at max-model-len; a
    state group its fixed blocks), as ``get_max_concurrency_for_kv_cache_config`` counts."""
    return admitted(kv.num_blocks,
                    [(g.kind, g.block_size, g.blocks_per_request) for g in kv.groups], tokens)


def admitted(num_blocks: int, groups: Sequence[tuple[str, int, int]], tokens: int) -> int:
    """:func:`requests_admitted` on a pool's block count and its groups' (kind, block size,
    blocks per request at max-model-len), as a stored plan document records them."""
    if tokens < 1:
        raise UsageError("a request holds at least one token")
    per_request = 0
    for kind, block_size, blocks in groups:
        if kind in STATE_KINDS:
            per_request += blocks
        elif kind in (SLIDING, CHUNKED):
            per_request += min(blocks, cdiv(tokens, block_size))
        else:
            per_request += cdiv(tokens, block_size)
    return num_blocks // per_request if per_request else 0


def simulate(step: StepCost, load: Load, limits: Limits, ahead: bool = True
             ) -> tuple[Timing, ...]:
    """Every request of ``load`` through the scheduler (see module docs), in arrival order.

    ``ahead``: vLLM's asynchronous scheduling (on by default in 0.26): while step k runs the
    engine has already scheduled step k + 1, so a request that arrives during step k is first
    scheduled in step k + 2; a closed-loop client's next request (sent when its last token
    comes out, just after step k + 1 was launched) in step k + 3. An idle engine schedules
    what has arrived at once."""
    p, o = load.prompt_len, load.output_len
    if load.rate is not None:
        arrivals: deque[_Req] = deque(_Req(i, i / load.rate) for i in range(load.requests))
    else:
        assert load.concurrency is not None
        arrivals = deque(_Req(i, 0.0) for i in range(min(load.concurrency, load.requests)))
    sent = len(arrivals)
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    out: dict[int, Timing] = {}
    cap = min(limits.max_num_seqs, limits.max_admitted)
    now = 0.0
    for _ in range(MAX_STEPS):
        while arrivals and arrivals[0].arrival <= now:
            waiting.append(arrivals.popleft())
        if not running and not waiting:
            if not arrivals:
                return tuple(out[i] for i in sorted(out))
            now = arrivals[0].arrival
            continue
        if not running or not ahead:  # idle (or synchronous): everything that has arrived
            for r in waiting:
                r.seen = True
        budget = limits.max_num_batched_tokens
        decoding = [r for r in running if r.done == p]
        decoding = decoding[:budget]
        budget -= len(decoding)
        chunks: list[tuple[_Req, int]] = []
        for r in running:
            if r.done < p and budget > 0:
                n = min(p - r.done, budget)
                chunks.append((r, n))
                budget -= n
        while waiting and waiting[0].seen and budget > 0 and len(running) < cap:
            r = waiting.popleft()
            r.admitted = now
            running.append(r)
            n = min(p, budget)
            chunks.append((r, n))
            budget -= n
        if len(running) >= cap:
            for r in waiting:
                r.queued = True
        for r in waiting:  # arrived before this step started: the next schedule sees it
            r.seen = r.seen or r.arrival < now
        now += step([p + r.generated for r in decoding], [(r.done, n) for r, n in chunks])
        ended: list[_Req] = []
        for r in decoding:
            r.generated += 1
            if r.generated >= o:
                ended.append(r)
        for r, n in chunks:
            r.done += n
            if r.done == p:
                r.generated, r.first = 1, now
                if o == 1:
                    ended.append(r)
        for r in ended:
            running.remove(r)
            out[r.index] = Timing(r.arrival, r.admitted, r.first, now, o, r.queued)
            if load.concurrency is not None and sent < load.requests:
                arrivals.append(_Req(sent, now))
                sent += 1
    raise UsageError(f"load simulation did not finish in {MAX_STEPS:,} steps")


@dataclass(frozen=True)
class LoadStats:
    """What a bench reports of one load point, from simulated (or measured) requests."""

    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_mean_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    e2e_mean_s: float
    stream_tok_s: float  # mean over requests of 1 / TPOT
    output_tok_s: float  # output tokens per second of the whole server
    queued: int  # requests that waited for admission (the KV pool or max_num_seqs)


def stats(timings: Sequence[Timing], load: Load) -> LoadStats:
    """:class:`LoadStats` of simulated requests. Output throughput: closed-loop, Little's law
    (``concurrency x output tokens / mean E2E``, what a steady bench measures); open-loop,
    the output tokens over the time from the first arrival to the last token."""
    if not timings:
        raise UsageError("no request to summarise")
    ttft = [t.ttft for t in timings]
    tpot = [t.tpot for t in timings]
    e2e = sum(t.e2e for t in timings) / len(timings)
    if load.concurrency is not None:
        thr = min(load.concurrency, load.requests) * load.output_len / e2e
    else:
        span = max(t.finish for t in timings) - min(t.arrival for t in timings)
        thr = sum(t.output_len for t in timings) / span
    return LoadStats(
        ttft_mean_s=sum(ttft) / len(ttft),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p99_s=percentile(ttft, 99),
        tpot_mean_s=sum(tpot) / len(tpot),
        tpot_p50_s=percentile(tpot, 50),
        tpot_p99_s=percentile(tpot, 99),
        e2e_mean_s=e2e,
        stream_tok_s=sum(1.0 / x for x in tpot if x > 0) / len(tpot),
        output_tok_s=thr,
        queued=sum(1 for t in timings if t.queued),
    )
