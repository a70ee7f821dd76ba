"""The answer first (issue 41): the short block ``plan``, ``choose`` and ``run`` open with.

A headline and a few labelled lines answer the question the command was asked: fits or not
and why, the KV pool and the requests it holds at the context, decode and prefill with their
intervals, users at the SLO when one was given, where the figures come from in words a user
acts on, and the one thing to do next. At most :data:`MAX_ROWS` rows at
:data:`BLOCK_COLUMNS` columns; the details follow under headings, ``--brief`` prints the
block alone, and the full provenance stays in the details, ``--json`` and ``--markdown``.

Every line is read from a result object, never from printed text:
:class:`~servelab.plan.build.Plan` (with the load answer, when asked), the ranked
:class:`~servelab.choose.rank.Choice`, a run's :class:`~servelab.pipeline.run.RunOutcome`
(:mod:`servelab.cli.run_block`).

**Adding a line** (a new field of a plan or a choice: a memory warning with the utilization
that passes, a published figure beside a prediction, a tie, an MTP figure, a way in for a
build that does not fit): write ``def _x(f: PlanFacts) -> Line | None`` (or
``ChooseFacts``) returning None when the field has nothing to say, and put it in
:data:`PLAN_LINES` / :data:`CHOOSE_LINES` where it should read. Its :attr:`Line.keep` says
which lines give way first when the block would pass :data:`MAX_ROWS` (the headline and the
next step never do). The next step is :func:`plan_next` / :func:`choose_next`: one
suggestion, the most pressing first.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from servelab.units import GIB

if TYPE_CHECKING:
    from servelab.choose.rank import Choice, Row, Speed
    from servelab.plan.build import Plan
    from servelab.plan.load import LoadAnswer
    from servelab.predict.levels import Fit

MAX_ROWS = 10
"""Most rows the block takes at :data:`BLOCK_COLUMNS` columns, headline included."""
BLOCK_COLUMNS = 80
LABEL_WIDTH = 8
HEADLINE_PROMPT = 2048
"""The prompt (decode: context) length the block quotes when a plan has several: the point
nearest it, as a run's headline is."""

MUST, HIGH, LOW = 0, 1, 2
"""How hard a line holds its place (:attr:`Line.keep`): MUST never gives way; LOW first."""


@dataclass(frozen=True)
class Line:
    """One labelled line of the block."""

    label: str
    text: str
    style: str | None = None
    keep: int = HIGH


@dataclass(frozen=True)
class Block:
    """The headline and its lines."""

    headline: Text
    lines: tuple[Line, ...]

    def rows(self, width: int = BLOCK_COLUMNS) -> int:
        """Rows the block takes at ``width`` columns."""
        con = Console(width=width, file=io.StringIO(), highlight=False)
        return len(con.render_lines(self.renderable(), con.options, pad=False))

    def fitted(self, width: int = BLOCK_COLUMNS) -> Block:
        """The block without its least needed lines until it takes at most :data:`MAX_ROWS`
        rows at ``width`` (lines of equal need give way from the bottom)."""
        block = self
        while block.rows(width) > MAX_ROWS:
            droppable = [i for i, ln in enumerate(block.lines) if ln.keep != MUST]
            if not droppable:
                break
            worst = max(droppable, key=lambda i: (block.lines[i].keep, i))
            block = replace(block, lines=block.lines[:worst] + block.lines[worst + 1:])
        return block

    def renderable(self) -> Table:
        """The block as a rich grid: the headline, then label and text per line (a long text
        wraps under itself)."""
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, width=LABEL_WIDTH, style="bold")
        grid.add_column(overflow="fold")
        head = Table.grid()
        head.add_column(overflow="fold")
        head.add_row(self.headline)
        for ln in self.lines:
            grid.add_row(ln.label, Text(ln.text, style=ln.style or ""))
        outer = Table.grid()
        outer.add_column()
        outer.add_row(head)
        outer.add_row(grid)
        return outer

    def plain(self, width: int = BLOCK_COLUMNS) -> str:
        """The block as text at ``width`` columns (tests, and the docs)."""
        con = Console(width=width, file=io.StringIO(), highlight=False, color_system=None)
        con.print(self.renderable())
        out = con.file.getvalue()  # type: ignore[attr-defined]
        return "\n".join(line.rstrip() for line in str(out).splitlines())


# --- words ------------------------------------------------------------------------------


def gib(n: float) -> str:
    """Bytes in GiB with one decimal."""
    return f"{n / GIB:,.1f} GiB"


def tok(x: float) -> str:
    """A speed in tok/s, one decimal below 1,000 and none above."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:,.1f}"


def span(value: float, low: float | None, high: float | None) -> str:
    """``38.5 tok/s (25.1–58.6)``: a figure and its interval."""
    if low is None or high is None:
        return f"{tok(value)} tok/s"
    return f"{tok(value)} tok/s ({tok(low)}–{tok(high)})"


def off_by(value: float, low: float | None, high: float | None) -> str:
    """How far the true figure may lie from ``value``, in words: ``36 % lower or 52 %
    higher`` (the interval read from the user's side)."""
    if low is None or high is None or value <= 0:
        return "of unknown accuracy"
    down, up = max(0.0, 1 - low / value) * 100, max(0.0, high / value - 1) * 100
    if abs(down - up) < 5:
        return f"{max(down, up):.0f} % off"
    return f"{down:.0f} % lower or {up:.0f} % higher"


def nearest(values: Sequence[int], target: int = HEADLINE_PROMPT) -> int:
    """The value nearest ``target`` (the smaller on a tie)."""
    return min(values, key=lambda v: (abs(v - target), v))


def context_short(tokens: int) -> str:
    """``32K`` for 32,768 (a whole number of KiB-tokens), else the number."""
    return f"{tokens // 1024}K" if tokens % 1024 == 0 and tokens >= 1024 else f"{tokens:,}"


def _could_be_off(fit: Fit) -> str:
    return (f"could be {fit.rel_error * 100:.0f} % off" if fit.rel_error is not None
            else "no interval")


def fit_words(fit: Fit | None, engine: str, hardware: str, kind: str = "decode") -> str:
    """Where a prediction comes from, in words a user acts on (the full label, with the
    interval's statistical basis, stays in the details)."""
    if fit is None or fit.is_roofline:
        return f"no run of {engine} on {hardware} yet: {kind} has an upper bound only"
    if fit.refused:
        return f"too few runs on {hardware} to predict {kind} (it could be off over 4x)"
    n = len(fit.models)
    models = f"{n} model{'' if n == 1 else 's'}"
    off = _could_be_off(fit)
    if fit.fallback:
        return f"no run of this kernel path on {hardware} yet: {kind} {off}"
    if not fit.level.startswith("prior"):
        return f"fitted to your runs ({models}) on {hardware}: {off}"
    return f"{n} published model{'' if n == 1 else 's'} on {hardware}, none of your runs: {off}"


# --- plan -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanFacts:
    """What ``plan``'s block reads: the plan, the load answer when one was asked for, and
    the recipe the plan came from (``servelab plan RECIPE.toml``)."""

    plan: Plan
    load: LoadAnswer | None = None
    recipe: str | None = None

    @property
    def engine(self) -> str:
        return self.plan.kv_arithmetic


def _headline(f: PlanFacts) -> Text:
    p = f.plan
    per_gpu = "" if p.layout.is_single else f" per GPU ({p.layout.label()})"
    verdict = (f"fits{per_gpu}", "bold green") if p.fits else (
        f"does NOT fit{per_gpu}", "bold red")
    return Text.assemble((p.checkpoint, "bold"), f" on {p.hardware.name}: ", verdict,
                         f" ({p.kv_arithmetic} {p.engine_version})")


def _why_not(f: PlanFacts) -> Line | None:
    p, mem = f.plan, f.plan.memory
    if p.fits:
        return None
    if not mem.fits and mem.kv_pool_bytes <= 0:
        text = (f"{gib(mem.weights_bytes)} weights + {gib(mem.overhead_bytes)} overhead "
                f"exceed the {gib(mem.budget_bytes)} budget")
    elif not mem.fits:
        text = f"weights + KV + overhead need {gib(mem.total_bytes)} of {gib(mem.budget_bytes)}"
    else:
        pool = p.pool
        length = pool.max_model_len if pool is not None else 0
        text = (f"one {length:,}-token request needs more KV than the "
                f"{gib(mem.kv_pool_bytes)} pool holds")
    return Line("why", text, "bold", MUST)


def _memory(f: PlanFacts) -> Line | None:
    p, mem = f.plan, f.plan.memory
    if not p.fits and not mem.fits:
        return None  # the why line says it
    kv = "KV pool" if p.pool is not None else "KV cache"
    return Line("memory", f"{gib(mem.weights_bytes)} weights + {gib(mem.kv_pool_bytes)} {kv} + "
                          f"{gib(mem.overhead_bytes)} overhead (of {gib(mem.memory_bytes)})",
                keep=LOW)


def _kv(f: PlanFacts) -> Line | None:
    p = f.plan
    if p.pool is not None:
        pool = p.pool
        if pool.num_blocks <= 0:
            return None
        text = (f"{pool.tokens:,} tokens: {pool.max_concurrency:,.1f} requests of "
                f"{pool.max_model_len:,} tokens at once")
        if not pool.fits_one_request:
            text = f"{pool.tokens:,} tokens; one request fits up to {p.largest_context_c1:,}"
        return Line("KV pool", text)
    cache = p.cache
    if cache is None or cache.n_ctx_seq <= 0:
        return None
    slots = cache.tokens // cache.n_ctx_seq
    return Line("KV cache", f"{cache.tokens:,} tokens: {slots} request{'s' if slots != 1 else ''}"
                            f" of {cache.n_ctx_seq:,} tokens at once")


def _findings(f: PlanFacts) -> Line | None:
    found = f.plan.findings
    if not found:
        return None
    more = f" (and {len(found) - 1} more below)" if len(found) > 1 else ""
    return Line("warning", f"{found[0].message}{more}", "yellow", MUST)


def _decode(f: PlanFacts) -> Line | None:
    sp, par = f.plan.speed, f.plan.parallel_decode
    if not sp.decode:
        return None
    at = nearest([d.context_len for d in sp.decode])
    d = next(x for x in sp.decode if x.context_len == at)
    where = f"one stream at {at:,} tokens"
    bound = None if f.plan.layout.is_single else next(
        (x for x in par if x.context_len == at), None)
    if bound is not None:  # a layout has a bound only; one GPU's prediction beside it
        alone = ("" if d.predicted_tok_s is None else f"; one GPU alone: "
                 f"{span(d.predicted_tok_s, d.predicted_low, d.predicted_high)} predicted")
        return Line("decode", f"at most {tok(bound.tok_s)} tok/s on {f.plan.layout.label()} "
                              f"(a bound, no prediction), {where}{alone}")
    if d.predicted_tok_s is None or d.predicted_low is None or d.predicted_high is None:
        return Line("decode", f"no prediction; roofline bound {tok(d.roofline_tok_s)} tok/s, "
                              f"{where}")
    return Line("decode", f"{span(d.predicted_tok_s, d.predicted_low, d.predicted_high)} "
                          f"predicted, {where}")


def _speculative(f: PlanFacts) -> Line | None:
    mtp = f.plan.speed.mtp
    if not mtp:
        return None
    m = max(mtp, key=lambda x: x.predicted_tok_s or 0.0)
    if m.predicted_tok_s is None:
        return None
    return Line("drafting", f"{span(m.predicted_tok_s, m.predicted_low, m.predicted_high)} "
                            f"predicted with {m.draft_tokens} draft token(s) at acceptance "
                            f"{m.acceptance_length:.2f}", keep=LOW)


def _prefill(f: PlanFacts) -> Line | None:
    sp = f.plan.speed
    if not sp.prefill:
        return None
    at = nearest([p.prompt_len for p in sp.prefill])
    p = next(x for x in sp.prefill if x.prompt_len == at)
    where = f"a {at:,}-token prompt"
    if p.predicted_tok_s is None or p.predicted_low is None or p.predicted_high is None:
        return Line("prefill", f"no prediction; roofline bound {tok(p.roofline_tok_s)} tok/s "
                               f"at {where}", keep=LOW)
    return Line("prefill", f"{span(p.predicted_tok_s, p.predicted_low, p.predicted_high)} "
                           f"predicted for {where}", keep=LOW)


def _users(f: PlanFacts) -> Line | None:
    ans = f.load
    if ans is None:
        return None
    if ans.reason is not None:
        return Line("users", f"no load prediction: {ans.reason}", keep=LOW)
    if not ans.capacities:
        return None
    cap = min(ans.capacities, key=lambda c: (abs(c.prompt_len - HEADLINE_PROMPT), c.prompt_len))
    unit = "streams" if cap.variable == "concurrency" else "req/s"
    measured = next((m for m in ans.measured_for(cap)), None)
    if measured is not None:
        value = "none" if measured.capacity is None else f"{measured.capacity:g} {unit}"
        return Line("users", f"{value} meet {cap.slo} at {cap.prompt_len:,}-token prompts "
                             f"(measured in run {measured.run_id})")
    if cap.capacity is None:
        return Line("users", f"none: even one stream misses {cap.slo} (predicted)")
    band = "" if cap.low is None or cap.high is None else f" ({cap.low:g}–{cap.high:g})"
    label = "no prediction, over 4x wide" if cap.no_prediction else "predicted"
    return Line("users", f"{cap.capacity:g}{band} {unit} meet {cap.slo} at "
                         f"{cap.prompt_len:,}-token prompts ({label})")


def _basis(f: PlanFacts) -> Line | None:
    sp = f.plan.speed
    if not sp.decode:
        return None
    ops = f.plan.operator
    if ops is not None and ops.tables is not None and sp.decode_fit is not None:
        return Line("basis", f"{ops.tables.short}: {_could_be_off(sp.decode_fit)}")
    return Line("basis", fit_words(sp.decode_fit, f.engine, f.plan.hardware.name))


def plan_next(f: PlanFacts) -> str:
    """The one thing to do next with this plan: make it fit, fix what the engine would
    refuse, or measure it (a run replaces the prediction with a measurement)."""
    p = f.plan
    hw = p.hardware.name
    if not p.fits:
        if p.memory.fits and p.largest_context_c1 > 0:
            return (f"cap the context: servelab plan {p.checkpoint} -H {hw} --max-model-len "
                    f"{p.largest_context_c1}")
        if p.layout.is_single:
            gpus = _gpus_for_weights(p)
            more = f" or {gpus} GPUs (-tp {gpus})" if gpus is not None else ""
            return f"a smaller build (compare them: servelab choose BUILD... -H {hw}){more}"
        return f"a smaller build, or more GPUs than {p.layout.world_size}"
    if p.findings:
        return f"fix: {p.findings[0].fix}"
    if f.recipe is not None:
        return f"measure it: servelab run {f.recipe}"
    return "measure it with a recipe: servelab recipe new; servelab run recipe.toml"


def _gpus_for_weights(p: Plan) -> int | None:
    """The fewest GPUs (2, 4 or 8) whose tensor-parallel shards of the weights, with the
    overhead, leave each GPU's budget room for a KV pool; None when 8 do not."""
    mem = p.memory
    for gpus in (2, 4, 8):
        if mem.weights_bytes / gpus + mem.overhead_bytes < mem.budget_bytes:
            return gpus
    return None


def _next(f: PlanFacts) -> Line | None:
    return Line("next", plan_next(f), "bold", MUST)


PLAN_LINES: tuple[Callable[[PlanFacts], Line | None], ...] = (
    _why_not, _memory, _kv, _findings, _decode, _speculative, _prefill, _users, _basis, _next,
)
"""The plan block's lines in reading order (module docs: adding one)."""
FITS_LINES: tuple[Callable[[PlanFacts], Line | None], ...] = (
    _why_not, _memory, _kv, _findings, _next,
)
"""``plan --fits``: whether it fits, the memory, the KV pool and what to do."""


def plan_block(f: PlanFacts, *, fits_only: bool = False) -> Block:
    """The block ``servelab plan`` opens with."""
    makers = FITS_LINES if fits_only else PLAN_LINES
    lines = tuple(ln for make in makers if (ln := make(f)) is not None)
    return Block(_headline(f), lines).fitted()


# --- choose -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChooseFacts:
    """What ``choose``'s block reads: the ranked choice."""

    choice: Choice

    @property
    def pick(self) -> Row | None:
        return next((r for r in self.choice.rows if r.build == self.choice.pick), None)

    @property
    def runner(self) -> Row | None:
        """The best fitting build after the pick."""
        pick = self.pick
        return next((r for r in self.choice.rows
                     if r is not pick and r.fits and r.refused is None), None)


def speed_cell(s: Speed | None) -> str:
    """A speed for a narrow cell: ``42.6 (27.8–67.5)``, ``38.0 measured``, ``≤24,477 bound``."""
    if s is None or s.tok_s is None:
        return "no prediction" if s is not None and "no prediction" in s.basis else "–"
    if s.source == "bound":
        return f"≤{tok(s.tok_s)} bound"
    text = tok(s.tok_s) if s.low is None or s.high is None else \
        f"{tok(s.tok_s)} ({tok(s.low)}–{tok(s.high)})"
    return f"{text} measured" if s.source == "measured" else text


def speed_words(s: Speed, where: str) -> str:
    """A row's speed in the block: figure, interval, and how it was had."""
    if s.tok_s is None:
        return f"no prediction {where}"
    if s.source == "bound":
        return f"no prediction; roofline bound {tok(s.tok_s)} tok/s {where}"
    label = "measured" if s.source == "measured" else "predicted"
    return f"{span(s.tok_s, s.low, s.high)} {label}, {where}"


def short_verdict(row: Row, pick: Row | None) -> str:
    """The verdict in a few words for the narrow table (the full one follows it)."""
    if row.refused is not None:
        return "not planned"
    if pick is not None and row.build == pick.build:
        return "pick"
    if not row.fits:
        return "does not fit"
    if row.slo == "fail":
        return "misses the SLO"
    words = []
    a, b = row.best_decode, pick.best_decode if pick is not None else None
    if b is not None and a.tok_s and b.tok_s and a.figure and b.figure:
        ratio = a.tok_s / b.tok_s - 1
        words.append("ties" if abs(ratio) <= 0.01 else f"{abs(ratio):.0%} "
                     f"{'slower' if ratio < 0 else 'faster'}")
    if row.fallback:
        words.append("kernel fallback")
    if row.mtp_declared_layers and not row.mtp_tensors:
        words.append("no MTP head")
    return "; ".join(words) or "fits"


def _choose_headline(f: ChooseFacts) -> Text:
    c = f.choice
    where = f" for {c.hardware} at a {c.context_len:,}-token context"
    if c.pick is None:
        return Text.assemble(("No build to download", "bold red"), where)
    return Text.assemble("Download ", (c.pick, "bold green"), where)


def _choose_why(f: ChooseFacts) -> Line | None:
    c, pick, runner = f.choice, f.pick, f.runner
    if pick is None:
        return Line("why", c.reason, "bold", MUST)
    if runner is None:
        return Line("why", f"the only build that fits {c.context_len:,} tokens"
                    + (f" and meets {c.slo}" if c.slo else ""))
    a, b = pick.best_decode, runner.best_decode
    if a.tok_s and b.tok_s and a.figure and b.figure:
        lead = a.tok_s / b.tok_s - 1
        text = (f"ties {runner.build} on decode" if abs(lead) <= 0.01 else
                f"decodes {lead:.0%} faster than {runner.build}")
    else:
        text = f"ranks above {runner.build}"
    if pick.mtp_usable and not runner.mtp_usable:
        text += " and ships an MTP draft head"
    elif pick.bytes_per_token and runner.bytes_per_token and (
            runner.bytes_per_token > 1.01 * pick.bytes_per_token):
        text += (f", which reads {runner.bytes_per_token / pick.bytes_per_token:.2f}x the "
                 "bytes per token")
    return Line("why", text)


def _choose_fits(f: ChooseFacts) -> Line | None:
    c = f.choice
    planned = [r for r in c.rows if r.refused is None]
    fit = sum(1 for r in planned if r.fits)
    refused = len(c.rows) - len(planned)
    more = f" ({refused} not planned)" if refused else ""
    return Line("fits", f"{fit} of {len(planned)} builds fit {c.context_len:,} tokens on "
                        f"{c.hardware}{more}", keep=LOW)


def _choose_kv(f: ChooseFacts) -> Line | None:
    pick = f.pick
    if pick is None or pick.kv_pool_tokens is None or pick.max_concurrency is None:
        return None
    return Line("KV pool", f"{pick.kv_pool_tokens:,} tokens: {pick.max_concurrency:,.1f} "
                           f"requests of {f.choice.context_len:,} tokens at once")


def _choose_decode(f: ChooseFacts) -> Line | None:
    pick = f.pick
    if pick is None:
        return None
    where = f"one stream at a {f.choice.prompt_len:,}-token prompt"
    if pick.best_decode.source == "bound":
        where = f"at a {f.choice.prompt_len:,}-token prompt"
    s = pick.best_decode
    drafts = " with MTP drafts" if pick.speculative is not None and s is pick.speculative else ""
    return Line("decode", speed_words(s, where) + drafts)


def _choose_prefill(f: ChooseFacts) -> Line | None:
    pick = f.pick
    if pick is None:
        return None
    return Line("prefill", speed_words(pick.prefill, f"at a {f.choice.prompt_len:,}-token prompt"),
                keep=LOW)


def _choose_slo(f: ChooseFacts) -> Line | None:
    c, pick = f.choice, f.pick
    if not c.slo:
        return None
    meets = sum(1 for r in c.rows if r.slo == "pass")
    said = {"pass": "meets it", "uncertain": "may miss it", "fail": "misses it"}
    head = f"{pick.build} {said.get(pick.slo or '', 'is not judged')}; " if pick else ""
    return Line("SLO", f"{c.slo}: {head}{meets} of {len(c.rows)} builds meet it (predicted)")


def _choose_basis(f: ChooseFacts) -> Line | None:
    pick = f.pick
    if pick is None:
        return None
    s = pick.best_decode
    if s.source == "measured":
        return Line("basis", f"decode measured on {f.choice.hardware} in run {s.run_id}",
                    keep=LOW)
    if s.tok_s is None or s.source == "bound":
        return Line("basis", f"no run on {f.choice.hardware} to predict from: bounds only",
                    keep=LOW)
    return Line("basis", f"not measured on {f.choice.hardware} yet: could be "
                         f"{off_by(s.tok_s, s.low, s.high)}", keep=LOW)


def choose_next(f: ChooseFacts) -> str:
    """The one thing to do after choosing: plan the pick in full, or what would let a build
    fit."""
    c, pick = f.choice, f.pick
    if pick is not None:
        return (f"its plan: servelab plan {pick.location} -H {c.hardware} "
                f"--max-model-len {c.context_len}")
    longest = max((r.largest_context or 0 for r in c.rows if r.refused is None), default=0)
    if longest > 0 and not any(r.fits for r in c.rows):
        best = max((r for r in c.rows if r.refused is None), key=lambda r: r.largest_context or 0)
        return f"a shorter context: {best.build} holds {longest:,} tokens (-c {longest})"
    if c.slo and any(r.fits for r in c.rows):
        return "relax the SLO, or measure the builds that fit: servelab run RECIPE"
    return f"a smaller build or a box with more memory than {c.hardware}"


def _choose_next(f: ChooseFacts) -> Line | None:
    return Line("next", choose_next(f), "bold", MUST)


CHOOSE_LINES: tuple[Callable[[ChooseFacts], Line | None], ...] = (
    _choose_why, _choose_fits, _choose_kv, _choose_decode, _choose_prefill, _choose_slo,
    _choose_basis, _choose_next,
)
"""The choose block's lines in reading order (module docs: adding one)."""


def choose_block(f: ChooseFacts) -> Block:
    """The block ``servelab choose`` opens with."""
    lines = tuple(ln for make in CHOOSE_LINES if (ln := make(f)) is not None)
    return Block(_choose_headline(f), lines).fitted()


__all__ = [
    "BLOCK_COLUMNS", "CHOOSE_LINES", "FITS_LINES", "MAX_ROWS", "PLAN_LINES", "Block",
    "ChooseFacts", "Line", "PlanFacts", "choose_block", "choose_next", "context_short",
    "fit_words", "plan_block", "plan_next", "short_verdict", "speed_cell", "speed_words",
]
