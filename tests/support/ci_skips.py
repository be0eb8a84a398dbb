"""Under CI a skipped test is a failed test: the rule for every test, in one place.

A test may skip on a developer machine that lacks a tool (``wrk``, ``helm``, ``tritonclient``),
but under ``CI=true`` everything the tests need is installed by ``scripts/setup-dev``, so a skip
there would only hide a broken install step. Only tests marked ``gpu`` may skip under CI, since
the CI machines have no GPU. Loaded as a plugin by the root ``conftest.py``.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not report.skipped or hasattr(report, "wasxfail") or os.environ.get("CI") != "true":
        return report
    if item.get_closest_marker("gpu") is not None:
        return report
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true, where every tool must be installed: {reason}"
    return report
