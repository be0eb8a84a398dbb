"""The operator tells its own writes (and controllers' status updates) from edits by content
where an object has no generation: a HorizontalPodAutoscaler's status changes about every 15 s,
and each one must not cost a GET of the service, a GET of the Secret and an apply."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, eventually, live, service

from cachefleet.operator.reconcile.applied import AppliedVersions, key_of

pytest_plugins = ("support.kube.fixtures",)  # cluster, api, start_operator
pytestmark = pytest.mark.timeout(120)

HPA_PATH = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/svc"
SENT: dict[str, Any] = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "svc", "namespace": NS, "labels": {"app.kubernetes.io/name": "x"}},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "svc"},
        "minReplicas": 1,
        "maxReplicas": 5,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": 70}}}],
    },
}  # fmt: skip


def as_stored(version: str, **changes: Any) -> dict[str, Any]:
    """The HPA as a server returns it: no generation, a resourceVersion, defaults, a status."""
    obj = copy.deepcopy(SENT)
    obj["metadata"].update(resourceVersion=version, uid="u1", managedFields=[])
    obj["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 300}}  # a default
    obj["status"] = {"currentReplicas": 1, "desiredReplicas": 1}
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = obj
        for part in parents:
            target = target[part]
        target[leaf] = value
    return obj


def test_a_status_update_of_an_object_without_generation_is_not_an_edit() -> None:
    versions = AppliedVersions()
    versions.record(key_of(SENT), as_stored("10"), SENT)
    assert versions.is_own(as_stored("10"))
    assert versions.is_own(as_stored("11", status={"currentReplicas": 3, "desiredReplicas": 3}))
    assert versions.is_own(as_stored("12", metadata__annotations={"someone": "else"}))
    assert not versions.is_own(as_stored("13", spec__maxReplicas=50))  # an edit: restore
    metrics = copy.deepcopy(SENT["spec"]["metrics"])
    metrics[0]["resource"]["target"]["averageUtilization"] = 90
    assert not versions.is_own(as_stored("14", spec__metrics=metrics))


async def test_hpa_status_updates_cost_no_requests(
    cluster: Cluster, api: Api, start_operator: Callable[[], Any]
) -> None:
    await start_operator()
    scaling = {"minReplicas": 1, "maxReplicas": 5}
    body = service("svc", cache={"mode": "local"}, autoscaling=scaling,
                   runtime={"resources": {"requests": {"cpu": "1"}}})  # fmt: skip
    await api.send("POST", CIS_PATH, body)
    hpa = await eventually(
        lambda: live(cluster, "autoscaling/v2/horizontalpodautoscalers", "svc"), "the HPA"
    )
    assert "generation" not in hpa["metadata"]
    service_path = f"{CIS_PATH}/svc"

    def service_reads() -> int:
        return sum(1 for r in cluster["get"] if r.url.path == service_path)

    def hpa_applies() -> int:
        return sum(
            1 for r in cluster["patch"] if r.url.path == HPA_PATH and "fieldManager" in r.params
        )

    # The create's own requests first, however late a busy machine runs them: the status
    # follower reads the service a second after the Deployment's event (a fixed second's wait
    # here let that read fall among the counted ones).
    reads, writes = await settled(lambda: (service_reads(), hpa_applies()))
    for replicas in (2, 3, 4):  # what the HPA controller writes every 15 s
        status = {"status": {"currentReplicas": replicas, "desiredReplicas": replicas}}
        await api.send("PATCH", HPA_PATH, status, patch=True)
    await asyncio.sleep(1.5)
    assert (service_reads(), hpa_applies()) == (reads, writes)
    # An edit of what the operator set is still restored.
    await api.send("PATCH", HPA_PATH, {"spec": {"maxReplicas": 50}}, patch=True)
    await eventually(lambda: hpa_applies() > writes, "the HPA restored")


async def settled(counts: Callable[[], tuple[int, int]], quiet_s: float = 3.0) -> tuple[int, int]:
    """``counts()`` once it has not moved for ``quiet_s`` (within the test's timeout)."""
    last, since = counts(), asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() - since < quiet_s:
        await asyncio.sleep(0.1)
        now = counts()
        if now != last:
            last, since = now, asyncio.get_running_loop().time()
    return last
