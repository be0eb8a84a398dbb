"""``cachefleet_operator_leader`` on a real ``cachefleet operator --leader-election`` process: 0
while it waits as a standby for a Lease another replica holds (its metrics answer all the same),
1 once it leads."""

from __future__ import annotations

import asyncio
import datetime
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import loopback
from support.kube.fixtures import NS, serving
from support.kube.leases import LeaseCluster
from support.processes import CACHEFLEET, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
#: The other replica's lease: this one waits that long after first reading it (on its own
#: clock, the metrics port already serving), time enough to scrape the 0 it reports meanwhile.
LEASE_S = 5


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[LeaseCluster]:
    emulator = LeaseCluster()
    async with serving(emulator, tmp_path, monkeypatch):
        yield emulator


async def leader(url: str) -> float | None:
    """The scraped figure; None while nothing answers."""
    try:
        answer = await asyncio.to_thread(loopback.get, url, timeout=2)
    except httpx.HTTPError:
        return None
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            if sample.name == "cachefleet_operator_leader":
                return sample.value
    return None


async def until(url: str, wanted: float, log: Path, timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while await leader(url) != wanted:
        assert asyncio.get_running_loop().time() < deadline, f"not {wanted}: {tail(log)}"
        await asyncio.sleep(0.2)


def tail(log: Path) -> str:
    return log.read_text()[-3000:]


async def test_a_standby_reports_it_does_not_lead_until_it_does(
    cluster: LeaseCluster, tmp_path: Path
) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "op", "namespace": NS},
        "spec": {"holderIdentity": "other-pod", "leaseDurationSeconds": LEASE_S,
                 "acquireTime": now, "renewTime": now},
    }  # fmt: skip
    async with httpx.AsyncClient(base_url=str(cluster.url)) as client:
        created = await client.post(
            f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", json=lease
        )
        assert created.status_code < 300, created.text
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig"), "POD_ID": "pod-a",
           "CACHEFLEET_OPERATOR_NAMESPACE": NS}  # fmt: skip
    command = [*CACHEFLEET, "operator", "--leader-election", "op", "-v", f"--metrics-port={port}",
               "--lease-duration", str(LEASE_S), "--lease-renew-deadline", "3",
               "--lease-retry-period", "0.5"]  # fmt: skip
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *command, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
    try:
        # Another replica holds the lease: this one waits, and says so.
        await until(url, 0.0, log, timeout_s=60)
        # Nobody renews it: once it has stood still for its duration, this replica leads.
        await until(url, 1.0, log, timeout_s=LEASE_S + 90)
    finally:
        process.kill()
        await asyncio.wait_for(process.wait(), 10)
