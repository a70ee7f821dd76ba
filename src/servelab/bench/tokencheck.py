"""Do the client's token counts agree with the server's?

Three sources must agree: the length the client built each prompt to (counted by the
server's ``/tokenize`` or the model's tokenizer), the server's per-request ``usage``,
and the server's own ``/metrics`` counters over the run. Per request, usage that
contradicts the stream is already an error (``usage_mismatch``); this check covers the
rest: built prompt length vs ``usage.prompt_tokens``, and Σ usage vs the counters'
increase. The counters are compared only when every request of the run completed (a
request the client abandoned may still have been counted by the server) — the check
then says it was skipped and why, never that it passed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from servelab.bench.samples import RequestSample
from servelab.bench.specdecode import CounterDelta


@dataclass(frozen=True, slots=True)
class TokenCheck:
    """The comparison and its outcome."""

    requests: int
    client_prompt_tokens: int
    client_completion_tokens: int
    prompt_len_mismatches: int
    """Completed requests whose usage.prompt_tokens differs from the built length."""
    server_prompt_tokens: float | None
    server_generation_tokens: float | None
    counters_compared: bool
    skipped_reason: str | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """No disagreement was found."""
        return not self.problems

    @property
    def failure(self) -> str | None:
        """Why the run is wrong (``token counts disagree: ...``); ``None`` when it is not."""
        return None if self.ok else f"token counts disagree: {'; '.join(self.problems)}"

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (``token_check`` of a result)."""
        return {"ok": self.ok, "requests": self.requests,
                "client_prompt_tokens": self.client_prompt_tokens,
                "client_completion_tokens": self.client_completion_tokens,
                "prompt_len_mismatches": self.prompt_len_mismatches,
                "server_prompt_tokens": self.server_prompt_tokens,
                "server_generation_tokens": self.server_generation_tokens,
                "counters_compared": self.counters_compared,
                "skipped_reason": self.skipped_reason, "problems": list(self.problems)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenCheck:
        """Inverse of :meth:`to_json`."""
        return cls(d["requests"], d["client_prompt_tokens"], d["client_completion_tokens"],
                   d["prompt_len_mismatches"], d.get("server_prompt_tokens"),
                   d.get("server_generation_tokens"), d["counters_compared"],
                   d.get("skipped_reason"), tuple(d.get("problems", [])))


def check(samples: Iterable[RequestSample], counters: CounterDelta | None) -> TokenCheck:
    """Compare every request the run sent (warm-up included) with the server's counters."""
    all_s = list(samples)
    ok = [s for s in all_s if s.ok]
    cp = sum(s.prompt_tokens or 0 for s in ok)
    cc = sum(s.completion_tokens or 0 for s in ok)
    mism = sum(1 for s in ok if s.prompt_len_mismatch)
    problems: list[str] = []
    if mism:
        problems.append(f"{mism} of {len(ok)} completed requests: the server counted a "
                        "different prompt length than the client built")
    reason: str | None = None
    sp = counters.prompt_tokens if counters is not None else None
    sg = counters.generation_tokens if counters is not None else None
    if counters is None:
        reason = "the server has no /metrics"
    elif sp is None or sg is None:
        reason = "the server's /metrics has no prompt/generation token counters"
    elif len(ok) != len(all_s):
        reason = f"{len(all_s) - len(ok)} requests did not complete"
    else:
        if round(sp) != cp:
            problems.append(f"server /metrics counted {sp:.0f} prompt tokens, the requests' "
                            f"usage sums to {cp}")
        if round(sg) != cc:
            problems.append(f"server /metrics counted {sg:.0f} generated tokens, the "
                            f"requests' usage sums to {cc}")
    return TokenCheck(len(all_s), cp, cc, mism, sp, sg, reason is None, reason, tuple(problems))
