"""``servelab plan``'s terminal view: the answer block first
(:mod:`servelab.cli.answer_block`), then the details under headings: the memory table and
the fit, the parallel layout, the KV pool or cache, decode / prefill / speculative decode
with their full sources, and the notes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from servelab.cli.answer_block import PlanFacts, plan_block
from servelab.cli.published_view import render_published
from servelab.cli.screen import Screen, labelled
from servelab.units import GIB
from servelab.units import format_bytes as human_bytes

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.plan.build import Plan
    from servelab.plan.load import LoadAnswer
    from servelab.predict.levels import Fit

__all__ = ["SAFETENSORS_FOR_LLAMACPP", "fit_line", "render_plan"]


def _gib(n: float, nd: int = 2) -> str:
    return f"{n / GIB:,.{nd}f} GiB"


SAFETENSORS_FOR_LLAMACPP = (
    "llama.cpp serves a GGUF conversion, not these safetensors: the bytes, bound and "
    "prediction above are the safetensors' tensor types; a "
    "GGUF of another type reads less or more per token. Plan the GGUF file for its own."
)

def fit_line(kind: str, fit: Fit | None) -> str:
    """One line naming where a prediction comes from, or, without one, what is missing (the
    fit says, naming the priors table the plan used: :meth:`~servelab.predict.priors.
    PriorTable.lacks`)."""
    if fit is None:
        return f"{kind}: not calibrated: roofline bound only"
    if fit.is_roofline:
        return f"{kind}: {fit.missing or 'no stored run or prior'}: roofline bound only"
    if fit.refused:
        return f"{kind}: {fit.refused}; roofline bound only (fit from {fit.source})"
    if fit.rel_error is None:  # a fit, but nothing to tell how far it carries
        return f"{kind}: no prediction ({fit.error_basis}); fitted from {fit.source}"
    return f"{kind} predicted from {fit.label()}"


def render_plan(plan: Plan, screen: Screen, *, fits_only: bool = False, brief: bool = False,
                wide: bool = False, load: LoadAnswer | None = None,
                recipe: str | None = None, published: Sequence[str] = ()) -> None:
    """The answer block (:mod:`servelab.cli.answer_block`), then the details under headings:
    memory and the fit, the parallel layout, the KV pool, decode / prefill / speculative
    decode with their full provenance, and the notes. ``fits_only``: the block's fit lines and
    the fit's details; ``brief``: the block alone; ``wide``: every column of the decode
    table; ``load``: the load answer (its users line in the block, its tables after);
    ``published``: what was published for the very build on this hardware, after the speeds."""
    from servelab.cli import load_view

    facts = PlanFacts(plan, load, recipe)
    screen.show(plan_block(facts, fits_only=fits_only).renderable())
    if brief:
        return
    mem = plan.memory
    hw = plan.hardware
    lay = plan.layout
    per_gpu = "" if lay.is_single else f" per GPU ({lay.label()}, {lay.world_size} GPUs)"
    if not fits_only:
        screen.heading("Memory" + per_gpu)
        screen.say(f"{hw.name}: {hw.description}; {plan.rules_label}")
        mt = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for c in ("item", "size", "source"):
            mt.add_column(c, justify="right" if c == "size" else "left")
        mt.add_row(
            "weights (resident)",
            human_bytes(mem.weights_bytes),
            plan.weights.source + ("" if lay.is_single else
                                   f"; fullest GPU of {human_bytes(plan.weights.resident_bytes)}"),
        )
        mt.add_row("KV pool" if plan.pool else "KV cache", _gib(mem.kv_pool_bytes),
                   mem.kv_pool_source)
        mt.add_row("overhead", _gib(mem.overhead_bytes), mem.overhead_source)
        mt.add_row(
            "total",
            _gib(mem.total_bytes),
            f"budget {_gib(mem.budget_bytes)} of "
            f"{_gib(mem.memory_bytes)}{' unified' if mem.unified else ''}",
        )
        screen.show(mt)
    else:
        screen.heading("Fit" + per_gpu)
    sentence = plan.fit_sentence()
    if not lay.is_single:
        sentence = sentence.replace("fits:", "fits per GPU:", 1)
    screen.say(sentence, None if plan.fits else "bold")
    for finding in plan.findings:
        screen.say(labelled("warning", finding.line, "bold yellow"))
    if plan.graph_capture is not None:
        screen.say(plan.graph_capture.line)
    if fits_only:
        return
    if not lay.is_single:
        _render_parallel(plan, screen)
    _render_kv(plan, screen)
    _render_speed(plan, screen, wide=wide)
    render_published(published, screen)
    if load is not None:
        load_view.render(load, screen)


def _render_kv(plan: Plan, screen: Screen) -> None:
    """The KV section: vLLM's pool or llama.cpp's cache, labelled by the engine, opening with
    the line the engine will log."""
    screen.heading(f"KV {'pool' if plan.pool else 'cache'} ({plan.kv_arithmetic} arithmetic)")
    kt = Table(box=box.SIMPLE, show_header=False, show_edge=False)
    kt.add_column(style="bold")
    kt.add_column()
    kv, cache = plan.pool, plan.cache
    if cache is not None:
        for label, value in cache.rows():
            kt.add_row(label, value)
        screen.show(kt)
        return
    assert kv is not None
    screen.say(f"the engine will log (predicted): {kv.log_line}")
    kt.add_row(
        "block size",
        f"{kv.block_size} tokens"
        + (" (raised to hold a mamba page)" if kv.block_size_was_aligned else ""),
    )
    if kv.mamba_page_bytes:
        pad = f", padded {kv.mamba_padding_pct:.2f}%" if kv.mamba_padding_pct is not None else ""
        kt.add_row(
            "state page",
            f"{kv.mamba_page_bytes:,} bytes{pad}; mode "
            f"{kv.mamba_cache_mode}, SSM dtype {kv.mamba_ssm_dtype}",
        )
    kt.add_row("groups", f"{len(kv.groups)}; {kv.padding_layers} padding layer(s)")
    for kind in kv.group_kinds():
        kt.add_row(f"  {kind.label}", kind.text())
    kt.add_row(
        "pool",
        f"{kv.num_blocks:,} blocks × {kv.bytes_per_block:,} bytes; "
        f"{kv.blocks_per_request} blocks per {kv.max_model_len:,}-token request",
    )
    kt.add_row("rule", kv.rule + ("" if kv.verified_rule else " (unverified for this version)"))
    for note in kv.notes:
        kt.add_row("note", note)
    screen.show(kt)


def _decode_table(plan: Plan, wide: bool) -> Table:
    """Single-stream decode per context: bytes read, bound and prediction (``wide``: the
    bytes split into weights, KV and recurrent state)."""
    from servelab.plan.markdown import interval_text

    split = ("weights", "KV read", "state r+w") if wide else ("read/token",)
    dt = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for c in ("context", *split, "roofline (bound)", "predicted tok/s (interval)"):
        dt.add_column(c, justify="right")
    for d in plan.speed.decode:
        cal = interval_text(d.predicted_tok_s, d.predicted_low, d.predicted_high, 1)
        read = ((human_bytes(d.weight_bytes), human_bytes(d.kv_bytes),
                 human_bytes(d.state_bytes)) if wide else (human_bytes(d.bytes_per_token),))
        dt.add_row(f"{d.context_len:,}", *read, f"{d.roofline_tok_s:,.1f}", cal)
    return dt


def _render_speed(plan: Plan, screen: Screen, *, wide: bool = False) -> None:
    """Decode, prefill and speculative decode tables with where each figure comes from (the
    full provenance), then the plan's notes."""
    from servelab.plan.markdown import interval_text
    from servelab.predict.spec import draft_line

    sp = plan.speed
    # one prediction per quantity: under a parallel layout this table is one GPU's (the
    # calibrated prediction), the layout's replica has its own table, a bound (issue 30)
    one_gpu = "" if plan.layout.is_single else " on one GPU, no parallelism"
    screen.heading(f"Decode, single stream{one_gpu} (predicted)")
    screen.show(_decode_table(plan, wide))
    screen.say(f"bandwidth {sp.bandwidth / 1e9:,.0f} GB/s ({sp.bandwidth_source})")
    screen.say(fit_line("decode", sp.decode_fit))
    if sp.prefill:
        screen.heading(f"Prefill (predicted; {sp.kernel_path.name}, {sp.compute_precision})")
        pt = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for c in ("prompt", "bound", "roofline tok/s", "predicted tok/s (interval)", "waits on"):
            pt.add_column(c, justify="right")
        for p in sp.prefill:
            cal = interval_text(p.predicted_tok_s, p.predicted_low, p.predicted_high, 0)
            pt.add_row(
                f"{p.prompt_len:,}", p.bound, f"{p.roofline_tok_s:,.0f}", cal, p.waits_on or "–"
            )
        screen.show(pt)
        screen.say(fit_line("prefill", sp.prefill_fit))
    if sp.mtp:
        screen.heading("Speculative decode (predicted)")
        st = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for c in ("acceptance length", "drafts", "step bytes", "roofline", "tok/s (interval)",
                  "speed-up"):
            st.add_column(c, justify="right")
        for m in sp.mtp:
            st.add_row(
                f"{m.acceptance_length:.2f}",
                str(m.draft_tokens),
                human_bytes(m.step_bytes),
                f"{m.roofline_tok_s:,.1f}",
                interval_text(m.predicted_tok_s, m.predicted_low, m.predicted_high, 1),
                f"{m.speedup:.2f}x" if m.speedup is not None else "-",
            )
        screen.show(st)
        screen.say(draft_line(sp.mtp[0]))
    if plan.speculative is not None:
        screen.say(plan.speculative.line)
    # a kind's fit line above already says why it is the roofline alone or refused; the
    # calibration's note saying it again (kept for JSON and pages) is not printed twice
    shown = [("decode", sp.decode_fit)] + ([("prefill", sp.prefill_fit)] if sp.prefill else [])
    said = {fit.note(kind) for kind, fit in shown if fit is not None}
    notes = [n for n in (*plan.notes, *sp.notes) if n not in said]
    if notes:
        screen.heading("Notes")
    for n in notes:
        screen.say(labelled("note", n))


def _render_parallel(plan: Plan, screen: Screen) -> None:
    """Per-stage weights, KV heads per rank, and decode with its communication term."""
    kv, lay = plan.pool, plan.layout
    assert kv is not None  # a parallel layout is a vLLM plan
    screen.heading(f"Parallel layout {lay.label()}")
    t = Table(box=box.SIMPLE, show_header=False, show_edge=False)
    t.add_column(style="bold")
    t.add_column()
    replicas = f"{lay.data} replica{'s' if lay.data != 1 else ''}"
    t.add_row("GPUs", f"{lay.world_size} ({lay.gpus_per_replica} per replica, {replicas})")
    for i, ((lo, hi), w) in enumerate(
        zip(kv.stage_layers, plan.gpu_weights.per_stage, strict=True)
    ):
        t.add_row(f"stage {i}", f"layers {lo}-{hi - 1}: {human_bytes(w)} weights per GPU")
    if kv.kv_heads_per_rank:
        t.add_row(
            "KV heads per rank",
            f"{kv.kv_heads_per_rank}"
            + (" (replicated: TP exceeds the KV head count)" if kv.kv_heads_replicated else ""),
        )
    t.add_row("KV tokens, all replicas", f"{kv.tokens_all_replicas:,}")
    topo = plan.topology
    t.add_row(
        "links (estimate)",
        f"{topo.intra_node.description} within a node of {topo.gpus_per_node}, "
        f"{topo.inter_node.description} between nodes",
    )
    screen.show(t)
    screen.heading(f"Decode, one replica of {lay.label()}: a bound, not a prediction")
    screen.say("peak bandwidth per rank + estimated communication")
    dt = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for c in ("context", "memory term", "communication term", "bound tok/s", "per GPU"):
        dt.add_column(c, justify="right")
    for d in plan.parallel_decode:
        comm = d.comm_label()
        dt.add_row(
            f"{d.context_len:,}",
            f"{d.memory_s * 1e3:.3f} ms",
            comm,
            f"{d.tok_s:,.1f}",
            f"{d.tok_s_per_gpu:,.1f}",
        )
    screen.show(dt)
