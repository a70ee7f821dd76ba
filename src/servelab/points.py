"""A workload point — prompt length × concurrency (× context depth) — and its one text form,
``p{n}-c{c}`` (``p{n}-d{depth}-c{c}`` for a point of a depth grid).

Samples and metrics are stored under a point's label (``p2048-c1``; ``cmax`` when the
concurrency was unbounded; ``p512-d4096-c1`` for 512 new tokens after 4,096 tokens of cached
context). :class:`PointKey` writes that label and reads it back, also from
longer names that embed it (``vllm-p2048-o128-c1``); nothing else builds or parses it.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PointKey", "point_label"]

_PROMPT = re.compile(r"(?:^|[-_])p(\d+)(?=$|[-_])")
_CONC = re.compile(r"(?:^|[-_])c(\d+|max)(?=$|[-_])")
_DEPTH = re.compile(r"(?:^|[-_])d(\d+)(?=$|[-_])")


@dataclass(frozen=True, order=True)
class PointKey:
    """Prompt tokens, concurrency (``None``: unbounded or unknown) and context depth of a
    workload point (0: no shared context before the prompt)."""

    prompt_tokens: int
    concurrency: int | None = 1
    depth: int = 0

    @property
    def label(self) -> str:
        """The stored form: ``p2048-c1`` (``p2048-cmax`` for an unbounded point,
        ``p512-d4096-c1`` at context depth 4,096)."""
        conc = "max" if self.concurrency is None else str(self.concurrency)
        depth = f"-d{self.depth}" if self.depth else ""
        return f"p{self.prompt_tokens}{depth}-c{conc}"

    @property
    def single_stream(self) -> bool:
        """One request at a time (or a point that does not say)."""
        return self.concurrency in (1, None)

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
        conc = int(c.group(1)) if c and c.group(1).isdigit() else None
        depth = int(d.group(1)) if d else 0
        if m:
            return cls(int(m.group(1)), conc, depth)
        counts = [n for n in prompt_tokens if n]
        if counts:
            return cls(int(statistics.median(counts)), conc, depth)
        return None


def point_label(prompt_tokens: int, concurrency: int | None = 1, depth: int = 0) -> str:
    """``point_label(2048, 1) == "p2048-c1"``: the label samples and metrics are stored under
    (``point_label(512, 1, 4096) == "p512-d4096-c1"``)."""
    return PointKey(prompt_tokens, concurrency, depth).label
