"""``servelab choose BUILD...``: which build to download, answered before the download.

``--json`` prints one document of schema ``servelab.choose/1`` (see
:mod:`servelab.choose.rank`); ``--csv`` the ranked table as plain values (:data:`CSV_COLUMNS`:
units in the column names, an interval as its low and high); ``--markdown`` the table and
the pick as Markdown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from servelab.cli.output import (
    TABLE,
    BriefOpt,
    CsvOpt,
    DbOpt,
    HardwareFileOpt,
    JsonOpt,
    MarkdownOpt,
    Table,
    WideOpt,
    emit,
    pick_format,
)
from servelab.cli.plan_options import (
    ChooseDraftTokensOpt,
    ChooseMtpAcceptanceOpt,
    ChooseNoStoreOpt,
    HardwareOptions,
    SpeculationOptions,
    StoreOptions,
)
from servelab.errors import UsageError
from servelab.units import GIB

if TYPE_CHECKING:
    from servelab.choose.rank import Choice, SloTarget, Speed

BuildsArg = Annotated[list[str], typer.Argument(
    help="Builds: Hub repo ids, local checkpoint directories or GGUF files; with --discover, "
    "one base model's repo id.")]
ChooseHardwareOpt = Annotated[str, typer.Option(
    "--hardware", "-H", help="Hardware profile name (servelab hardware list).")]
ContextOpt = Annotated[int, typer.Option(
    "--context", "-c", help="Context length each request must reach (tokens).")]
PromptLenOpt = Annotated[int, typer.Option(
    "--prompt-len", help="Prompt length decode and prefill are compared at.")]
ChooseSloOpt = Annotated[str | None, typer.Option(
    "--slo", help="Single-stream latency target, e.g. tpot_p50=40,ttft_p99=2000 (ms).")]
DiscoverOpt = Annotated[bool, typer.Option(
    "--discover",
    help="Read BUILD as a base model and add its Hub model tree (quantized, fine-tuned, "
    "adapter and merge children; GGUF repos listed).")]
NoPublishedOpt = Annotated[bool, typer.Option(
    "--no-published", help="Leave out the shipped published figures (servelab.published): "
    "the ranking and its reason are the prediction's own.")]
HubEndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint", help="Hub endpoint URL (default: HF_ENDPOINT or huggingface.co).")]

#: The ``--csv`` columns: one value each, units in the names (the table's cells carry them).
CSV_COLUMNS = (
    "rank", "build", "engine", "scheme", "fits", "concurrency_at_context", "kv_pool_tokens",
    "decode_tok_s", "decode_low_tok_s", "decode_high_tok_s", "decode_source",
    "prefill_tok_s", "prefill_low_tok_s", "prefill_high_tok_s", "prefill_source",
    "speculative_tok_s", "speculative_low_tok_s", "speculative_high_tok_s",
    "speculative_source", "kernel_path", "kernel_fallback", "mtp_head_tensors",
    "bytes_per_token_gib", "slo", "verdict",
)


def _speed_values(s: Speed | None) -> list[object]:
    """value, low, high, source ("measured", "predicted", "bound" or "no prediction")."""
    if s is None:
        return [None, None, None, None]
    source = s.source if s.tok_s is not None else (
        "no prediction" if "no prediction" in s.basis else None)
    return [None if v is None else round(v, 2) for v in (s.tok_s, s.low, s.high)] + [source]


def csv_rows(choice: Choice) -> list[list[object]]:
    """The ranked table as plain values (``--csv``)."""
    return [[
        r.rank, r.build, r.engine, r.scheme, r.fits,
        None if r.max_concurrency is None else round(r.max_concurrency, 2), r.kv_pool_tokens,
        *_speed_values(r.decode), *_speed_values(r.prefill), *_speed_values(r.speculative),
        r.kernel_path, r.fallback, r.mtp_tensors if r.mtp_usable else 0,
        None if r.bytes_per_token is None else round(r.bytes_per_token / GIB, 3),
        r.slo, r.verdict,
    ] for r in choice.rows]


def _slo_targets(text: str | None) -> tuple[SloTarget, ...]:
    from servelab.bench.slo import parse_slo
    from servelab.choose.rank import SloTarget

    if not text:
        return ()
    out = []
    for term in parse_slo(text).terms:
        if term.metric == "e2el":
            raise UsageError(f"--slo {term.label}: choose predicts TTFT and TPOT, not end-to-end "
                             "latency (it depends on the output length)")
        out.append(SloTarget(term.metric, term.threshold_ms, term.label))
    return tuple(out)


def choose(
    ctx: typer.Context,
    builds: BuildsArg,
    hardware: ChooseHardwareOpt = "dgx-spark",
    hardware_file: HardwareFileOpt = None,
    context: ContextOpt = 32768,
    prompt_len: PromptLenOpt = 2048,
    slo: ChooseSloOpt = None,
    discover: DiscoverOpt = False,
    endpoint: HubEndpointOpt = None,
    draft_tokens: ChooseDraftTokensOpt = 0,
    mtp_acceptance: ChooseMtpAcceptanceOpt = "auto",
    db: DbOpt = None,
    no_store: ChooseNoStoreOpt = False,
    no_published: NoPublishedOpt = False,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    as_markdown: MarkdownOpt = False,
    brief: BriefOpt = False,
    wide: WideOpt = False,
) -> None:
    """Rank builds of a model for one hardware profile: which to download, and why.

    The answer comes first (the build to download, why, its KV pool, decode and prefill,
    what to do next; --brief prints only that), then the ranked table (rank, build, fits,
    users at the context, decode, verdict; --wide: every column) and each verdict in full.

    Reads each build's headers only, plans it (fit, KV pool, concurrency at --context) and
    predicts its decode and prefill at --prompt-len with intervals; measured numbers from
    stored runs of the same checkpoint on the same hardware replace predictions, labelled
    measured. The verdict's reason is explain's: bytes against kernels, a kernel fallback,
    a missing draft head, memory as the binding constraint.
    """
    from servelab.pipeline.choose import ChooseRequest, choose_builds

    fmt = pick_format(as_json, as_csv, as_markdown)
    req = ChooseRequest(
        builds=tuple(builds), hardware=HardwareOptions.of(ctx.params).profile(hardware),
        context_len=context, prompt_len=prompt_len, slo=_slo_targets(slo), discover=discover,
        endpoint=endpoint, store=StoreOptions.of(ctx.params).choice(),
        speculation=SpeculationOptions.of(ctx.params).speculation(),
        published=not no_published,
    )
    result = choose_builds(req)
    from servelab.cli.choose_view import COLUMNS, published_lines, render_choice, table_rows

    if fmt == TABLE:
        render_choice(result, brief=brief, wide=wide)
        return
    title = (f"Builds on {result.hardware} at a {result.context_len:,}-token context "
             f"(decode and prefill at a {result.prompt_len:,}-token prompt)")
    pick = (f"Download {result.pick}: {result.reason}" if result.pick
            else f"No build to download: {result.reason}")
    emit(fmt, doc=result.to_dict(),
         tables=[Table(title, COLUMNS, table_rows(result), no_wrap=("build",),
                       csv=(CSV_COLUMNS, csv_rows(result)))],
         notes=[pick, *published_lines(result)])


def register(app: typer.Typer) -> None:
    """Attach ``choose`` to the root app."""
    app.command("choose")(choose)


__all__ = ["CSV_COLUMNS", "choose", "csv_rows", "register"]
