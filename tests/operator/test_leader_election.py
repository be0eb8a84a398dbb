"""Two real operator processes elect one leader on a Lease of the emulator.

Each replica is ``cachefleet operator --leader-election`` as the chart runs it. The emulator
refuses a Lease update naming a stale resourceVersion (409), as a real API server does, so the
election is not helped by a lenient server. Lease timings are short so the tests stay short.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import loopback
from support.kube.fixtures import NS, eventually, live, serving
from support.kube.leases import LEASES, LeaseCluster
from support.processes import CACHEFLEET, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LeaseCluster]:
    emulator = LeaseCluster()
    async with serving(emulator, tmp_path, monkeypatch):
        yield emulator


class Replica:
    """One ``cachefleet operator --leader-election op`` process, its log in a file."""

    def __init__(self, tmp_path: Path, identity: str, timings: tuple[float, float, float]):
        self.identity = identity
        self.log = tmp_path / f"{identity}.log"
        self.liveness = f"http://127.0.0.1:{free_port()}/healthz"
        duration, deadline, retry = (str(value) for value in timings)
        env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig"), "POD_ID": identity,
               "CACHEFLEET_OPERATOR_NAMESPACE": NS}  # fmt: skip
        command = [*CACHEFLEET, "operator", "--leader-election", "op", "-v",
                   f"--liveness={self.liveness}", "--lease-duration", duration,
                   "--lease-renew-deadline", deadline, "--lease-retry-period", retry]  # fmt: skip
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)

    async def live(self) -> bool:
        """Whether the liveness endpoint answers 200 (off the loop: the emulator serves there)."""
        try:
            answer = await asyncio.to_thread(loopback.get, self.liveness, timeout=2)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    async def answers(self, what: str, timeout_s: float = 60) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not await self.live():
            tail = self.log.read_text()[-2000:]
            assert asyncio.get_running_loop().time() < deadline, f"no liveness: {what}\n{tail}"
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.stop()


def holder(cluster: LeaseCluster) -> Any:
    return ((live(cluster, LEASES, "op") or {}).get("spec") or {}).get("holderIdentity")


def renewed_at(cluster: LeaseCluster) -> datetime:
    """The Lease's renewTime, as the leader wrote it."""
    spec = (live(cluster, LEASES, "op") or {}).get("spec") or {}
    return datetime.fromisoformat(spec["renewTime"])


class Holders:
    """Every holder the Lease had, in order, sampled while the test runs."""

    def __init__(self, cluster: LeaseCluster) -> None:
        self.seen: list[Any] = []
        self.task = asyncio.create_task(self._watch(cluster))

    async def _watch(self, cluster: LeaseCluster) -> None:
        while True:
            self._sample(cluster)
            await asyncio.sleep(0.05)

    def _sample(self, cluster: LeaseCluster) -> None:
        now = holder(cluster)
        if now and (not self.seen or self.seen[-1] != now):
            self.seen.append(now)

    def stop(self, cluster: LeaseCluster) -> list[Any]:
        """Every holder seen, the present one included (the sampler may be between samples:
        a test that saw the handover itself can get here before the sampler's next look)."""
        self.task.cancel()
        self._sample(cluster)
        return self.seen


async def start_leader_and_standby(
    cluster: LeaseCluster, replicas: list[Replica], tmp_path: Path, timings: Any
) -> tuple[Replica, Replica]:
    first = Replica(tmp_path, "pod-a", timings)
    replicas.append(first)
    await eventually(lambda: holder(cluster) == "pod-a", "pod-a to lead", timeout_s=60)
    await first.answers("the leader's kopf")
    second = Replica(tmp_path, "pod-b", timings)
    replicas.append(second)
    return first, second


async def test_a_standby_answers_liveness_and_takes_over_when_the_leader_is_killed(
    cluster: LeaseCluster, replicas: list[Replica], tmp_path: Path
) -> None:
    holders = Holders(cluster)
    first, second = await start_leader_and_standby(cluster, replicas, tmp_path, (3, 2, 0.5))
    await second.answers("the standby")
    # The standby stays alive and answering while it waits, and never takes over, through two
    # lease durations (3 s) of the leader's renewals: counted on the Lease, not slept through.
    first_renewal = renewed_at(cluster)
    deadline = asyncio.get_running_loop().time() + 60
    while renewed_at(cluster) - first_renewal < timedelta(seconds=2 * 3):
        assert asyncio.get_running_loop().time() < deadline, "the leader stopped renewing"
        assert await second.live(), second.log.read_text()[-2000:]
        assert second.process.poll() is None
        assert holder(cluster) == "pod-a"
        await asyncio.sleep(0.5)
    assert holder(cluster) == "pod-a"
    first.process.send_signal(signal.SIGKILL)
    # The standby leads once the lease it last saw change expires: duration plus a retry.
    await eventually(lambda: holder(cluster) == "pod-b", "pod-b to lead", timeout_s=3 + 0.5 + 10)
    await second.answers("the new leader's kopf")
    assert holders.stop(cluster) == ["pod-a", "pod-b"]  # one handover, never back and forth


async def test_a_leader_stopped_by_sigterm_releases_the_lease(
    cluster: LeaseCluster, replicas: list[Replica], tmp_path: Path
) -> None:
    holders = Holders(cluster)
    # A long lease: a takeover well within it can only come from the release.
    first, second = await start_leader_and_standby(cluster, replicas, tmp_path, (60, 40, 0.5))
    await second.answers("the standby")
    first.process.send_signal(signal.SIGTERM)
    await eventually(lambda: holder(cluster) == "pod-b", "pod-b to lead", timeout_s=30)
    assert await asyncio.to_thread(first.process.wait, 30) == 0
    log = first.log.read_text()
    assert "released lease op" in log, log[-2000:]
    assert holders.stop(cluster) == ["pod-a", "pod-b"]
