"""Bring the live children in line with the desired ones: apply what drifted, prune the rest."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from cachefleet.operator.manifests.children import CHILD_KINDS
from cachefleet.operator.manifests.meta import MANAGER, Owner
from cachefleet.operator.reconcile.drift import carries
from cachefleet.operator.reconcile.kube import Kube, KubeError

# A StatefulSet's volumeClaimTemplates (persistence) cannot be changed in place.
RECREATABLE_KINDS = frozenset({"StatefulSet"})


def describe(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def apply_children(kube: Kube, children: Sequence[Mapping[str, Any]]) -> list[str]:
    """Apply every child that is missing or differs; returns what was written."""
    written = []
    for child in children:
        meta = child["metadata"]
        live = kube.get(child["apiVersion"], child["kind"], meta["namespace"], meta["name"])
        if live is not None and carries(live, child):
            continue
        _apply(kube, child)
        written.append(describe(child) + (" (created)" if live is None else ""))
    return written


def _apply(kube: Kube, child: Mapping[str, Any]) -> None:
    try:
        kube.apply(child)
    except KubeError as error:
        if not (error.invalid and child["kind"] in RECREATABLE_KINDS):
            raise
        # Replace it, orphaning the pods and claims so the new one adopts and rolls them.
        kube.delete(child, orphan=True)
        _wait_until_gone(kube, child)
        kube.apply(child)


def _wait_until_gone(kube: Kube, obj: Mapping[str, Any], timeout_s: float = 30.0) -> None:
    meta = obj["metadata"]
    deadline = time.monotonic() + timeout_s
    while kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) is not None:
        if time.monotonic() > deadline:
            raise KubeError(0, f"{describe(obj)} is still being deleted; retrying later")
        time.sleep(0.2)


def prune_children(kube: Kube, owner: Owner, children: Sequence[Mapping[str, Any]]) -> list[str]:
    """Delete owned children the spec no longer asks for (e.g. Redis after mode: local)."""
    wanted = {describe(child) for child in children}
    selector = {"app.kubernetes.io/instance": owner.name, "app.kubernetes.io/managed-by": MANAGER}
    deleted = []
    for api_version, kind in CHILD_KINDS:
        for live in kube.list_labelled(api_version, kind, owner.namespace, selector):
            live.setdefault("apiVersion", api_version)
            live.setdefault("kind", kind)
            live["metadata"].setdefault("namespace", owner.namespace)
            if describe(live) not in wanted and _owned_by(live, owner):
                kube.delete(live)
                deleted.append(describe(live))
    return deleted


def _owned_by(obj: Mapping[str, Any], owner: Owner) -> bool:
    references = obj.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner.uid for ref in references if owner.uid)
