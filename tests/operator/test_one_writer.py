"""One writer: a paused or standby operator writes nothing, a service the API server no longer
has is not brought back, and several replicas elect one leader on a Lease.

The requests the operator sends are counted on the emulator; kopf's peering rule and the Lease
scheme are checked on the objects as a real server holds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, live, must, service, serving
from support.kube.leases import LeaseCluster

from cachefleet.cli.main import build_parser
from cachefleet.operator.operator_command import kopf_arguments
from cachefleet.operator.reconcile.kube import Kube, KubeError
from cachefleet.operator.reconcile.lease import LeaseElector, LeaseTimings
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.peering import paused_by_peers
from cachefleet.operator.reconcile.periodic import Periodic
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
DEPLOYMENT = f"/apis/apps/v1/namespaces/{NS}/deployments/svc"


def peer(priority: int, seconds_ago: int, lifetime: int = 60) -> dict[str, Any]:
    seen = NOW - datetime.timedelta(seconds=seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


@pytest.mark.parametrize(
    ("peers", "paused"),
    [
        ({}, False),
        ({"other": peer(10, 5)}, True),  # a live peer of higher priority leads
        ({"other": peer(0, 5)}, True),  # the same priority: kopf pauses both
        ({"other": peer(-1, 5)}, False),
        ({"other": peer(10, 120)}, False),  # dead: past lastseen + lifetime
        ({"me": peer(0, 5), "me/20260101/abc": peer(0, 5)}, False),  # our own records
    ],
)
def test_kopfs_peering_rule(peers: dict[str, Any], paused: bool) -> None:
    body = {"status": peers}
    assert paused_by_peers(body, priority=0, ids=("me",), now=NOW) is paused
    assert not paused_by_peers(None, priority=0, ids=("me",), now=NOW)


def periodic(**settings: Any) -> Periodic:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Periodic(Reconciler(Kube(), OperatorSettings(**settings)), KeyedLocks())


def applies(cluster: Cluster) -> int:
    return sum(1 for r in cluster["patch"] if "fieldManager" in r.params)


async def run_for(passes: Periodic, snapshot: list[Any], active: bool, seconds: float) -> None:
    task = asyncio.create_task(passes.run(lambda: snapshot, lambda: active))
    await asyncio.sleep(seconds)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_paused_operator_resyncs_nothing_and_an_active_one_does(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
    snapshot = [must(cis(cluster, "svc"))]
    passes = periodic(resync_interval_s=0.1, cache_figures_interval_s=0.1)
    before = len(cluster)
    await run_for(passes, snapshot, active=False, seconds=1.0)
    assert len(cluster) == before  # not one request while a peer leads
    await run_for(passes, snapshot, active=True, seconds=1.0)
    assert applies(cluster) > 0


async def test_a_service_the_server_no_longer_has_is_not_brought_back(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
    stale = must(cis(cluster, "svc"))  # what kopf's index keeps when it misses the DELETED
    passes = periodic()
    await asyncio.to_thread(passes.resync, stale)
    assert live(cluster, "apps/v1/deployments", "svc") is not None
    await api.send("DELETE", f"{CIS_PATH}/svc")
    await api.send("DELETE", DEPLOYMENT)  # garbage collection takes the children
    done = applies(cluster)
    await asyncio.to_thread(passes.resync, stale)
    assert applies(cluster) == done
    assert live(cluster, "apps/v1/deployments", "svc") is None


async def test_a_resync_applies_the_servers_spec_not_an_older_indexed_one(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
    stale = must(cis(cluster, "svc"))
    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"replicas": 5}}, patch=True)
    await asyncio.to_thread(periodic().resync, stale)
    [last] = [r for r in cluster["patch"] if r.url.path == DEPLOYMENT][-1:]
    assert last.data["spec"]["replicas"] == 5


# --- leader election ------------------------------------------------------------------------


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Cluster]:
    async with serving(LeaseCluster(), tmp_path, monkeypatch) as emulator:
        yield emulator


def lease(cluster: Cluster) -> dict[str, Any]:
    return must(live(cluster, "coordination.k8s.io/v1/leases", "op"))


SHORT = LeaseTimings(duration_s=1.0, renew_deadline_s=0.6, retry_period_s=0.2)


def elector(identity: str) -> LeaseElector:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return LeaseElector(Kube(), NS, "op", identity, SHORT)


async def test_one_replica_holds_the_lease_and_another_takes_it_once_it_expires(
    cluster: Cluster,
) -> None:
    first, second = elector("pod-a"), elector("pod-b")
    assert await asyncio.to_thread(first.try_acquire)
    assert lease(cluster)["spec"]["holderIdentity"] == "pod-a"
    assert not await asyncio.to_thread(second.try_acquire)  # held and renewed: a standby
    assert await asyncio.to_thread(first.try_acquire)  # the holder renews
    renewals = [r for r in cluster["patch"] if r.url.path.endswith("/leases/op")]
    # Every update names the version it read: a real server refuses a concurrent one (409).
    assert all(r.data["metadata"]["resourceVersion"] for r in renewals)
    assert not await asyncio.to_thread(second.try_acquire)  # a change seen: the wait restarts
    await asyncio.sleep(1.2)  # pod-a stopped renewing
    assert await asyncio.to_thread(second.try_acquire)
    spec = lease(cluster)["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("pod-b", 1)


async def test_a_holder_whose_clock_is_behind_keeps_its_lease(cluster: Cluster, api: Api) -> None:
    # The holder's node clock is a day behind: its renewTime looks long expired to a standby
    # that compares it with its own clock. client-go's rule: expiry counts from when the standby
    # saw the record change, on the standby's clock.
    behind = {"holderIdentity": "pod-a", "leaseDurationSeconds": 1,
              "renewTime": "2026-01-01T00:00:00.000000Z"}  # fmt: skip
    path = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
    await api.send("POST", path, {"metadata": {"name": "op", "namespace": NS}, "spec": behind})
    standby = elector("pod-b")
    for renewal in range(3):  # pod-a keeps renewing, with its own (late) clock
        assert not await asyncio.to_thread(standby.try_acquire)
        behind["renewTime"] = f"2026-01-01T00:00:0{renewal + 1}.000000Z"
        await api.send("PATCH", f"{path}/op", {"spec": behind}, patch=True)
        await asyncio.sleep(0.5)
    assert lease(cluster)["spec"]["holderIdentity"] == "pod-a"
    assert not await asyncio.to_thread(standby.try_acquire)  # sees the last renewal
    await asyncio.sleep(1.2)  # now pod-a is gone: no change for a whole duration
    assert await asyncio.to_thread(standby.try_acquire)


async def test_a_write_naming_an_old_version_is_refused(cluster: Cluster) -> None:
    first, second = elector("pod-a"), elector("pod-b")
    assert await asyncio.to_thread(first.try_acquire)
    read = lease(cluster)
    assert await asyncio.to_thread(first.try_acquire)  # the version moves on
    with pytest.raises(KubeError) as refused:  # what a replica that read before would send
        await asyncio.to_thread(second._update, read, {"holderIdentity": "pod-b"}, 2.0)
    assert refused.value.status == 409
    assert lease(cluster)["spec"]["holderIdentity"] == "pod-a"


async def test_release_hands_the_lease_over_at_once(cluster: Cluster) -> None:
    first, second = elector("pod-a"), elector("pod-b")
    assert await asyncio.to_thread(first.try_acquire)
    assert not await asyncio.to_thread(second.try_acquire)
    await asyncio.to_thread(first.release)
    assert "holderIdentity" not in lease(cluster)["spec"]
    assert await asyncio.to_thread(second.try_acquire)  # no wait for the lease to expire
    await asyncio.to_thread(first.release)  # not the holder any more: changes nothing
    assert lease(cluster)["spec"]["holderIdentity"] == "pod-b"


def test_lease_timings_must_nest() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        LeaseTimings(duration_s=15, renew_deadline_s=15, retry_period_s=2)


def test_leader_election_runs_kopf_standalone() -> None:
    args = build_parser().parse_args(["operator", "--leader-election", "op"])
    assert "--standalone" in kopf_arguments(args)
