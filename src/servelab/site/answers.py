"""The model pages' answers: which build to download on each hardware servelab knows
(``servelab choose``'s ranking over a model's recipes), and each recipe page's finding
against the model's other builds. Pure: a :class:`~servelab.site.model.Site` and the choices
in, the site with its answers out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from servelab.choose.rank import MEASURED, PREDICTED, Choice, Speed
from servelab.site import prose
from servelab.site.collect import recipe_key, replace_page
from servelab.site.fmt import slugify
from servelab.site.model import (
    HardwareAnswer,
    Measured,
    ModelIndexPage,
    Predicted,
    RecipePage,
    Site,
)
from servelab.store.model import RunRecord

__all__ = ["answer_lengths", "hardware_answer", "model_runs", "with_answers"]


def _answer_number(speed: Speed) -> Measured | Predicted | None:
    if speed.tok_s is None:
        return None
    if speed.source == MEASURED and speed.run_id:
        return Measured(speed.tok_s, "tok/s", speed.run_id, speed.low, speed.high)
    if speed.source == PREDICTED:
        return Predicted(speed.tok_s, "tok/s", speed.basis, None, speed.low, speed.high)
    return None


def hardware_answer(choice: Choice) -> HardwareAnswer:
    """One hardware's answer for a model page, from ``servelab choose``'s ranking."""
    pick = next((r for r in choice.rows if r.build == choice.pick), None)
    best = pick.best_decode if pick is not None else None
    return HardwareAnswer(
        hardware=choice.hardware, pick=choice.pick,
        pick_slug=slugify(choice.pick) if choice.pick else None,
        decode=_answer_number(best) if best is not None else None,
        basis=best.source if best is not None else "none", reason=choice.reason,
        verdicts=tuple((r.build, r.verdict) for r in choice.rows))


def _finding(page: RecipePage, answer: HardwareAnswer, builds: int) -> str:
    """The recipe page's first sentence: this build against the model's others."""
    hw = answer.hardware
    if answer.pick is None:
        return f"On {hw}, no build of {page.model_name} is the one to download: {answer.reason}."
    if answer.pick_slug == page.slug:
        return (f"On {hw}, this is the build of {page.model_name} to download among its "
                f"{builds}: {answer.reason}.")
    verdict = dict(answer.verdicts).get(page.build_name) or next(
        (v for b, v in answer.verdicts if slugify(b) == page.slug), "")
    return (f"On {hw}, download {answer.pick} rather than this build: "
            f"{verdict.removeprefix('pick: ')}.")


def model_runs(site: Site, runs: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    """The runs of each model page (by its slug), for :func:`with_answers`'s choices."""
    out: dict[str, list[RunRecord]] = {}
    for index in site.models:
        slugs = {p.slug for p in site.recipes if p.model_slug == index.slug}
        out[index.slug] = [r for r in runs if slugify(recipe_key(r)) in slugs]
    return out


def answer_lengths(site: Site, slug: str) -> tuple[int, int]:
    """(context, prompt) a model page's answer is for: the longest context its recipes
    serve and the prompt its headlines quote (2,048 by default)."""
    pages = [p for p in site.recipes if p.model_slug == slug]
    prompt = max((prose.reference_prompt(p) or 0 for p in pages), default=0) or 2048
    context = max((p.context_tokens for p in pages), default=0) or prompt
    return context, prompt


def with_answers(site: Site, choices: Mapping[str, Sequence[Choice]]) -> Site:
    """Every model page with its answer per hardware (``choices``: by model slug, one
    :class:`~servelab.choose.rank.Choice` per hardware over its recipes), measured hardware
    first, and every recipe page with its finding on its own hardware."""
    indexes, recipes = [], {p.slug: p for p in site.recipes}
    for index in site.models:
        pages = [p for p in site.recipes if p.model_slug == index.slug]
        if not choices.get(index.slug):
            indexes.append(index)
            continue
        answers = tuple(sorted((hardware_answer(c) for c in choices[index.slug]),
                               key=lambda a: a.basis != "measured"))
        indexes.append(_replace_index(index, answers, *answer_lengths(site, index.slug)))
        for page in pages:
            own = next((a for a in answers if a.hardware == page.hardware), None)
            if own is not None:
                recipes[page.slug] = replace_page(page, finding=_finding(page, own, len(pages)))
    return dataclasses.replace(site, models=tuple(indexes),
                               recipes=tuple(recipes[p.slug] for p in site.recipes))


def _replace_index(index: ModelIndexPage, answers: tuple[HardwareAnswer, ...], context: int,
                   prompt: int) -> ModelIndexPage:
    return dataclasses.replace(index, answers=answers, context_tokens=context,
                               prompt_tokens=prompt)
