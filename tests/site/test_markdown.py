"""The Markdown twins, rendered by a real CommonMark parser (markdown-it-py, with tables):
hostile text stays text, tables keep their shape, and links point inside the site."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt
from site_samples import HOSTILE, HOSTILE_LOG, build_site

from servelab.site.render import render_site


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.tables: list[list[int]] = []  # per table: cells per row
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append(0)
        elif tag in ("td", "th") and self.tables and self.tables[-1]:
            self.tables[-1][-1] += 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def rendered() -> dict[str, _Collect]:
    files = render_site(build_site(model_name=HOSTILE, log_line=HOSTILE_LOG,
                                   hardware="DGX | Spark <b>x</b>"))
    md = MarkdownIt("commonmark").enable("table")
    out = {}
    for name, text in files.items():
        if name.endswith(".md"):
            parser = _Collect()
            parser.feed(md.render(text))
            out[name] = parser
    return out


def test_markdown_twins_render_without_markup_from_data(rendered: dict[str, _Collect]) -> None:
    assert {"index.md", "recipes/tiny-fp8.md", "models/tiny-moe.md",
            "experiments/fp8-vs-nvfp4.md"} <= set(rendered)
    for name, doc in rendered.items():
        tags = {t for t, _ in doc.tags}
        assert not tags & {"script", "iframe", "object", "style"}, name
        for tag, attrs in doc.tags:
            assert not any(k.startswith("on") for k in attrs), (name, tag, attrs)
            if tag == "img":  # only the site's own plots
                assert re.fullmatch(r"[a-z0-9-]+\.svg", attrs.get("src") or ""), attrs
            if tag == "a":
                href = attrs.get("href") or ""
                assert not href.lower().startswith(("javascript:", "http:", "https:")), href


def test_hostile_text_is_shown_verbatim(rendered: dict[str, _Collect]) -> None:
    text = "".join(rendered["recipes/tiny-fp8.md"].text)
    assert HOSTILE in text  # as text: the parser decoded the entities back
    assert HOSTILE_LOG in text


def test_tables_keep_their_shape(rendered: dict[str, _Collect]) -> None:
    for name, doc in rendered.items():
        # a stray "|" in data would split a cell: every row of a table has the header's width
        for table in doc.tables:
            assert len(set(table)) == 1, (name, table)
    assert len(rendered["recipes/tiny-fp8.md"].tables) >= 8
