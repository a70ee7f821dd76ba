"""``servelab --help`` loads none of the heavy libraries (it must start fast; the time itself
is measured in benchmarks/cli_startup.py, not asserted here)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# (typer itself loads pydantic to coerce a subcommand's options, so pydantic is not listed)
HEAVY = ("sqlalchemy", "numpy", "matplotlib", "jinja2", "httpx", "orjson",
         "huggingface_hub", "safetensors", "torch", "transformers", "psycopg",
         "servelab.store", "servelab.pipeline", "servelab.site", "servelab.analysis",
         "servelab.bench", "servelab.checkpoint")

_CODE = """
import sys
from servelab.cli.app import main
try:
    main({argv!r})
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print("\\n".join(sorted(sys.modules)))
"""


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["plan", "--help"],
                                  ["runs", "--help"], ["experiment", "--help"]])
def test_help_imports_no_heavy_library(argv: list[str]) -> None:
    out = subprocess.run([sys.executable, "-c", _CODE.format(argv=argv)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    loaded = set(out.splitlines())
    heavy = sorted(m for m in loaded for h in HEAVY if m == h or m.startswith(h + "."))
    assert heavy == [], heavy
    assert "servelab.cli.run_cmd" in loaded  # the commands themselves are registered
