"""Switching autoscaling engines on a running service, held to what a real API server and KEDA
need: the replica count is handed over before the operator stops sending it (so the fleet does
not drop to the default of 1), the scaler being replaced is deleted before the new one is
applied (KEDA's admission webhook refuses a ScaledObject for a Deployment another HPA scales),
and turning autoscaling off makes ``spec.replicas`` the count again. Without KEDA in the
cluster the service stalls with a message and the rest of it keeps running."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import (
    CIS_PATH,
    NS,
    Api,
    cis,
    condition,
    eventually,
    live,
    must,
    service,
    serving,
)

from cachefleet.operator.manifests.meta import MANAGER
from cachefleet.operator.reconcile.children import HANDOVER_MANAGER

pytest_plugins = ("support.kube.fixtures",)  # cluster, api, start_operator, operator
pytestmark = pytest.mark.timeout(180)

DEPLOYMENT_PATH = f"/apis/apps/v1/namespaces/{NS}/deployments/svc"
HPA_PATH = f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/svc"
SCALED_OBJECT_PATH = f"/apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects/svc"
DEPLOYMENTS = "apps/v1/deployments"
HPAS = "autoscaling/v2/horizontalpodautoscalers"
SCALED_OBJECTS = "keda.sh/v1alpha1/scaledobjects"
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
KEDA_MISSES = {
    "minReplicas": 1,
    "maxReplicas": 6,
    "engine": "keda",
    "metric": "misses",
    "target": 20,
    "prometheus": {"serverAddress": PROMETHEUS},
}
HPA_QUEUE = {"minReplicas": 1, "maxReplicas": 6, "metric": "queue", "target": 4}
#: What a real server records after the operator's applies: it owns spec.replicas.
OWNED_REPLICAS = {
    "metadata": {
        "managedFields": [
            {
                "manager": "cachefleet-operator",
                "operation": "Apply",
                "apiVersion": "apps/v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}},
            }
        ]
    }
}


def requests_since(cluster: Cluster, start: int) -> list[Any]:
    return list(cluster)[start:]


def applies(requests: list[Any], path: str) -> list[tuple[int, Any]]:
    return [
        (i, r)
        for i, r in enumerate(requests)
        if r.method == "PATCH" and r.url.path == path and "fieldManager" in r.params
    ]


def deletes(requests: list[Any], path: str) -> list[int]:
    return [i for i, r in enumerate(requests) if r.method == "DELETE" and r.url.path == path]


async def switch(api: Api, autoscaling: dict[str, Any] | None) -> None:
    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"autoscaling": autoscaling}}, patch=True)


async def start_service(cluster: Cluster, api: Api) -> None:
    body = service("svc", replicas=3, cache={"mode": "local"},
                   runtime={"resources": {"requests": {"cpu": "1"}}})  # fmt: skip
    await api.send("POST", CIS_PATH, body)
    await eventually(lambda: live(cluster, DEPLOYMENTS, "svc"), "the Deployment")
    await api.send("PATCH", DEPLOYMENT_PATH, OWNED_REPLICAS, patch=True)


@pytest.mark.usefixtures("operator")
async def test_switching_engines_hands_the_count_over_and_replaces_the_scaler(
    cluster: Cluster, api: Api
) -> None:
    await start_service(cluster, api)

    # Off -> KEDA: the count is handed over first, then the Deployment goes without it.
    start = len(list(cluster))
    await switch(api, KEDA_MISSES)
    await eventually(lambda: live(cluster, SCALED_OBJECTS, "svc"), "the ScaledObject")
    requests = requests_since(cluster, start)
    deployment = applies(requests, DEPLOYMENT_PATH)
    handovers = [(i, r) for i, r in deployment if r.params["fieldManager"] == HANDOVER_MANAGER]
    without = [i for i, r in deployment if "replicas" not in r.data.get("spec", {})]
    assert handovers, "the replicas were not handed over"
    assert without
    assert handovers[0][0] < without[0]
    assert handovers[0][1].data["spec"] == {"replicas": 3}
    [(_, scaled)] = applies(requests, SCALED_OBJECT_PATH)
    assert scaled.params["fieldManager"] == MANAGER
    assert scaled.data["spec"]["triggers"][0]["metadata"]["serverAddress"] == PROMETHEUS
    assert live(cluster, HPAS, "svc") is None

    # KEDA -> HPA: the ScaledObject goes before the HPA is applied; the Deployment stays
    # without replicas (the HPA owns them now).
    start = len(list(cluster))
    await switch(api, {**HPA_QUEUE, "engine": "hpa", "prometheus": None})
    await eventually(lambda: live(cluster, HPAS, "svc"), "the HPA")
    await eventually(lambda: live(cluster, SCALED_OBJECTS, "svc") is None, "no ScaledObject")
    requests = requests_since(cluster, start)
    [deleted] = deletes(requests, SCALED_OBJECT_PATH)
    [(applied, hpa)] = applies(requests, HPA_PATH)
    assert deleted < applied
    assert hpa.data["spec"]["metrics"][0]["pods"]["metric"]["name"] == "cachefleet_queue_pending"
    mine = [r for _, r in applies(requests, DEPLOYMENT_PATH) if r.params["fieldManager"] == MANAGER]
    assert mine
    assert all("replicas" not in r.data["spec"] for r in mine)

    # HPA -> KEDA: the HPA goes first (KEDA would refuse a ScaledObject beside it).
    start = len(list(cluster))
    await switch(api, {**KEDA_MISSES, "metric": "misses", "target": 20})
    await eventually(lambda: live(cluster, SCALED_OBJECTS, "svc"), "the ScaledObject again")
    await eventually(lambda: live(cluster, HPAS, "svc") is None, "no HPA")
    requests = requests_since(cluster, start)
    [deleted] = deletes(requests, HPA_PATH)
    [(applied, _)] = applies(requests, SCALED_OBJECT_PATH)
    assert deleted < applied

    # Off: spec.replicas is the count again, and the ScaledObject goes.
    start = len(list(cluster))
    await switch(api, None)

    def counted() -> list[Any]:
        deployment = applies(requests_since(cluster, start), DEPLOYMENT_PATH)
        return [r for _, r in deployment if r.params["fieldManager"] == MANAGER]

    mine = await eventually(counted, "the Deployment applied with spec.replicas")
    assert [r.data["spec"]["replicas"] for r in mine] == [3]
    assert live(cluster, SCALED_OBJECTS, "svc") is None
    requests = requests_since(cluster, start)
    [deleted] = deletes(requests, SCALED_OBJECT_PATH)
    assert deleted < applies(requests, DEPLOYMENT_PATH)[0][0]
    assert live(cluster, HPAS, "svc") is None


@pytest.fixture
async def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cluster]:
    """The emulator, with KEDA's CRD unless the test asks for a cluster without it (then it is
    not discovered, and every request for it gets a real server's 404)."""
    emulator = Cluster()
    if not getattr(request, "param", True):
        del emulator.resources[SCALED_OBJECTS]
        resource = kmock.resource("keda.sh", "v1alpha1", "scaledobjects")
        emulator[resource] << kmock.KubernetesError(
            404, "NotFound", "the server could not find the requested resource"
        )
    async with serving(emulator, tmp_path, monkeypatch) as served:
        yield served


@pytest.mark.parametrize("cluster", [False], indirect=True, ids=["without KEDA"])
@pytest.mark.usefixtures("operator")
async def test_without_keda_the_service_stalls_with_a_message_and_keeps_its_pods(
    cluster: Cluster, api: Api
) -> None:
    await start_service(cluster, api)
    await switch(api, KEDA_MISSES)

    def stalled() -> dict[str, Any] | None:
        found = condition(cis(cluster, "svc"), "Stalled")
        return found if found and found["status"] == "True" else None

    found = await eventually(stalled, "Stalled")
    assert found["reason"] == "NotInstalled"
    assert "KEDA is not installed" in found["message"]
    ready = condition(cis(cluster, "svc"), "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    assert "KEDA is not installed" in ready["message"]
    assert live(cluster, DEPLOYMENTS, "svc") is not None

    # Back to an HPA: the service recovers.
    await switch(api, {**HPA_QUEUE, "engine": "hpa", "prometheus": None})
    await eventually(lambda: live(cluster, HPAS, "svc"), "the HPA")

    def recovered() -> bool:
        found = condition(cis(cluster, "svc"), "Stalled")
        return found is not None and found["status"] == "False"

    await eventually(recovered, "Stalled False")


#: What KEDA leaves after scaling the fleet to zero: the count at 0, written by its own
#: manager through the scale subresource (an update, not an apply).
KEDA_AT_ZERO = {
    "spec": {"replicas": 0},
    "metadata": {
        "managedFields": [
            {
                "manager": "keda",
                "operation": "Update",
                "apiVersion": "apps/v1",
                "subresource": "scale",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}},
            }
        ]
    },
}
KEDA_TO_ZERO = {
    **KEDA_MISSES,
    "minReplicas": 0,
    "prometheus": {"serverAddress": PROMETHEUS, "activationQuery": "sum(rate(x[1m]))"},
}


@pytest.mark.usefixtures("operator")
async def test_an_hpa_taking_over_a_fleet_keda_left_at_zero_starts_from_its_minimum(
    cluster: Cluster, api: Api
) -> None:
    await start_service(cluster, api)
    await switch(api, KEDA_TO_ZERO)
    await eventually(lambda: live(cluster, SCALED_OBJECTS, "svc"), "the ScaledObject")
    await api.send("PATCH", DEPLOYMENT_PATH, KEDA_AT_ZERO, patch=True)

    start = len(list(cluster))
    await switch(api, {**HPA_QUEUE, "minReplicas": 2, "engine": "hpa", "prometheus": None})
    await eventually(lambda: live(cluster, HPAS, "svc"), "the HPA")

    def raised() -> list[Any]:
        deployment = applies(requests_since(cluster, start), DEPLOYMENT_PATH)
        return [r for _, r in deployment if "replicas" in r.data.get("spec", {})]

    [handover] = await eventually(raised, "the Deployment applied with a count")
    assert handover.params["fieldManager"] == HANDOVER_MANAGER
    assert handover.data["spec"]["replicas"] == 2
    assert must(live(cluster, DEPLOYMENTS, "svc"))["spec"]["replicas"] == 2

    def reported() -> dict[str, Any] | None:
        return condition(cis(cluster, "svc"), "Ready")

    ready = await eventually(reported, "a Ready condition")
    assert ready["status"] == "False"
    assert "0/0" not in ready["message"]
