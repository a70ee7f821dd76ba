"""Recipe pages: page model, prose from facts, HTML + Markdown rendering, plots, site builder.

Public API::

    from servelab.site import build_site, collect_site, render_site
    from servelab.store import open_store

    with open_store(url) as store:
        site = collect_site(store)            # Store -> Site (page models, pure after reading)
    built = build_site(site, Path("out"))     # render + write atomically; built.index

Page models (:mod:`servelab.site.model`) are frozen dataclasses that tests and other tools can
build directly; :func:`render_site` turns one into ``{relative path: file content}``.
"""

from servelab.site.build import BuiltSite, build_site, write_files
from servelab.site.collect import collect_site, site_from_records
from servelab.site.render import render_site

__all__ = [
    "BuiltSite",
    "build_site",
    "collect_site",
    "render_site",
    "site_from_records",
    "write_files",
]
