"""Compare llama.cpp's predicted KV cache with what ``llama-server`` logged."""

from __future__ import annotations

from typing import Protocol

from servelab.check import Check, Value
from servelab.engines.llamacpp.kv import LlamaCppKvPlan, log_mib
from servelab.sizing.check import KvCheck

__all__ = ["LoggedLlamaCppKv", "check_llamacpp_kv_against_log"]


class LoggedLlamaCppKv(Protocol):
    """What llama.cpp's log said about its KV cache (``None``: the log is silent); the
    engine's log facts satisfy it."""

    @property
    def kv_pool_tokens(self) -> int | None: ...
    @property
    def kv_cells(self) -> int | None: ...
    @property
    def kv_streams(self) -> int | None: ...
    @property
    def kv_layers(self) -> int | None: ...
    @property
    def kv_cache_type(self) -> str | None: ...
    @property
    def kv_cache_type_v(self) -> str | None: ...
    @property
    def kv_cache_gib(self) -> float | None: ...
    @property
    def kv_k_mib(self) -> float | None: ...
    @property
    def kv_v_mib(self) -> float | None: ...
    @property
    def kv_swa_cells(self) -> int | None: ...
    @property
    def kv_swa_layers(self) -> int | None: ...
    @property
    def kv_swa_mib(self) -> float | None: ...
    @property
    def max_model_len(self) -> int | None: ...
    @property
    def parallel_slots(self) -> int | None: ...


def check_llamacpp_kv_against_log(plan: LlamaCppKvPlan, facts: LoggedLlamaCppKv) -> KvCheck:
    """Pair every figure of llama.cpp's ``llama_kv_cache`` line (and its slots and
    per-slot context) with the plan; sizes as the log prints them, MiB to two decimals. A
    sliding-window model's first line is its non-SWA cache; its SWA cache's line is paired
    with the plan's SWA cache."""

    def item(label: str, predicted: Value, logged: Value, decimals: int | None = None) -> Check:
        return Check(label, predicted, logged, exact=True, decimals=decimals)

    total = facts.kv_cache_gib * 1024 if facts.kv_cache_gib is not None else None
    items: tuple[Check, ...] = (
        item("KV cache tokens (cells x streams)", plan.tokens, facts.kv_pool_tokens),
        item("cells per stream", plan.cells, facts.kv_cells),
        item("streams", plan.streams, facts.kv_streams),
        item("layers with KV", len(plan.layers), facts.kv_layers),
        item("K type", plan.type_k, facts.kv_cache_type),
        item("V type", plan.type_v, facts.kv_cache_type_v),
        item("K MiB", log_mib(plan.k_bytes), facts.kv_k_mib, 2),
        item("V MiB", log_mib(plan.v_bytes), facts.kv_v_mib, 2),
        item("KV cache MiB", log_mib(plan.main.total_bytes), total, 2),
        item("context per slot (n_ctx_seq)", plan.n_ctx_seq, facts.max_model_len),
        item("slots", plan.slots, facts.parallel_slots),
    )
    if (swa := plan.swa) is not None:
        items += (
            item("SWA cache cells per stream", swa.cells, facts.kv_swa_cells),
            item("SWA cache layers", len(swa.layers), facts.kv_swa_layers),
            item("SWA cache MiB", log_mib(swa.total_bytes), facts.kv_swa_mib, 2),
        )
    return KvCheck(items)
