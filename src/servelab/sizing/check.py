"""A planned KV pool against what a real engine logged, as :class:`~servelab.check.Check`
values (llama.cpp's every cache figure is paired in
:mod:`servelab.engines.llamacpp.kvcheck`).

Two views, one arithmetic each:

- :func:`kv_pool_checks`: the stored plan (:class:`~servelab.sizing.document.PlanDocument`)
  against the engine's log — the checks ``servelab run`` prints after a run and the recipe
  pages show under "Planned vs reported" (vLLM: pool tokens and max concurrency; llama.cpp:
  cache tokens and MiB as its log prints them);
- :func:`check_kv_against_log`: every quantity of vLLM's pool (tokens, concurrency, block
  size, padding) against the log, for tests against real engines and for anyone who wants
  to know whether servelab's arithmetic still matches their engine; a mismatch names the
  quantity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from servelab.check import Check
from servelab.sizing.document import PlanDocument
from servelab.sizing.kvpool import KvPoolPlan
from servelab.units import f32_mib

__all__ = [
    "KV_CACHE_SIZE",
    "KV_CONCURRENCY",
    "KV_TOKENS",
    "KvCheck",
    "LoggedKvPool",
    "LoggedKvSize",
    "check_kv_against_log",
    "kv_pool_checks",
]

#: Labels of :func:`kv_pool_checks`, per arithmetic (tokens, then concurrency or size).
KV_TOKENS = {"vLLM": "KV pool", "llama.cpp": "KV cache tokens"}
KV_CONCURRENCY = "max concurrency at full context"
KV_CACHE_SIZE = "KV cache size"


@dataclass(frozen=True)
class KvCheck:
    """All quantities of one comparison."""

    items: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        """Every quantity matches."""
        return all(i.matches for i in self.items)

    def mismatches(self) -> list[str]:
        """``name: predicted X, engine logged Y`` for each mismatch."""
        return [i.mismatch() for i in self.items if not i.matches]


class LoggedKvSize(Protocol):
    """What an engine logged about the size of its KV cache (``None``: the log is silent).

    :class:`servelab.engines.facts.EngineFacts` satisfies it, and so does
    :class:`LoggedKv` (built from a stored run); the planner never imports engine code.
    """

    @property
    def kv_pool_tokens(self) -> int | None: ...
    @property
    def max_concurrency(self) -> float | None: ...
    @property
    def kv_cache_gib(self) -> float | None: ...


@dataclass(frozen=True)
class LoggedKv:
    """:class:`LoggedKvSize` as values (a stored run's engine facts, read back)."""

    kv_pool_tokens: int | None = None
    max_concurrency: float | None = None
    kv_cache_gib: float | None = None


def kv_pool_checks(plan: PlanDocument, logged: LoggedKvSize | None) -> tuple[Check, ...]:
    """The plan's KV pool by its engine's own arithmetic against that engine's log.

    vLLM: pool tokens and max concurrency at full context; llama.cpp: cache tokens and its
    size in MiB to two decimals, as its log prints them. ``()`` when the plan has no pool or
    followed another engine's arithmetic than the one planned for."""
    rules = plan.kv_arithmetic
    engine = plan.engine_name or "vllm"
    if rules is None or engine != plan.kv_engine:
        return ()
    log = logged if logged is not None else LoggedKv()
    tokens = float(plan.kv_tokens) if plan.kv_tokens is not None else None
    seen = float(log.kv_pool_tokens) if log.kv_pool_tokens is not None else None
    if rules == "llama.cpp":
        basis = f"llama.cpp KV arithmetic ({plan.kv_rule or '?'})"
        gib = log.kv_cache_gib
        return (
            Check(KV_TOKENS[rules], tokens, seen, "tokens", basis, exact=True, decimals=0),
            Check(KV_CACHE_SIZE,
                  round(f32_mib(plan.kv_bytes), 2) if plan.kv_bytes is not None else None,
                  round(gib * 1024, 2) if gib is not None else None, "MiB",
                  basis + "; MiB to two decimals, as llama.cpp prints it",
                  exact=True, decimals=2),
        )
    basis = f"vLLM {plan.kv_engine_version or '?'} KV arithmetic ({plan.kv_rule or '?'})"
    return (
        Check(KV_TOKENS[rules], tokens, seen, "tokens", basis, exact=True, decimals=0),
        Check(KV_CONCURRENCY, plan.kv_max_concurrency, log.max_concurrency, "x", basis,
              exact=True, decimals=2),
    )


class LoggedKvPool(Protocol):
    """What an engine logged about its KV pool (``None``: the log is silent).

    The engine's log facts (:class:`servelab.engines.facts.EngineFacts`) satisfy it; the
    planner never imports engine code.
    """

    @property
    def kv_pool_tokens(self) -> int | None: ...
    @property
    def max_concurrency(self) -> float | None: ...
    @property
    def concurrency_at_tokens(self) -> int | None: ...
    @property
    def attention_block_size(self) -> int | None: ...
    @property
    def mamba_padding_pct(self) -> float | None: ...
    @property
    def padding_layers(self) -> int | None: ...


def check_kv_against_log(plan: KvPoolPlan, facts: LoggedKvPool) -> KvCheck:
    """Pair the plan's tokens, concurrency, block size, padding with the log's."""

    def exact(label: str, predicted: float | None, logged: float | None,
              decimals: int = 0) -> Check:
        return Check(label, predicted, logged, exact=True, decimals=decimals)

    return KvCheck((
        exact("KV cache size (tokens)", plan.tokens, facts.kv_pool_tokens),
        exact("Maximum concurrency", plan.max_concurrency, facts.max_concurrency, 2),
        exact("tokens per request", plan.max_model_len, facts.concurrency_at_tokens),
        exact("attention block size", plan.block_size if plan.block_size_was_aligned else None,
              facts.attention_block_size),
        exact("mamba page padding %", plan.mamba_padding_pct, facts.mamba_padding_pct, 2),
        exact("padding layers", plan.padding_layers, facts.padding_layers),
    ))
