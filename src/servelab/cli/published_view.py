"""What someone published for the very build being planned, on the hardware it is planned
for, shown beside the prediction (never fitted): the matcher ``choose`` uses
(:func:`servelab.published.identity.published_at`), the figures it shows
(:func:`servelab.choose.rank.newest_published`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servelab.published.identity import BuildIdentity, published_at
from servelab.published.runs import PublishedRun

if TYPE_CHECKING:
    from servelab.cli.screen import Screen

HEADING = "Published figures (shown, not fitted)"


@dataclass(frozen=True)
class Published:
    """The build's identity and the published rows matched by it (newest first)."""

    identity: BuildIdentity | None
    rows: tuple[PublishedRun, ...]

    def lines(self) -> list[str]:
        """``published: 67.9 tok/s decode, ... (source, date)``, the newest of each figure,
        then which identity matched."""
        if not self.rows or self.identity is None:
            return []
        # imported here: plan's view renders this section, and `plan --help` must not load
        # what choose ranks with (tests/cli/test_startup.py)
        from servelab.choose.rank import newest_published

        return [*(p.line for p in newest_published(self.rows)),
                f"matched as {self.identity.words}"]

    def to_dict(self) -> dict[str, Any]:
        """JSON form: every row, each with its line, and the identity that matched."""
        return {"identity": self.identity.repo_id if self.identity else None,
                "matched_by": self.identity.how if self.identity else None,
                "rows": [{**p.to_dict(), "line": p.line} for p in self.rows]}


def published_for_plan(checkpoint: str, hardware: str, *, recipe: bool = False) -> Published:
    """The published rows for ``checkpoint`` (a path or repo id) on ``hardware``; none for a
    recipe file (its model is planned under the recipe's name)."""
    if recipe:
        return Published(None, ())
    ident, rows = published_at(checkpoint, hardware)
    return Published(ident, rows)


def markdown_lines(published: Published) -> Sequence[str]:
    """The section as Markdown (empty when nothing matched)."""
    lines = published.lines()
    if not lines:
        return []
    return ["", f"## {HEADING}", "", *(f"- {line}" for line in lines), ""]


def render_published(lines: Sequence[str], screen: Screen) -> None:
    """The section in a terminal, under its heading (nothing when ``lines`` is empty):
    shown beside a prediction, never fitted into it."""
    if not lines:
        return
    screen.heading(HEADING)
    for line in lines:
        screen.say(line)
