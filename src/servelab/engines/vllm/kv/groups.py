"""vLLM's KV-cache groups (``v1/core/kv_cache_utils.py::get_kv_cache_groups``). Pure.

1. Every layer has the same spec: one group (``_get_kv_cache_groups_uniform_spec``).
2. Every layer has the same *type* (same block size; all full attention, or all sliding
   with one window, ...): one group whose block holds every layer's page
   (``UniformTypeKVCacheSpecs``).
3. Otherwise (a hybrid): pages are unified (``unify_kv_cache_spec_page_size``: a smaller
   attention page grows its block size by the ratio, a state page is padded, an attention
   page that does not divide the largest is padded in 0.32 and refused in 0.26), then
   layers are bucketed by spec in layer order and split into groups of equal size: the
   smallest bucket's count, or the largest's when it is below 1.5x the smallest; short
   groups are padded ("Add N padding layers, may waste at most X% KV cache memory"), and
   bucket ``i`` of ``n`` groups takes ``layers[i::n]``
   (``_get_kv_cache_groups_uniform_page_size``).

vLLM's block-outermost packing (``_get_packed_kv_cache_groups``) applies only to KV
layouts that only some backends ask for (DeepSeek-V4's indexer); CPU_ATTN declares LBHNC
and FlashAttention no layout (default LBNHC), so neither reaches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from servelab.engines.vllm.kv.rules import EngineRules
from servelab.engines.vllm.kv.specs import MLA_SPEC, LayerSpec
from servelab.errors import ConfigError
from servelab.sizing.kvpool import cdiv


@dataclass(frozen=True)
class SpecGroup:
    """One group: its members (layer indices) and the spec they share."""

    spec: LayerSpec
    layers: tuple[int, ...]
    padding_layers: int
    member_pages: tuple[int, ...]  # each member's page (one block of the group holds all)


def _same_type(specs: Sequence[LayerSpec]) -> bool:
    """``UniformTypeKVCacheSpecs.is_uniform_type``: one block size and one kind of token
    slots (state kinds: equal pages too)."""
    first = specs[0]
    if any(s.block_size != first.block_size for s in specs):
        return False
    if first.is_state:
        return all(s.is_state and s.page_bytes == first.page_bytes for s in specs)
    return all(
        s.spec == first.spec and s.window == first.window and s.chunk == first.chunk
        for s in specs
    )


def unify_page_sizes(
    specs: Sequence[LayerSpec], rules: EngineRules
) -> tuple[list[LayerSpec], list[str]]:
    """``unify_kv_cache_spec_page_size``: every page made equal to the largest."""
    pages = {s.page_bytes for s in specs}
    if len(pages) <= 1:
        return list(specs), []
    top = max(pages)
    out: list[LayerSpec] = []
    for s in specs:
        if s.page_bytes == top:
            out.append(s)
        elif s.is_state:
            out.append(replace(s, page_padded=top))
        elif top % s.page_bytes == 0:
            out.append(replace(s, block_size=s.block_size * (top // s.page_bytes)))
        elif rules.pads_indivisible_attention_pages and s.spec != MLA_SPEC:
            out.append(replace(s, page_padded=top))
        else:
            raise ConfigError(
                f"vLLM {rules.engine_version} cannot unify a {s.page_bytes:,}-byte "
                f"{s.kind} page with a {top:,}-byte page (it is not a divisor)"
            )
    return out, []


def group_specs(
    specs: Sequence[LayerSpec], rules: EngineRules
) -> tuple[list[SpecGroup], list[str]]:
    """The groups of ``specs`` (indexed as the layers they describe), and the log lines
    vLLM prints while making them."""
    if not specs:
        raise ConfigError("the model has no KV cache to size")
    first = specs[0]
    everyone = tuple(range(len(specs)))
    if all(s == first for s in specs):
        return [SpecGroup(first, everyone, 0, (first.page_bytes,) * len(specs))], []
    if _same_type(specs):
        widest = max(specs, key=lambda s: s.page_bytes)
        return [SpecGroup(widest, everyone, 0, tuple(s.page_bytes for s in specs))], []
    unified, logs = unify_page_sizes(specs, rules)
    buckets: dict[LayerSpec, list[int]] = {}
    for i, s in enumerate(unified):
        buckets.setdefault(s, []).append(i)
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < min(sizes) * 1.5:
        group_size = max(sizes)
    groups: list[SpecGroup] = []
    for spec, layers in buckets.items():
        pad = group_size - len(layers) % group_size
        if pad != group_size:
            logs.append(
                f"Add {pad} padding layers, may waste at most {pad / len(layers) * 100:.2f}% "
                "KV cache memory"
            )
        n = cdiv(len(layers), group_size)
        for i in range(n):
            members = tuple(layers[i::n])
            groups.append(
                SpecGroup(spec, members, group_size - len(members),
                          (spec.page_bytes,) * len(members))
            )
    return groups, logs
