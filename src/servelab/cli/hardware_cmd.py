"""``servelab hardware list|show|probe``: hardware profiles and measured ceilings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from servelab.cli.output import HardwareFileOpt, stdout_console
from servelab.errors import UsageError
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import BUILTIN, HardwareProfile, load_profiles_toml
from servelab.outfile import check_output_file, write_text
from servelab.units import GIB

app = typer.Typer(
    help="Hardware profiles (published figures with sources) and probes.", no_args_is_help=True
)


def _row(p: HardwareProfile) -> list[str]:
    comp = ", ".join(f"{k} {v / 1e12:,.0f}" for k, v in p.compute.items())
    return [
        p.name,
        f"{p.memory_bytes / GIB:,.0f} GiB" + (" unified" if p.unified else ""),
        f"{p.bandwidth / 1e9:,.0f}",
        comp,
        p.arch,
        p.origin,
    ]


@app.command("list")
def list_profiles(
    hardware_file: HardwareFileOpt = None,
    as_json: bool = typer.Option(False, "--json", help="Print the profiles as JSON."),
) -> None:
    """List built-in and user hardware profiles (``host`` is measured when used)."""
    profiles = dict(BUILTIN)
    for f in hardware_file or []:
        profiles.update(load_profiles_toml(f))
    if as_json:
        typer.echo(json.dumps([p.to_dict() for p in profiles.values()], indent=2))
        return
    t = Table(
        title="Hardware profiles (published / derived figures; see `show` for sources)",
        title_justify="left",
    )
    for c in ("name", "memory", "GB/s", "dense TFLOP/s", "arch", "origin"):
        t.add_column(c)
    for p in profiles.values():
        t.add_row(*_row(p))
    t.add_row("host", "this machine", "measured", "measured", "", "probe on use")
    stdout_console().print(t)


@app.command("show")
def show(
    name: str = typer.Argument(..., help="Profile name (or 'host' to measure this machine)."),
    hardware_file: HardwareFileOpt = None,
    as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON."),
) -> None:
    """Show one profile with the source of every figure and its kernel paths."""
    p = get_profile(name, files=hardware_file or [])
    if as_json:
        typer.echo(json.dumps(p.to_dict(), indent=2))
        return
    c = stdout_console()
    t = Table(title=f"{p.name}: {p.description}", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("memory", f"{p.memory_bytes / GIB:,.1f} GiB{' unified' if p.unified else ''}")
    t.add_row("bandwidth", f"{p.bandwidth / 1e9:,.1f} GB/s")
    for k, v in p.compute.items():
        t.add_row(f"dense {k}", f"{v / 1e12:,.3g} TFLOP/s")
    t.add_row("arch / platform", f"{p.arch} / {p.platform}")
    if p.cpu_isa is not None:
        t.add_row("CPU features", f"{p.cpu_isa.summary()} ({p.cpu_isa.source})")
    for figure, source in p.sources.items():
        t.add_row(f"source: {figure}", source)
    c.print(t)
    if p.kernel_paths:
        kt = Table(title="Kernel paths", title_justify="left")
        for col in ("weights", "path", "compute", "note", "source"):
            kt.add_column(col)
        for k, kp in p.kernel_paths.items():
            kt.add_row(k, kp.name, kp.compute, kp.note, kp.source)
        c.print(kt)


@app.command("probe")
def probe(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="Optional GPU probe command and its "
            "arguments (after --), printing probe JSON, e.g. "
            "-- python -m servelab.hardware.gpu_probe"
        ),
    ] = None,
    copy_mib: int = typer.Option(256, "--copy-mib", help="Host copy-probe array size in MiB."),
    reps: int = typer.Option(7, "--reps", help="Repetitions of each host measurement."),
    matmul_n: int = typer.Option(1024, "--matmul-n", help="Host matmul size n (n×n)."),
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the probe JSON to this file.")
    ] = None,
    as_json: bool = typer.Option(False, "--json", help="Print the probe as JSON."),
) -> None:
    """Measure copy bandwidth and matmul rate of this machine (or of a GPU via a command)."""
    from servelab.hardware.probe import ProbeResult, probe_command, probe_host  # numpy

    if copy_mib <= 0 or reps <= 0:
        raise UsageError("--copy-mib and --reps must be positive")
    if output is not None:
        check_output_file(output)  # before the probe runs
    result: ProbeResult
    if command:
        result = probe_command(command)
    else:
        with Console(stderr=True).status("probing copy bandwidth and matmul rate…"):
            result = probe_host(
                copy_bytes=copy_mib << 20, copy_reps=reps, matmul_n=matmul_n, matmul_reps=reps
            )
    text = json.dumps(result.to_dict(), indent=2)
    if output is not None:
        write_text(output, text + "\n")
    if as_json:
        typer.echo(text)
        return
    t = Table(title=f"Probe: {result.device} ({result.method}), measured", title_justify="left")
    for col in ("quantity", "best", "median", "samples"):
        t.add_column(col, justify="left" if col == "quantity" else "right")
    bw = result.copy_bandwidth
    t.add_row(
        "copy bandwidth (read+write)",
        f"{bw.best / 1e9:,.2f} GB/s",
        f"{bw.median / 1e9:,.2f} GB/s",
        str(len(bw.samples)),
    )
    for k, v in result.matmul.items():
        t.add_row(
            f"matmul {k}",
            f"{v.best / 1e12:,.3f} TFLOP/s",
            f"{v.median / 1e12:,.3f} TFLOP/s",
            str(len(v.samples)),
        )
    stdout_console().print(t)
    if result.cpu_isa is not None:
        stdout_console().print(f"CPU features: {result.cpu_isa.summary()} (the engines pick "
                               "CPU kernels and KV block sizes by them)")


def register(root: typer.Typer) -> None:
    """Attach the ``hardware`` group to the root app."""
    root.add_typer(app, name="hardware")
