"""The built-in hardware profiles are data (src/servelab/hardware/builtin.toml) with a source
for every figure, in the units the schema states, shown by ``servelab hardware show``."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.hardware.profiles import BUILTIN, SOURCED
from servelab.units import GB, GIB, TERA

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


@pytest.mark.parametrize("name", ["h100", "b200", "rtx-pro-6000", "rtx-5090"])
def test_the_gpus_people_own_cite_the_vendors_page_for_every_figure(name: str) -> None:
    """Issue 30's hardware: each figure names the vendor's page it comes from (a URL on
    nvidia.com), and a figure worked out from a published one says so ("derived")."""
    p = BUILTIN[name]
    for figure in SOURCED:
        src = p.sources[figure]
        assert "https://www.nvidia.com/" in src or "https://images.nvidia.com/" in src, (
            f"{name}: {figure} cites no vendor page")
    # the sparse figures NVIDIA publishes are halved for the dense ones kept here
    assert p.sources["compute"].startswith("derived:")
    assert "with sparsity" in p.sources["compute"]


def test_the_datasheet_figures_of_the_gpus_people_own() -> None:
    """The numbers the cited pages print (dense compute: their sparse figure halved)."""
    h100, b200 = BUILTIN["h100"], BUILTIN["b200"]
    assert h100.bandwidth == 3350 * GB and h100.compute["fp8"] == 1979 * TERA
    assert b200.bandwidth == 8000 * GB and b200.compute["fp4"] == 9000 * TERA
    assert BUILTIN["rtx-pro-6000"].memory_bytes == 96 * GIB
    assert BUILTIN["rtx-pro-6000"].bandwidth == BUILTIN["rtx-5090"].bandwidth == 1792 * GB
    assert BUILTIN["rtx-5090"].memory_bytes == 32 * GIB
    assert {p.arch for p in (BUILTIN["rtx-pro-6000"], BUILTIN["rtx-5090"])} == {"sm_120"}


def test_show_prints_every_source() -> None:
    r = runner.invoke(app, ["hardware", "show", "mi300x"], terminal_width=300)
    assert r.exit_code == 0, r.output
    for figure in SOURCED:
        assert f"source: {figure}" in r.output
    assert "AMD Instinct MI300X data sheet" in r.output
    listing = runner.invoke(app, ["hardware", "list"], terminal_width=300)
    assert listing.exit_code == 0 and "rtx-4090" in listing.output and "m3-ultra" in listing.output
