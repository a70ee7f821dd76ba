"""Markdown renderings of a plan and of an explanation (pure strings)."""

from __future__ import annotations

from servelab.plan.build import Plan
from servelab.plan.explain import Explanation
from servelab.predict.spec import draft_line
from servelab.units import GIB


def _gib(n: float) -> str:
    return f"{n / GIB:,.2f} GiB"


def _parallel_markdown(plan: Plan) -> list[str]:
    """Layout, per-stage weights and decode with its communication term (multi-GPU only)."""
    lay, kv = plan.layout, plan.pool
    if lay.is_single or kv is None:
        return []
    out = [
        "",
        f"## Parallel layout {lay.label()} ({lay.world_size} GPUs; memory above is per GPU)",
        "",
    ]
    for i, ((lo, hi), w) in enumerate(
        zip(kv.stage_layers, plan.gpu_weights.per_stage, strict=True)
    ):
        out.append(f"- stage {i}: layers {lo}-{hi - 1}, {_gib(w)} of weights per GPU")
    if kv.kv_heads_per_rank:
        rep = " (replicated)" if kv.kv_heads_replicated else ""
        out.append(f"- KV heads per rank: {kv.kv_heads_per_rank}{rep}")
    out += [
        "",
        "Decode of one replica: a bound (peak bandwidth per rank + estimated communication; "
        "nothing calibrated), not a prediction.",
        "",
        "| context | memory term | communication term (estimate) | tok/s (bound) | "
        "tok/s per GPU (bound) |",
        "|---:|---:|---|---:|---:|",
    ]
    for d in plan.parallel_decode:
        comm = d.comm_label()
        out.append(
            f"| {d.context_len:,} | {d.memory_s * 1e3:.3f} ms | {comm} | {d.tok_s:,.1f} | "
            f"{d.tok_s_per_gpu:,.1f} |"
        )
    return out


def _kv_markdown(plan: Plan) -> list[str]:
    """The KV section: vLLM's pool or llama.cpp's cache, by the plan's engine."""
    kv, cache = plan.pool, plan.cache
    if cache is not None:
        lines = ["## KV cache (llama.cpp arithmetic, predicted)", ""]
        return lines + [f"- {label}: {value}" for label, value in cache.rows()]
    assert kv is not None
    return [
        "## KV pool (vLLM arithmetic)",
        "",
        f"- `{kv.log_line}` (predicted engine log)",
        f"- block size {kv.block_size} tokens"
        + (" (aligned to the mamba page)" if kv.block_size_was_aligned else ""),
        f"- {len(kv.groups)} group(s), {kv.num_blocks:,} blocks of {kv.bytes_per_block:,} bytes, "
        f"{kv.blocks_per_request} blocks per request at {kv.max_model_len:,} tokens",
        *(f"  - {kind.label}: {kind.text()}" for kind in kv.group_kinds()),
        f"- rule: {kv.rule}",
        *(f"- note: {note}" for note in kv.notes),
    ]


def plan_markdown(plan: Plan) -> str:
    """The plan as Markdown; every speed is marked *predicted*."""
    mem, sp = plan.memory, plan.speed
    out = [
        f"# Plan: {plan.checkpoint} on {plan.hardware.name}",
        "",
        f"{plan.rules_label}. All speeds are **predicted**.",
        "",
        "## Memory",
        "",
        "| item | size | source |",
        "|---|---:|---|",
        f"| weights (resident) | {_gib(mem.weights_bytes)} | {plan.weights.source} |",
        f"| KV pool | {_gib(mem.kv_pool_bytes)} | {mem.kv_pool_source} |",
        f"| overhead | {_gib(mem.overhead_bytes)} | {mem.overhead_source} |",
        f"| total | {_gib(mem.total_bytes)} | of {_gib(mem.budget_bytes)} budget |",
        "",
        plan.fit_sentence().replace("fits: ", "Fits: ", 1) + ".",
        *(x for f in plan.findings for x in ("", f"**Warning (predicted):** {f.line}.")),
        *(("", f"{plan.graph_capture.line} (predicted).") if plan.graph_capture else ()),
        "",
        *_kv_markdown(plan),
        "",
        "## Decode (predicted, single stream"
        + ("" if plan.layout.is_single else ", one GPU without parallelism") + ")",
        "",
        "| context | bytes/token | roofline tok/s (bound) | predicted tok/s (interval) |",
        "|---:|---:|---:|---:|",
    ]
    for d in sp.decode:
        cal = interval_text(d.predicted_tok_s, d.predicted_low, d.predicted_high, 1)
        out.append(
            f"| {d.context_len:,} | {d.bytes_per_token / GIB:.3f} GiB | "
            f"{d.roofline_tok_s:,.1f} | {cal} |"
        )
    out += _parallel_markdown(plan)
    if sp.prefill:
        out += [
            "",
            f"## Prefill (predicted, {sp.kernel_path.name}, {sp.compute_precision} compute)",
            "",
            "| prompt | bound | roofline tok/s | predicted tok/s (interval) | waits on |",
            "|---:|---|---:|---:|---|",
        ]
        for p in sp.prefill:
            cal = interval_text(p.predicted_tok_s, p.predicted_low, p.predicted_high, 0)
            out.append(
                f"| {p.prompt_len:,} | {p.bound} | {p.roofline_tok_s:,.0f} | {cal} "
                f"| {p.waits_on or '–'} |"
            )
    if sp.mtp:
        out += [
            "",
            "## Speculative decode (predicted)",
            "",
            "| acceptance length | drafts | roofline tok/s | predicted tok/s (interval) | "
            "speed-up |",
            "|---:|---:|---:|---:|---:|",
        ]
        for m in sp.mtp:
            up = f"{m.speedup:.2f}x" if m.speedup is not None else "-"
            cal = interval_text(m.predicted_tok_s, m.predicted_low, m.predicted_high, 1)
            out.append(
                f"| {m.acceptance_length:.2f} | {m.draft_tokens} | {m.roofline_tok_s:,.1f} | "
                f"{cal} | {up} |"
            )
    out += ["", "## Where the predictions come from", ""]
    for kind, fit in (("decode", sp.decode_fit), ("prefill", sp.prefill_fit)):
        label = fit.label() if fit and not fit.is_roofline else "no data: roofline bound only"
        out.append(f"- {kind}: {label}")
    if sp.mtp:
        out.append(f"- speculative step: {draft_line(sp.mtp[0])}")
    if plan.speculative is not None:
        out.append(f"- speculative decode: {plan.speculative.line}")
    if plan.notes or sp.notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in (*plan.notes, *sp.notes)]
    return "\n".join(out) + "\n"


def interval_text(tok: float | None, lo: float | None, hi: float | None, nd: int) -> str:
    """``38.6 (35.1–42.9)``, or ``-`` without a prediction."""
    if tok is None or lo is None or hi is None:
        return "-"
    return f"{tok:,.{nd}f} ({lo:,.{nd}f}–{hi:,.{nd}f})"


def explain_markdown(e: Explanation) -> str:
    """The explanation as Markdown (predicted)."""
    out = [
        f"# Why {e.a.name} and {e.b.name} differ on {e.hardware} (predicted)",
        "",
        "| | A | B |",
        "|---|---|---|",
        f"| build | {e.a.name} | {e.b.name} |",
        f"| scheme | {e.a.scheme} | {e.b.scheme} |",
        f"| kernel path | {e.a.kernel_path} | {e.b.kernel_path} |",
        f"| bytes/token @ {e.context_len:,} | {e.a.bytes_per_token / GIB:.3f} GiB | "
        f"{e.b.bytes_per_token / GIB:.3f} GiB |",
        f"| predicted decode | {e.a.predicted_tok_s:,.1f} tok/s | "
        f"{e.b.predicted_tok_s:,.1f} tok/s |",
        "",
        *[f"- {line}" for line in e.lines],
    ]
    return "\n".join(out) + "\n"
