"""A click usage error is one message and exit status 2, not a traceback (typer >= 0.2x
vendors click, so its errors are not ``click.ClickException``)."""

from __future__ import annotations

import subprocess
import sys


def test_unknown_option_is_a_usage_error() -> None:
    res = subprocess.run([sys.executable, "-m", "servelab", "plan", "--bogus"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2, res.stderr
    assert "No such option: --bogus" in res.stderr
    assert "Traceback" not in res.stderr
