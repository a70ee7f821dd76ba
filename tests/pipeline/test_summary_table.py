"""``servelab run``'s summary stays whole at 80 columns: no number folded mid-digit."""

from __future__ import annotations

import io

from rich.console import Console

from servelab.cli.output import Table, emit
from servelab.cli.run_cmd import graphs_table, summary_tables
from servelab.pipeline.summary import SummaryRow


def _row(kind: str, prompt: int, measured: float, roof: float, pred: float | None) -> SummaryRow:
    return SummaryRow(
        kind=kind, prompt_tokens=prompt, measured_tok_s=measured, ci_low=measured * 0.97,
        ci_high=measured * 1.03, samples=120, roofline_tok_s=roof, predicted_tok_s=pred,
        predicted_low=pred * 0.8 if pred else None, predicted_high=pred * 1.25 if pred else None,
        achieved_bandwidth=measured * 3.2e9 if kind == "decode" else None,
        roofline_fraction=measured / roof,
    )


def test_summary_fits_80_columns_with_every_value_whole() -> None:
    rows = (
        _row("decode", 2048, 386.2, 1234.5, 421.9),
        _row("decode", 131072, 42.1, 99.0, None),
        _row("prefill", 131072, 12345.6, 123456.7, 23456.7),
    )
    text = _whole_at_80(summary_tables(rows))
    assert "374.6–397.8" in text and "337.5–527.4" in text and "131,072" in text


def _whole_at_80(tables: list[Table]) -> str:
    """The tables as printed at 80 columns; every cell on one line, not folded."""
    out = io.StringIO()
    emit("table", doc={}, tables=tables,
         console=Console(file=out, width=80, highlight=False, soft_wrap=False))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    for table in tables:
        for cells in table.rows:
            for cell in cells:
                assert cell in text, cell
    return text


def test_cuda_graph_table_fits_80_columns() -> None:
    table = graphs_table({"cuda_graph_max_tokens": {"predicted": 1536, "engine": None},
                          "mamba_cache_blocks": {"predicted": 12345, "engine": 794}})
    assert table is not None
    text = _whole_at_80([table])
    assert "not in the log" in text and "1,536" in text and "12,345" in text
