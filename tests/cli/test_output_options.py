"""``plan`` and ``explain`` take the shared ``--json`` / ``--markdown`` options: asking for both
is one usage line naming the flags they have (exit 2, nothing on stdout), checked before any
checkpoint is read."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("argv", [["plan", "no-such-dir"], ["explain", "no-a", "no-b"]])
def test_json_and_markdown_together_is_a_usage_error(argv: list[str]) -> None:
    res = subprocess.run([sys.executable, "-m", "servelab", *argv, "--json", "--markdown"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert lines == ["error: choose one of --json, --markdown (got json, markdown)"]
