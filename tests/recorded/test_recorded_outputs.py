"""Every recorded ``plan``, ``choose``, ``explain`` and ``calibration report`` output
(:mod:`tests.recorded.cases`) is printed again byte for byte: code moves change no figure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.recorded.cases import CASES, Case, check_json, inside, make_inputs, output_path, run_case

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("recorded")
    make_inputs(root)
    with inside(root):
        yield root


def test_every_case_has_a_recording() -> None:
    recorded = {p.stem for p in output_path(CASES[0]).parent.glob("*.txt")}
    assert recorded == {c.name for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_output_is_the_recorded_one(inputs: Path, case: Case) -> None:
    want = output_path(case).read_text(encoding="utf-8")
    got = run_case(case)
    if "--json" in case.argv and "exit 0\n" in want:
        check_json(want)
    assert got == want
