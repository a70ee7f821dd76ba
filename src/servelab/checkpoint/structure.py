"""A checkpoint's structure read from its tensors alone (no config): its layer kinds and its
routed experts, for inspect's report to set beside what the config declares."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from servelab.checkpoint.roles import Role, TensorRole
from servelab.checkpoint.safetensors_format import TensorEntry

__all__ = ["NOT_DECODED", "experts_from_tensors", "tensor_layer_types"]

#: Roles a decoded token never reads (the vision tower, the MTP head).
NOT_DECODED = frozenset({Role.VISION, Role.MTP})


def tensor_layer_types(
    tensors: Sequence[TensorEntry], roles: Sequence[TensorRole]
) -> tuple[tuple[str, ...], int | None]:
    kinds: dict[int, set[Role]] = defaultdict(set)
    for r in roles:
        if r.layer is not None and r.base not in NOT_DECODED:
            kinds[r.layer].add(r.base)
    if not kinds:
        return (), None
    n = max(kinds) + 1
    out = []
    for i in range(n):
        k = kinds.get(i, set())
        if Role.LINEAR_ATTENTION in k:
            out.append("linear_attention")
        elif Role.ATTENTION in k:
            out.append("full_attention")
        else:
            out.append("none")
    return tuple(out), n


def experts_from_tensors(
    tensors: Sequence[TensorEntry], roles: Sequence[TensorRole]
) -> tuple[int | None, str | None]:
    per_expert: set[int] = set()
    fused = 0
    for t, r in zip(tensors, roles, strict=True):
        if r.base is not Role.ROUTED_EXPERT or r.is_scale:
            continue
        if r.expert is not None:
            per_expert.add(r.expert)
        elif len(t.shape) >= 3:  # [E, 2I, H]; gpt-oss blocks [E, out, in/32, 16]
            fused = max(fused, t.shape[0])
    if per_expert and fused:
        return max(len(per_expert), fused), "mixed"
    if per_expert:
        return max(per_expert) + 1, "per-expert"
    if fused:
        return fused, "fused"
    return None, None
