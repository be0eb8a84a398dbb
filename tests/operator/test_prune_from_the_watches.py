"""Pruning without a list per kind: a new service's first reconcile and the periodic resync find
the service's children in the operator's index of its child watches (kopf watches every child
kind already); a spec change still lists them (a consistent read: a child applied a moment ago
may not have reached the index). The resync prunes every kind, so what a missed prune left goes
at the next pass, and a child of the same labels that the service does not own stays.

The operator (kopf, real HTTP) against the emulator, its requests read from the emulator's log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, condition, eventually, live, must, service

from cachefleet.operator.manifests.meta import Owner, labels

pytest_plugins = ("support.kube.fixtures",)  # cluster, api, start_operator
pytestmark = pytest.mark.timeout(120)

LOCAL = {"mode": "local"}  # no Redis: a StatefulSet is then a child the spec does not ask for
STATEFULSETS = f"/apis/apps/v1/namespaces/{NS}/statefulsets"


def children_listed(cluster: Cluster, name: str) -> list[str]:
    """The list calls that selected the children of the service ``name`` (kopf's own watches
    and lists select every managed object, by the managed-by label alone)."""
    return [
        request.url.path
        for request in cluster["get"]
        if f"app.kubernetes.io/instance={name}" in (request.params.get("labelSelector") or "")
    ]


def statefulset(name: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    """A Redis StatefulSet of the service ``svc``'s labels, owned by ``owner`` when given."""
    metadata: dict[str, Any] = {
        "name": name, "namespace": NS, "labels": labels(Owner("svc", NS), "redis"),
    }  # fmt: skip
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "cachefleet.io/v1alpha1", "kind": "CachedInferenceService",
             "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
             "controller": True}
        ]  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata,
        "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": {"x": "y"}},
                 "template": {"metadata": {"labels": {"x": "y"}}, "spec": {"containers": []}}},
    }  # fmt: skip


@pytest.mark.usefixtures("operator")
async def test_a_new_service_is_reconciled_without_listing_its_children(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL))
    await eventually(lambda: condition(cis(cluster, "svc"), "RuntimeReady"), "the status")
    assert live(cluster, "apps/v1/deployments", "svc") is not None
    assert children_listed(cluster, "svc") == []


async def test_the_resync_prunes_what_the_spec_does_not_ask_for_from_the_watches(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CACHEFLEET_OPERATOR_RESYNC_INTERVAL", "1")
    await start_operator()
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL))
    await eventually(lambda: condition(cis(cluster, "svc"), "RuntimeReady"), "the status")
    # What a missed prune leaves (an operator stopped between a spec change and its prune), and
    # a user's StatefulSet that carries the same labels but is not the service's.
    await api.send("POST", STATEFULSETS, statefulset("svc-redis", must(cis(cluster, "svc"))))
    await api.send("POST", STATEFULSETS, statefulset("users-own", None))

    await eventually(lambda: live(cluster, "apps/v1/statefulsets", "svc-redis") is None, "pruned")
    assert live(cluster, "apps/v1/statefulsets", "users-own") is not None
    assert children_listed(cluster, "svc") == []


@pytest.mark.usefixtures("operator")
async def test_a_spec_change_prunes_after_a_consistent_list(cluster: Cluster, api: Api) -> None:
    await api.send("POST", CIS_PATH, service("svc"))
    await eventually(lambda: live(cluster, "apps/v1/statefulsets", "svc-redis"), "Redis")
    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"cache": LOCAL}}, patch=True)
    await eventually(lambda: live(cluster, "apps/v1/statefulsets", "svc-redis") is None, "pruned")
    assert STATEFULSETS in children_listed(cluster, "svc")
