"""``servelab choose``'s terminal view: the answer block first
(:mod:`servelab.cli.answer_block`), then the ranked table at 80 columns (rank, build, fits,
users at the context, decode, a short verdict; ``--wide``: every column and the full
verdicts in the table) and each build's verdict in full."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from servelab.choose.rank import newest_published
from servelab.cli.answer_block import (
    ChooseFacts,
    choose_block,
    context_short,
    short_verdict,
    speed_cell,
)
from servelab.cli.published_view import render_published
from servelab.cli.screen import Screen
from servelab.units import GIB

if TYPE_CHECKING:
    from servelab.choose.rank import Choice, Row, Speed

NARROW = ("#", "build", "fits", "users@{ctx}", "decode tok/s", "verdict")
"""The default table's columns ({ctx}: the context, e.g. ``32K``)."""


COLUMNS = ("rank", "build", "engine", "scheme", "fits", "concurrency @ context", "KV pool",
           "decode tok/s", "prefill tok/s", "speculative", "kernel path", "MTP head",
           "GiB/token", "SLO", "verdict")


def _speed(s: Speed | None) -> str:
    if s is None:
        return "–"
    if s.tok_s is None:
        return "no prediction" if "no prediction" in s.basis else "–"
    text = f"{s.tok_s:,.1f}"
    if s.low is not None and s.high is not None:
        text += f" ({s.low:,.1f}–{s.high:,.1f})"
    label = {"measured": "measured", "predicted": "predicted", "bound": "bound"}[s.source]
    return f"{text} {label}"


def _mtp(r: Row) -> str:
    if r.mtp_usable:
        return f"yes ({r.mtp_tensors} tensors)"
    if r.mtp_declared_layers:
        return "declared, none shipped"
    return "no" if r.refused is None else "–"


def table_rows(choice: Choice) -> list[list[str]]:
    """The full table's cells (``--wide``, ``--markdown``)."""
    rows = []
    for r in choice.rows:
        fits = "–" if r.fits is None else "yes" if r.fits else "no"
        conc = f"{r.max_concurrency:,.2f}x" if r.max_concurrency is not None else "–"
        kernel = r.kernel_path or "–"
        if r.fallback:
            kernel += " (fallback)"
        rows.append([
            str(r.rank) if r.rank is not None else "–", r.build, r.engine or "–",
            r.scheme or "–", fits, conc,
            f"{r.kv_pool_tokens:,} tokens" if r.kv_pool_tokens is not None else "–",
            _speed(r.decode), _speed(r.prefill), _speed(r.speculative), kernel, _mtp(r),
            f"{r.bytes_per_token / GIB:.3f}" if r.bytes_per_token is not None else "–",
            r.slo or "–", r.verdict,
        ])
    return rows



def narrow_rows(choice: Choice) -> list[list[str]]:
    """The default table's cells: rank, build, fits, requests at the context, decode and a
    verdict in a few words."""
    facts = ChooseFacts(choice)
    pick = facts.pick
    rows = []
    for r in choice.rows:
        fits = "–" if r.fits is None else "yes" if r.fits else "no"
        users = f"{r.max_concurrency:,.1f}" if r.max_concurrency is not None else "–"
        best = r.best_decode
        decode = speed_cell(best) + (" MTP" if r.speculative is not None
                                     and best is r.speculative else "")
        rows.append([str(r.rank) if r.rank is not None else "–", r.build, fits, users, decode,
                     short_verdict(r, pick)])
    return rows


def _table(choice: Choice, wide: bool) -> Table:
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    if wide:
        for c in COLUMNS:
            t.add_column(c, overflow="fold", no_wrap=c == "build")
        for row in table_rows(choice):
            t.add_row(*row)
        return t
    for c in NARROW:
        name = c.format(ctx=context_short(choice.context_len))
        right = c in ("#", "users@{ctx}", "decode tok/s")
        t.add_column(name, justify="right" if right else "left",
                     no_wrap=c not in ("build", "verdict"), overflow="fold")
    for row in narrow_rows(choice):
        t.add_row(*row)
    return t


def published_lines(choice: Choice) -> list[str]:
    """``BUILD: published figure (source, date)``, the newest of each build's figures."""
    return [f"{_as(r)}: {p.line}" for r in choice.rows for p in newest_published(r.published)]


def _as(r: Row) -> str:
    """A build's name, and the identity its published figures matched where that is not its
    name (a local folder whose manifest names its repo)."""
    if r.identity is None or r.identity.split(" (from ", 1)[0] == r.build:
        return r.build
    return f"{r.build} = {r.identity}"


def render_choice(choice: Choice, *, brief: bool = False, wide: bool = False,
                  screen: Screen | None = None) -> None:
    """The block, then (unless ``brief``) the ranked table and the verdicts in full."""
    screen = screen or Screen(wide=wide)
    screen.show(choose_block(ChooseFacts(choice)).renderable())
    if brief:
        return
    screen.heading(f"Builds on {choice.hardware} at a {choice.context_len:,}-token context")
    screen.say(f"users: requests of {choice.context_len:,} tokens the KV pool holds at once; "
               f"decode: one stream at a {choice.prompt_len:,}-token prompt, predicted "
               "(interval) unless marked measured; bound: the roofline, an upper bound")
    screen.show(_table(choice, wide))
    render_published(published_lines(choice), screen)
    if wide:
        return
    screen.heading("Verdicts")
    for r in choice.rows:
        rank = f"{r.rank}." if r.rank is not None else "–"
        screen.say(f"{rank} {r.build}: {r.verdict}")


__all__ = ["COLUMNS", "NARROW", "narrow_rows", "published_lines", "render_choice", "table_rows"]
