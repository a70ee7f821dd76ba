"""Rendering the page model: escaping, redaction, provenance, Markdown twin."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser

import pytest
from site_samples import HOSTILE, HOSTILE_LOG, SECRET, build_site

from servelab.redact import redact_args as redact_argv
from servelab.redact import redact_text as redact
from servelab.site.fmt import slugify
from servelab.site.model import Site
from servelab.site.render import md_code, md_escape, render_site, run_file


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(html: str) -> _Tags:
    p = _Tags()
    p.feed(html)
    p.close()
    return p


@pytest.fixture(scope="module")
def hostile_files() -> dict[str, str]:
    """The sample site with a hostile model name and log line, rendered once per module."""
    return render_site(build_site(model_name=HOSTILE, log_line=HOSTILE_LOG))


@pytest.fixture(scope="module")
def plain_files() -> dict[str, str]:
    """The sample site rendered once per module."""
    return render_site(build_site())


def test_hostile_text_is_escaped_in_html(hostile_files: dict[str, str]) -> None:
    files = hostile_files
    htmls = {k: v for k, v in files.items() if k.endswith(".html")}
    assert len(htmls) >= 8
    for name, html in htmls.items():
        parsed = _parse(html)
        tags = [t for t, _ in parsed.tags]
        assert "script" not in tags, name
        assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")], name
        for _, attrs in parsed.tags:
            for value in attrs.values():
                assert not (value or "").lower().startswith("javascript:"), name
    recipe = htmls["recipes/tiny-fp8.html"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in recipe
    assert HOSTILE in "".join(_parse(recipe).text)  # shown as text, not markup
    assert HOSTILE_LOG in "".join(_parse(recipe).text)


def test_hostile_text_is_escaped_in_markdown(hostile_files: dict[str, str]) -> None:
    files = hostile_files
    mds = {k: v for k, v in files.items() if k.endswith(".md")}
    assert "recipes/tiny-fp8.md" in mds and "index.md" in mds
    for name, md in mds.items():
        outside_code = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1$", "", md)
        assert "<script" not in outside_code, name
        assert "<img" not in outside_code, name
        assert "](javascript:" not in outside_code, name
    # the log line survives verbatim inside a fence it cannot close
    assert md_code(HOSTILE_LOG).startswith("```\n")
    assert HOSTILE_LOG in mds["recipes/tiny-fp8.md"]
    fenced = md_code("a ``` b")
    assert fenced.startswith("````\n") and fenced.endswith("\n````")


def test_secrets_are_never_rendered(plain_files: dict[str, str]) -> None:
    files = plain_files
    for name, content in files.items():
        assert SECRET not in content, name
        assert SECRET[:12] not in content, name
    assert "--api-key &#39;[REDACTED]&#39;" in files["recipes/tiny-fp8.html"] or (
        "--api-key '[REDACTED]'" in files["recipes/tiny-fp8.html"])


def test_redaction_rules() -> None:
    """Pages mask with the one masker (servelab.redact), as the store does."""
    assert redact(f"token {SECRET} end") == "token [REDACTED] end"
    assert redact("postgresql://bob:hunter2@db/x") == "postgresql://bob:[REDACTED]@db/x"
    assert redact("HF_TOKEN=abc123 OTHER=1") == "HF_TOKEN=[REDACTED] OTHER=1"
    assert redact("Authorization: Bearer abcdefgh12345") == "Authorization: [REDACTED]"
    assert redact("--api-key=xyz") == "--api-key=[REDACTED]"
    assert redact(redact("--api-key=xyz")) == "--api-key=[REDACTED]"
    assert redact("Model loading took 35.28 GiB") == "Model loading took 35.28 GiB"
    assert redact_argv(("vllm", "--api-key", "s3cret", "--port", "8000")) == (
        "vllm", "--api-key", "[REDACTED]", "--port", "8000")


def test_every_measured_number_names_its_run(plain_files: dict[str, str]) -> None:
    files = plain_files
    recipe = files["recipes/tiny-fp8.html"]
    parsed = _parse(recipe)
    measured = [a for t, a in parsed.tags if t == "a" and "measured" in (a.get("class") or "")]
    assert len(measured) > 20
    for attrs in measured:
        run = attrs["data-run"]
        assert run is not None
        assert attrs["href"] == f"../runs/{run_file(run)}"
        assert f"runs/{run_file(run)}" in files
        assert (attrs.get("title") or "").startswith(f"measured in run {run}")
    predicted = [a for t, a in parsed.tags if t == "span" and a.get("class") == "num predicted"]
    assert predicted and all((a.get("title") or "").startswith("predicted:") for a in predicted)
    footer = 1  # the footer explains the label once
    assert recipe.count('<span class="tag">predicted</span>') == len(predicted) + footer
    derived = [a for t, a in parsed.tags if t == "span" and a.get("class") == "num derived"]
    assert derived and all(a.get("data-runs") for a in derived)


def test_tables_hold_the_page_values(site_factory: Callable[..., Site]) -> None:
    site = site_factory()
    md = render_site(site)["recipes/tiny-fp8.md"]
    page = site.recipes[0]
    for row in page.decode:
        line = next(ln for ln in md.splitlines()
                    if ln.startswith(f"| {row.engine_version} | {row.prompt_tokens:,} | [")
                    and "decode" not in ln and f"runs/{row.measured.run_id}.html" in ln)
        assert f"[{row.measured.value:.2f} tok/s]" in line
        if row.predicted:
            assert row.predicted.low is not None and row.predicted.high is not None
            assert (f"{row.predicted.value:.2f} \\({row.predicted.low:.2f}–"
                    f"{row.predicted.high:.2f}\\) tok/s *(predicted)*") in line
    assert page.memory is not None
    for part in page.memory.by_dtype:
        assert f"| {md_escape(part.label)} | {part.bytes:,} |" in md


def test_pages_and_links(hostile_files: dict[str, str]) -> None:
    files = hostile_files
    for rel, content in files.items():
        if not rel.endswith(".html"):
            continue
        base = rel.rsplit("/", 1)[0] + "/" if "/" in rel else ""
        for href in re.findall(r'(?:href|src)="([^"#:]+)"', content):
            target = base + href
            parts: list[str] = []
            for piece in target.split("/"):
                if piece == "..":
                    parts.pop()
                elif piece:
                    parts.append(piece)
            assert "/".join(parts) in files, f"{rel} links to missing {href}"
    # file names never carry the hostile text
    assert all(re.fullmatch(r"[a-z0-9/._-]+", name) for name in files), sorted(files)


def test_slugify_and_run_file() -> None:
    assert slugify(HOSTILE) == "script-alert-1-script"
    assert slugify("Qwen/Qwen3.6-35B-A3B-FP8") == "qwen-qwen3-6-35b-a3b-fp8"
    assert slugify("...") == "x"
    assert run_file("abc_12-3") == "abc_12-3.html"
    odd = run_file("../../etc/passwd")
    assert odd.startswith("run-") and "/" not in odd and odd != run_file("../../etc/passwdx")


def test_rendering_is_reproducible(plain_files: dict[str, str]) -> None:
    assert render_site(build_site()) == plain_files
