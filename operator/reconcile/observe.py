"""RedisReady and RuntimeReady, read from the StatefulSet's and the Deployment's status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cachefleet.operator.reconcile.conditions import Condition
from cachefleet.runtime.config import QuantityError, parse_bytes


def redis_condition(statefulset: Mapping[str, Any] | None, *, managed: bool) -> Condition:
    if not managed:
        return Condition("RedisReady", True, "NotManaged", "Redis is external or not used")
    if statefulset is None:
        return Condition("RedisReady", False, "Missing", "the Redis StatefulSet does not exist yet")
    status = statefulset.get("status") or {}
    ready = int(status.get("readyReplicas") or 0)
    if not _observed(statefulset) or ready < 1:
        return Condition(
            "RedisReady", False, "Starting", "waiting for the Redis pod to become ready"
        )
    # During a rolling restart the old pod is still ready: only when every pod runs the current
    # template (currentRevision == updateRevision) is the new configuration in effect.
    current, update = status.get("currentRevision"), status.get("updateRevision")
    updated = int(status.get("updatedReplicas") or 0)
    if (current and update and current != update) or (update and updated < 1):
        return Condition("RedisReady", False, "Restarting", "Redis is restarting on a new revision")
    return Condition("RedisReady", True, "Ready", "Redis is ready")


def volume_condition(
    redis: Condition, claim: Mapping[str, Any] | None, wanted_size: str
) -> Condition:
    """RedisReady stays False while the Redis claim has not grown to the size asked for.

    An expansion is asynchronous: the claim asks for the new size at once, and its
    ``status.capacity`` follows when the volume (and its filesystem) has grown.
    """
    if not redis.status or claim is None:
        return redis
    name = (claim.get("metadata") or {}).get("name")
    capacity = ((claim.get("status") or {}).get("capacity") or {}).get("storage")
    try:
        growing = capacity is not None and parse_bytes(capacity) < parse_bytes(wanted_size)
    except QuantityError:
        return redis
    if growing:
        message = (
            f"the volume claim {name} holds {capacity}; waiting for it to grow to {wanted_size}"
        )
        return Condition("RedisReady", False, "ResizingVolume", message)
    return redis


def runtime_condition(deployment: Mapping[str, Any] | None) -> Condition:
    if deployment is None:
        return Condition("RuntimeReady", False, "Missing", "the Deployment does not exist yet")
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wanted = int(spec.get("replicas", status.get("replicas") or 1))
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    total = int(status.get("replicas") or 0)
    # Old pods still terminating count in replicas: ready means every pod is new and available.
    rolled = updated >= wanted and available >= wanted and total <= wanted
    if ready >= wanted and rolled and _observed(deployment):
        return Condition("RuntimeReady", True, "Ready", f"{ready}/{wanted} runtime pods ready")
    return Condition("RuntimeReady", False, "Progressing", f"{ready}/{wanted} runtime pods ready")


def replica_counts(deployment: Mapping[str, Any] | None) -> tuple[int, int]:
    status = (deployment or {}).get("status") or {}
    return int(status.get("replicas") or 0), int(status.get("readyReplicas") or 0)


def _observed(obj: Mapping[str, Any]) -> bool:
    generation = (obj.get("metadata") or {}).get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration")
    return generation is None or observed is None or int(observed) >= int(generation)
