"""Published measurements servelab ships as sourced data: evidence beside a prediction, never
silently fitted (entering a calibration still needs pre-registration).

* :mod:`~servelab.published.acceptance`: speculative-decoding acceptance lengths per model
  family, method and draft length (``acceptance.toml``), the priors a plan predicts a drafting
  build at when no stored run measured one;
* :mod:`~servelab.published.runs`: published runs (build, hardware, engine and version, flags,
  metric, value, date, source; ``runs.toml``) and the matcher "published figures for this
  build on this hardware".
"""
