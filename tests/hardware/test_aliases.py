"""Hardware names as users type them (issue 41): case, spaces, hyphens and underscores never
matter, a profile's aliases (``spark``, ``4090``) name it, and an unknown name gets the
closest ones ("did you mean")."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli_checks import assert_one_line_errors
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.errors import HardwareProfileError
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import check_profile_name


@pytest.mark.parametrize(("typed", "name"), [
    ("DGX-Spark", "dgx-spark"), ("DGX Spark", "dgx-spark"), ("dgx_spark", "dgx-spark"),
    ("spark", "dgx-spark"), ("GB10", "dgx-spark"), ("4090", "rtx-4090"),
    ("RTX4090", "rtx-4090"), ("RTX 5090", "rtx-5090"), ("H200", "h200"),
    ("M4 Max", "m4-max"), ("rtx-6000-pro", "rtx-pro-6000"), ("dgx-spark", "dgx-spark"),
])
def test_a_name_as_typed_finds_its_profile(typed: str, name: str) -> None:
    assert get_profile(typed).name == name
    assert check_profile_name(typed) == name


@pytest.mark.parametrize(("typed", "guess"), [
    ("dgx-sprak", "did you mean dgx-spark?"), ("h300", "did you mean h200, h100 or mi300x?"),
    ("rtx-4080", "did you mean rtx-4090"),
])
def test_an_unknown_name_gets_the_closest_ones(typed: str, guess: str) -> None:
    with pytest.raises(HardwareProfileError) as exc:
        get_profile(typed)
    msg = str(exc.value)
    assert f"unknown hardware profile {typed!r}; {guess}" in msg
    assert "(known: dgx-spark, h100" in msg and "\n" not in msg


def test_no_guess_for_a_name_like_none(tmp_path: Path) -> None:
    with pytest.raises(HardwareProfileError) as exc:
        get_profile("quantum-toaster")
    assert "did you mean" not in str(exc.value)


def test_a_user_profile_has_aliases_too(tmp_path: Path) -> None:
    f = tmp_path / "hw.toml"
    f.write_text('[profile.lab-box]\naliases = ["lab"]\nbase = "h100"\n', encoding="utf-8")
    assert get_profile("LAB", files=[f]).name == "lab-box"
    assert get_profile("Lab Box", files=[f]).name == "lab-box"
    f.write_text('[profile.lab-box]\naliases = "lab"\nbase = "h100"\n', encoding="utf-8")
    with pytest.raises(HardwareProfileError, match=r"aliases must be a list of names"):
        get_profile("lab-box", files=[f])


def test_the_cli_takes_an_alias(capsys: pytest.CaptureFixture[str]) -> None:
    res = CliRunner().invoke(app, ["hardware", "show", "4090"])
    assert res.exit_code == 0, res.output
    assert "rtx-4090" in res.output
    assert_one_line_errors([(["hardware", "show", "sparkk"], "did you mean dgx-spark?")], capsys)
