"""``servelab plan``'s terminal view: the memory table, the fit, the KV pool or cache, the
parallel layout, decode / prefill / speculative decode with their sources, and the notes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servelab.units import GIB
from servelab.units import format_bytes as human_bytes

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.plan.build import Plan
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


def render_plan(plan: Plan, console: Console, *, fits_only: bool = False) -> None:
    """Rich tables for a plan; speeds are labelled predicted."""
    mem = plan.memory
    hw = plan.hardware
    console.print(
        f"[bold]{plan.checkpoint}[/] on [bold]{hw.name}[/] ({hw.description}); "
        f"{plan.rules_label}"
    )
    fit = plan.fits
    lay = plan.layout
    per_gpu = "" if lay.is_single else f" per GPU ({lay.label()}, {lay.world_size} GPUs)"
    mt = Table(title="Memory" + per_gpu, title_justify="left")
    for c in ("item", "size", "source"):
        mt.add_column(c, justify="right" if c == "size" else "left")
    mt.add_row(
        "weights (resident)",
        human_bytes(mem.weights_bytes),
        plan.weights.source
        + ("" if lay.is_single else f"; fullest GPU of {human_bytes(plan.weights.resident_bytes)}"),
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
    console.print(mt)
    sentence = plan.fit_sentence()
    if not lay.is_single:
        sentence = sentence.replace("fits:", "fits per GPU:", 1)
    console.print(escape(sentence), soft_wrap=True, style=None if fit else "bold")
    for finding in plan.findings:
        console.print(f"[bold yellow]warning:[/] {escape(finding.line)}", soft_wrap=True)
    if plan.graph_capture is not None:
        console.print(escape(plan.graph_capture.line), soft_wrap=True)
    if fits_only:
        return
    if not lay.is_single:
        _render_parallel(plan, console)
    console.print(_kv_table(plan))
    _render_speed(plan, console)


def _kv_table(plan: Plan) -> Table:
    """The KV table: vLLM's pool or llama.cpp's cache, labelled by the engine."""
    kt = Table(
        title=f"KV {'pool' if plan.pool else 'cache'} ({plan.kv_arithmetic} arithmetic)",
        title_justify="left", show_header=False,
    )
    kt.add_column(style="bold")
    kt.add_column()
    kv, cache = plan.pool, plan.cache
    if cache is not None:
        for label, value in cache.rows():
            kt.add_row(label, value)
        return kt
    assert kv is not None
    kt.add_row("engine log (predicted)", kv.log_line)
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
    return kt


def _render_speed(plan: Plan, console: Console) -> None:
    """Decode, prefill and speculative decode tables, then the plan's notes."""
    from servelab.plan.markdown import interval_text
    from servelab.predict.spec import draft_line

    sp = plan.speed
    # one prediction per quantity: under a parallel layout this table is one GPU's (the
    # calibrated prediction), the layout's replica has its own table, a bound (issue 30)
    one_gpu = "" if plan.layout.is_single else " on one GPU, no parallelism"
    dt = Table(title=f"Decode, single stream{one_gpu} (predicted)", title_justify="left")
    for c in (
        "context",
        "weights",
        "KV read",
        "state r+w",
        "roofline (bound)",
        "predicted tok/s (interval)",
    ):
        dt.add_column(c, justify="right")
    for d in sp.decode:
        cal = interval_text(d.predicted_tok_s, d.predicted_low, d.predicted_high, 1)
        dt.add_row(
            f"{d.context_len:,}",
            human_bytes(d.weight_bytes),
            human_bytes(d.kv_bytes),
            human_bytes(d.state_bytes),
            f"{d.roofline_tok_s:,.1f}",
            cal,
        )
    console.print(dt)
    console.print(f"bandwidth {sp.bandwidth / 1e9:,.0f} GB/s ({sp.bandwidth_source})")
    console.print(escape(fit_line("decode", sp.decode_fit)))
    if sp.prefill:
        pt = Table(
            title=f"Prefill (predicted; {sp.kernel_path.name}, {sp.compute_precision})",
            title_justify="left",
        )
        for c in ("prompt", "bound", "roofline tok/s", "predicted tok/s (interval)", "waits on"):
            pt.add_column(c, justify="right")
        for p in sp.prefill:
            cal = interval_text(p.predicted_tok_s, p.predicted_low, p.predicted_high, 0)
            pt.add_row(
                f"{p.prompt_len:,}", p.bound, f"{p.roofline_tok_s:,.0f}", cal, p.waits_on or "–"
            )
        console.print(pt)
        console.print(escape(fit_line("prefill", sp.prefill_fit)))
    if sp.mtp:
        st = Table(title="Speculative decode (predicted)", title_justify="left")
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
        console.print(st)
        console.print(draft_line(sp.mtp[0]))
    if plan.speculative is not None:
        console.print(plan.speculative.line)
    # a kind's fit line above already says why it is the roofline alone or refused; the
    # calibration's note saying it again (kept for JSON and pages) is not printed twice
    shown = [("decode", sp.decode_fit)] + ([("prefill", sp.prefill_fit)] if sp.prefill else [])
    said = {fit.note(kind) for kind, fit in shown if fit is not None}
    for n in (*plan.notes, *sp.notes):
        if n not in said:
            console.print(f"[yellow]note:[/] {n}")


def _render_parallel(plan: Plan, console: Console) -> None:
    """Per-stage weights, KV heads per rank, and decode with its communication term."""
    kv, lay = plan.pool, plan.layout
    assert kv is not None  # a parallel layout is a vLLM plan
    t = Table(title=f"Parallel layout {lay.label()}", title_justify="left", show_header=False)
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
    console.print(t)
    dt = Table(
        title=f"Decode, one replica of {lay.label()}: a bound, not a prediction (peak "
        "bandwidth per rank + estimated communication)",
        title_justify="left",
    )
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
    console.print(dt)
