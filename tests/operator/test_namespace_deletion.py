"""A namespace being deleted: the API server refuses new objects there with a 403 whose cause is
``NamespaceTerminating``. The operator takes that as done (its children go with the namespace)
instead of logging a traceback and retrying for every child.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import kmock
import pytest
from support.kube.cluster import APPLY, Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, live, must, service, serving

from cachefleet.operator.reconcile.kube import Kube, status_error
from cachefleet.operator.reconcile.reconciler import Reconciler, restore_child
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

#: What kube-apiserver answers to a create in a terminating namespace (its NamespaceLifecycle
#: admission plugin), as the wire carries it.
TERMINATING_STATUS = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": f'deployments.apps "svc" is forbidden: unable to create new content in namespace '
    f"{NS} because it is being terminated",
    "reason": "Forbidden",
    "details": {
        "name": "svc",
        "group": "apps",
        "kind": "deployments",
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": f"namespace {NS} is being terminated",
                "field": "metadata.namespace",
            }
        ],
    },
    "code": 403,
}
RBAC_STATUS = {
    "kind": "Status",
    "status": "Failure",
    "message": 'deployments.apps "svc" is forbidden: User "x" cannot patch resource',
    "reason": "Forbidden",
    "details": {"name": "svc", "group": "apps", "kind": "deployments"},
    "code": 403,
}


def test_the_servers_terminating_refusal_is_recognised_and_rbac_is_not() -> None:
    terminating = status_error(403, "PATCH /x", json.dumps(TERMINATING_STATUS))
    assert terminating.namespace_terminating
    assert "being terminated" in str(terminating)
    assert not status_error(403, "PATCH /x", json.dumps(RBAC_STATUS)).namespace_terminating


@attrs.frozen
class TerminatingError(kmock.KubernetesError):
    status: int = 403
    reason: str = "Forbidden"
    message: str = str(TERMINATING_STATUS["message"])
    details: Any = attrs.field(factory=lambda: TERMINATING_STATUS["details"])


@attrs.define(kw_only=True)
class TerminatingCluster(Cluster):
    """Refuses new objects in the namespace once ``terminating`` (updates still pass)."""

    terminating: bool = False

    async def _handle(self, request: Any) -> Any:
        if self.terminating and request.resource is not None and request.namespace == NS:
            creates = request.action == kmock.action.CREATE
            applies = request.action == kmock.action.UPDATE and request.headers.get(
                "Content-Type", ""
            ).startswith(APPLY)
            key = (request.resource, request.namespace, request.name)
            if creates or (applies and self._live(key) is None):
                raise TerminatingError()
        return await super()._handle(request)


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Cluster]:
    async with serving(TerminatingCluster(), tmp_path, monkeypatch) as emulator:
        yield emulator


def reconciler() -> Reconciler:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Reconciler(Kube(), OperatorSettings())


async def test_a_terminating_namespace_is_done_not_an_error(cluster: Cluster, api: Api) -> None:
    assert isinstance(cluster, TerminatingCluster)
    await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
    body = must(cis(cluster, "svc"))
    operator = reconciler()
    await asyncio.to_thread(operator.reconcile, body)
    assert live(cluster, "apps/v1/deployments", "svc") is not None

    cluster.terminating = True  # the namespace is deleted; garbage collection takes a child
    await api.send("DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments/svc")
    # The child watch's restore: no exception (kopf would log a traceback), nothing written.
    assert await asyncio.to_thread(restore_child, operator, body, "Deployment", "svc") == []
    # The resync or an update handler: no retry, no warning event, no status write.
    outcome = await asyncio.to_thread(operator.reconcile, body)
    assert outcome.retry is None
    assert outcome.events == []
    assert outcome.status == {}


# --- the replica handover to an HPA keeps a fleet scaled to zero at zero -------------------------


class RecordingKube(Kube):
    """A Kube whose live Deployment is scaled to 0 and owned by the operator; applies recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.applies: list[tuple[str, dict[str, Any]]] = []

    def get(
        self, api_version: str, kind: str, namespace: str, name: str, *, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        owned = {"manager": "cachefleet-operator", "operation": "Apply",
                 "fieldsV1": {"f:spec": {"f:replicas": {}}}}  # fmt: skip
        return {"metadata": {"name": name, "managedFields": [owned]}, "spec": {"replicas": 0}}

    def apply(
        self, obj: Any, *, manager: str = "cachefleet-operator", dry_run: bool = False
    ) -> dict[str, Any]:
        self.applies.append((manager, dict(obj)))
        return {"metadata": {"resourceVersion": str(len(self.applies))}}


def test_the_hpa_handover_keeps_a_deployment_scaled_to_zero_at_zero() -> None:
    from cachefleet.operator.reconcile.applied import AppliedVersions
    from cachefleet.operator.reconcile.children import HANDOVER_MANAGER, apply_children

    kube = RecordingKube()
    meta = {"name": "svc", "namespace": NS}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {}}
    apply_children(kube, [deployment], AppliedVersions())
    [handover] = [body for manager, body in kube.applies if manager == HANDOVER_MANAGER]
    assert handover["spec"] == {"replicas": 0}
