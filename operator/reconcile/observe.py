"""RedisReady and RuntimeReady, read from the StatefulSet's and the Deployment's status.

Pods the API server refuses (admission: Pod Security, an OpenShift SCC, a ResourceQuota, a
webhook) never exist, so no pod status tells of them: the Deployment says it in its
``ReplicaFailure`` condition (reason FailedCreate), the StatefulSet only in FailedCreate events.
Both become the component's condition with reason ``PodsRefused`` and the server's message, and
a refusal that only a change can lift (a policy, a quota that demands resources the pods do not
state, a rollout past its progress deadline) makes the service Stalled.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cachefleet.operator.reconcile.conditions import Condition
from cachefleet.runtime.config import QuantityError, parse_bytes

#: RedisReady's message while the Redis pod waits for its own restart to take the new form.
DEFERRED_READY = (
    "Redis is ready; it takes its password off its command line at its pod's next restart"
)


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
        if ((statefulset.get("spec") or {}).get("updateStrategy") or {}).get("type") == "OnDelete":
            # Only a change of the password's delivery waits so (``redis_restarts``): the pod
            # runs the configuration asked for, and takes the new form when it restarts.
            return Condition("RedisReady", True, "Ready", DEFERRED_READY)
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


def runtime_condition(deployment: Mapping[str, Any] | None, *, floor: int = 0) -> Condition:
    """Ready when every wanted pod is new and available; ``floor`` (a scaler's minReplicas) is
    the least that is wanted, so a fleet left at zero under an HPA is not "Ready 0/0"."""
    if deployment is None:
        return Condition("RuntimeReady", False, "Missing", "the Deployment does not exist yet")
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wanted = max(int(spec.get("replicas", status.get("replicas") or 1)), floor)
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


REFUSED = "PodsRefused"
#: Refusals that come back the same until the spec, the namespace or the policy changes.
#: "exceeded quota" is left out: it lifts when other pods free the quota.
LASTING_REFUSALS = (
    "violates PodSecurity",
    "unable to validate against any security context constraint",
    "must specify",  # a quota counting resources the pod does not state
    "admission webhook",
    "is invalid",
)
#: A FailedCreate event older than this is not taken as the present state (the controller
#: retries with a backoff of at most a few minutes, and each retry refreshes the event).
EVENT_FRESHNESS = datetime.timedelta(minutes=10)


@dataclass(frozen=True)
class Refusal:
    """Why the controller could not create pods, and whether that can lift by itself."""

    message: str
    lasting: bool

    def condition(self, kind: str) -> Condition:
        return Condition(kind, False, REFUSED, f"pods are refused: {self.message}")


def deployment_refusal(deployment: Mapping[str, Any] | None) -> Refusal | None:
    """The Deployment's ReplicaFailure, or a rollout past its progress deadline."""
    for condition in (deployment or {}).get("status", {}).get("conditions") or []:
        message = str(condition.get("message") or "")
        if condition.get("type") == "ReplicaFailure" and condition.get("status") == "True":
            return Refusal(message, _lasting(message))
        if (
            condition.get("type") == "Progressing"
            and condition.get("status") == "False"
            and condition.get("reason") == "ProgressDeadlineExceeded"
        ):
            return Refusal(message or "the rollout exceeded its progress deadline", True)
    return None


def statefulset_refusal(
    events: Iterable[Mapping[str, Any]], *, now: datetime.datetime | None = None
) -> Refusal | None:
    """The newest fresh FailedCreate event of a StatefulSet, if any."""
    now = now or datetime.datetime.now(datetime.UTC)
    newest: tuple[datetime.datetime, str] | None = None
    for event in events:
        if event.get("reason") != "FailedCreate":
            continue
        when = _event_time(event)
        if when is None or now - when > EVENT_FRESHNESS:
            continue
        if newest is None or when > newest[0]:
            newest = (when, str(event.get("message") or ""))
    if newest is None:
        return None
    return Refusal(newest[1], _lasting(newest[1]))


def _lasting(message: str) -> bool:
    return any(marker in message for marker in LASTING_REFUSALS)


def _event_time(event: Mapping[str, Any]) -> datetime.datetime | None:
    for field in ("lastTimestamp", "eventTime", "firstTimestamp"):
        raw = event.get(field) or ((event.get("series") or {}).get("lastObservedTime"))
        if raw:
            try:
                parsed = datetime.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
            except ValueError:
                continue
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
    return None
