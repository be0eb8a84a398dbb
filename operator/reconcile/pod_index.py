"""What the operator keeps of each fleet pod from its one cluster-wide pod watch, and by what key.

The handlers keep these entries in a kopf index, filled by the label-selected watch, so that the
status (why pods do not start) and the served pass (which pods are ready, at which address) read
a service's pods without a list call each: at a thousand services, the served pass alone would
otherwise list pods a thousand times a pass. Only what those readers use is kept (a pod's
metadata that names it, its status, and its containers' names and ports; the Redis container's
command, a few hundred bytes, tells how that Redis got its password: ``redis_restarts``), not the
whole pod.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cachefleet.operator.reconcile.follow import COMPONENT, INSTANCE

#: The managed Redis's container (``manifests/redis.py``).
REDIS_CONTAINER = "redis"

#: The metadata an entry keeps.
KEPT_METADATA = ("name", "namespace", "labels", "creationTimestamp", "deletionTimestamp")
#: The status an entry keeps: what ``pod_problems``, ``follow`` and ``served`` read (not the
#: host, QoS class, IP lists, images and container ids a pod's status also carries).
KEPT_STATUS = ("phase", "reason", "message", "podIP", "startTime")
KEPT_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")
KEPT_CONTAINER_STATUS = ("name", "ready", "state", "lastState", "restartCount")

PodKey = tuple[str | None, str | None, str | None]
"""(namespace, service, component) of a fleet pod."""


def pod_key(namespace: str | None, labels: Mapping[str, str]) -> PodKey:
    """The index key of a pod of ``namespace`` with ``labels`` (the selector labels of a
    service's component select exactly the pods under this key)."""
    return namespace, labels.get(INSTANCE), labels.get(COMPONENT)


def pod_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a pod the operator reads, copied (kopf reuses the body it was given)."""
    metadata = body.get("metadata") or {}
    containers = [_container(c) for c in (body.get("spec") or {}).get("containers") or ()]
    return {
        "metadata": {k: copy.deepcopy(metadata[k]) for k in KEPT_METADATA if k in metadata},
        "spec": {"containers": containers},
        "status": _status(body.get("status") or {}),
    }


def _status(status: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {k: status[k] for k in KEPT_STATUS if k in status}
    if "conditions" in status:
        kept["conditions"] = [{k: c[k] for k in KEPT_CONDITION if k in c}
                              for c in status.get("conditions") or ()]  # fmt: skip
    for key in ("initContainerStatuses", "containerStatuses"):
        if key in status:
            kept[key] = [{k: copy.deepcopy(c[k]) for k in KEPT_CONTAINER_STATUS if k in c}
                         for c in status.get(key) or ()]  # fmt: skip
    return kept


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    kept = {"name": container.get("name"), "ports": copy.deepcopy(container.get("ports") or [])}
    if container.get("name") == REDIS_CONTAINER:
        kept["command"] = list(container.get("command") or [])
    return kept
