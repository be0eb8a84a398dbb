"""What the operator says about itself in events: the changes a user should see, and no more.

A new service's children are announced in one Normal event; a restarted operator re-applies
every service and announces nothing it did not change; an update announces only the children it
changed; a deleted child comes back with a Restored event. Each is read from the events the
operator posted to the (emulated) API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, condition, eventually, live, service

from cachefleet.operator.reconcile.announcements import EventFilter, announced
from cachefleet.operator.reconcile.applied import AppliedVersions

pytest_plugins = ("support.kube.fixtures",)  # cluster, api

pytestmark = pytest.mark.timeout(180)


def events(cluster: Cluster, name: str, reason: str) -> list[dict[str, Any]]:
    """The events posted about the service ``name`` with ``reason``, oldest first."""
    found = [
        dict(obj.raw)
        for obj in list(cluster.objects.values())
        if obj.get("kind") == "Event" or obj.get("involvedObject")
    ]
    return sorted(
        (
            e
            for e in found
            if e.get("reason") == reason
            and (e.get("involvedObject") or {}).get("name") == name
            and (e.get("involvedObject") or {}).get("kind") == "CachedInferenceService"
        ),
        key=lambda e: int(e["metadata"]["resourceVersion"]),
    )


@contextlib.asynccontextmanager
async def running_operator() -> AsyncIterator[None]:
    """One operator run (kopf in a thread with its own loop), stopped when the block ends, so
    that a test can restart it."""
    import kopf

    import cachefleet.operator.handlers  # noqa: F401  (registers the handlers)

    stop, ready = threading.Event(), threading.Event()

    def run() -> None:
        asyncio.run(
            kopf.operator(
                clusterwide=True, standalone=True, stop_flag=stop, ready_flag=ready,
                settings=kopf.OperatorSettings(),
            )
        )  # fmt: skip

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert await asyncio.to_thread(ready.wait, 30), "the operator did not start"
        yield
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 30)


async def test_changes_are_announced_once_and_a_restart_announces_nothing(
    cluster: Cluster, api: Api
) -> None:
    async with running_operator():
        await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
        created = await eventually(lambda: events(cluster, "svc", "Applied"), "an Applied event")
        # One event for the whole creation, naming each child it made.
        assert created[0]["type"] == "Normal"
        assert "Deployment/svc" in created[0]["message"]
        assert "Service/svc" in created[0]["message"]
        await eventually(lambda: condition(cis(cluster, "svc"), "Ready"), "the status")
        await asyncio.sleep(1.0)  # events of the creation settle
        before = len(events(cluster, "svc", "Applied"))
        assert before == 1, events(cluster, "svc", "Applied")

    # A restart re-applies every child (kopf's resume): nothing changes, nothing is announced.
    deployment = f"/apis/apps/v1/namespaces/{NS}/deployments/svc"

    def deployment_applies() -> int:
        return sum(1 for r in cluster["patch"] if r.url.path == deployment)

    applied_before_restart = deployment_applies()
    async with running_operator():
        await eventually(
            lambda: deployment_applies() > applied_before_restart, "the resume's re-apply"
        )
        await asyncio.sleep(1.0)  # the resume's reconcile ends
        assert len(events(cluster, "svc", "Applied")) == before
        await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"replicas": 3}}, patch=True)
        await eventually(
            lambda: len(events(cluster, "svc", "Applied")) > before, "the update's event"
        )
        await asyncio.sleep(1.0)
        after = events(cluster, "svc", "Applied")[before:]
        # Only the update's event, naming only what the new replica count changed.
        assert len(after) == 1, after
        assert "Deployment/svc" in after[0]["message"]
        assert "Service/svc" not in after[0]["message"]

        # A deleted child comes back, and says so.
        await api.send("DELETE", f"/api/v1/namespaces/{NS}/services/svc")
        restored = await eventually(lambda: events(cluster, "svc", "Restored"), "Restored")
        assert restored[0]["type"] == "Normal"
        assert restored[0]["message"] == "restored Service/svc"
        assert live(cluster, "v1/services", "svc") is not None


def test_the_same_event_of_the_same_object_is_posted_once_per_window() -> None:
    now = [0.0]
    allowed = EventFilter(window_s=600, remembered=2, clock=lambda: now[0])
    svc = {"metadata": {"uid": "u1", "namespace": NS, "name": "svc"}}
    other = {"metadata": {"uid": "u2", "namespace": NS, "name": "other"}}
    assert allowed.admit(svc, "ApplyFailed", "refused")
    assert not allowed.admit(svc, "ApplyFailed", "refused")  # a retry says it again: dropped
    assert allowed.admit(svc, "ApplyFailed", "another message")
    assert allowed.admit(other, "ApplyFailed", "refused")
    now[0] = 601.0
    assert allowed.admit(svc, "ApplyFailed", "refused")  # the window passed


def test_a_restarted_operator_announces_only_what_it_knows_it_changed() -> None:
    written, first_seen = ["Deployment/svc", "Service/svc"], ["Service/svc"]
    reconciled = {"metadata": {"generation": 2}, "status": {"observedGeneration": 2}}
    assert announced(reconciled, written, first_seen) == ["Deployment/svc"]
    # A spec the operator has not reconciled yet (new, or changed while it was away): all.
    changed = {"metadata": {"generation": 3}, "status": {"observedGeneration": 2}}
    assert announced(changed, written, first_seen) == written
    assert announced({"metadata": {"generation": 1}}, written, first_seen) == written


def test_a_controller_writing_status_is_no_change_of_the_operators() -> None:
    versions = AppliedVersions()
    key = ("Deployment", NS, "svc")
    assert versions.record(key, {"metadata": {"resourceVersion": "10", "generation": 1}})
    # The Deployment controller wrote the status (resourceVersion 11); the next apply is a no-op.
    assert not versions.record(key, {"metadata": {"resourceVersion": "11", "generation": 1}})
    assert versions.record(key, {"metadata": {"resourceVersion": "12", "generation": 2}})
    # Deleted and made again: a new object, whatever its generation.
    assert versions.record(
        key, {"metadata": {"resourceVersion": "20", "generation": 1, "uid": "new"}}
    )
    # Without a generation (a ConfigMap), a new resourceVersion is the only sign of a change.
    config = ("ConfigMap", NS, "svc")
    assert versions.record(config, {"metadata": {"resourceVersion": "5"}})
    assert not versions.record(config, {"metadata": {"resourceVersion": "5"}})
    assert versions.record(config, {"metadata": {"resourceVersion": "6"}})
