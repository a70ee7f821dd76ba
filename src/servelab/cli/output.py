"""Shared output options: a Rich table by default, or ``--json`` / ``--csv`` / ``--markdown``.

Every command that prints results takes the same three flags with the same meaning:

* ``--json``: one JSON document on stdout (each command documents its schema);
* ``--csv``: the command's main table as CSV (header row first): one value per cell, numbers
  without units or thousands separators, the unit in the column's name (a table may carry
  a machine form of its own, :attr:`Table.csv`; otherwise a cell that is a formatted number
  such as ``5,752`` is written ``5752``);
* ``--markdown``: every table as a GitHub-flavoured Markdown table.

At most one may be given. Commands build :class:`Table` values and a JSON document, then call
:func:`emit`; nothing else in the command decides how output looks.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from servelab.errors import UsageError

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document (schema in the command's docs).")
]
CsvOpt = Annotated[bool, typer.Option("--csv", help="Print the main table as CSV.")]
MarkdownOpt = Annotated[bool, typer.Option("--markdown", help="Print tables as Markdown.")]
BriefOpt = Annotated[bool, typer.Option(
    "--brief", help="Print only the answer block (at most 10 lines), not the details.")]
WideOpt = Annotated[bool, typer.Option(
    "--wide", help="Every column in the tables (the default fits 80 columns).")]
DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Results database: SQLite path or postgresql:// URL "
        "(default: $SERVELAB_DB, else results.db in $SERVELAB_HOME or the user data dir).",
    ),
]
# metavar "<path>", not Typer's "<list[Path]>": that wider metavar column left too little room
# for option names at 80 columns (plan's --no-enable-prefix-caching was cut; tests/cli/
# test_help_width.py checks every command)
HardwareFileOpt = Annotated[
    list[Path] | None,
    typer.Option("--hardware-file", metavar="<path>",
                 help="TOML file of user hardware profiles (repeatable)."),
]

TABLE, JSON, CSV, MARKDOWN = "table", "json", "csv", "markdown"


@dataclass(frozen=True, slots=True)
class Table:
    """A titled table of already-formatted cells."""

    title: str
    columns: tuple[str, ...]
    rows: Sequence[Sequence[str]] = ()
    caption: str | None = None
    no_wrap: tuple[str, ...] = ()
    """Columns never folded (ids to copy); the others fold to fit the terminal."""
    csv: tuple[tuple[str, ...], Sequence[Sequence[object]]] | None = None
    """The ``--csv`` form, when the shown cells carry units or labels ("67,366 tokens",
    "100.5 bound"): column names with their units and plain values (None: empty)."""


def pick_format(
    as_json: bool,
    as_csv: bool,
    as_markdown: bool,
    *,
    offered: Sequence[str] = (JSON, CSV, MARKDOWN),
) -> str:
    """The one output format asked for; UsageError when several are (naming the ``offered``
    flags: a command without ``--csv`` passes ``(JSON, MARKDOWN)``)."""
    chosen = [n for n, on in ((JSON, as_json), (CSV, as_csv), (MARKDOWN, as_markdown)) if on]
    if len(chosen) > 1:
        flags = ", ".join(f"--{f}" for f in offered)
        raise UsageError(f"choose one of {flags} (got {', '.join(chosen)})")
    return chosen[0] if chosen else TABLE


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(tables: Sequence[Table]) -> str:
    """Tables as Markdown sections."""
    out: list[str] = []
    for t in tables:
        if t.title:
            out.append(f"### {_md_cell(t.title)}\n")
        out.append("| " + " | ".join(_md_cell(c) for c in t.columns) + " |")
        out.append("|" + "|".join("---" for _ in t.columns) + "|")
        for row in t.rows:
            out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
        if t.caption:
            out.append(f"\n{_md_cell(t.caption)}")
        out.append("")
    return "\n".join(out)


_FORMATTED_NUMBER = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")


def csv_value(value: object) -> str:
    """A CSV cell: empty for None, a number as Python writes it (no separators, no unit),
    a formatted number's separators dropped."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return repr(round(value, 6))
    text = str(value)
    return text.replace(",", "") if _FORMATTED_NUMBER.fullmatch(text) else text


def to_csv(table: Table) -> str:
    """One table as CSV text (its machine form when it has one)."""
    columns, rows = table.csv if table.csv is not None else (table.columns, table.rows)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([csv_value(v) for v in row] for row in rows)
    return buf.getvalue()


def emit(
    fmt: str,
    *,
    doc: Any,
    tables: Sequence[Table],
    console: Console | None = None,
    notes: Sequence[str] = (),
) -> None:
    """Print ``doc`` (JSON) or ``tables`` in the chosen format; ``notes`` follow tables."""
    if fmt == JSON:
        typer.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    if fmt == CSV:
        typer.echo(to_csv(tables[0]) if tables else "", nl=False)
        return
    if fmt == MARKDOWN:
        md = to_markdown(tables)
        if notes:
            md += "\n" + "\n".join(f"- {_md_cell(n)}" for n in notes) + "\n"
        typer.echo(md, nl=False)
        return
    con = console or stdout_console()
    for t in tables:
        rt = RichTable(
            title=escape(t.title) if t.title else None,
            box=box.SIMPLE_HEAD,
            caption=escape(t.caption) if t.caption else None,
        )
        for c in t.columns:
            keep = c in t.no_wrap
            rt.add_column(escape(c), overflow="ellipsis" if keep else "fold", no_wrap=keep,
                          min_width=max((len(r[t.columns.index(c)]) for r in t.rows),
                                        default=None) if keep else None)
        for row in t.rows:
            rt.add_row(*(escape(c) for c in row))
        con.print(rt)
    for n in notes:
        con.print(escape(n))


PIPE_WIDTH = 1000
"""Console width when stdout is not a terminal (rich would assume 80 and fold every cell)."""


def stdout_console() -> Console:
    """The console for results on stdout: the terminal's width, or, into a pipe or a log where
    there is no width to fit, wide enough that tables keep their natural width (rich would
    assume 80 columns and cut every heading to an ellipsis)."""
    con = Console(highlight=False, soft_wrap=False)
    return con if con.is_terminal else Console(highlight=False, soft_wrap=False,
                                               width=PIPE_WIDTH)


def num(value: float | int | None, digits: int = 2) -> str:
    """A number for a table cell (empty for None)."""
    if value is None:
        return ""
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"
