"""A build that does not fit, and its way in (issue 40): the smallest changes that make it
fit, each one planned with the same planner, never guessed.

Tried in order, each alone: an FP8 KV cache (where the plan's is wider), tensor parallelism
over 2, 4 or 8 GPUs of one node of the planned hardware (the smallest that fits), and a
shorter context where the plan already holds one (its largest context at concurrency 1).
A smaller build of the same model (its Hub model tree) is ``servelab choose --discover``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from servelab.errors import ServelabError
from servelab.plan.build import Plan
from servelab.plan.request import PlanRequest

__all__ = ["TP_SIZES", "way_in"]

TP_SIZES = (2, 4, 8)
"""The tensor-parallel sizes tried: one node of up to 8 GPUs (a DGX / HGX node)."""


def _fit(p: Plan) -> str:
    conc = f", {p.pool.max_concurrency:.2f}x concurrency" if p.pool is not None else ""
    return f"fits with a KV pool of {p.kv_tokens:,} tokens{conc}"


def way_in(request: PlanRequest, plan: Plan, replan: Callable[[PlanRequest], Plan]
           ) -> tuple[str, ...]:
    """The ways ``plan`` (of ``request``) would fit, one line each, each planned by
    ``replan``; none when it fits already."""
    if plan.fits:
        return ()
    knobs, hw = request.knobs, request.hardware
    out: list[str] = []

    def tried(changed: PlanRequest) -> Plan | None:
        try:
            p = replan(changed)
        except ServelabError:
            return None
        return p if p.fits else None

    if plan.largest_context_c1 > 0:
        out.append(f"a shorter context: --max-model-len {plan.largest_context_c1:,} (the "
                   "largest that fits one request)")
    if knobs.kv_cache_dtype in ("auto", "bfloat16", "float16") and plan.memory.kv_pool_bytes > 0:
        p = tried(replace(request, knobs=replace(knobs, kv_cache_dtype="fp8")))
        if p is not None:
            out.append(f"an FP8 KV cache: --kv-cache-dtype fp8 {_fit(p)}")
    layout = knobs.layout
    for n in (n for n in TP_SIZES if n > layout.tensor):
        p = tried(replace(request, knobs=replace(knobs, layout=replace(layout, tensor=n))))
        if p is not None:
            out.append(f"tensor parallel over {n} GPUs of one {n} x {hw.name} node: "
                       f"--tensor-parallel-size {n} {_fit(p)}")
            break
    else:
        out.append(f"no tensor-parallel size up to {TP_SIZES[-1]} GPUs of one {hw.name} node "
                   "fits it: a smaller build of the model (servelab choose --discover)")
    return tuple(f"way in: {line}" for line in out)
