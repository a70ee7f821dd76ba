"""Compare llama.cpp's predicted KV cache with what ``llama-server`` logged."""

from __future__ import annotations

from typing import Protocol

from servelab.engines.llamacpp.kv import LlamaCppKvPlan, log_mib
from servelab.plan.check import CheckItem, KvCheck

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

    def s(v: object) -> str | None:
        return None if v is None else str(v)

    def mib(v: float | None) -> str | None:
        return None if v is None else f"{v:.2f}"

    total = facts.kv_cache_gib * 1024 if facts.kv_cache_gib is not None else None
    items: tuple[CheckItem, ...] = (
        CheckItem("KV cache tokens (cells x streams)", str(plan.tokens), s(facts.kv_pool_tokens)),
        CheckItem("cells per stream", str(plan.cells), s(facts.kv_cells)),
        CheckItem("streams", str(plan.streams), s(facts.kv_streams)),
        CheckItem("layers with KV", str(len(plan.layers)), s(facts.kv_layers)),
        CheckItem("K type", plan.settings.cache_type_k, facts.kv_cache_type),
        CheckItem("V type", plan.settings.cache_type_v, facts.kv_cache_type_v),
        CheckItem("K MiB", f"{log_mib(plan.k_bytes):.2f}", mib(facts.kv_k_mib)),
        CheckItem("V MiB", f"{log_mib(plan.v_bytes):.2f}", mib(facts.kv_v_mib)),
        CheckItem("KV cache MiB", f"{log_mib(plan.main.total_bytes):.2f}", mib(total)),
        CheckItem("context per slot (n_ctx_seq)", str(plan.n_ctx_seq), s(facts.max_model_len)),
        CheckItem("slots", str(plan.slots), s(facts.parallel_slots)),
    )
    if (swa := plan.swa) is not None:
        items += (
            CheckItem("SWA cache cells per stream", str(swa.cells), s(facts.kv_swa_cells)),
            CheckItem("SWA cache layers", str(len(swa.layers)), s(facts.kv_swa_layers)),
            CheckItem("SWA cache MiB", f"{log_mib(swa.total_bytes):.2f}", mib(facts.kv_swa_mib)),
        )
    return KvCheck(items)
