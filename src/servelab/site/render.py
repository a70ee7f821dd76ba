"""Render the page model to HTML and Markdown strings (pure: no file I/O).

:func:`render_site` returns every file of the site as ``{relative path: content}``; the builder
(:mod:`servelab.site.build`) writes them. HTML goes through Jinja2 with autoescaping on; the
Markdown twin escapes Markdown and HTML metacharacters in every interpolated string, so hostile
text (a model name ``<script>…``, a log line) stays inert in both. Every interpolated string also
passes :func:`~servelab.redact.redact_text`, so secrets never reach a page.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shlex
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

import jinja2
from markupsafe import Markup, escape

from servelab.predict.ledger import LedgerRow
from servelab.redact import redact_args, redact_text
from servelab.site import plots, prose
from servelab.site.fmt import (
    format_bytes_gib,
    format_ci,
    format_number,
    format_value,
    provenance,
)
from servelab.site.model import (
    Derived,
    Measured,
    MeasuredRow,
    ModelIndexPage,
    Predicted,
    RecipePage,
    Site,
    Text,
)
from servelab.units import GIB

_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def run_file(run_id: str) -> str:
    """The file name (without directory) of a run's page; safe for any run id."""
    if _SAFE_ID.fullmatch(run_id):
        return f"{run_id}.html"
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    return f"run-{digest}.html"


# --- numbers and text: HTML -------------------------------------------------------------------


def _html_num(num: Measured | Predicted | Derived, root: str) -> Markup:
    text = escape(format_number(num))
    title = escape(redact_text(provenance(num)))
    if isinstance(num, Measured):
        href = escape(f"{root}runs/{run_file(num.run_id)}")
        return Markup(
            f'<a class="num measured" href="{href}" title="{title}" '
            f'data-run="{escape(num.run_id)}">{text}</a>'
        )
    if isinstance(num, Predicted):
        return Markup(
            f'<span class="num predicted" title="{title}">{text}'
            '<span class="tag">predicted</span></span>'
        )
    runs = " ".join(num.run_ids)
    return Markup(
        f'<span class="num derived" title="{title}" data-runs="{escape(runs)}">{text}</span>'
    )


_RUN_REF = re.compile(r"\bin run (?P<id>[0-9A-Za-z][0-9A-Za-z._-]*[0-9A-Za-z])")


def _html_runs(text: str, root: str) -> Markup:
    """``text`` escaped, each "in run ID" linking the run's page (a measured number's run)."""
    out, last = Markup(), 0
    for m in _RUN_REF.finditer(text):
        rid = m["id"]
        out += escape(redact_text(text[last:m.start("id")]))
        out += Markup(f'<a class="run" href="{escape(root)}runs/{escape(run_file(rid))}">'
                      f"{escape(rid)}</a>")
        last = m.end("id")
    return out + escape(redact_text(text[last:]))


def _html_text(segments: Text, root: str) -> Markup:
    out = Markup()
    for seg in segments:
        out += escape(redact_text(seg)) if isinstance(seg, str) else _html_num(seg, root)
    return out


# --- numbers and text: Markdown ---------------------------------------------------------------


class MdSafe(str):
    """A string already escaped for Markdown (passes the Markdown finalizer unchanged)."""

    __slots__ = ()


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~])")


def md_escape(text: str) -> str:
    """Escape a plain string for Markdown: HTML metacharacters become entities, Markdown
    punctuation is backslash-escaped, line breaks become spaces (tables stay one line)."""
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = _MD_SPECIAL.sub(r"\\\1", out)
    return re.sub(r"[\r\n]+", " ", out)


def _md_runs(text: str, root: str) -> MdSafe:
    """``text`` escaped for Markdown, each "in run ID" linking the run's page."""
    out, last = [], 0
    for m in _RUN_REF.finditer(text):
        rid = m["id"]
        out.append(md_escape(redact_text(text[last:m.start("id")])))
        out.append(f"[{md_escape(rid)}]({_md_url(f'{root}runs/{run_file(rid)}')})")
        last = m.end("id")
    out.append(md_escape(redact_text(text[last:])))
    return MdSafe("".join(out))


def _md_num(num: Measured | Predicted | Derived, root: str) -> MdSafe:
    text = md_escape(format_number(num))
    if isinstance(num, Measured):
        title = provenance(num).replace('"', "'")
        href = _md_url(f"{root}runs/{run_file(num.run_id)}")
        return MdSafe(f'[{text}]({href} "{md_escape(title)}")')
    if isinstance(num, Predicted):
        return MdSafe(f"{text} *(predicted)*")
    runs = (f"runs {', '.join(num.run_ids)}" if len(num.run_ids) <= 2
            else f"from {len(num.run_ids)} runs")
    return MdSafe(f"{text} ({md_escape(runs)})")


def _md_text(segments: Text, root: str) -> MdSafe:
    return MdSafe(
        "".join(
            md_escape(redact_text(s)) if isinstance(s, str) else _md_num(s, root) for s in segments
        )
    )


def _md_url(href: str) -> str:
    return urllib.parse.quote(href, safe="/.#:-_~")


def md_link(label: str, href: str) -> MdSafe:
    """A Markdown link with an escaped label and a percent-encoded target."""
    return MdSafe(f"[{md_escape(label)}]({_md_url(href)})")


def md_run_link(run_id: str, root: str) -> MdSafe:
    """A Markdown link to a run's page."""
    return md_link(run_id, f"{root}runs/{run_file(run_id)}")


def md_raw_url(href: str) -> MdSafe:
    """A relative URL for use inside Markdown link syntax."""
    return MdSafe(_md_url(href))


def md_code(code: str, lang: str = "") -> MdSafe:
    """A fenced code block whose fence cannot be closed by the code inside it."""
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return MdSafe(f"{fence}{lang}\n{redact_text(code)}\n{fence}")


# --- derived strings for pages -----------------------------------------------------------------


def engine_command(page: RecipePage) -> str:
    """The engine command, shell-quoted, one flag per line, secrets redacted."""
    argv = redact_args(page.command)
    lines: list[list[str]] = [[]]
    for arg in argv:
        if arg.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(shlex.quote(arg))
    return " \\\n  ".join(" ".join(line) for line in lines)


def reproduce_command(page: RecipePage) -> str:
    """The command a reader runs to reproduce the page: ``servelab run`` on its recipe."""
    return f"servelab run {shlex.quote(page.slug + '.toml')}"


def curl_examples(page: RecipePage) -> tuple[str, ...]:
    """curl examples for the served model name, with and (if it applies) without thinking."""
    url = f"http://127.0.0.1:{page.port}/v1/chat/completions"
    plain = {
        "model": page.served_model_name,
        "messages": [{"role": "user", "content": "Explain speculative decoding in two sentences."}],
        "max_tokens": 256,
        "temperature": 0,
    }
    examples = [plain]
    if page.thinking_kwarg:
        examples.append({
            "model": page.served_model_name,
            "messages": [{"role": "user", "content": "Write an LRU cache in Python."}],
            "max_tokens": 512,
            "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": False},
        })
    return tuple(
        f"curl -s {url} \\\n  -H 'Content-Type: application/json' \\\n"
        f"  -d {shlex.quote(_json_body(body))}"
        for body in examples
    )


def _json_body(body: dict[str, Any]) -> str:
    """JSON with one top-level key per line, as people write request bodies by hand."""
    items = [f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=False, separators=(',', ':'))}"
             for k, v in body.items()]
    return "{" + ",\n       ".join(items) + "}"


def _plot_files(page: RecipePage) -> dict[str, str]:
    """SVG plots of one recipe page: {file name under recipes/: svg}."""
    out: dict[str, str] = {}
    if page.decode:
        by_version: dict[str, list[MeasuredRow]] = {}
        for row in page.decode:
            by_version.setdefault(f"{page.build_name} · {row.engine_version}", []).append(row)
        out[f"{page.slug}-decode.svg"] = plots.decode_vs_prompt(
            by_version, title=f"{page.model_name}: decode vs prompt length")
    if page.memory is not None:
        kv = None
        obs = [o for o in page.engine if o.kv_cache is not None]
        if obs and obs[-1].kv_cache is not None:
            kv = obs[-1].kv_cache.value
        out[f"{page.slug}-memory.svg"] = plots.memory_split(
            page.memory, kv_cache_gib=kv, title=f"{page.build_name}: memory split")
    pareto = pareto_series(page)
    if pareto is not None:
        series_, y_label = pareto
        out[f"{page.slug}-pareto.svg"] = plots.pareto(
            series_, y_label=y_label, title=f"{page.build_name}: throughput vs latency")
    for i, series in enumerate(page.history):
        if series.points:
            out[f"{page.slug}-history-{i}.svg"] = plots.history(
                series, title=f"{page.build_name}: {series.metric}")
    return out


_PARALLEL_FLAGS = ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size")


def engine_gpus(page: RecipePage) -> int:
    """GPUs one engine of the recipe uses: the product of its TP, PP and DP sizes."""
    n = 1
    params = dict(page.key_params)
    for flag in _PARALLEL_FLAGS:
        v = params.get(flag) or params.get(flag.replace("-", "_"))
        if v is not None and v.isdigit() and int(v) > 0:
            n *= int(v)
    return n


def pareto_series(page: RecipePage
                  ) -> tuple[dict[str, list[tuple[float, float, int]]], str] | None:
    """Points of the throughput/latency plot for the newest engine version: per prompt length,
    (TPOT ms = 1000 ÷ per-stream decode, streams × per-stream decode ÷ GPUs, streams), from
    the single-stream and several-stream measurements; None with fewer than two points."""
    version = prose.primary_version(page)
    gpus = engine_gpus(page)
    out: dict[str, list[tuple[float, float, int]]] = {}
    rows = [(r.prompt_tokens, 1, r.measured.value) for r in prose.rows_for(page.decode, version)]
    rows += [(r.prompt_tokens, r.concurrency, r.decode.value) for r in page.concurrent
             if r.engine_version == version and not r.open_loop]
    for prompt, streams, decode in rows:
        if decode > 0:
            out.setdefault(f"prompt {prompt:,}", []).append(
                (1000.0 / decode, streams * decode / gpus, streams))
    if sum(len(v) for v in out.values()) < 2 or not page.concurrent:
        return None
    measured = {k.split()[1] for k in out}
    for p in page.predicted_load:  # the plan's prediction at the measured prompt lengths
        if f"{p.prompt_tokens:,}" in measured and p.stream_tok_s > 0:
            out.setdefault(f"{plots.PREDICTED} prompt {p.prompt_tokens:,}", []).append(
                (1000.0 / p.stream_tok_s, p.concurrency * p.stream_tok_s / gpus, p.concurrency))
    per = "GPU" if page.hardware not in ("host", "cpu") else "engine"
    label = (f"output tok/s per {per} (streams × per-stream decode"
             + (f" ÷ {gpus} GPUs)" if gpus > 1 else ")"))
    def order(kv: tuple[str, list[tuple[float, float, int]]]) -> tuple[int, bool]:
        words = kv[0].split()
        return int(words[-1].replace(",", "")), words[0] == plots.PREDICTED

    return dict(sorted(out.items(), key=order)), label


def decode_lengths(index: ModelIndexPage) -> list[int]:
    """Every prompt length at which some build of the model has a decode measurement."""
    return sorted({n for b in index.builds for n, _ in b.decode})


def model_decode_plot(index: ModelIndexPage, recipes: Iterable[RecipePage]) -> str | None:
    """Decode vs prompt length for every build of a model (latest engine version per build)."""
    series: dict[str, list[MeasuredRow]] = {}
    for page in recipes:
        version = prose.primary_version(page)
        rows = prose.rows_for(page.decode, version)
        if rows:
            series[f"{page.build_name} · {version}"] = rows
    if not series:
        return None
    return plots.decode_vs_prompt(series, title=f"{index.model_name}: decode by build")


# --- environments -----------------------------------------------------------------------------


def _html_finalize(value: Any) -> Any:
    if isinstance(value, str) and not isinstance(value, Markup):
        return redact_text(value)
    return value


def _md_finalize(value: Any) -> Any:
    if isinstance(value, MdSafe):
        return value
    if isinstance(value, str):
        return md_escape(redact_text(value))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return md_escape(str(value))
    return value


def _loader() -> jinja2.BaseLoader:
    return jinja2.PackageLoader("servelab.site", "templates")


def ledger_groups(
    rows: Sequence[LedgerRow],
) -> list[tuple[tuple[str, str, str], list[LedgerRow]]]:
    """Ledger rows grouped by (hardware, build, kind), in ledger order (one source each)."""
    groups: dict[tuple[str, str, str], list[LedgerRow]] = {}
    for r in rows:
        groups.setdefault((r.hardware, r.model, r.kind), []).append(r)
    return list(groups.items())


def _common(env: jinja2.Environment) -> None:
    env.filters["groupby_rows"] = ledger_groups
    env.globals.update(
        prose=prose,
        format_number=format_number,
        format_value=format_value,
        format_ci=format_ci,
        format_bytes_gib=format_bytes_gib,
        provenance=provenance,
        run_file=run_file,
        GIB=GIB,
        engine_command=engine_command,
        reproduce_command=reproduce_command,
        curl_examples=curl_examples,
        decode_lengths=decode_lengths,
    )


@functools.cache
def html_env() -> jinja2.Environment:
    """The HTML environment: autoescape on, strict undefined, secrets redacted."""
    env = jinja2.Environment(
        loader=_loader(), autoescape=True, undefined=jinja2.StrictUndefined,
        finalize=_html_finalize, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    _common(env)
    env.globals.update(num=_html_num, text=_html_text, runs_linked=_html_runs)
    return env


@functools.cache
def md_env() -> jinja2.Environment:
    """The Markdown environment: every interpolated string is Markdown- and HTML-escaped."""
    env = jinja2.Environment(
        loader=_loader(), autoescape=False, undefined=jinja2.StrictUndefined,
        finalize=_md_finalize, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    _common(env)
    env.globals.update(num=_md_num, text=_md_text, runs_linked=_md_runs, code=md_code,
                       link=md_link,
                       run_link=md_run_link, raw=md_raw_url)
    env.filters["md"] = MdSafe
    return env


# --- the site ---------------------------------------------------------------------------------


def _render(env: jinja2.Environment, name: str, **ctx: Any) -> str:
    return env.get_template(name).render(**ctx)


def _sorted_rows(rows: Iterable[MeasuredRow]) -> list[MeasuredRow]:
    return sorted(rows, key=lambda r: (prose.version_key(r.engine_version), r.prompt_tokens))


def render_recipe(page: RecipePage, site: Site) -> dict[str, str]:
    """A recipe page's files: HTML, Markdown twin and plots, keyed by path under the site."""
    plots_ = _plot_files(page)
    ctx: dict[str, Any] = {
        "page": page, "site": site, "root": "../", "plots": sorted(plots_),
        "headline": prose.headline(page), "key_facts": prose.key_facts(page),
        "software": prose.software_requirements(page),
        "troubleshooting": prose.troubleshooting(page),
        "versions": prose.engine_versions(page),
        "decode_rows": _sorted_rows(page.decode), "prefill_rows": _sorted_rows(page.prefill),
    }
    out = {f"recipes/{name}": svg for name, svg in plots_.items()}
    out[f"recipes/{page.slug}.html"] = _render(html_env(), "recipe.html.j2", **ctx)
    out[f"recipes/{page.slug}.md"] = _render(md_env(), "recipe.md.j2", **ctx)
    if page.recipe_text:
        out[f"recipes/{page.slug}.toml"] = page.recipe_text
    return out


def render_site(site: Site) -> dict[str, str]:
    """Every file of the site, ``{relative path: content}``."""
    html, md = html_env(), md_env()
    files: dict[str, str] = {"style.css": _render(html, "style.css")}
    for page in site.recipes:
        files.update(render_recipe(page, site))
    for index in site.models:
        recipes = [r for r in site.recipes if r.model_slug == index.slug]
        plot = model_decode_plot(index, recipes)
        if plot is not None:
            files[f"models/{index.slug}-decode.svg"] = plot
        ctx = {"index": index, "site": site, "root": "../", "plot": plot is not None}
        files[f"models/{index.slug}.html"] = _render(html, "model.html.j2", **ctx)
        files[f"models/{index.slug}.md"] = _render(md, "model.md.j2", **ctx)
    for exp in site.experiments:
        ctx = {"exp": exp, "site": site, "root": "../"}
        files[f"experiments/{exp.slug}.html"] = _render(html, "experiment.html.j2", **ctx)
        files[f"experiments/{exp.slug}.md"] = _render(md, "experiment.md.j2", **ctx)
    for run in site.runs:
        files[f"runs/{run_file(run.run_id)}"] = _render(
            html, "run.html.j2", run=run, site=site, root="../")
    files["calibration.html"] = _render(html, "calibration.html.j2", site=site, root="")
    files["calibration.md"] = _render(md, "calibration.md.j2", site=site, root="")
    files["index.html"] = _render(html, "index.html.j2", site=site, root="")
    files["index.md"] = _render(md, "index.md.j2", site=site, root="")
    return files

