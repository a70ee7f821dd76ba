"""A click usage error is one message and exit status 2, not a traceback (typer >= 0.2x
vendors click, so its errors are not ``click.ClickException``)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.cli_checks import assert_one_line_errors

from servelab.cli.app import main


def test_unknown_option_is_a_usage_error() -> None:
    res = subprocess.run([sys.executable, "-m", "servelab", "plan", "--bogus"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2, res.stderr
    assert "error: no such option: --bogus (see servelab plan --help)" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(("argv", "needle"), [
    (["plan"], "error: missing argument 'checkpoint' (see servelab plan --help)"),
    (["synth", "tiny", "llama"], "missing argument 'out_dir' (see servelab synth tiny --help)"),
    (["plan", "x", "--bogus"], "no such option: --bogus (see servelab plan --help)"),
    (["choose", "x", "--context", "abc"], "invalid value for '--context'"),
    (["bogus"], "no such command 'bogus' (see servelab --help)"),
])
def test_a_usage_error_is_one_error_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # not click's three lines (Usage: ... / Try 'servelab plan --help' ... / Error: ...)
    assert_one_line_errors([(argv, needle)], capsys)
    with pytest.raises(SystemExit):
        main(argv)
    assert capsys.readouterr().err.startswith("error: ")


def test_a_group_without_its_command_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["runs"])
    out = capsys.readouterr()
    assert exc.value.code == 2 and "list" in out.out + out.err and "error:" not in out.err
