"""The cluster tests' fixtures: one real control plane per test session (``support.plane``).

The layer is skipped, whole, only when ``scripts/build-plane`` has not built the plane;
``scripts/test-cluster`` builds it first, and under ``CI=true`` a skip fails
(``support/ci_skips.py``), so CI never skips it.

- ``plane``: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok with three
  nodes (one with four ``nvidia.com/gpu``), a default StorageClass and static volumes.
- ``installed``: the CRD and ``deploy/`` applied with kubectl, as the README installs them.
- ``operator``: ``cachefleet operator`` as a process of the test, under a token of ``deploy/``'s
  ServiceAccount (its real RBAC), with a loopback ``redis-server`` standing in for the managed
  Redis pods (kwok runs no container).
- ``session_operator_paused``: that operator stopped (SIGSTOP) for a module that runs its own.
- ``nothing_left_behind`` (every module): the module's services and namespaces deleted at its
  end, waited for until gone, so that each module starts on the plane ``installed`` made.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from support.cluster_operator import OPERATOR_NAMESPACE, OperatorProcess
from support.plane import ROOT, SERVICES, Plane, plane_bin
from support.processes import RedisProcess

pytestmark = pytest.mark.slow

_started: list[Plane] = []


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    found = plane_bin()
    if found is None:
        pytest.skip("the control plane is not built: bash scripts/build-plane")
    started = Plane(found, tmp_path_factory.mktemp("plane"))
    _started.append(started)
    try:
        started.start()
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def installed(plane: Plane) -> Plane:
    """The CRD, then ``deploy/`` (namespace, ServiceAccount, RBAC, the operator Deployment)."""
    plane.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    plane.established(f"crd/{SERVICES}")
    plane.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy" / "cachefleet.yaml"))
    return plane


@pytest.fixture(scope="module", autouse=True)
def nothing_left_behind(installed: Plane) -> Iterator[None]:
    """Every CachedInferenceService deleted at the module's end, and every namespace the module
    made (its own or a chart's), each waited for until gone.

    The session's operator serves every namespace, and what a module leaves is still its
    work: a fleet whose rollout cannot finish (a GPU request no node holds, an image that is
    never pulled) counts as rolling until its progress deadline and takes one of the
    operator's ``maxConcurrentRollouts`` places, so a later module's rollouts would wait."""
    before = installed.namespaces()
    yield
    installed.delete_fleets_and_namespaces(installed.namespaces() - before)


@pytest.fixture(scope="session")
def stand_in_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """The managed Redis as the operator reaches it: a loopback redis-server."""
    redis = RedisProcess(tmp_path_factory.mktemp("redis"))
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


@pytest.fixture(scope="session")
def operator(
    installed: Plane, stand_in_redis: RedisProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    running = OperatorProcess.start(
        installed, tmp_path_factory.mktemp("operator"), "cachefleet-operator",
        env={"CACHEFLEET_OPERATOR_REDIS_ADDRESS": f"127.0.0.1:{stand_in_redis.port}",
             "CACHEFLEET_OPERATOR_NAMESPACE": OPERATOR_NAMESPACE},
    )  # fmt: skip
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def session_operator_paused(operator: OperatorProcess) -> Iterator[None]:
    """The session's operator (today's code, every namespace) stopped for a module that runs
    an operator of its own, so that only that one handles the module's services; continued
    afterwards."""
    group = os.getpgid(operator.process.pid)
    os.killpg(group, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(group, signal.SIGCONT)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for started in _started:
        if started.start_s:
            terminalreporter.write_line(
                f"control plane ({started.bin.parent.name}): {len(started.nodes)} nodes Ready "
                f"{started.start_s:.1f} s after the first process started"
            )
