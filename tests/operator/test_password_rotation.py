"""A deleted generated-password Secret means a new password, even when its delete lands while a
reconcile is under way: that reconcile read the old password, and its apply must not bring the
Secret back with it (the password a user deleted it to rotate).

The reconciler runs against the emulator, which refuses, as the API server does, an apply that
names the uid of an object that is gone (409, "uid mismatch") or that another object took over.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, live, must, service

from cachefleet.operator.manifests.meta import CONFIG_HASH_ANNOTATION
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

SECRET = "svc-redis-auth"


class DeletingAfterRead(Kube):
    """A client that deletes the password Secret just after the reconcile reads it: a user's
    delete landing between the reconcile's read and its apply, made certain."""

    armed = False

    def get(self, api_version: str, kind: str, namespace: str, name: str, **kw: Any) -> Any:
        found = super().get(api_version, kind, namespace, name, **kw)
        if self.armed and kind == "Secret" and name == SECRET and found is not None:
            self.armed = False
            self.delete(found)
        return found


def redis_hash(cluster: Cluster) -> str:
    statefulset = must(live(cluster, "apps/v1/statefulsets", "svc-redis"))
    return str(statefulset["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION])


async def test_a_password_secret_deleted_during_a_reconcile_is_made_again_with_a_new_password(
    cluster: Cluster, api: Api
) -> None:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    kube = DeletingAfterRead()
    reconciler = Reconciler(kube, OperatorSettings())
    await api.send("POST", CIS_PATH, service("svc"))
    await asyncio.to_thread(reconciler.reconcile, must(cis(cluster, "svc")))
    first = must(live(cluster, "v1/secrets", SECRET))
    rolled_from = redis_hash(cluster)

    kube.armed = True
    outcome = await asyncio.to_thread(reconciler.reconcile, must(cis(cluster, "svc")))

    assert not kube.armed, "the reconcile never read the password Secret"
    assert outcome.retry is None, outcome.events
    renewed = must(live(cluster, "v1/secrets", SECRET))
    assert renewed["data"] != first["data"]
    assert renewed["metadata"]["uid"] != first["metadata"]["uid"]
    assert redis_hash(cluster) != rolled_from  # Redis and the runtime roll for the new password
    assert not [e for e in outcome.events if e.warning], outcome.events


async def test_an_unchanged_password_secret_is_applied_over_itself(
    cluster: Cluster, api: Api
) -> None:
    """The pinned apply of a Secret that stayed is the same no-op as before: nothing written."""
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    reconciler = Reconciler(Kube(), OperatorSettings())
    await api.send("POST", CIS_PATH, service("svc"))
    await asyncio.to_thread(reconciler.reconcile, must(cis(cluster, "svc")))
    first = must(live(cluster, "v1/secrets", SECRET))

    outcome = await asyncio.to_thread(reconciler.reconcile, must(cis(cluster, "svc")))

    assert outcome.retry is None
    again = must(live(cluster, "v1/secrets", SECRET))
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert again["data"] == first["data"]
    assert again["metadata"]["namespace"] == NS
