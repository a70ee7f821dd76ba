"""A workload point — prompt length × concurrency (× context depth × request rate) — and its
one text form, ``p{n}-c{c}`` (``p{n}-d{depth}-c{c}`` for a point of a depth grid,
``p{n}-c{c}-r{rate}`` for an open-loop point).

Samples and metrics are stored under a point's label (``p2048-c1``; ``cmax`` when the
concurrency was unbounded; ``p512-d4096-c1`` for 512 new tokens after 4,096 tokens of cached
context; ``p512-c8-r2`` for Poisson arrivals at 2 requests/s with at most 8 in flight, with
the arrival profile after the rate where it is not Poisson: ``p512-c8-r2-constant``,
``p512-c8-r2-gamma0.5`` (gamma gaps of shape 0.5), ``p512-c8-r1-ramp4`` (a ramp from 1 to 4
req/s), ``p512-c8-trace`` (a replayed trace)). :class:`PointKey` writes that label and reads
it back, also from longer names that embed it (``vllm-p2048-o128-c1``); nothing else builds
or parses it. Labels written before rates were part of the key (no ``r``) read back as
closed-loop points, as they were stored.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PointKey", "arrival_tag", "point_label"]

_NUM = r"\d+(?:\.\d+)?"
_PROMPT = re.compile(r"(?:^|[-_])p(\d+)(?=$|[-_])")
_CONC = re.compile(r"(?:^|[-_])c(\d+|max)(?=$|[-_])")
_DEPTH = re.compile(r"(?:^|[-_])d(\d+)(?=$|[-_])")
_RATE = re.compile(rf"(?:^|[-_])r({_NUM})(?=$|[-_])")
_ARRIVAL = re.compile(rf"(?:^|[-_])(constant|trace|gamma{_NUM}|ramp(?:{_NUM})?)(?=$|[-_])")


def _num(x: float) -> str:
    """A rate or shape as the label writes it: no exponent, at most 6 decimals (``0.5``,
    ``2``, ``0.333333``)."""
    return f"{x:.6f}".rstrip("0").rstrip(".")


def arrival_tag(profile: str, burstiness: float = 1.0, ramp_end_rate: float | None = None
                ) -> str:
    """The label's arrival part for an open-loop profile: empty for Poisson (the default, and
    ``vllm bench serve``'s), ``constant``, ``gamma{shape}``, ``ramp{end rate}``, ``trace``."""
    if profile == "poisson":
        return ""
    if profile == "gamma":
        return f"gamma{_num(burstiness)}"
    if profile == "ramp":
        return f"ramp{_num(ramp_end_rate)}" if ramp_end_rate is not None else "ramp"
    return profile


@dataclass(frozen=True, order=True)
class PointKey:
    """Prompt tokens, concurrency (``None``: unbounded or unknown), context depth (0: no
    shared context before the prompt), request rate (``None``: closed loop) and arrival
    profile tag (:func:`arrival_tag`; empty: Poisson, or closed loop) of a workload point."""

    prompt_tokens: int
    concurrency: int | None = 1
    depth: int = 0
    rate: float | None = None
    arrival: str = ""

    def __post_init__(self) -> None:
        if self.rate is not None:  # the label's precision, so that parse(label) == key
            object.__setattr__(self, "rate", float(_num(self.rate)))

    @property
    def label(self) -> str:
        """The stored form: ``p2048-c1`` (``p2048-cmax`` for an unbounded point,
        ``p512-d4096-c1`` at context depth 4,096, ``p512-c8-r2`` at 2 requests/s)."""
        conc = "max" if self.concurrency is None else str(self.concurrency)
        depth = f"-d{self.depth}" if self.depth else ""
        return f"p{self.prompt_tokens}{depth}-c{conc}{self.load_suffix}"

    @property
    def load_suffix(self) -> str:
        """The label's open-loop part: ``-r2``, ``-r2-constant``, ``-trace``; empty for a
        closed-loop point."""
        rate = f"-r{_num(self.rate)}" if self.rate is not None else ""
        return rate + (f"-{self.arrival}" if self.arrival else "")

    @property
    def single_stream(self) -> bool:
        """One request at a time (or a point that does not say)."""
        return self.concurrency in (1, None)

    @property
    def open_loop(self) -> bool:
        """Requests arrived on a schedule (a rate or a trace) rather than in a closed loop."""
        return self.rate is not None or bool(self.arrival)

    @property
    def load(self) -> str:
        """Human form of the arrivals: ``closed loop``, ``2 req/s Poisson``,
        ``2 req/s gamma (shape 0.5)``, ``trace replay``."""
        if not self.open_loop:
            return "closed loop"
        if self.arrival == "trace":
            return "trace replay"
        rate = f"{_num(self.rate)} req/s " if self.rate is not None else ""
        a = self.arrival
        if not a:
            kind = "Poisson"
        elif a.startswith("gamma"):
            kind = f"gamma (shape {a[5:]})"
        elif a.startswith("ramp"):
            kind = f"ramp to {a[4:]} req/s" if a[4:] else "ramp"
        else:
            kind = a
        return rate + kind

    def __str__(self) -> str:
        return self.label

    @classmethod
    def parse(cls, text: str, prompt_tokens: Iterable[int | None] = ()) -> PointKey | None:
        """Read a label (or a name embedding one); ``None`` when it names no prompt length.

        Without ``p<n>`` in the text, the median of ``prompt_tokens`` (the samples' own
        counts) is the prompt length when there are any.
        """
        m = _PROMPT.search(text)
        c = _CONC.search(text)
        d = _DEPTH.search(text)
        r = _RATE.search(text)
        a = _ARRIVAL.search(text)
        conc = int(c.group(1)) if c and c.group(1).isdigit() else None
        depth = int(d.group(1)) if d else 0
        rate = float(r.group(1)) if r else None
        arrival = a.group(1) if a else ""
        if m:
            return cls(int(m.group(1)), conc, depth, rate, arrival)
        counts = [n for n in prompt_tokens if n]
        if counts:
            return cls(int(statistics.median(counts)), conc, depth, rate, arrival)
        return None


def point_label(prompt_tokens: int, concurrency: int | None = 1, depth: int = 0,
                rate: float | None = None, arrival: str = "") -> str:
    """``point_label(2048, 1) == "p2048-c1"``: the label samples and metrics are stored under
    (``point_label(512, 1, 4096) == "p512-d4096-c1"``,
    ``point_label(512, 8, rate=2) == "p512-c8-r2"``)."""
    return PointKey(prompt_tokens, concurrency, depth, rate, arrival).label
