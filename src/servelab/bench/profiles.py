"""Load profiles: when each request of an open-loop run is due, as a pure schedule.

A profile turns a request count and a seed into :class:`Arrival` times (seconds from
the start of the batch), and for trace replay also into per-request lengths:

- ``constant``: one request every ``1 / rate`` seconds;
- ``poisson``: exponential gaps with mean ``1 / rate``;
- ``gamma``: gamma-distributed gaps with shape ``burstiness`` and mean ``1 / rate``
  (``vllm bench serve --burstiness``: 1 is Poisson, below 1 burstier, above 1 steadier);
- ``ramp``: the rate rises linearly from ``rate`` to ``ramp_end_rate`` over the batch,
  gaps drawn as for ``gamma`` (Poisson with the default burstiness 1);
- ``trace``: the arrival times and lengths of a JSONL trace, one request per line, in
  the Mooncake trace format that AIPerf also replays: ``{"timestamp": ms,
  "input_length": tokens, "output_length": tokens}`` (lengths optional).

The sender (``servelab.bench.workload``) sleeps until each scheduled time and records
the send time next to it, so the dispatch lag of the client is measured, not assumed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from servelab.bench.jsonl import positive_int, read_lines
from servelab.errors import InputError, UsageError

ProfileKind = Literal["constant", "poisson", "gamma", "ramp", "trace"]
PROFILES: tuple[str, ...] = ("constant", "poisson", "gamma", "ramp", "trace")


@dataclass(frozen=True, slots=True)
class Arrival:
    """One scheduled request: due ``t_s`` seconds after the batch starts."""

    t_s: float
    prompt_len: int | None = None
    """From a trace; None = the point's prompt length."""
    output_len: int | None = None
    """From a trace; None = the point's output length."""


@dataclass(frozen=True, slots=True)
class Trace:
    """A replayable trace: arrivals in time order, the first at 0."""

    path: str
    arrivals: tuple[Arrival, ...]

    @property
    def duration_s(self) -> float:
        """Time from the first to the last arrival."""
        return self.arrivals[-1].t_s if self.arrivals else 0.0

    @property
    def mean_rate(self) -> float | None:
        """Requests per second over the trace (None for fewer than two requests)."""
        if len(self.arrivals) < 2 or self.duration_s <= 0:
            return None
        return (len(self.arrivals) - 1) / self.duration_s


def load_trace(path: Path) -> Trace:
    """Read a JSONL trace; InputError naming the file and line for anything malformed."""
    rows: list[tuple[float, int | None, int | None]] = []
    for i, obj in read_lines(path, "trace"):
        if not isinstance(obj, dict):
            raise InputError(f"line {i}: expected a JSON object", path=path)
        ts = obj.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, int | float) or ts < 0:
            raise InputError(f"line {i}: timestamp (milliseconds, >= 0) is missing or "
                             f"invalid: {ts!r}", path=path)
        rows.append((float(ts) / 1000.0,
                     positive_int(obj.get("input_length"), "input_length", path, i),
                     positive_int(obj.get("output_length"), "output_length", path, i)))
    if not rows:
        raise InputError("the trace has no requests", path=path)
    if any(rows[k][0] < rows[k - 1][0] for k in range(1, len(rows))):
        raise InputError("timestamps must not decrease", path=path)
    t0 = rows[0][0]
    return Trace(str(path), tuple(Arrival(t - t0, p, o) for t, p, o in rows))


@dataclass(frozen=True, slots=True)
class LoadProfile:
    """How an open-loop batch spreads its requests over time."""

    kind: ProfileKind = "poisson"
    rate: float = 1.0
    """Requests per second (the start rate of a ramp); unused for a trace."""
    burstiness: float = 1.0
    """Gamma shape for ``gamma`` and ``ramp`` gaps."""
    ramp_end_rate: float | None = None
    trace: Trace | None = None

    def __post_init__(self) -> None:
        if self.kind not in PROFILES:
            raise UsageError(f"unknown load profile {self.kind!r} (one of {', '.join(PROFILES)})")
        if self.kind == "trace":
            if self.trace is None:
                raise UsageError("the trace profile needs a trace file (--trace)")
            return
        if not self.rate > 0:
            raise UsageError("request rate must be > 0")
        if not self.burstiness > 0:
            raise UsageError("burstiness must be > 0")
        if self.kind == "ramp" and (self.ramp_end_rate is None or not self.ramp_end_rate > 0):
            raise UsageError("the ramp profile needs an end rate > 0 (--ramp-end-rate)")

    def schedule(self, n: int, seed: int) -> tuple[Arrival, ...]:
        """``n`` arrivals (a trace gives at most its own length), first one at 0."""
        if n < 1:
            return ()
        if self.trace is not None and self.kind == "trace":
            return self.trace.arrivals[:n]
        rng = random.Random(seed)
        out = [Arrival(0.0)]
        t = 0.0
        for i in range(1, n):
            t += self._gap(rng, i, n)
            out.append(Arrival(t))
        return tuple(out)

    def _gap(self, rng: random.Random, i: int, n: int) -> float:
        if self.kind == "constant":
            return 1.0 / self.rate
        rate = self.rate
        if self.kind == "ramp":
            assert self.ramp_end_rate is not None
            rate = self.rate + (self.ramp_end_rate - self.rate) * i / max(n - 1, 1)
        if self.kind == "poisson":
            return rng.expovariate(rate)
        return rng.gammavariate(self.burstiness, 1.0 / (rate * self.burstiness))

    def describe(self) -> str:
        """Short label, e.g. ``gamma 4 req/s, burstiness 0.5``."""
        if self.kind == "trace":
            assert self.trace is not None
            return f"trace {Path(self.trace.path).name} ({len(self.trace.arrivals)} requests)"
        if self.kind == "ramp":
            return f"ramp {self.rate:g}→{self.ramp_end_rate:g} req/s"
        if self.kind == "gamma":
            return f"gamma {self.rate:g} req/s, burstiness {self.burstiness:g}"
        return f"{self.kind} {self.rate:g} req/s"
