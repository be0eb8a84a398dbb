"""What the operator keeps of each fleet child from the watches it already has, and by what key.

kopf watches every child kind (the restore handler), so an index of those watches tells which
children a service has without a list call per kind. At a thousand services applied at once, a
service's first reconcile listed seven kinds to prune (none of which it had yet), and every
reconcile, the resync's included, listed its ConfigMaps: eight of the twenty-two requests a new
service cost (the API server answers them from its watch cache, so they cost it little: the
time to all Ready stayed the same without them). Only what pruning reads is kept: the child's
name and its owners' uids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cachefleet.operator.reconcile.follow import INSTANCE

ChildKey = tuple[str | None, str | None]
"""(namespace, service) of a child: its service is its ``app.kubernetes.io/instance``."""


def index_id(plural: str) -> str:
    """The kopf index id of the children of one kind (one index a kind: kopf keys an index by
    its handler, and a handler by one resource)."""
    return f"children_{plural}"


def child_key(namespace: str | None, labels: Mapping[str, str]) -> ChildKey:
    """The index key of a child in ``namespace`` with ``labels``."""
    return namespace, labels.get(INSTANCE)


def child_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a child pruning reads (a new dict: kopf reuses the body it was given)."""
    metadata = body.get("metadata") or {}
    owners = [{"uid": ref.get("uid")} for ref in metadata.get("ownerReferences") or ()]
    return {"metadata": {"name": metadata.get("name"), "ownerReferences": owners}}
