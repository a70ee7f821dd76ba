"""``servelab serve RECIPE`` — start a real engine from a recipe and serve until Ctrl-C.

``servelab serve --url URL`` attaches to a server that is already running instead and
prints what it reports (``/version``, ``/v1/models``, ``/metrics``).

``--json`` prints, once the engine is ready, one JSON object on one stdout line::

    {"event": "ready", "base_url": str, "served_model_name": str, "pid": int,
     "run_dir": str, "log_path": str, "ready_s": float, "argv": [str, ...],
     "facts": {EngineFacts fields}}

and, for ``--url``, the :meth:`ServerInfo.to_dict` object. Progress goes to stderr.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servelab.cli.output import stdout_console
from servelab.cli.signals import interrupt_on_sigterm
from servelab.errors import UsageError
from servelab.redact import redact_args

if TYPE_CHECKING:  # loaded only when a command runs (fast --help)
    from servelab.engines.facts import EngineFacts
    from servelab.serve.attach import ServerInfo
    from servelab.serve.process import EngineProcess

__all__ = ["facts_table", "facts_view", "register", "serve"]

err = Console(stderr=True, highlight=False)
out = stdout_console()

_FACT_ROWS: tuple[tuple[str, str, str], ...] = (
    ("version", "engine version", ""),
    ("architecture", "architecture", ""),
    ("max_model_len", "max model len", ""),
    ("attention_backend", "attention backend", ""),
    ("moe_backend", "MoE backend", ""),
    ("moe_quant", "MoE quantization", ""),
    ("moe_experts_kernel", "MoE experts kernel", ""),
    ("weights_gib", "weights", "GiB"),
    ("checkpoint_gib", "checkpoint size", "GiB"),
    ("weights_load_s", "weights load", "s"),
    ("kv_available_gib", "KV cache memory", "GiB"),
    ("kv_pool_tokens", "KV pool", "tokens"),
    ("max_concurrency", "max concurrency", "x"),
    ("attention_block_size", "attention block size", "tokens"),
    ("scheduler_block_size", "KV block size (lcm)", "tokens"),
    ("mamba_padding_pct", "mamba page padding", "%"),
    ("padding_layers", "padding layers", ""),
    ("graph_capture_s", "graph capture", "s"),
    ("graph_capture_gib", "graph memory", "GiB"),
    ("cudagraph_capture_max", "largest CUDA graph (0: none)", "tokens"),
    ("mamba_cache_blocks", "mamba cache blocks", ""),
    ("init_engine_s", "engine init", "s"),
    ("startup_s", "startup (log)", "s"),
    ("cpu_threads_bind", "OpenMP cores per rank", ""),
)


def _fmt(value: Any, unit: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        text = f"{value:,}"
    elif isinstance(value, float):
        text = f"{value:,.2f}"
    else:
        text = str(value)
    return f"{text} {unit}".rstrip() if unit and unit != "x" else (text + unit)


def facts_table(facts: EngineFacts, *, title: str = "What the engine's log says") -> Table:
    """A Rich table of the facts the log gave (silent fields are left out)."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("fact", style="bold")
    table.add_column("value")
    for key, label, unit in _FACT_ROWS:
        value = getattr(facts, key)
        if value is None:
            continue
        if key == "max_concurrency" and facts.concurrency_at_tokens:
            label = f"max concurrency at {facts.concurrency_at_tokens:,} tokens"
        table.add_row(label, escape(_fmt(value, unit)))
    if facts.marlin_fallback:
        table.add_row("kernel path", "[yellow]Marlin weight-only fallback[/]")
    if facts.cpu_paths:  # llama.cpp's system_info: the CPU kernels it built and uses
        table.add_row("CPU paths", escape(" ".join(facts.cpu_paths)))
    if facts.weight_buffers:
        table.add_row("weight buffers", escape(", ".join(facts.weight_buffers)))
    for notice in facts.warnings:
        table.add_row(f"[yellow]warning ({notice.kind})[/]", escape(notice.text))
    return table


def facts_view(facts: EngineFacts, log: Path) -> Table | str:
    """The facts table, or, when the log gave none of them (an engine whose log servelab
    reads nothing from, such as the synthetic one), a sentence saying so instead of an
    empty table."""
    table = facts_table(facts)
    if table.row_count:
        return table
    return (f"The engine's log ({escape(str(log))}) holds none of the facts servelab reads "
            "from a log (version, KV cache, concurrency, kernel path).")


def _info_table(info: ServerInfo) -> Table:
    table = Table(title=f"Server at {escape(info.url)}", show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("version", escape(info.version or "(no /version)"))
    for m in info.models:
        mml = f" (max_model_len {m.max_model_len:,})" if m.max_model_len else ""
        table.add_row("model", escape(m.id + mml))
    for key, value in info.to_dict()["metrics"].items():
        table.add_row(escape(key), f"{value:,.6g}")
    for key, value in info.cache_config().items():
        table.add_row(escape(f"cache_config.{key}"), escape(value))
    return table


def _parse_port(port: str | None) -> int | Literal["auto"] | None:
    if port is None:
        return None
    if port == "auto":
        return "auto"
    try:
        value = int(port)
    except ValueError:
        raise UsageError(f"--port must be 'auto' or a number, not {port!r}") from None
    if not 1 <= value <= 65535:
        raise UsageError(f"--port {value} is out of range 1-65535")
    return value


def _ready_payload(engine: EngineProcess, run_dir: Path) -> dict[str, Any]:
    return {
        "event": "ready",
        "base_url": engine.base_url,
        "served_model_name": engine.served_model_name,
        "pid": engine.pid,
        "run_dir": str(run_dir),
        "log_path": str(engine.log_path),
        "ready_s": engine.ready_s,
        "argv": redact_args(engine.spec.argv),
        "auto_env": dict(engine.spec.auto_env),
        "facts": engine.facts.to_dict(),
    }


ServeRecipeArg = Annotated[Path | None, typer.Argument(
    help="Recipe file (TOML). Leave out when attaching with --url.", show_default=False)]
UrlOpt = Annotated[str | None, typer.Option(
    "--url", help="Attach to a running server instead: read /version, /v1/models, /metrics.")]
ServePortOpt = Annotated[str | None, typer.Option(
    "--port", help="'auto' (pick a free port) or a port number; default: the recipe's.")]
RunDirOpt = Annotated[Path | None, typer.Option(
    "--run-dir",
    help="Directory for the engine log and facts (default: new, under SERVELAB_HOME/runs).")]
ServeJsonOpt = Annotated[bool, typer.Option(
    "--json", help="Print the ready event as JSON on stdout.")]


def serve(
    recipe: ServeRecipeArg = None,
    url: UrlOpt = None,
    port: ServePortOpt = None,
    run_dir: RunDirOpt = None,
    json_out: ServeJsonOpt = False,
) -> None:
    """Serve a recipe on a real engine until Ctrl-C, printing what the engine's log says."""
    from servelab.engines.facts import Phase
    from servelab.serve.attach import attach
    from servelab.serve.launch import launch, new_run_dir
    from servelab.serve.recipe import load_recipe

    if url is not None:
        if recipe is not None:
            raise UsageError("give a RECIPE or --url, not both")
        info = attach(url)
        if json_out:
            out.print_json(json.dumps(info.to_dict()))
        else:
            out.print(_info_table(info))
        return
    if recipe is None:
        raise UsageError("give a RECIPE file, or --url to attach to a running server")
    parsed_port = _parse_port(port)
    rec = load_recipe(recipe)
    rdir = run_dir.absolute() if run_dir is not None else new_run_dir(rec)
    rdir.mkdir(parents=True, exist_ok=True)
    engine: EngineProcess | None = None
    with interrupt_on_sigterm():
        try:
            log = escape(str(rdir / "engine.log"))
            err.print(f"[bold]serving[/] {escape(rec.name)} — log: {log}")
            with err.status("starting engine…", spinner="dots") as status:
                last = [0.0]

                def on_phase(phase: Phase, elapsed: float) -> None:
                    if phase is not Phase.STARTING:
                        err.print(f"  [green]✓[/] {phase.label} [dim](+{elapsed:.1f} s)[/]")
                    last[0] = elapsed
                    status.update(f"{phase.label}…")

                engine = launch(rec, run_dir=rdir, port=parsed_port, on_phase=on_phase)
            if json_out:
                # One line, flushed: scripts read it while the engine keeps serving.
                print(json.dumps(_ready_payload(engine, rdir), default=str), flush=True)
            else:
                out.print(facts_view(engine.facts, rdir / "engine.log"), soft_wrap=True)
                out.print(
                    f"[bold green]ready[/] in {engine.ready_s:.1f} s: {escape(engine.base_url)}/v1 "
                    f"(model {escape(engine.served_model_name)!r}) — Ctrl-C to stop"
                )
            while True:
                engine.check_alive()
                time.sleep(0.5)
        finally:
            if engine is not None:
                err.print("stopping engine…")
                engine.stop()


def register(app: typer.Typer) -> None:
    """Attach ``servelab serve`` to the root app."""
    app.command("serve")(serve)
