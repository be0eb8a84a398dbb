"""The CI rule for skips, run in an inner pytest session: a skip fails under CI=true (unless
the test needs a GPU), and stays a skip elsewhere."""

from __future__ import annotations

import pytest

pytest_plugins = ("pytester",)

TESTS = """
import pytest

def test_needs_a_missing_tool():
    pytest.skip("wrk is not installed")

@pytest.mark.skipif(True, reason="helm is not installed")
def test_marked_skip():
    pass

@pytest.mark.gpu
def test_needs_a_gpu():
    pytest.skip("no GPU here")
"""


@pytest.mark.parametrize(("ci", "failed", "skipped"), [("true", 2, 1), ("", 0, 3)])
def test_a_skip_fails_only_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, failed: int, skipped: int
) -> None:
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest('pytest_plugins = ("support.ci_skips",)')
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\nmarkers =\n    gpu: needs a GPU\n"
    )
    pytester.makepyfile(TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) == failed
    assert outcomes.get("skipped", 0) == skipped
    if failed:
        result.stdout.fnmatch_lines(["*skipped under CI=true*wrk is not installed*"])
