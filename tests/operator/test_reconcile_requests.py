"""The operator's decisions and the API requests it sends, on the emulator (not a real server).

These assert the requests themselves: full applies that let removed fields leave, the replica
handover to an HPA (its order), server-side label selectors on the child watches, no
finalizers, Ready only after a rollout finished, status writes only on change. What a real
server makes of them is seen in ``tests/cluster/`` (field ownership of the autoscaled
Deployment: ``test_cluster_autoscaling.py``; the claim paths: ``test_cluster_claims.py``).

The claim tests kept here run on ``StrictCluster``, an emulator that refuses what the rules in
``api_rules`` refuse (both checked on the real server in ``test_cluster_api_rules.py``), for
cases the real control plane cannot make: the server naming a second, unrelated cause beside
the immutable claim template, or refusing a Deployment the operator's validated spec renders
(no CR makes a real server do either). The stale and retained claim paths are kept here too
until their cluster test is written: on the real plane the re-created StatefulSet with a claim
left from before stayed "restarting on a new revision" (not yet understood).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import kmock
import kopf
import pytest
from support.kube.api_rules import (
    claim_resize_refusal,
    statefulset_forbidden_cause,
    statefulset_forbidden_changes,
)
from support.kube.cluster import VERBS, Cluster, InvalidError
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

from cachefleet.operator import handlers
from cachefleet.operator.reconcile import observe
from cachefleet.operator.reconcile.children import HANDOVER_MANAGER
from cachefleet.operator.reconcile.claims import plan_claim_change
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.reconciler import Outcome, Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings
from cachefleet.runtime.config import parse_bytes

pytest_plugins = ("support.kube.fixtures",)  # cluster, api, start_operator, operator
pytestmark = pytest.mark.timeout(120)

HASH = "cachefleet.io/config-hash"
DEPLOYMENT_PATH = f"/apis/apps/v1/namespaces/{NS}/deployments/svc"
PERSISTENT = {"persistence": {"mode": "aof", "size": "1Gi", "storageClassName": "fast"}}


def applies_to(cluster: Cluster, path: str) -> list[Any]:
    return [r for r in cluster["patch"] if r.url.path == path and "fieldManager" in r.params]


# --- defect 1: removed fields leave the cluster ----------------------------------------------


@pytest.mark.usefixtures("operator")
async def test_fields_the_spec_drops_are_left_out_of_the_next_apply(
    cluster: Cluster, api: Api
) -> None:
    pinned = {"gpus": 1, "nodeSelector": {"pool": "a100"},
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}  # fmt: skip
    await api.send("POST", CIS_PATH, service("svc", runtime=pinned))
    await eventually(lambda: live(cluster, "apps/v1/deployments", "svc"), "the Deployment")
    unpinned = {"spec": {"runtime": {"gpus": 0, "nodeSelector": None, "tolerations": None}}}
    await api.send("PATCH", f"{CIS_PATH}/svc", unpinned, patch=True)

    def unpinned_apply() -> Any:
        for request in applies_to(cluster, DEPLOYMENT_PATH):
            pod = request.data["spec"]["template"]["spec"]
            limits = pod["containers"][0].get("resources", {}).get("limits", {})
            if "nodeSelector" not in pod and "nvidia.com/gpu" not in limits:
                return request
        return None

    # With server-side apply, a field the manager stops sending is removed from the object: the
    # operator must send the whole new intent even though the live object "carries" it all.
    request = await eventually(unpinned_apply, "an apply without the GPU and the pinning")
    assert "tolerations" not in request.data["spec"]["template"]["spec"]
    assert "strategy" not in request.data["spec"]  # the no-surge rollout went with the GPUs


# --- defect 3: replicas handed over to the HPA ------------------------------------------------


@pytest.mark.usefixtures("operator")
async def test_switching_autoscaling_on_hands_replicas_over_before_dropping_them(
    cluster: Cluster, api: Api
) -> None:
    cpu = {"resources": {"requests": {"cpu": "1"}}}
    await api.send("POST", CIS_PATH, service("svc", runtime=cpu, replicas=3))
    await eventually(lambda: live(cluster, "apps/v1/deployments", "svc"), "the Deployment")
    # What a real server records after the operator's applies: it owns spec.replicas.
    owned = {"metadata": {"managedFields": [{
        "manager": "cachefleet-operator", "operation": "Apply", "apiVersion": "apps/v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]}}  # fmt: skip
    await api.send("PATCH", DEPLOYMENT_PATH, owned, patch=True)
    scaling = {"spec": {"autoscaling": {"minReplicas": 1, "maxReplicas": 5}}}
    await api.send("PATCH", f"{CIS_PATH}/svc", scaling, patch=True)
    hpas = "autoscaling/v2/horizontalpodautoscalers"
    await eventually(lambda: live(cluster, hpas, "svc"), "the HPA")

    requests = applies_to(cluster, DEPLOYMENT_PATH)
    without = [i for i, r in enumerate(requests) if "replicas" not in r.data.get("spec", {})]
    handovers = [i for i, r in enumerate(requests) if r.params["fieldManager"] == HANDOVER_MANAGER]
    assert without
    assert handovers
    # Server-side apply: a field nobody owns any more is reset to its default (1 replica), so a
    # second manager must co-own the live count before the operator's apply leaves it out.
    assert handovers[0] < without[0]
    handover = requests[handovers[0]].data
    assert handover["spec"] == {"replicas": 3}
    assert set(handover) == {"apiVersion", "kind", "metadata", "spec"}


# --- defect 5: server-side label selectors ----------------------------------------------------


@pytest.mark.usefixtures("operator")
async def test_child_watches_ask_the_server_for_the_operators_children_only(
    cluster: Cluster,
) -> None:
    selector = "app.kubernetes.io/managed-by=cachefleet-operator"

    def watched() -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        for request in cluster["get"]:
            plural = request.url.path.rsplit("/", 1)[-1]
            if plural in ("configmaps", "services", "deployments", "statefulsets"):
                found[plural] = request.params.get("labelSelector")
        return found if len(found) == 4 else {}

    seen = await eventually(watched, "the child watches")
    assert seen == dict.fromkeys(seen, selector)
    # Secrets are never listed nor watched (that would need both on every Secret: RBAC cannot
    # grant by label); they are read by name.
    assert not [r for r in cluster["get"] if r.url.path.endswith("/secrets")]


# --- defect 6: no finalizer --------------------------------------------------------------------


@pytest.mark.usefixtures("operator")
async def test_services_carry_no_finalizer_and_an_old_one_is_removed(
    cluster: Cluster, api: Api
) -> None:
    old = service("old")
    old["metadata"]["finalizers"] = ["kopf.zalando.org/KopfFinalizerMarker"]
    await api.send("POST", CIS_PATH, service("svc"))
    await api.send("POST", CIS_PATH, old)
    await eventually(lambda: condition(cis(cluster, "svc"), "RuntimeReady"), "the status")
    assert not must(cis(cluster, "svc"))["metadata"].get("finalizers")
    for request in cluster["patch"]:  # no request the operator sent ever added one
        if request.url.path.startswith(f"{CIS_PATH}/svc") and isinstance(request.data, dict):
            assert "finalizers" not in (request.data.get("metadata") or {}), request.data
    await eventually(
        lambda: not must(cis(cluster, "old"))["metadata"].get("finalizers"),
        "the old finalizer removed",
    )
    # Deleting now needs no operator: nothing holds the object back.
    await api.send("DELETE", f"{CIS_PATH}/svc")
    await eventually(lambda: cis(cluster, "svc") is None, "the service gone")


# --- defect 8: names that make invalid children ------------------------------------------------


@pytest.mark.usefixtures("operator")
async def test_a_name_that_makes_invalid_children_stalls_with_a_message(
    cluster: Cluster, api: Api
) -> None:
    name = "n" * 50
    await api.send("POST", CIS_PATH, service(name))
    stalled = await eventually(lambda: condition(cis(cluster, name), "Stalled"), "Stalled")
    assert stalled["status"] == "True"
    assert "metadata.name" in stalled["message"]
    assert live(cluster, "apps/v1/deployments", name) is None
    assert applies_to(cluster, f"/apis/apps/v1/namespaces/{NS}/deployments/{name}") == []


# --- defect 9: a rotated user password rolls the pods -------------------------------------------


async def test_rotating_a_user_supplied_password_rolls_redis_and_the_runtime(
    cluster: Cluster, api: Api
) -> None:
    import kubernetes

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mine", "namespace": NS},
              "data": {"password": base64.b64encode(b"first-secret").decode()}}  # fmt: skip
    await api.send("POST", f"/api/v1/namespaces/{NS}/secrets", secret)
    auth = {"redis": {"auth": {"passwordSecretRef": {"name": "mine"}}}}
    body = await api.send("POST", CIS_PATH, service("svc", cache=auth))
    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    reconciler = Reconciler(Kube(), OperatorSettings(redis_timeout_s=0.2))

    def hashes() -> tuple[str, str]:
        sts = must(live(cluster, "apps/v1/statefulsets", "svc-redis"))
        deployment = must(live(cluster, "apps/v1/deployments", "svc"))
        return (
            sts["spec"]["template"]["metadata"]["annotations"][HASH],
            deployment["spec"]["template"]["metadata"]["annotations"][HASH],
        )

    await asyncio.to_thread(reconciler.reconcile, body)
    before = hashes()
    rotated = {"data": {"password": base64.b64encode(b"second-secret").decode()}}
    await api.send("PATCH", f"/api/v1/namespaces/{NS}/secrets/mine", rotated, patch=True)
    await asyncio.to_thread(reconciler.reconcile, body, consistent=False)  # the resync
    after = hashes()
    assert after[0] != before[0]
    assert after[1] != before[1]


# --- defect 4: immutable StatefulSet fields, and other refusals ------------------------------


@attrs.frozen
class ForbiddenError(kmock.KubernetesError):
    status: int = 403
    reason: str = "Forbidden"
    message: str = "forbidden"


@attrs.define(kw_only=True)
class StrictCluster(Cluster):
    """The emulator, refusing what the API server refuses (rules from ``api_rules``)."""

    class_allows_expansion: bool = True
    refuse_deployments: bool = False
    #: Causes the server adds to any StatefulSet update (an invalid value edited alongside).
    extra_causes: list[dict[str, str]] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.resources["v1/persistentvolumeclaims"] = kmock.ResourceInfo(
            kind="PersistentVolumeClaim", namespaced=True, verbs=VERBS, subresources=set()
        )

    async def _handle(self, request: Any) -> Any:
        if (
            request.action == kmock.action.UPDATE
            and request.resource is not None
            and request.subresource is None
            and isinstance(request.data, dict)
        ):
            found = self._live((request.resource, request.namespace, request.name))
            if found is not None:
                self._refuse(request.resource.plural, found, request.data)
        return await super()._handle(request)

    def _refuse(self, plural: str, found: dict[str, Any], new: dict[str, Any]) -> None:
        name = found["metadata"]["name"]
        if plural == "statefulsets" and "spec" in new:
            causes = list(self.extra_causes)
            if statefulset_forbidden_changes(found, new):
                causes.insert(0, statefulset_forbidden_cause())
            if causes:
                text = "; ".join(f"{c['field']}: {c['message']}" for c in causes)
                raise InvalidError(message=f'StatefulSet.apps "{name}" is invalid: {text}',
                                   details={"name": name, "kind": "statefulsets",
                                            "causes": causes})  # fmt: skip
        if plural == "persistentvolumeclaims":
            size = functools.partial(_claim_size)
            refusal = claim_resize_refusal(
                size(found), size(new) or size(found),
                class_allows_expansion=self.class_allows_expansion,
            )  # fmt: skip
            if refusal:
                raise ForbiddenError(message=f'persistentvolumeclaims "{name}" is forbidden: '
                                     f"{refusal}")  # fmt: skip
        if plural == "deployments" and self.refuse_deployments:
            required = "spec.template.spec.containers[0].image: Required value"
            raise InvalidError(message=f'Deployment.apps "{name}" is invalid: {required}')


def _claim_size(obj: dict[str, Any]) -> int:
    requests = obj.get("spec", {}).get("resources", {}).get("requests", {})
    return parse_bytes(requests["storage"]) if "storage" in requests else 0


@pytest.fixture
async def strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StrictCluster]:
    async with serving(StrictCluster(), tmp_path, monkeypatch) as emulator:
        assert isinstance(emulator, StrictCluster)
        yield emulator


@pytest.fixture
async def cluster(strict: StrictCluster) -> StrictCluster:
    return strict


async def _persistent_service(cluster: StrictCluster, api: Api) -> dict[str, Any]:
    await api.send("POST", CIS_PATH, service("svc", cache={"redis": copy.deepcopy(PERSISTENT)}))
    sts = await eventually(lambda: live(cluster, "apps/v1/statefulsets", "svc-redis"), "the STS")
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "data-svc-redis-0", "namespace": NS},
             "spec": {"resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
    await api.send("POST", f"/api/v1/namespaces/{NS}/persistentvolumeclaims", claim)
    return dict(sts)


def _template_size(sts: dict[str, Any] | None) -> str | None:
    if sts is None:
        return None
    [template] = sts["spec"].get("volumeClaimTemplates") or [{"spec": {}}]
    storage = template["spec"].get("resources", {}).get("requests", {}).get("storage")
    return None if storage is None else str(storage)


def _deletes(cluster: Cluster, plural: str) -> list[Any]:
    return [r for r in cluster["delete"] if f"/{plural}/" in r.url.path]


CLAIMS = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"


def _claim_body(size: str) -> dict[str, Any]:
    """A claim as the orphaning delete of an earlier StatefulSet left it: no owner reference."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-svc-redis-0", "namespace": NS},
            "spec": {"resources": {"requests": {"storage": size}}},
            "status": {"capacity": {"storage": size}}}  # fmt: skip


def _sts_recreated(cluster: StrictCluster) -> bool:
    return bool(_deletes(cluster, "statefulsets")) and bool(
        live(cluster, "apps/v1/statefulsets", "svc-redis")
    )


@pytest.mark.usefixtures("operator")
async def test_switching_persistence_on_never_reuses_a_stale_claim(
    cluster: StrictCluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc"))
    await eventually(lambda: live(cluster, "apps/v1/statefulsets", "svc-redis"), "the STS")
    await api.send("POST", CLAIMS, _claim_body("1Gi"))  # left over from an earlier persistence
    bigger = {"persistence": {**PERSISTENT["persistence"], "size": "2Gi"}}
    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"cache": {"redis": bigger}}}, patch=True)
    await eventually(lambda: _sts_recreated(cluster), "the StatefulSet re-created")
    # Deleted before the new StatefulSet (which makes a fresh 2Gi claim), never reused at 1Gi.
    [deleted] = _deletes(cluster, "persistentvolumeclaims")
    assert deleted.url.path.endswith("/data-svc-redis-0")
    assert _template_size(live(cluster, "apps/v1/statefulsets", "svc-redis")) == "2Gi"


@pytest.mark.usefixtures("operator")
async def test_a_retained_claim_is_kept_and_grown_when_persistence_comes_back(
    cluster: StrictCluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc"))
    await eventually(lambda: live(cluster, "apps/v1/statefulsets", "svc-redis"), "the STS")
    await api.send("POST", CLAIMS, _claim_body("1Gi"))
    kept = {**PERSISTENT["persistence"], "size": "2Gi", "retainOnDelete": True}
    patch = {"spec": {"cache": {"redis": {"persistence": kept}}}}
    await api.send("PATCH", f"{CIS_PATH}/svc", patch, patch=True)
    await eventually(lambda: _sts_recreated(cluster), "the StatefulSet re-created")
    assert _deletes(cluster, "persistentvolumeclaims") == []
    claim = must(live(cluster, "v1/persistentvolumeclaims", "data-svc-redis-0"))
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"  # no ResizingVolume forever


@pytest.mark.usefixtures("operator")
async def test_a_larger_claim_with_another_invalid_field_is_reported_and_changes_nothing(
    cluster: StrictCluster, api: Api
) -> None:
    await _persistent_service(cluster, api)
    # The server names both causes: the immutable claim template and a value it refuses.
    invalid = {"reason": "FieldValueInvalid", "field": "spec.template.spec.containers[0].image",
               "message": "Invalid value: \"bad image\": must not contain spaces"}  # fmt: skip
    cluster.extra_causes = [invalid]
    bigger = {"persistence": {**PERSISTENT["persistence"], "size": "2Gi"}}
    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"cache": {"redis": bigger}}}, patch=True)

    def failed() -> dict[str, Any] | None:
        found = condition(cis(cluster, "svc"), "Ready")
        return found if found and "must not contain spaces" in found["message"] else None

    await eventually(failed, "the server's refusal reported")
    assert _deletes(cluster, "statefulsets") == []  # no orphaned Redis pod
    claim_patches = [r for r in cluster["patch"] if "persistentvolumeclaims" in r.url.path]
    assert claim_patches == []  # and no claim grown for a StatefulSet that stays as it was


@pytest.mark.usefixtures("operator")
async def test_any_other_refusal_is_reported_and_never_deletes(
    cluster: StrictCluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc"))
    await eventually(lambda: live(cluster, "apps/v1/deployments", "svc"), "the Deployment")
    cluster.refuse_deployments = True
    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"replicas": 4}}, patch=True)

    def failed() -> dict[str, Any] | None:
        found = condition(cis(cluster, "svc"), "Ready")
        return found if found and found["reason"] == "ReconcileFailed" else None

    ready = await eventually(failed, "ReconcileFailed")
    assert "containers[0].image: Required value" in ready["message"]
    assert must(condition(cis(cluster, "svc"), "Stalled"))["status"] == "True"
    assert list(cluster["delete"]) == []


def test_immutable_field_changes_get_a_deliberate_path() -> None:
    def sts(size: str | None, storage_class: str | None = "fast") -> dict[str, Any]:
        spec: dict[str, Any] = {
            "serviceName": "svc-redis-headless",
            "replicas": 1,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {},
        }
        if size is not None:
            claim = {
                "resources": {"requests": {"storage": size}},
                "storageClassName": storage_class,
            }
            spec["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": claim}]
        return {"metadata": {"name": "svc-redis"}, "spec": spec}

    cases = {
        (None, "1Gi"): "recreate",
        ("1Gi", None): "recreate",
        ("1Gi", "2Gi"): "expand",
        ("2Gi", "1Gi"): "blocked",
        ("1Gi", "1024Mi"): "none",
    }
    for (old, new), action in cases.items():
        if action != "none":  # each is a change the server refuses
            assert statefulset_forbidden_changes(sts(old), sts(new)) == ["volumeClaimTemplates"]
        assert plan_claim_change(sts(old), sts(new)).action == action, (old, new)
    expand = plan_claim_change(sts("1Gi"), sts("2Gi"))
    assert (expand.size, expand.claims) == ("2Gi", ("data-svc-redis-0",))
    assert plan_claim_change(sts("1Gi"), sts("1Gi", "slow")).action == "blocked"


# --- defect 15: Ready only once the rollout finished -------------------------------------------


def test_redis_is_not_ready_while_it_restarts_on_a_new_revision() -> None:
    restarting: dict[str, Any] = {"metadata": {"generation": 2}, "status": {
        "observedGeneration": 2, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 0,
        "currentRevision": "svc-redis-6d4f", "updateRevision": "svc-redis-7c9b"}}  # fmt: skip
    assert observe.redis_condition(restarting, managed=True).status is False
    done = copy.deepcopy(restarting)
    done["status"].update(updatedReplicas=1, currentRevision="svc-redis-7c9b")
    assert observe.redis_condition(done, managed=True).status is True


def test_the_runtime_is_not_ready_while_old_pods_are_still_serving() -> None:
    rolling = {"metadata": {"generation": 3}, "spec": {"replicas": 2}, "status": {
        "observedGeneration": 3, "replicas": 3, "readyReplicas": 2, "updatedReplicas": 1,
        "availableReplicas": 2}}  # fmt: skip
    assert observe.runtime_condition(rolling).status is False
    unavailable = copy.deepcopy(rolling)
    unavailable["status"].update(replicas=2, updatedReplicas=2, readyReplicas=2,
                                 availableReplicas=1)  # fmt: skip
    assert observe.runtime_condition(unavailable).status is False
    done = copy.deepcopy(unavailable)
    done["status"]["availableReplicas"] = 2
    assert observe.runtime_condition(done).status is True


# --- defect 16: status writes only on change --------------------------------------------------


def test_an_unchanged_status_is_not_written_again() -> None:
    status = {"observedGeneration": 1, "url": "http://svc.ml.svc:8000", "replicas": 2}
    body = kopf.Body({"metadata": {"name": "svc", "namespace": NS}, "status": status})
    patch = kopf.Patch()
    handlers._report(body, patch, Outcome(dict(status)))
    assert not patch
    handlers._report(body, patch, Outcome({**status, "replicas": 3}))
    assert dict(patch) == {"status": {"replicas": 3}}


def test_redis_is_not_ready_until_an_expanded_claim_has_grown() -> None:
    ready = observe.redis_condition(
        {"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "readyReplicas": 1}},
        managed=True,
    )
    assert ready.status is True
    claim: dict[str, Any] = {
        "metadata": {"name": "data-svc-redis-0"},
        "spec": {"resources": {"requests": {"storage": "2Gi"}}},
        "status": {"capacity": {"storage": "1Gi"}},
    }
    growing = observe.volume_condition(ready, claim, "2Gi")
    assert growing.status is False
    assert "data-svc-redis-0" in growing.message
    claim["status"]["capacity"]["storage"] = "2048Mi"
    assert observe.volume_condition(ready, claim, "2Gi").status is True
