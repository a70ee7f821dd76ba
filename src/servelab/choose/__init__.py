"""Which build of a model to download, answered before the download.

- :mod:`servelab.choose.rank` (pure): plans of several builds (+ measured numbers where the
  store has them) in, one ranked :class:`~servelab.choose.rank.Choice` out, each row with a
  verdict computed from :func:`servelab.plan.explain.explain`'s terms;
- :mod:`servelab.choose.tree`: the builds of a base model on the Hub (its model tree).

The pipeline that reads headers, plans and looks up the store is
:mod:`servelab.pipeline.choose`; the command is ``servelab choose``.
"""
