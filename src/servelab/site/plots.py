"""SVG plots for recipe pages (matplotlib, Agg/SVG canvas, reproducible output).

Each function takes page-model values and returns the SVG document as a string. The output is
byte-for-byte reproducible: a fixed ``svg.hashsalt``, no date in the metadata, text kept as
``<text>`` elements (escaped by matplotlib's SVG writer). Figures are created directly (no
pyplot global state), so plotting is thread-safe and never opens a window.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from servelab.site.model import HistorySeries, MeasuredRow, MemorySplit
from servelab.units import GIB

_RC: dict[Any, Any] = {
    "svg.hashsalt": "servelab-site",
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
}
_COLORS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#57606a")


def _to_svg(fig: Figure) -> str:
    FigureCanvasSVG(fig)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "servelab"})
    return buf.getvalue()


def decode_vs_prompt(series: Mapping[str, Sequence[MeasuredRow]], *, title: str) -> str:
    """Decode tok/s against prompt length, one line per build (or engine version).

    Predictions, where rows carry them, are drawn dashed and labelled "predicted".
    """
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(6.4, 3.4), layout="constrained")
        ax = fig.add_subplot()
        for i, (label, rows) in enumerate(series.items()):
            ordered = sorted(rows, key=lambda r: r.prompt_tokens)
            color = _COLORS[i % len(_COLORS)]
            xs = [r.prompt_tokens for r in ordered]
            ys = [r.measured.value for r in ordered]
            ax.plot(xs, ys, marker="o", color=color, label=f"{label} (measured)")
            lows = [r.measured.ci_low for r in ordered]
            highs = [r.measured.ci_high for r in ordered]
            if all(v is not None for v in (*lows, *highs)):
                ax.fill_between(xs, [float(v or 0) for v in lows], [float(v or 0) for v in highs],
                                color=color, alpha=0.15, linewidth=0)
            pred = [(r.prompt_tokens, r.predicted.value) for r in ordered if r.predicted]
            if pred:
                ax.plot([p[0] for p in pred], [p[1] for p in pred], linestyle="--", marker="x",
                        color=color, alpha=0.7, label=f"{label} (predicted)")
        ax.set_xscale("log", base=2)
        ticks = sorted({r.prompt_tokens for rows in series.values() for r in rows})
        if ticks:
            ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
            ax.minorticks_off()
        ax.set_xlabel("prompt length (tokens)")
        ax.set_ylabel("decode (tok/s, single stream)")
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        if series:
            ax.legend(fontsize=7, loc="best")
        return _to_svg(fig)


def history(series: HistorySeries, *, title: str) -> str:
    """A metric over time, with detected change points marked as vertical lines."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(6.4, 3.0), layout="constrained")
        ax = fig.add_subplot()
        xs = list(range(len(series.points)))
        ys = [p.value.value for p in series.points]
        ax.plot(xs, ys, marker="o", color=_COLORS[0], label="measured")
        for cp in series.change_points:
            ax.axvline(cp.index - 0.5, color=_COLORS[1], linestyle="--", linewidth=1)
            ax.annotate(f"change {cp.relative_change.value:+.1f}%", (cp.index - 0.5, max(ys)),
                        color=_COLORS[1], fontsize=7, ha="center", va="bottom")
        ax.set_xticks(xs, [p.when[:10] for p in series.points], rotation=30, ha="right",
                      fontsize=7)
        ax.set_ylabel(series.unit)
        ax.set_ylim(bottom=0, top=max(ys) * 1.15 if ys and max(ys) > 0 else None)
        ax.set_title(title)
        return _to_svg(fig)


def memory_split(split: MemorySplit, *, kv_cache_gib: float | None, title: str) -> str:
    """A horizontal stacked bar: checkpoint bytes by tensor role, plus the KV pool if known."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(6.4, 2.2), layout="constrained")
        ax = fig.add_subplot()
        left = 0.0
        parts = [(p.label, p.bytes / GIB) for p in split.by_role]
        if kv_cache_gib is not None:
            parts.append(("KV cache (engine)", kv_cache_gib))
        total = sum(gib for _, gib in parts)
        unit, scale = ("GiB", 1.0) if total >= 0.5 else ("MiB", 1024.0)
        for i, (label, gib) in enumerate(parts):
            ax.barh([0], [gib * scale], left=left, color=_COLORS[i % len(_COLORS)],
                    label=f"{label}: {gib * scale:.2f} {unit}")
            left += gib * scale
        ax.set_yticks([])
        ax.set_xlabel(unit)
        ax.grid(axis="y", visible=False)
        ax.set_title(title)
        fig.legend(fontsize=7, loc="outside lower center", ncols=3, frameon=False)
        return _to_svg(fig)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (lower latency x, higher throughput y),
    ordered by latency."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return front


#: First word of a series drawn as predicted (dashed, hollow markers, off the Pareto front).
PREDICTED = "predicted"


def pareto(series: Mapping[str, Sequence[tuple[float, float, int]]], *, y_label: str,
           title: str) -> str:
    """Throughput against latency, one marker series per prompt length (points labelled with
    their concurrency), and the Pareto front over the measured ones as a step line. A series
    whose label starts with :data:`PREDICTED` is the plan's prediction for that prompt length:
    dashed, hollow markers, the colour of its measured series, never on the front."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(6.4, 3.6), layout="constrained")
        ax = fig.add_subplot()
        every: list[tuple[float, float]] = []
        colors: dict[str, str] = {}
        for label, pts in series.items():
            predicted = label.split()[0] == PREDICTED
            key = label.removeprefix(PREDICTED).strip()
            color = colors.setdefault(key, _COLORS[len(colors) % len(_COLORS)])
            ordered = sorted(pts)
            ax.plot([p[0] for p in ordered], [p[1] for p in ordered], marker="o", color=color,
                    linestyle="--" if predicted else ":", label=label,
                    markerfacecolor="none" if predicted else color)
            if predicted:
                continue
            for x, y, c in ordered:
                ax.annotate(f"c={c}", (x, y), textcoords="offset points", xytext=(4, 3),
                            fontsize=7, color=color)
            every += [(x, y) for x, y, _ in pts]
        front = pareto_front(every)
        if len(front) > 1:
            ax.step([p[0] for p in front], [p[1] for p in front], where="post",
                    color="#57606a", linewidth=1.2, alpha=0.8, label="Pareto front")
        ax.set_xlabel("time per output token (ms, per stream; lower is better)")
        ax.set_ylabel(y_label)
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        if series:
            ax.legend(fontsize=7, loc="best")
        return _to_svg(fig)
