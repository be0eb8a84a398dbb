"""Pods the API server refuses (Pod Security, an OpenShift SCC, a quota) show in the status as
``PodsRefused`` with the server's message, and as Stalled where they will not come by themselves.

The refusals are what the controllers write on a real cluster: the Deployment's ReplicaFailure
condition, and a StatefulSet's FailedCreate events; the operator reads them back through the API.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, condition, live, must, service

from cachefleet.operator.reconcile import observe
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

POD_SECURITY = (
    'pods "svc-7d9c6b5f4-x2x9z" is forbidden: violates PodSecurity "restricted:latest": '
    'allowPrivilegeEscalation != false (container "server" must set '
    "securityContext.allowPrivilegeEscalation=false)"
)
QUOTA_EXCEEDED = (
    'pods "svc-7d9c6b5f4-x2x9z" is forbidden: exceeded quota: compute, requested: '
    "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited: requests.nvidia.com/gpu=4"
)
SCC = (
    'create Pod svc-redis-0 in StatefulSet svc-redis failed error: pods "svc-redis-0" is '
    "forbidden: unable to validate against any security context constraint: "
    "[spec.containers[0].securityContext.runAsUser: Invalid value: 999: must be in the ranges: "
    "[1000680000, 1000689999]]"
)


def replica_failure(message: str) -> dict[str, Any]:
    return {"status": {"conditions": [
        {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
         "message": message},
    ]}}  # fmt: skip


def test_what_lifts_by_itself_and_what_does_not() -> None:
    assert must_refusal(replica_failure(POD_SECURITY)).lasting
    assert not must_refusal(replica_failure(QUOTA_EXCEEDED)).lasting
    timed_out = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                 "message": 'ReplicaSet "svc-1" has timed out progressing'}  # fmt: skip
    deadline = {"status": {"conditions": [timed_out]}}
    assert must_refusal(deadline).lasting
    assert observe.deployment_refusal({"status": {"conditions": []}}) is None


def must_refusal(deployment: dict[str, Any]) -> observe.Refusal:
    found = observe.deployment_refusal(deployment)
    assert found is not None
    return found


def test_only_fresh_failed_create_events_count() -> None:
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
    fresh = {"reason": "FailedCreate", "message": SCC, "lastTimestamp": "2026-01-01T11:58:00Z"}
    stale = {**fresh, "lastTimestamp": "2026-01-01T10:00:00Z", "message": "old"}
    other = {**fresh, "reason": "SuccessfulCreate"}
    found = observe.statefulset_refusal([stale, other, fresh], now=now)
    assert found is not None
    assert found.message == SCC
    assert found.lasting
    assert observe.statefulset_refusal([stale, other], now=now) is None


def reconciler() -> Reconciler:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Reconciler(Kube(), OperatorSettings())


async def reconcile_status(cluster: Cluster) -> dict[str, Any]:
    outcome = await asyncio.to_thread(reconciler().reconcile, must(cis(cluster, "svc")))
    assert outcome.retry is None
    return outcome.status


@pytest.mark.parametrize(
    ("message", "stalled"), [(POD_SECURITY, True), (QUOTA_EXCEEDED, False)], ids=["psa", "quota"]
)
async def test_a_deployment_whose_pods_are_refused_says_so_in_ready(
    cluster: Cluster, api: Api, message: str, stalled: bool
) -> None:
    await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
    await reconcile_status(cluster)
    assert live(cluster, "apps/v1/deployments", "svc") is not None
    # What the Deployment controller writes when the ReplicaSet cannot create its pods.
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/svc/status"
    await api.send("PATCH", path, replica_failure(message), patch=True)
    status = {"status": await reconcile_status(cluster)}
    ready, stall = must(condition(status, "Ready")), must(condition(status, "Stalled"))
    runtime = must(condition(status, "RuntimeReady"))
    progress = must(condition(status, "Reconciling"))
    assert (ready["status"], ready["reason"]) == ("False", "PodsRefused")
    assert message in ready["message"]
    assert runtime["reason"] == "PodsRefused"
    assert stall["status"] == ("True" if stalled else "False")
    assert progress["status"] == ("False" if stalled else "True")


async def test_a_redis_pod_refused_by_an_scc_stalls_the_service(cluster: Cluster, api: Api) -> None:
    await api.send("POST", CIS_PATH, service("svc"))
    await reconcile_status(cluster)
    assert live(cluster, "apps/v1/statefulsets", "svc-redis") is not None
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {"apiVersion": "v1", "kind": "Event",
             "metadata": {"name": "svc-redis.1", "namespace": NS},
             "involvedObject": {"kind": "StatefulSet", "name": "svc-redis", "namespace": NS},
             "reason": "FailedCreate", "type": "Warning", "message": SCC,
             "firstTimestamp": now, "lastTimestamp": now, "count": 3}  # fmt: skip
    await api.send("POST", f"/api/v1/namespaces/{NS}/events", event)
    status = {"status": await reconcile_status(cluster)}
    redis, stall = must(condition(status, "RedisReady")), must(condition(status, "Stalled"))
    assert redis["reason"] == "PodsRefused"
    assert "security context constraint" in redis["message"]
    assert (stall["status"], stall["reason"]) == ("True", "PodsRefused")
