"""The skew tests' fixture runs the previous release's own code, not today's."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.previous_release import (
    REPOSITORY,
    PreviousReleaseError,
    ReleaseCheckout,
    previous_release,
)


def test_the_previous_release_runs_from_its_own_checkout(previous_release: ReleaseCheckout) -> None:
    where = previous_release.run_python(
        "import cachefleet.operator.render_command as o; print(o.__file__)"
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(previous_release.root)
    assert not Path(where.stdout.strip()).is_relative_to(REPOSITORY / "operator")
    head = previous_release.run_python(
        "import subprocess; print(subprocess.check_output(['git', 'rev-parse', 'HEAD'], text=True))"
    )
    assert head.stdout.strip() == previous_release.release.commit
    assert previous_release.run("--help").returncode == 0


def test_a_missing_commit_fails_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEFLEET_PREVIOUS_RELEASE", "0" * 40)
    with pytest.raises(PreviousReleaseError, match=r"not in this clone.*git fetch"):
        previous_release()
