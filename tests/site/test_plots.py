"""SVG plots: valid, reproducible, escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

from site_samples import HOSTILE

from servelab.site import plots
from servelab.site.model import Site


def test_plots_are_valid_reproducible_svg(site_factory: Callable[..., Site]) -> None:
    page = site_factory(model_name=HOSTILE).recipes[0]
    assert page.memory is not None
    makers = [
        lambda: plots.decode_vs_prompt({"FP8": page.decode}, title=HOSTILE),
        lambda: plots.history(page.history[0], title=HOSTILE),
        lambda: plots.memory_split(page.memory, kv_cache_gib=6.0, title=HOSTILE),  # type: ignore[arg-type]
    ]
    for make in makers:
        first, second = make(), make()
        assert first == second  # byte-for-byte: fixed hashsalt, no date
        root = ET.fromstring(first)
        assert root.tag.endswith("svg")
        assert not [el for el in root.iter() if el.tag.endswith("script")]
        assert "<script>" not in first
        texts = "".join(el.text or "" for el in root.iter() if el.tag.endswith("text"))
        assert HOSTILE in texts  # the title is there, as text


def test_decode_plot_labels_predictions(site_factory: Callable[..., Site]) -> None:
    page = site_factory().recipes[0]
    svg = plots.decode_vs_prompt({"FP8": page.decode}, title="t")
    assert "FP8 (measured)" in svg and "FP8 (predicted)" in svg
    no_pred = plots.decode_vs_prompt({"FP8": [r for r in page.decode if not r.predicted]},
                                     title="t")
    assert "(predicted)" not in no_pred
