"""The built site in real headless Chromium: renders cleanly, holds the stored values, and
hostile text from model names and engine logs stays text."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from site_chromium import Browser, chromium_available, serve_directory
from site_records import HOSTILE_LINE, populate
from site_samples import HOSTILE, HOSTILE_LOG

from servelab.site.build import build_site
from servelab.site.collect import collect_site
from servelab.site.model import Site
from servelab.store import open_store

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not chromium_available(), reason="chromium is not installed"),
]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "site"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    b = Browser()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def served(tmp_path: Path, site_factory: Callable[..., Site]) -> Iterator[tuple[str, Site]]:
    site = site_factory(model_name=HOSTILE, log_line=HOSTILE_LOG)
    built = build_site(site, tmp_path / "site")
    with serve_directory(built.outdir) as base:
        yield base, site


def _clean(page_errors: list[str]) -> None:
    assert page_errors == [], page_errors


def test_every_page_renders_without_errors_and_runs_no_script(
    browser: Browser, served: tuple[str, Site]
) -> None:
    base, site = served
    pages = ["index.html", "models/tiny-moe.html", "experiments/fp8-vs-nvfp4.html",
             *(f"recipes/{r.slug}.html" for r in site.recipes),
             *(f"runs/{r.run_id}.html" for r in site.runs)]
    for rel in pages:
        with browser.page(base + rel) as page:
            _clean(page.result.errors)
            # nothing but the site itself is fetched: no CDN, no fonts, no network
            foreign = [u for u in page.result.statuses if not u.startswith((base, "data:"))]
            assert foreign == [], foreign
            assert page.result.dialogs == [], f"a script ran on {rel}"
            assert page.js("document.scripts.length") == 0, rel
            assert page.js("document.querySelectorAll('[onerror],[onload]').length") == 0, rel
            # every image (the SVG plots) actually loaded
            broken = page.js("[...document.images].filter(i => !i.complete || i.naturalWidth === 0)"
                             ".map(i => i.src)")
            assert broken == [], broken
            if rel.startswith(("recipes/", "models/", "index")):
                page.screenshot(ARTIFACTS / (rel.replace("/", "_") + ".png"))


def test_recipe_tables_hold_the_stored_values(browser: Browser, served: tuple[str, Site]) -> None:
    base, site = served
    recipe = site.recipes[0]
    with browser.page(base + f"recipes/{recipe.slug}.html") as page:
        rows = page.js(
            "[...document.querySelectorAll('#decode-table tbody tr')].map(tr => ({"
            "engine: tr.dataset.engine, prompt: +tr.dataset.prompt, run: tr.dataset.run,"
            "value: tr.querySelector('td.value').innerText,"
            "href: tr.querySelector('td.value a').getAttribute('href')}))"
        )
        expected = sorted(
            ({"engine": r.engine_version, "prompt": r.prompt_tokens, "run": r.measured.run_id,
              "value": f"{r.measured.value:.2f} tok/s",
              "href": f"../runs/{r.measured.run_id}.html"} for r in recipe.decode),
            key=lambda d: (str(d["engine"]), int(str(d["prompt"]))),
        )
        assert sorted(rows, key=lambda d: (d["engine"], d["prompt"])) == expected
        # predictions carry a visible label
        labels = page.js("[...document.querySelectorAll('#decode-table .predicted')]"
                         ".map(e => e.innerText)")
        assert labels and all("predicted" in text for text in labels)
        # the hostile model name is shown as text, in the title and the heading
        assert page.js("document.querySelector('h1').innerText").startswith(HOSTILE)
        assert HOSTILE in page.js("document.title")
        # the hostile log line is shown verbatim as text inside the troubleshooting entry
        logs = page.js("[...document.querySelectorAll('#troubleshooting pre.log')]"
                       ".map(e => e.innerText)")
        assert HOSTILE_LOG in logs
        # the memory split table holds the inspected bytes
        cells = page.js("[...document.querySelectorAll('#memory-dtype tbody tr')]"
                        ".map(tr => tr.cells[1].innerText)")
        assert recipe.memory is not None
        assert cells == [f"{p.bytes:,}" for p in recipe.memory.by_dtype]
        # no secret anywhere in the rendered text
        body = page.js("document.documentElement.outerHTML")
        assert "hf_abcdefghijklmnop" not in body


def test_every_measured_number_links_to_an_existing_run_page(
    browser: Browser, served: tuple[str, Site]
) -> None:
    base, site = served
    with browser.page(base + f"recipes/{site.recipes[0].slug}.html") as page:
        hrefs = page.js("[...new Set([...document.querySelectorAll('a.measured')]"
                        ".map(a => a.href))]")
    assert hrefs
    for href in hrefs:
        with browser.page(href) as run_page:
            _clean(run_page.result.errors)
            assert run_page.js("document.querySelector('h1').innerText").startswith("Run ")


def test_site_built_from_a_real_store(browser: Browser, tmp_path: Path) -> None:
    """The CLI path end to end: SQLite store → collect → build → Chromium."""
    url, bf16, _kv = populate(tmp_path / "results.db")
    with open_store(url) as store:
        site = collect_site(store)
    built = build_site(site, tmp_path / "site")
    with serve_directory(built.outdir) as base:
        for rel in ("index.html", "recipes/tiny-bf16.html", "recipes/tiny-kv.html",
                    f"experiments/{site.experiments[0].slug}.html",
                    f"models/{site.models[0].slug}.html", f"runs/{bf16[-1]}.html"):
            with browser.page(base + rel) as page:
                _clean(page.result.errors)
                assert page.result.dialogs == [], rel
                assert page.js("document.scripts.length") == 0, rel
                broken = page.js("[...document.images].filter(i => i.naturalWidth === 0).length")
                assert broken == 0, rel
                stable = rel.split("/")[0] if rel.startswith(("runs/", "experiments/")) else rel
                page.screenshot(ARTIFACTS / ("store_" + stable.replace("/", "_") + ".png"))
                if rel == "recipes/tiny-bf16.html":
                    kinds = page.js("[...document.querySelectorAll('#troubleshooting details')]"
                                    ".map(d => d.dataset.kind)")
                    assert {"regression", "kernel-fallback", "profiling-skipped"} <= set(kinds)
                    verified = page.js("[...document.querySelectorAll("
                                       "'#verification-table tbody tr')].map(tr => tr.cells[0]"
                                       ".innerText)")
                    assert verified[0] == "2026-07-01" and len(verified) == 7
                if rel.startswith("experiments/"):
                    assert page.js("document.getElementById('verdict').innerText") == "adopt"
                if rel.startswith("runs/"):
                    log = page.js("document.getElementById('log').innerText")
                    assert HOSTILE_LINE in log and "[redacted]" in log.lower()
                    assert "hf_zyxwvutsrq" not in log


def test_a_recipe_page_shows_the_published_figures_for_its_build(
    browser: Browser, tmp_path: Path
) -> None:
    """Issue 40: a recipe of a Hub build run on a DGX Spark shows what was published for that
    build there, as text with its source link, beside the measurements."""
    import dataclasses

    from site_records import record

    from servelab.site.collect import site_from_records

    text = 'name = "fp8-spark"\n[model]\nrepo = "Qwen/Qwen3.6-35B-A3B-FP8"\n'
    run = dataclasses.replace(record(0, "fp8-spark", "FP8", "0.32.0", 38.0), run_id="pub1",
                              recipe_text=text, hardware="dgx-spark",
                              model_id="Qwen/Qwen3.6-35B-A3B-FP8")
    site = site_from_records([run])
    [recipe] = site.recipes
    built = build_site(site, tmp_path / "site")
    with serve_directory(built.outdir) as base, \
            browser.page(base + f"recipes/{recipe.slug}.html") as page:
        _clean(page.result.errors)
        items = page.js("[...document.querySelectorAll('#published-list li')]"
                        ".map(li => ({text: li.innerText, href: li.querySelector('a') ? "
                        "li.querySelector('a').getAttribute('href') : null}))")
        assert [i["text"] for i in items] == [line for line, _ in recipe.published]
        assert any(i["text"].startswith("published: 38.27 tok/s decode, 2,048-token prompt")
                   for i in items), items
        assert all(i["href"] is None or i["href"].startswith("https://") for i in items)
