"""Builds tied within the uncertainty of their order, and what decides between them (pure).

Two predictions from one calibration on one hardware share most of their error; whether
their *order* can be trusted is the error of their ratio, measured on stored pairs of builds
of one family with the family held out (:class:`~servelab.predict.pairs.OrderError`). Two
predicted decode figures whose ratio is within that error are tied; so are a measurement and
another figure whose intervals overlap (a measurement's 95 % CI is its own noise), and any
two figures within :data:`TIE` of each other. Between tied builds what decides is, in
order: a measured or published decode figure for the build on this hardware (the higher
one; a build with one before a build without), a reported problem with its kernel path (the
build without one first), then memory: more requests of the context held at once, a longer
largest context, fewer bytes per token.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from servelab.choose.row import Row
from servelab.predict.pairs import OrderError
from servelab.published.runs import PublishedRun

TIE = 0.01
"""Decode figures within 1 % of each other are a tie whatever else is known."""


def decisive_figure(row: Row, prompt_len: int) -> tuple[float, str] | None:
    """The measured decode figure of ``row``'s build on this hardware, else the published one
    that matches it best (drafting or not as its best figure is; the prompt length nearest
    ``prompt_len``; the newest), with how to name it; None where neither exists."""
    if row.decode.source == "measured" and row.decode.tok_s is not None:
        return row.decode.tok_s, f"measured in run {row.decode.run_id}"
    drafting = row.speculative is not None and row.best_decode is row.speculative
    rows = [p for p in row.published
            if p.metric == "decode_tok_s" and (p.spec is not None) == drafting]
    if not rows:
        return None

    def near(p: PublishedRun) -> tuple[int, float]:
        return ((0, abs(math.log(p.prompt_tokens / prompt_len))) if p.prompt_tokens
                else (1, 0.0))

    best = min(sorted(rows, key=lambda p: p.date, reverse=True), key=near)  # newest of equals
    return best.value, best.line


def tie_key(row: Row, prompt_len: int) -> tuple[int, float, int, float, int, int, int]:
    """The order among tied rows (the module docs)."""
    fig = decisive_figure(row, prompt_len)
    return (0 if fig else 1, -(fig[0] if fig else 0.0), 1 if row.kernel_risk else 0,
            -round(row.max_concurrency or 0.0, 1), -(row.largest_context or 0),
            row.bytes_per_token or 0, 0 if row.mtp_usable else 1)


def tied(a: Row, b: Row, order: OrderError | None) -> bool:
    """Whether the decode figures of ``a`` and ``b`` cannot be told apart (module docs)."""
    da, db = a.best_decode, b.best_decode
    sa, sb = da.tok_s, db.tok_s
    if sa is None or sb is None or da.figure != db.figure:
        return False
    if abs(sa - sb) <= TIE * max(sa, sb):
        return True
    if "measured" not in (da.source, db.source):
        return da.figure and order is not None and order.tied(sa, sb)
    return (da.figure and None not in (da.low, da.high, db.low, db.high)
            and (da.low or 0.0) <= (db.high or 0.0) and (db.low or 0.0) <= (da.high or 0.0))


def order_ties(rows: Sequence[Row], order: OrderError | None, prompt_len: int,
               same_class: Callable[[Row, Row], bool]) -> list[Row]:
    """``rows`` (sorted by prediction) with each run of rows tied with the run's first
    reordered by :func:`tie_key`; ``same_class(a, b)`` says whether two rows may tie at all
    (both fit, the same SLO verdict)."""
    out: list[Row] = []
    i = 0
    while i < len(rows):
        head, j = rows[i], i + 1
        while (j < len(rows) and same_class(head, rows[j])
               and tied(head, rows[j], order)):
            j += 1
        out.extend(sorted(rows[i:j], key=lambda r: tie_key(r, prompt_len)))
        i = j
    return out


def _figure_words(row: Row, prompt_len: int) -> str:
    fig = decisive_figure(row, prompt_len)
    return fig[1] if fig else "no measured or published figure"


def what_decides(win: Row, lose: Row, prompt_len: int) -> str:
    """Why ``win`` ranks above ``lose`` when they tie (the first rule that tells them apart)."""
    kw, kl = tie_key(win, prompt_len), tie_key(lose, prompt_len)
    if kw[:2] != kl[:2]:
        return (f"a figure measured or published on this hardware decides: "
                f"{win.build}: {_figure_words(win, prompt_len)}; "
                f"{lose.build}: {_figure_words(lose, prompt_len)}")
    if kw[2] != kl[2]:
        return (f"the kernel path decides: {lose.build}'s ({lose.kernel_path}) has a "
                f"reported problem on this hardware and {win.build}'s ({win.kernel_path}) "
                "has none")
    if kw[3] != kl[3]:
        return (f"memory decides: {win.build} holds {win.max_concurrency or 0:,.1f} requests "
                f"of the context at once against {lose.max_concurrency or 0:,.1f}")
    if kw[4] != kl[4]:
        return (f"context decides: {win.build} reaches {win.largest_context or 0:,} tokens "
                f"against {lose.largest_context or 0:,}")
    if kw[5] != kl[5]:
        return f"memory decides: {win.build} reads fewer bytes per token"
    if kw[6] != kl[6]:
        return f"{win.build} ships a usable MTP draft head that {lose.build} lacks"
    return "nothing tells them apart"


def tie_words(a: Row, b: Row, order: OrderError | None) -> str:
    """``tie within the uncertainty of the order: 42.6 vs 38.5 tok/s, the order ...``."""
    sa, sb = a.best_decode.tok_s or 0.0, b.best_decode.tok_s or 0.0
    if "measured" in (a.best_decode.source, b.best_decode.source):
        why = "a measurement's interval overlaps the other figure's"
    elif abs(sa - sb) <= TIE * max(sa, sb) or order is None:
        why = f"within {TIE:.0%} of each other"
    else:
        why = order.describe()
    return f"tie within the uncertainty of the order: {sa:,.1f} vs {sb:,.1f} tok/s, {why}"
