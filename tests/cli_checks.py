"""CLI checks shared by the command tests (importable: ``from tests.cli_checks import ...``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from servelab.cli.app import main


def assert_one_line_errors(
    cases: Sequence[tuple[list[str], str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each ``(argv, needle)`` exits 2 with one line on stderr that contains ``needle``."""
    for argv, needle in cases:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2, (argv, err)
        assert needle in err and len(err.strip().splitlines()) == 1, (argv, err)
