"""Fixtures for the site tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from site_samples import build_site

from servelab.site.model import Site


@pytest.fixture
def site_factory() -> Callable[..., Site]:
    """``site_factory(model_name=..., log_line=...)`` → a complete :class:`Site`."""
    return build_site
