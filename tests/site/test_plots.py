"""SVG plots: valid, reproducible, escaped."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest
from site_records import record
from site_samples import HOSTILE

from servelab.site import plots
from servelab.site.collect import site_from_records
from servelab.site.model import Site
from servelab.site.render import pareto_series, render_site
from servelab.store import Sample


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


def test_pareto_front_keeps_only_undominated_points() -> None:
    pts = [(10.0, 100.0), (12.0, 90.0), (15.0, 300.0), (20.0, 280.0), (30.0, 500.0),
           (9.0, 50.0)]
    assert plots.pareto_front(pts) == [(9.0, 50.0), (10.0, 100.0), (15.0, 300.0), (30.0, 500.0)]
    assert plots.pareto_front([]) == []


def test_sweep_points_get_a_pareto_plot_on_the_recipe_page() -> None:
    base = record(0, "tiny-bf16", "BF16", "0.32.0", 50.0)
    extra = tuple(Sample(point=f"p512-c{c}", index=i, ttft_s=0.1, tpot_s=1 / d,
                         prompt_tokens=512, completion_tokens=32)
                  for c, d in ((4, 40.0), (16, 20.0)) for i in range(3))
    run = dataclasses.replace(base, run_id="sweep", samples=base.samples + extra)
    site = site_from_records([run])
    [page] = site.recipes
    got = pareto_series(page)
    assert got is not None
    series, y_label = got
    c4 = next(p for p in series["prompt 512"] if p[2] == 4)
    assert c4 == pytest.approx((25.0, 160.0, 4))  # 1000/40 ms; 4 streams × 40 tok/s
    assert "streams × per-stream decode" in y_label
    files = render_site(site)
    assert 'src="tiny-bf16-pareto.svg"' in files["recipes/tiny-bf16.html"]
    assert "tiny-bf16-pareto.svg" in files["recipes/tiny-bf16.md"]
    svg = files["recipes/tiny-bf16-pareto.svg"]
    ET.fromstring(svg)
    assert "Pareto front" in svg and "c=16" in svg


def test_the_plans_load_prediction_is_drawn_beside_the_measured_sweep() -> None:
    base = record(0, "tiny-bf16", "BF16", "0.32.0", 50.0)
    extra = tuple(Sample(point=f"p512-c{c}", index=i, ttft_s=0.1, tpot_s=1 / d,
                         prompt_tokens=512, completion_tokens=32)
                  for c, d in ((4, 40.0), (16, 20.0)) for i in range(3))
    band = {"value": 25.0, "low": 20.0, "high": 30.0}
    load = {"points": {"points": [
        {"prompt_len": 512, "concurrency": c, "stream_tok_s": band} for c in (1, 4, 16)
    ] + [{"prompt_len": 8192, "concurrency": 4, "stream_tok_s": band}]}}
    prediction = {**(base.prediction or {}), "load": load}
    run = dataclasses.replace(base, run_id="sweep", samples=base.samples + extra,
                              prediction=prediction)
    [page] = site_from_records([run]).recipes
    assert [(p.prompt_tokens, p.concurrency) for p in page.predicted_load] == [
        (512, 1), (512, 4), (512, 16), (8192, 4)]
    got = pareto_series(page)
    assert got is not None
    series, _ = got
    # only at a measured prompt length, after its measured series
    assert "predicted prompt 8,192" not in series
    assert list(series)[:2] == ["prompt 512", "predicted prompt 512"]
    assert series["predicted prompt 512"] == [(40.0, 25.0, 1), (40.0, 100.0, 4),
                                               (40.0, 400.0, 16)]
    svg = render_site(site_from_records([run]))["recipes/tiny-bf16-pareto.svg"]
    assert "predicted prompt 512" in svg and "Pareto front" in svg
