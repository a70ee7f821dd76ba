"""``servelab run``'s summary stays whole at 80 columns: no number folded mid-digit."""

from __future__ import annotations

import io

from rich.console import Console

from servelab.cli.output import emit
from servelab.cli.run_cmd import summary_tables
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
    out = io.StringIO()
    emit("table", doc={}, tables=summary_tables(rows),
         console=Console(file=out, width=80, highlight=False, soft_wrap=False))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    for table in summary_tables(rows):
        for cells in table.rows:
            for cell in cells:
                assert cell in text, cell  # on one line, not folded
    assert "374.6–397.8" in text and "337.5–527.4" in text and "131,072" in text
