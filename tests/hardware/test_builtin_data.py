"""The built-in hardware profiles are data (src/servelab/hardware/builtin.toml) with a source
for every figure, in the units the schema states, shown by ``servelab hardware show``."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.hardware.profiles import BUILTIN, GB, GIB, SOURCED, TERA

runner = CliRunner()


def _tables() -> dict[str, dict[str, object]]:
    text = resources.files("servelab.hardware").joinpath("builtin.toml").read_text("utf-8")
    tables: dict[str, dict[str, object]] = tomllib.loads(text)["profile"]
    return tables


def test_every_built_in_profile_comes_from_the_data_file_with_its_sources() -> None:
    tables = _tables()
    assert set(tables) == set(BUILTIN)
    for name, p in BUILTIN.items():
        t = tables[name]
        assert "base" not in t, f"{name}: a built-in stands on its own figures"
        for figure in SOURCED:
            assert len(p.sources.get(figure, "")) > 10, f"{name}: no source for {figure}"
        # units as the schema states them: GiB, GB/s, dense TFLOP/s
        assert p.memory_bytes == int(float(t["memory_gib"]) * GIB)  # type: ignore[arg-type]
        assert p.bandwidth == float(t["bandwidth_gbs"]) * GB  # type: ignore[arg-type]
        compute = t["compute_tflops"]
        assert isinstance(compute, dict)
        assert p.compute == {k: float(v) * TERA for k, v in compute.items()}


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_figures_lie_in_physical_ranges(name: str) -> None:
    """A figure typed in the wrong unit (GB/s as TB/s, TFLOP/s as FLOP/s) lands outside."""
    p = BUILTIN[name]
    assert 8 * GIB <= p.memory_bytes <= 1024 * GIB
    assert 100 * GB <= p.bandwidth <= 20_000 * GB
    assert 5 * TERA <= p.compute["bf16"] <= 5_000 * TERA
    # lower precisions are never slower; bandwidth / bf16 compute is a sane ridge point
    rates = [p.compute[k] for k in ("bf16", "fp8", "fp4") if k in p.compute]
    assert rates == sorted(rates)
    assert 10 <= p.compute["bf16"] / p.bandwidth <= 2_000


def test_the_published_figures_people_quote_are_kept() -> None:
    assert BUILTIN["h200"].memory_bytes == 143_771 << 20
    assert BUILTIN["rtx-4090"].bandwidth == 1008 * GB
    assert BUILTIN["mi300x"].memory_bytes == 192 * GIB and BUILTIN["mi300x"].platform == "rocm"
    assert BUILTIN["m2-ultra"].bandwidth == 800 * GB and BUILTIN["m2-ultra"].unified
    assert BUILTIN["m3-ultra"].bandwidth == 819 * GB


def test_show_prints_every_source() -> None:
    r = runner.invoke(app, ["hardware", "show", "mi300x"], terminal_width=300)
    assert r.exit_code == 0, r.output
    for figure in SOURCED:
        assert f"source: {figure}" in r.output
    assert "AMD Instinct MI300X data sheet" in r.output
    listing = runner.invoke(app, ["hardware", "list"], terminal_width=300)
    assert listing.exit_code == 0 and "rtx-4090" in listing.output and "m3-ultra" in listing.output
