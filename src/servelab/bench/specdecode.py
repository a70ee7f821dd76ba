"""Server counters from ``/metrics`` (Prometheus text) before and after a workload.

Speculative decoding: acceptance rate = Δaccepted / Δdraft_tokens and mean
acceptance length = 1 + Δaccepted / Δdrafts (vLLM's definitions), reported only
when the counters exist; the per-position accepted counts (vLLM's
``vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}``) are kept per position.
The prompt / generation token counters let a run be
cross-checked against what the engine itself counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import httpx

PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
"""Accepted draft tokens at each draft position (label ``position``)."""
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
"""Prompt tokens looked up in the prefix cache (vLLM's counter ``vllm:prefix_cache_queries``)."""
PREFIX_HITS = "vllm:prefix_cache_hits_total"
"""Of those, tokens found in the cache."""


_POSITION = re.compile(r'(?:^|[,{\s])position="(\d+)"')


def position_key(name: str, position: int) -> str:
    """The key :func:`parse_prometheus` files a ``position="i"`` sample of ``name`` under."""
    return f"{name}[{position}]"


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum every sample of each metric name over its label sets.

    A sample labelled ``position="i"`` is also summed under ``name[i]``
    (:func:`position_key`). Comment lines and malformed lines are skipped; ``NaN``
    samples are ignored.
    """
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        labels = ""
        if "{" in line:
            name, _, rest = line.partition("{")
            labels, _, value_part = rest.rpartition("}")
        else:
            name, _, value_part = line.partition(" ")
        fields = value_part.split()
        if not fields:
            continue
        try:
            v = float(fields[0])
        except ValueError:
            continue
        if math.isnan(v):
            continue
        out[name.strip()] = out.get(name.strip(), 0.0) + v
        pos = _POSITION.search(labels)
        if pos is not None:
            key = position_key(name.strip(), int(pos.group(1)))
            out[key] = out.get(key, 0.0) + v
    return out


def scrape(base_url: str, *, timeout_s: float = 10.0, api_key: str | None = None
           ) -> dict[str, float] | None:
    """GET ``/metrics``; None when the server has none (or it is unreachable)."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/metrics"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(url, timeout=timeout_s, headers=headers)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    return parse_prometheus(r.text)


@dataclass(frozen=True, slots=True)
class CounterDelta:
    """What the server counted during a workload (differences of ``/metrics``)."""

    prompt_tokens: float | None
    generation_tokens: float | None
    spec_drafts: float | None
    spec_draft_tokens: float | None
    spec_accepted: float | None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    spec_accepted_per_pos: tuple[float, ...] | None = None
    """Accepted draft tokens at positions 0, 1, ... (None when not exported)."""

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Cached ÷ queried prompt tokens during the run (the engine's own counters)."""
        if self.prefix_cache_hits is None or not self.prefix_cache_queries:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted ÷ proposed draft tokens."""
        if self.spec_accepted is None or not self.spec_draft_tokens:
            return None
        return self.spec_accepted / self.spec_draft_tokens

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted ÷ drafts: tokens produced per target-model step."""
        if self.spec_accepted is None or not self.spec_drafts:
            return None
        return 1.0 + self.spec_accepted / self.spec_drafts

    @property
    def acceptance_rate_per_pos(self) -> tuple[float, ...] | None:
        """Accepted at each draft position ÷ drafts (vLLM's per-position acceptance rate)."""
        if self.spec_accepted_per_pos is None or not self.spec_drafts:
            return None
        return tuple(a / self.spec_drafts for a in self.spec_accepted_per_pos)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (schema ``servelab.bench/1``, ``server_counters``)."""
        return {
            "prompt_tokens": self.prompt_tokens, "generation_tokens": self.generation_tokens,
            "spec_decode_num_drafts": self.spec_drafts,
            "spec_decode_num_draft_tokens": self.spec_draft_tokens,
            "spec_decode_num_accepted_tokens": self.spec_accepted,
            "spec_decode_acceptance_rate": self.acceptance_rate,
            "spec_decode_acceptance_length": self.mean_acceptance_length,
            "spec_decode_num_accepted_tokens_per_pos": (
                list(self.spec_accepted_per_pos) if self.spec_accepted_per_pos is not None
                else None),
            "spec_decode_acceptance_rate_per_pos": (
                list(r) if (r := self.acceptance_rate_per_pos) is not None else None),
            "prefix_cache_queries": self.prefix_cache_queries,
            "prefix_cache_hits": self.prefix_cache_hits,
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CounterDelta:
        """Inverse of :meth:`to_json`."""
        per_pos = d.get("spec_decode_num_accepted_tokens_per_pos")
        return cls(d.get("prompt_tokens"), d.get("generation_tokens"),
                   d.get("spec_decode_num_drafts"), d.get("spec_decode_num_draft_tokens"),
                   d.get("spec_decode_num_accepted_tokens"), d.get("prefix_cache_queries"),
                   d.get("prefix_cache_hits"),
                   tuple(float(x) for x in per_pos) if isinstance(per_pos, list) else None)


def delta(before: dict[str, float], after: dict[str, float]) -> CounterDelta:
    """Counter differences; a counter missing from either scrape is None."""
    def d(name: str, position: int | None = None) -> float | None:
        for key in (name, name.removesuffix("_total")):
            if position is not None:
                key = position_key(key, position)
            if key in before and key in after:
                return after[key] - before[key]
        return None

    per_pos: list[float] = []
    while (v := d(SPEC_ACCEPTED_PER_POS, len(per_pos))) is not None:
        per_pos.append(v)
    return CounterDelta(d(PROMPT_TOKENS), d(GENERATION_TOKENS), d(SPEC_DRAFTS),
                        d(SPEC_DRAFT_TOKENS), d(SPEC_ACCEPTED), d(PREFIX_QUERIES),
                        d(PREFIX_HITS), tuple(per_pos) if per_pos else None)
