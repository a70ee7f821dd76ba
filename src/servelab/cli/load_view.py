"""``servelab plan --concurrency/--request-rate/--slo``: predicted serving under load, and
the highest load that meets an SLO, printed after the plan (or under ``load`` in its JSON)."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from servelab.cli.screen import Screen
from servelab.errors import UsageError
from servelab.plan.load import LoadAnswer, LoadRequest


def _num(x: float, digits: int) -> str:
    return f"{x:,.{digits}f}"


def render(ans: LoadAnswer, screen: Screen) -> None:
    """The load table, the SLO capacities and where the figures come from."""
    screen.heading("Under load (predicted)")
    if ans.reason is not None:
        screen.say(Text.assemble(("no load prediction:", "yellow"), " ", ans.reason))
        for m in ans.measured:
            unit = "streams" if m.variable == "concurrency" else "req/s"
            value = "none" if m.capacity is None else f"{m.capacity:g} {unit}"
            screen.say(f"measured SLO capacity at {m.prompt_len:,} tokens ({m.slo}, "
                       f"{m.output_len} output tokens): {value} (run {m.run_id})")
        return
    lp = ans.load
    if lp is not None:
        screen.say("each figure within the row's ±")
        t = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for c in ("prompt", "load", "TPOT ms", "TTFT ms", "TTFT p99", "tok/s/stream",
                  f"tok/s/GPU ({lp.gpus})", "±", "admitted", "queued"):
            t.add_column(c, justify="right")
        for p in lp.points:
            load = f"c={p.concurrency}" if p.concurrency is not None else f"{p.rate:g}/s"
            pm = "none" if p.no_prediction else f"{p.rel_error * 100:.0f}%"
            t.add_row(f"{p.prompt_len:,}", load, _num(p.tpot_s.value * 1e3, 1),
                      _num(p.ttft_s.value * 1e3, 0), _num(p.ttft_p99_s.value * 1e3, 0),
                      _num(p.stream_tok_s.value, 1), _num(p.output_tok_s_per_gpu.value, 0), pm,
                      f"{p.max_admitted:,}", f"{p.queued}/{p.requests}")
        screen.show(t)
        screen.say(f"step budget {lp.max_num_batched_tokens:,} tokens "
                   f"({lp.max_num_batched_tokens_source}); max_num_seqs "
                   f"{lp.max_num_seqs:,} ({lp.max_num_seqs_source}); admitted: "
                   "requests of that length the KV pool holds at once")
        screen.say(f"load: {lp.source}; {lp.error_basis}")
        for n in lp.notes:
            screen.say(Text.assemble(("note:", "yellow"), " ", n))
    for cap in ans.capacities:
        unit = "streams" if cap.variable == "concurrency" else "req/s"
        head = f"predicted SLO capacity at {cap.prompt_len:,} tokens ({cap.slo}): "
        measured = "".join(
            f"; measured {'none' if m.capacity is None else f'{m.capacity:g}'} {unit} "
            f"(run {m.run_id})" for m in ans.measured_for(cap))
        if cap.capacity is None:
            screen.say(head + "none (the lowest load misses it)" + measured)
            continue
        lo = "none" if cap.low is None else f"{cap.low:g}"
        hi = "none" if cap.high is None else f"{cap.high:g}"
        band = f"steps ±{cap.rel_error * 100:.0f}%: {lo}–{hi}"
        if cap.no_prediction:
            band += "; no prediction: steps that uncertain span more than 4x"
        one = unit == "streams" and cap.capacity == 1
        screen.say(head + f"{cap.capacity:g} {'stream' if one else unit} ({band})" + measured)


def parse_request(prompt_lens: Sequence[int], output_len: int, concurrency: Sequence[int],
                  rates: Sequence[float], requests: int | None,
                  max_num_batched_tokens: int | None, slo: str | None) -> LoadRequest:
    """Check the options and build a :class:`LoadRequest`."""
    if output_len < 1:
        raise UsageError(f"--output-len must be at least 1, got {output_len}")
    if any(c < 1 for c in concurrency):
        raise UsageError("--concurrency levels must be at least 1")
    if any(not r > 0 for r in rates):
        raise UsageError("--request-rate values must be positive")
    if requests is not None and requests < 1:
        raise UsageError(f"--requests must be at least 1, got {requests}")
    if max_num_batched_tokens is not None and max_num_batched_tokens < 1:
        raise UsageError("--max-num-batched-tokens must be at least 1")
    return LoadRequest(tuple(prompt_lens), output_len, tuple(concurrency), tuple(rates),
                       requests, max_num_batched_tokens, slo)
