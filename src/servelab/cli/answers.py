"""The site as ``servelab site build`` and ``servelab run`` publish it: every page from the
store, each model page leading with which build to download on every hardware servelab
knows and each recipe page with its finding (composition of :mod:`servelab.site` and
:mod:`servelab.pipeline.choose`, which may not import each other)."""

from __future__ import annotations

from servelab.pipeline.choose import recipe_choices
from servelab.site.answers import answer_lengths, model_runs, with_answers
from servelab.site.collect import site_from_records
from servelab.site.model import Site
from servelab.store import Store

__all__ = ["answered_site"]


def answered_site(store: Store, *, title: str = "servelab recipes") -> Site:
    """The whole site from ``store`` with the model pages' answers and the recipe pages'
    findings (:func:`~servelab.pipeline.choose.recipe_choices` over each model's recipes)."""
    runs = store.list_runs(samples=True)
    site = site_from_records(runs, store.list_experiments(), title=title)
    choices = {}
    for slug, mine in model_runs(site, runs).items():
        if mine:
            context, prompt = answer_lengths(site, slug)
            choices[slug] = recipe_choices(store, mine, prompt_len=prompt, context_len=context)
    return with_answers(site, choices)
