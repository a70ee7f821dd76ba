"""What someone published for a recipe's very build on its hardware, for its page: the
matcher ``choose`` and ``plan`` use (:func:`servelab.published.identity.published_at`), the
newest figure of each kind (:func:`servelab.choose.rank.newest_published`); shown beside the
measurements, never fitted."""

from __future__ import annotations

from servelab.choose.rank import newest_published
from servelab.errors import InputError
from servelab.published.identity import GIVEN, published_at


def published_figures(model_id: str, hardware: str | None) -> tuple[tuple[str, str | None], ...]:
    """(line, url) per published figure for the build ``model_id`` (a Hub repo id; a local
    path or ``synth:`` id matches nothing here: a page names no local path) on
    ``hardware``."""
    if not hardware or model_id.startswith(("/", ".", "~")):
        return ()
    try:
        ident, rows = published_at(model_id, hardware)
    except InputError:  # a manifest that cannot be read: no figures on the page
        return ()
    if ident is None or ident.how != GIVEN:
        return ()
    return tuple((p.line, p.url) for p in newest_published(rows))
