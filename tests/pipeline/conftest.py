"""The pipeline tests reuse the site tests' headless-Chromium client."""

from __future__ import annotations

import sys
from pathlib import Path

SITE_TESTS = str(Path(__file__).resolve().parents[1] / "site")
if SITE_TESTS not in sys.path:
    sys.path.insert(0, SITE_TESTS)
