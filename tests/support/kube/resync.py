"""One periodic resync of a service run against the emulator, and the Deployment apply it sent:
how the rollout tests see what reaches the pods when a Secret or ConfigMap the pods read changes
in place (a renewed TLS certificate, a rotated upstream token or CA)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.periodic import Periodic
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings
from support.kube.cluster import Cluster
from support.kube.fixtures import NS, cis, must


def periodic() -> Periodic:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Periodic(Reconciler(Kube(), OperatorSettings()), KeyedLocks())


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def last_deployment_apply(cluster: Cluster, name: str) -> dict[str, Any]:
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/{name}"
    [last] = [r for r in cluster["patch"] if r.url.path == path and "fieldManager" in r.params][-1:]
    return dict(last.data)


def pod_annotations(deployment: dict[str, Any]) -> dict[str, str]:
    return dict(deployment["spec"]["template"]["metadata"]["annotations"])


async def resync(name: str, cluster: Cluster) -> dict[str, Any]:
    """The service ``name`` resynced once, and the Deployment apply that resync sent."""
    await asyncio.to_thread(periodic().resync, must(cis(cluster, name)))
    return last_deployment_apply(cluster, name)
