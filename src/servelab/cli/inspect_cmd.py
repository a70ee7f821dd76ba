"""``servelab inspect PATH_OR_REPO_ID``: checkpoint forensics from safetensors headers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from servelab.cli.output import stdout_console
from servelab.errors import UsageError
from servelab.units import format_bytes

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.checkpoint.report import CheckpointReport

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _size(n: int) -> str:
    return format_bytes(n)


def _params(n: float) -> str:
    """Parameter counts in the unit that shows them (a tiny model is not "0.000 B")."""
    for unit, size in (("B", 1e9), ("M", 1e6)):
        if n >= size:
            return f"{n / size:,.3f} {unit}"
    return f"{n:,.0f}"


def render(report: CheckpointReport, console: Console) -> None:
    """Print the report as Rich tables."""
    r = report
    console.print(
        f"[bold]{r.source.location}[/]" + (f" @ {r.source.revision}" if r.source.revision else "")
    )
    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("model", f"{r.model_type or '?'} {' '.join(r.architectures)}".strip())
    summary.add_row("tensors", f"{r.tensor_count:,} in {r.source.shards} file(s)")
    summary.add_row("total", f"{r.total_bytes:,} bytes = {_size(r.total_bytes)}")
    if r.source.kind == "hub":
        summary.add_row("fetched", f"{r.source.bytes_fetched:,} bytes (headers and configs only)")
    summary.add_row(
        "params",
        f"{_params(r.total_params)} total, {_params(r.active_params)} active per token",
    )
    if r.layer_types:
        counts: dict[str, int] = {}
        for t in r.layer_types:
            counts[t] = counts.get(t, 0) + 1
        kinds = ", ".join(f"{n} {t}" for t, n in counts.items())
        summary.add_row("layers", f"{r.num_layers} ({kinds})")
    elif r.num_layers is not None:
        summary.add_row("layers", str(r.num_layers))
    if r.num_experts:
        summary.add_row(
            "experts",
            f"{r.num_experts} routed, top-{r.experts_per_token or '?'} active, "
            f"{r.expert_layout or '?'} layout" + (", shared expert" if r.has_shared_expert else ""),
        )
    summary.add_row("quantization", r.quant.label)
    if r.routed_expert_bits:
        summary.add_row("routed-expert bits", f"{r.routed_expert_bits:.3f} per weight incl. scales")
    summary.add_row(
        "MTP",
        f"config declares {r.mtp_declared_layers} layer(s); {r.mtp_tensors:,} tensors ship "
        f"({_size(r.mtp_bytes)})",
    )
    summary.add_row(
        "decode reads",
        f"{r.decode_bytes_per_token:,} bytes = {_size(r.decode_bytes_per_token)} per "
        "generated token (weights; KV/state not included)",
    )
    console.print(summary)

    dt = Table(title="By dtype", title_justify="left")
    for col in ("dtype", "tensors", "bytes", "size", "elements"):
        dt.add_column(col, justify="left" if col == "dtype" else "right", no_wrap=True)
    for d in r.dtypes:
        dt.add_row(d.dtype, f"{d.tensors:,}", f"{d.bytes:,}", _size(d.bytes), f"{d.elements:,}")
    console.print(dt)

    rt = Table(
        title="By role (w/ scales: scales folded in; decode: read per generated token)",
        title_justify="left",
    )
    for col in ("role", "tensors", "size", "w/ scales", "bits/w", "decode"):
        rt.add_column(col, justify="left" if col == "role" else "right", no_wrap=True)
    split = Table(title="By role and dtype", title_justify="left")
    for col in ("role", "dtype", "bytes", "size"):
        split.add_column(col, justify="left" if col in ("role", "dtype") else "right", no_wrap=True)
    for s in r.roles:
        if not (s.tensors or s.bytes_incl_scales):
            continue
        bits = f"{s.effective_bits:.2f}" if s.effective_bits else "–"
        rt.add_row(
            s.role,
            f"{s.tensors:,}",
            _size(s.bytes),
            _size(s.bytes_incl_scales),
            bits,
            _size(s.decode_bytes),
        )
        for dtype, nbytes in s.dtypes.items():
            split.add_row(s.role, dtype, f"{nbytes:,}", _size(nbytes))
    console.print(rt)
    console.print(split)

    if r.findings:
        ft = Table(title="Findings", title_justify="left")
        ft.add_column("code", no_wrap=True)
        ft.add_column("severity", no_wrap=True)
        ft.add_column("explanation")
        for f in r.findings:
            style = _SEVERITY_STYLE.get(f.severity, "")
            ft.add_row(f.code, f"[{style}]{f.severity}[/]" if style else f.severity, f.message)
        console.print(ft)


def inspect(
    location: str = typer.Argument(
        ...,
        metavar="PATH_OR_REPO_ID",
        help="A model.safetensors file, a checkpoint directory (single or sharded), or a "
        "Hugging Face repo id (only headers are fetched, by HTTP range requests).",
    ),
    revision: str | None = typer.Option(
        None, "--revision", help="Hub branch, tag or commit (default: main)."
    ),
    token: str | None = typer.Option(
        None,
        "--token",
        help="Hub token (default: HF_TOKEN or the huggingface-cli login).",
        show_default=False,
    ),
    endpoint: str | None = typer.Option(
        None, "--endpoint", help="Hub endpoint URL (default: HF_ENDPOINT or huggingface.co)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the report as JSON (schema servelab.inspect/1)."
    ),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print the report as Markdown."),
) -> None:
    """Report what a checkpoint holds, byte by byte, from its safetensors headers alone.

    Tensor count, bytes by dtype and by role, layers, experts, quantization (with
    effective bits per routed-expert weight), bytes read per generated token, and lint
    findings. Nothing is ever loaded or unpickled.
    """
    from servelab.checkpoint.report import inspect_checkpoint

    if as_json and as_markdown:
        raise UsageError("--json and --markdown cannot be used together")
    report = inspect_checkpoint(location, revision=revision, token=token, endpoint=endpoint)
    if as_json:
        typer.echo(json.dumps(report.to_json_dict(), indent=2))
    elif as_markdown:
        typer.echo(report.to_markdown(), nl=False)
    else:
        render(report, stdout_console())


def register(app: typer.Typer) -> None:
    """Attach the inspect command to the root app."""
    app.command("inspect")(inspect)
