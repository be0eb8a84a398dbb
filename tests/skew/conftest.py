"""Fixtures of the version-skew tests: the previous release's real code, installed beside today's.

These tests run in their own CI step (``bash scripts/test-skew``): the first run checks the
previous release out and installs it (``support/previous_release.py``), later runs reuse it.
"""

from __future__ import annotations

import pytest
from support.previous_release import ReleaseCheckout, checkout_previous_release


@pytest.fixture(scope="session")
def previous_release() -> ReleaseCheckout:
    """The previous release (or ``$CACHEFLEET_PREVIOUS_RELEASE``), checked out and installed.
    Fails, never skips, when its commit is not in the clone."""
    return checkout_previous_release()
