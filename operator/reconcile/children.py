"""Bring the live children in line with the desired ones: apply each in full, prune the rest.

Every child is sent whole on every reconcile and the API server decides what changed (a no-op
apply changes nothing there and wakes no watch). A field the spec stops asking for (a GPU limit,
a nodeSelector) leaves the cluster only this way; deciding locally that the live object "already
carries" the intent would keep it forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachefleet.operator.manifests.autoscaling import SCALER_KINDS
from cachefleet.operator.manifests.children import LISTED_KINDS
from cachefleet.operator.manifests.meta import MANAGER, Owner
from cachefleet.operator.reconcile.applied import AppliedVersions, key_of
from cachefleet.operator.reconcile.claims import (
    ClaimChange,
    not_expandable_message,
    only_immutable_fields,
    plan_claim_change,
)
from cachefleet.operator.reconcile.kube import Kube, KubeError

# The field manager that takes the Deployment's replicas over from the operator when an HPA is
# switched on, so that the operator's next apply (without replicas) does not reset them.
HANDOVER_MANAGER = "cachefleet-handover-to-hpa"
#: Child APIs a cluster may not serve (an add-on's CRD), and what to tell the user when one is
#: missing. A server-side apply creates a missing object, so its 404 means the API is absent.
OPTIONAL_APIS: dict[str, str] = {
    "keda.sh/v1alpha1": (
        "KEDA is not installed: the cluster serves no keda.sh/v1alpha1 ScaledObject; install "
        "KEDA (keda.sh), or set spec.autoscaling.engine: hpa"
    ),
}


def describe(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


@dataclass
class Applied:
    """What applying the children did: written (changed) children, the server's answers, and
    what needs the user (the service is Stalled with these messages): immutable-field changes,
    and children of an API the cluster does not serve (KEDA not installed)."""

    written: list[str] = field(default_factory=list)
    live: dict[str, dict[str, Any]] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)
    unserved: list[str] = field(default_factory=list)
    #: Written children this process had not applied before (see ``AppliedVersions.knows``).
    first_seen: list[str] = field(default_factory=list)


def apply_children(
    kube: Kube, children: Sequence[Mapping[str, Any]], versions: AppliedVersions
) -> Applied:
    """Apply every child in full (see the module docstring)."""
    result = Applied()
    floor = _scaler_floor(children)
    for child in children:
        if child["kind"] == "Deployment" and "replicas" not in child["spec"]:
            _hand_replicas_over(kube, child, floor)
        response = _apply(kube, child, result)
        if response is None:
            continue
        result.live[describe(child)] = response
        known = versions.knows(key_of(child))
        if versions.record(key_of(child), response, child):
            result.written.append(describe(child))
            if not known:
                result.first_seen.append(describe(child))
    return result


def _hand_replicas_over(kube: Kube, child: Mapping[str, Any], floor: int) -> None:
    """Before the operator stops applying ``replicas``, let another manager co-own the field,
    and never leave a scaler a count below its ``floor`` (its minReplicas).

    Without the handover, the apply that drops ``replicas`` removes the operator's ownership, the
    field has no owner left and the API server defaults it to 1, scaling the fleet down before
    the HPA acts. This is the handover the server-side apply documentation describes
    ("Transferring ownership"): apply the live count under a second manager first.

    Without the floor, a fleet KEDA left at zero stays there when the ScaledObject is replaced by
    an HPA: nothing restores the count, and an HPA never scales a target at 0 (its condition
    ``ScalingActive`` is ``False``, reason ``ScalingDisabled``). So whoever owns the field, a
    live count under the floor is raised to it.
    """
    meta = child["metadata"]
    live = kube.get(child["apiVersion"], child["kind"], meta["namespace"], meta["name"])
    if live is None:
        return
    count = _live_replicas(live)
    if not _owns_replicas(live, MANAGER) and count >= floor:
        return
    kube.apply(
        {
            "apiVersion": child["apiVersion"],
            "kind": child["kind"],
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {"replicas": max(count, floor)},
        },
        manager=HANDOVER_MANAGER,
    )


def _scaler_floor(children: Sequence[Mapping[str, Any]]) -> int:
    """The least count the scaler among ``children`` keeps (an HPA's ``minReplicas``, a
    ScaledObject's ``minReplicaCount``); 0 without one, or when KEDA may scale to zero."""
    for child in children:
        if (child["apiVersion"], child["kind"]) in SCALER_KINDS:
            spec = child["spec"]
            return int(spec.get("minReplicas", spec.get("minReplicaCount", 0)))
    return 0


def _live_replicas(live: Mapping[str, Any]) -> int:
    """The live count, 0 included (a fleet scaled to zero stays there; an HPA leaves a target at
    0 alone); only a missing field means the server's default, 1."""
    replicas = (live.get("spec") or {}).get("replicas")
    return 1 if replicas is None else int(replicas)


def _owns_replicas(live: Mapping[str, Any], manager: str) -> bool:
    for entry in (live.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
            if "f:replicas" in spec:
                return True
    return False


def _apply(kube: Kube, child: Mapping[str, Any], result: Applied) -> dict[str, Any] | None:
    try:
        return kube.apply(child)
    except KubeError as error:
        missing_api = OPTIONAL_APIS.get(child["apiVersion"])
        if error.not_found and missing_api is not None:
            result.unserved.append(missing_api)
            return None
        if not (
            error.invalid and child["kind"] == "StatefulSet" and only_immutable_fields(error.causes)
        ):
            raise  # refused for another reason too: the caller reports the server's message
        meta = child["metadata"]
        live = kube.get(child["apiVersion"], child["kind"], meta["namespace"], meta["name"])
        if live is None:
            raise
        change = plan_claim_change(live, child)
        if change.action == "none":
            raise  # refused for another reason: the caller reports the server's message
        if change.action == "expand":
            change = _expand_claims(kube, child, change)
        if change.adopted:
            change = _prepare_adopted_claims(kube, child, change)
        if change.action == "blocked":
            result.blocked.append(change.message)
            return None
        response = _recreate(kube, child)
        for claim in change.dropped:
            kube.delete(_claim(child, claim))
        return response


def _claim(child: Mapping[str, Any], name: str) -> dict[str, Any]:
    namespace = child["metadata"]["namespace"]
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta}


def _prepare_adopted_claims(
    kube: Kube, child: Mapping[str, Any], change: ClaimChange
) -> ClaimChange:
    """Persistence is switched on and its claims may be left from before: a retained one is
    kept (its data wanted) and grown to the size asked for; any other is deleted, so that the
    new StatefulSet makes a fresh claim of the new size instead of reusing a stale one."""
    found = []
    for name in change.adopted:
        claim = _claim(child, name)
        if kube.get("v1", "PersistentVolumeClaim", claim["metadata"]["namespace"], name):
            found.append(name)
    if not found:
        return change
    if change.retain:
        grow = ClaimChange("expand", "", change.size, change.storage_class, tuple(found))
        grown = _expand_claims(kube, child, grow)
        return grown if grown.action == "blocked" else change
    for name in found:
        claim = _claim(child, name)
        kube.delete(claim)
        _wait_until_gone(kube, claim)
    return change


def _expand_claims(kube: Kube, child: Mapping[str, Any], change: ClaimChange) -> ClaimChange:
    """Ask for the larger size on every existing claim; blocked when the server refuses.

    The API server only lets a claim grow when its storage class has allowVolumeExpansion, and
    answers 403 otherwise, so the operator needs no access to storage classes to find out.
    """
    namespace = child["metadata"]["namespace"]
    for claim in change.claims:
        obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
        }
        try:
            kube.merge_patch(obj, {"spec": {"resources": {"requests": {"storage": change.size}}}})
        except KubeError as error:
            if error.not_found:
                continue  # a claim not made yet gets the new template's size
            if error.refused:
                return ClaimChange("blocked", not_expandable_message(change, str(error)))
            raise
    return change


def _recreate(kube: Kube, child: Mapping[str, Any]) -> dict[str, Any]:
    """Replace the StatefulSet, orphaning its pod and claims so the new one adopts them."""
    kube.delete(child, orphan=True)
    _wait_until_gone(kube, child)
    return kube.apply(child)


def _wait_until_gone(kube: Kube, obj: Mapping[str, Any], timeout_s: float = 30.0) -> None:
    meta = obj["metadata"]
    deadline = time.monotonic() + timeout_s
    while kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) is not None:
        if time.monotonic() > deadline:
            raise KubeError(0, f"{describe(obj)} is still being deleted; retrying later")
        time.sleep(0.2)


LiveChildren = Callable[[str, str], Sequence[Mapping[str, Any]]]
"""A service's live children of one (apiVersion, kind), each with its name and owners."""


def prune_children(
    kube: Kube,
    found: LiveChildren,
    owner: Owner,
    children: Sequence[Mapping[str, Any]],
    kinds: Sequence[tuple[str, str]] = LISTED_KINDS,
    keep: Callable[[Mapping[str, Any]], bool] = lambda _: False,
) -> list[str]:
    """Delete the owner's live children (``found``) of ``kinds`` that the spec no longer asks
    for (e.g. Redis after mode: local), except those ``keep`` says are still in use (a previous
    runtime ConfigMap).

    Secrets are never pruned (see ``LISTED_KINDS``): the garbage collector takes them with
    their service."""
    wanted = {describe(child) for child in children}
    deleted = []
    for api_version, kind in kinds:
        try:
            lives = found(api_version, kind)
        except KubeError as error:
            if error.not_found and api_version in OPTIONAL_APIS:
                continue  # not served here: there is nothing of that kind to prune
            raise
        for live in lives:
            name = live["metadata"]["name"]
            child = {"apiVersion": api_version, "kind": kind,
                     "metadata": {"name": name, "namespace": owner.namespace}}  # fmt: skip
            if describe(child) not in wanted and _owned_by(live, owner) and not keep(child):
                kube.delete(child)
                deleted.append(describe(child))
    return deleted


def _owned_by(obj: Mapping[str, Any], owner: Owner) -> bool:
    references = obj.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner.uid for ref in references if owner.uid)
