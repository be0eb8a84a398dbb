"""What the README's test command leaves out still runs in CI: every path ``scripts/test``
ignores is run by a step of ``.ci/run`` (the skew and dependency-floor steps), so moving tests
out of the time budget never drops them."""

from __future__ import annotations

import re

from delivery.support import REPO


def ci_steps() -> list[str]:
    """The scripts ``.ci/run`` runs as steps, in order."""
    run = (REPO / ".ci" / "run").read_text()
    return re.findall(r"^step bash (scripts/[\w-]+)", run, flags=re.M)


def test_every_path_the_test_command_ignores_is_run_by_a_ci_step() -> None:
    ignored = re.findall(r"--ignore=(\S+)", (REPO / "scripts" / "test").read_text())
    assert "tests/test_dependency_floors.py" in ignored
    steps = {step: (REPO / step).read_text() for step in ci_steps()}
    assert steps, "no steps in .ci/run"
    for path in ignored:
        assert (REPO / path).exists(), path
        runners = [step for step, text in steps.items() if step != "scripts/test" and path in text]
        assert runners, f"{path} is left out of scripts/test and run by no step of .ci/run"


def test_the_test_command_is_the_first_ci_step() -> None:
    assert ci_steps()[0] == "scripts/test"
