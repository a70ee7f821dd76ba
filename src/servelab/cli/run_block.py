"""The answer first for ``servelab run`` (issue 41): the block it opens with.

How the run went (and why it failed), the KV pool the engine logged against the plan's, the
measured decode and prefill beside their prediction (inside its interval or not), the users
the recipe's ``[capacity]`` search found at its SLO, and the one thing to do next. The block
is :class:`~servelab.cli.answer_block.Block`, read from the
:class:`~servelab.pipeline.run.RunOutcome` and the run's ``--json`` document; the tables
follow it (``--brief``: the block alone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from servelab.cli.answer_block import LOW, MUST, Block, Line, nearest, tok

if TYPE_CHECKING:
    from servelab.pipeline.run import RunOutcome
    from servelab.pipeline.summary import SummaryRow


@dataclass(frozen=True)
class RunFacts:
    """What ``run``'s block reads: the outcome, its ``--json`` document, the site built
    after it (``--site``) and the recipe file it ran."""

    outcome: RunOutcome
    doc: dict[str, Any]
    site: Path | None = None
    recipe: Path | None = None


def _headline(f: RunFacts) -> Text:
    rec = f.outcome.record
    verdict = ("ok", "bold green") if f.outcome.ok else ("FAILED", "bold red")
    engine = " ".join(x for x in (rec.engine_name, rec.engine_version) if x)
    where = f" on {rec.hardware}" if rec.hardware else ""
    return Text.assemble(f"run {f.outcome.run_id} of ", (rec.recipe_name or "recipe", "bold"),
                         f"{where}: ", verdict, f" ({engine})" if engine else "")


def _why(f: RunFacts) -> Line | None:
    reason = f.outcome.record.status_reason
    if f.outcome.ok or not reason:
        return None
    return Line("why", reason, "bold", MUST)


def _kv(f: RunFacts) -> Line | None:
    kv = f.doc.get("kv_pool_tokens") or {}
    predicted, logged = kv.get("predicted"), kv.get("engine")
    if predicted is None and logged is None:
        return None
    label = "KV cache" if f.doc.get("kv_arithmetic") == "llama.cpp" else "KV pool"
    if logged is None:
        return Line(label, f"{predicted:,} tokens planned; the engine log did not state it")
    if predicted is None:
        return Line(label, f"{logged:,} tokens, as the engine logged it (not planned)")
    off = "as planned" if logged == predicted else f"{logged / predicted - 1:+.1%} against " \
        f"the plan's {predicted:,}"
    return Line(label, f"{logged:,} tokens, as the engine logged it: {off}")


def _measured(kind: str, rows: tuple[SummaryRow, ...], keep: int) -> Line | None:
    mine = [r for r in rows if r.kind == kind and r.measured_tok_s is not None]
    if not mine:
        return None
    at = nearest([r.prompt_tokens for r in mine])
    r = next(x for x in mine if x.prompt_tokens == at)
    assert r.measured_tok_s is not None
    where = f"one stream at a {at:,}-token prompt" if kind == "decode" else \
        f"a {at:,}-token prompt"
    text = f"{tok(r.measured_tok_s)} tok/s measured, {where}"
    if r.predicted_tok_s is None or r.predicted_low is None or r.predicted_high is None:
        bound = "" if r.roofline_tok_s is None else \
            f", only its roofline bound {tok(r.roofline_tok_s)} tok/s"
        return Line(kind, f"{text}; no prediction{bound}", keep=keep)
    inside = "inside" if r.inside_interval else "OUTSIDE"
    return Line(kind, f"{text}; predicted {tok(r.predicted_tok_s)} ({tok(r.predicted_low)}–"
                      f"{tok(r.predicted_high)}): {inside}", keep=keep)


def _decode(f: RunFacts) -> Line | None:
    return _measured("decode", f.outcome.summary, MUST if f.outcome.ok else LOW)


def _prefill(f: RunFacts) -> Line | None:
    return _measured("prefill", f.outcome.summary, LOW)


def _users(f: RunFacts) -> Line | None:
    cap = (f.outcome.record.extra or {}).get("capacity")
    if not isinstance(cap, dict) or not cap.get("capacities"):
        return None
    rows = cap["capacities"]
    row = next(r for r in rows if r["prompt_len"] == nearest([r["prompt_len"] for r in rows]))
    unit = "streams" if cap.get("variable") == "concurrency" else "req/s"
    value = "none" if row["capacity"] is None else f"{row['capacity']:g} {unit}"
    return Line("users", f"{value} meet {cap.get('slo')} at {row['prompt_len']:,}-token prompts "
                         "(measured)")


def _warnings(f: RunFacts) -> Line | None:
    found = f.doc.get("warnings") or []
    if not found:
        return None
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return Line("warning", f"{found[0]['message']}{more}", "yellow", LOW)


def run_next(f: RunFacts) -> str:
    """The one thing to do after the run: read why it failed, or publish what it measured."""
    o = f.outcome
    if not o.ok:
        log = o.run_dir / "engine.log"
        if log.is_file() and log.stat().st_size > 0:
            return f"read the engine log: {log}"
        recipe = f.recipe if f.recipe is not None else "RECIPE.toml"
        return f"fix what stopped it, then check the recipe: servelab recipe check {recipe}"
    if f.site is not None:
        return f"open the page: {f.site}"
    return "publish it: servelab site build site/ (recipe pages from every stored run)"


def _next(f: RunFacts) -> Line | None:
    return Line("next", run_next(f), "bold", MUST)


RUN_LINES: tuple[Callable[[RunFacts], Line | None], ...] = (
    _why, _kv, _decode, _prefill, _users, _warnings, _next,
)
"""The run block's lines in reading order (answer_block's module docs: adding one)."""


def run_block(f: RunFacts) -> Block:
    """The block ``servelab run`` opens with."""
    lines = tuple(ln for make in RUN_LINES if (ln := make(f)) is not None)
    return Block(_headline(f), lines).fitted()


__all__ = ["RUN_LINES", "RunFacts", "run_block", "run_next"]
