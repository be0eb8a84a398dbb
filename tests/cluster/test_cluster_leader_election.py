"""Leader election of two operator processes on a real Lease, the leader's API connection cut.

Both run as the chart's ``replicas: 2`` install runs them (``--leader-election``, the chart's
ServiceAccount token, its Lease Role), with the chart's default timings (15 s lease, 10 s renew
deadline, 2 s retry). The leader reaches the API server through a proxy of the test's that then
goes silent: connections stay open, nothing comes back, as in a partition. The old leader must
stop (the process exits) before the standby holds the Lease: never two leaders.
"""

from __future__ import annotations

import datetime
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import loopback
from support.cluster_operator import OperatorProcess
from support.plane import ROOT, Plane, until
from support.processes import free_port
from support.silent_proxy import SilentProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMESPACE = "ha"
RELEASE = "ha"
LEASE = f"{RELEASE}-cachefleet-operator"
ACCOUNT = f"{RELEASE}-cachefleet-operator"


@pytest.fixture(scope="module")
def chart_with_two_replicas(installed: Plane) -> Iterator[Plane]:
    helm = str(ROOT / ".cache" / "tools" / "bin" / "helm")
    subprocess.run(
        [helm, "install", RELEASE, str(ROOT / "charts" / "cachefleet"), "-n", NAMESPACE,
         "--create-namespace", "--set", "replicas=2", "--wait=false"],
        env=installed.env(), check=True, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    yield installed
    subprocess.run([helm, "uninstall", RELEASE, "-n", NAMESPACE], env=installed.env(),
                   check=False, capture_output=True, timeout=180)  # fmt: skip


def _holder(plane: Plane) -> tuple[str | None, str | None]:
    fields = "jsonpath={.spec.holderIdentity} {.spec.acquireTime}"
    done = plane.kubectl("get", "lease", LEASE, "-n", NAMESPACE, "-o", fields, check=False)
    if done.returncode != 0:
        return (None, None)
    holder, _, acquired = done.stdout.partition(" ")
    return (holder or None, acquired or None)


def _parse(stamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC)


class ExitWatch:
    """When a process was first seen gone, on the wall clock (polled every 50 ms): an upper
    bound of when it stopped leading."""

    def __init__(self, operator: OperatorProcess) -> None:
        self.exited_at: datetime.datetime | None = None
        self._operator = operator
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            if not self._operator.running():
                self.exited_at = datetime.datetime.now(datetime.UTC)
                return

    def stop(self) -> None:
        self._stop.set()


def test_a_silent_api_connection_never_makes_two_leaders(
    chart_with_two_replicas: Plane, tmp_path: Path
) -> None:
    plane = chart_with_two_replicas
    proxy = SilentProxy(plane.port)
    flags = ("--leader-election", LEASE, "--namespace", NAMESPACE)
    started: list[OperatorProcess] = []
    try:
        leader = OperatorProcess.start(plane, tmp_path, ACCOUNT, *flags, namespace=NAMESPACE,
                                       server=proxy.url, name="replica-a")  # fmt: skip
        started.append(leader)
        until(lambda: _holder(plane)[0] == "replica-a", "replica-a holding the Lease", 180)
        liveness = f"http://127.0.0.1:{free_port()}/healthz"
        standby = OperatorProcess.start(plane, tmp_path, ACCOUNT, *flags,
                                        f"--liveness={liveness}", namespace=NAMESPACE,
                                        name="replica-b")  # fmt: skip
        started.append(standby)
        # A standby answers its liveness probe while it waits for the Lease.
        until(lambda: _answers(liveness), f"the standby waiting\n{standby.log[-2000:]}", 120)
        assert _holder(plane)[0] == "replica-a"
        watch = ExitWatch(leader)

        proxy.silence()
        silenced_at = datetime.datetime.now(datetime.UTC)

        until(lambda: _holder(plane)[0] == "replica-b", "the standby taking the Lease", 180)
        holder, acquired = _holder(plane)
        assert acquired is not None
        taken_at = _parse(acquired)
        watch.stop()
        assert watch.exited_at is not None, f"the old leader still runs\n{leader.log[-2000:]}"
        assert watch.exited_at < taken_at, (
            f"two leaders: the Lease was silenced at {silenced_at}, taken by {holder} at "
            f"{taken_at}, and the old leader was still running "
            f"(exited at {watch.exited_at})\n{leader.log[-2000:]}"
        )
        assert "not renewed in time; stopping" in leader.log
    finally:
        for operator in started:
            operator.stop()
        proxy.stop()


def _answers(url: str) -> bool:
    try:
        return loopback.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
