"""When a measurement's failed requests make its command fail, and the client's default
timeouts (shared by ``bench`` and ``capacity``).

A hung server is told apart before any measured request (:mod:`servelab.bench.diagnose`), so
the first-byte limit only has to cover a slow prefill, not a dead server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from servelab.errors import BenchError

if TYPE_CHECKING:
    from servelab.bench.metrics import Metrics

FIRST_BYTE_S = 120.0
STALL_S = 60.0
TOTAL_S = 1800.0
MAX_FAILED = 0.1
"""Above this fraction of failed measured requests, ``bench`` and ``capacity`` exit 1."""


def fail_check(where: str, metrics: Sequence[Metrics], max_failed: float) -> None:
    """BenchError naming how many requests failed and why, when more than ``max_failed``
    of the measured requests did."""
    failed = sum(m.failed for m in metrics)
    total = failed + sum(m.completed for m in metrics)
    if total == 0 or failed / total <= max_failed:
        return
    kinds: dict[str, int] = {}
    for m in metrics:
        for k, n in m.failures.items():
            kinds[k] = kinds.get(k, 0) + n
    why = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    raise BenchError(f"{where}: {failed} of {total} measured requests failed "
                     f"({failed / total:.0%}, above --max-failed {max_failed:.0%}): {why}")


__all__ = ["FIRST_BYTE_S", "MAX_FAILED", "STALL_S", "TOTAL_S", "fail_check"]
