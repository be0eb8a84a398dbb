"""The chart on a real control plane, with Helm: install, upgrade between one operator replica
and two (the Deployment's strategy changes type: Recreate for one writer, RollingUpdate for a
leader-elected pair) and rollback, each accepted by the API server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from support.plane import ROOT, Plane

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMESPACE = "charted"
RELEASE = "charted"
DEPLOYMENT = f"deployment/{RELEASE}-cachefleet-operator"


def _helm(plane: Plane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    helm = str(ROOT / ".cache" / "tools" / "bin" / "helm")
    done = subprocess.run([helm, *args, "-n", NAMESPACE], env=plane.env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert not check or done.returncode == 0, f"helm {' '.join(args)}:\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def chart(installed: Plane) -> Iterator[Plane]:
    yield installed
    _helm(installed, "uninstall", RELEASE, check=False)


def _strategy(plane: Plane) -> dict[str, object]:
    strategy: dict[str, object] = plane.get(DEPLOYMENT, "-n", NAMESPACE)["spec"]["strategy"]
    return strategy


def test_upgrades_between_one_and_two_replicas_and_rolls_back(chart: Plane) -> None:
    path = str(ROOT / "charts" / "cachefleet")
    _helm(chart, "install", RELEASE, path, "--create-namespace", "--set", "replicas=2")
    assert _strategy(chart)["type"] == "RollingUpdate"

    _helm(chart, "upgrade", RELEASE, path, "--set", "replicas=1")
    assert _strategy(chart) == {"type": "Recreate"}

    _helm(chart, "upgrade", RELEASE, path, "--set", "replicas=2")
    assert _strategy(chart)["type"] == "RollingUpdate"
    lease_role = chart.kubectl("get", "role", f"{RELEASE}-cachefleet-operator-leader",
                               "-n", NAMESPACE, check=False)  # fmt: skip
    assert lease_role.returncode == 0, lease_role.stderr

    _helm(chart, "rollback", RELEASE, "2")  # the one-replica revision
    assert _strategy(chart) == {"type": "Recreate"}
    assert chart.get(DEPLOYMENT, "-n", NAMESPACE)["spec"]["replicas"] == 1
