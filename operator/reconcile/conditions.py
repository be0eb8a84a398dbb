"""kstatus-compatible conditions: Ready, Reconciling, Stalled, RedisReady and RuntimeReady.

A condition keeps its lastTransitionTime while its status stays the same, so watchers see real
transitions only.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str

    def render(self, generation: int | None, previous: Mapping[str, Any] | None) -> dict[str, Any]:
        status = "True" if self.status else "False"
        unchanged = previous is not None and previous.get("status") == status
        since = previous.get("lastTransitionTime") if unchanged and previous else None
        rendered: dict[str, Any] = {
            "type": self.type,
            "status": status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": since or timestamp_now(),
        }
        if generation is not None:
            rendered["observedGeneration"] = generation
        return rendered


def render_conditions(
    conditions: Iterable[Condition],
    *,
    generation: int | None,
    previous: Iterable[Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    by_type = {str(c.get("type")): c for c in previous or ()}
    return [c.render(generation, by_type.get(c.type)) for c in conditions]


#: Waiting reasons of a container that will not start without a change somewhere (a Secret, an
#: image, a pull secret, the program itself). ``ContainerCreating`` and ``PodInitializing`` are
#: the normal way to start and are not problems. (Here, not in ``pod_problems``, which reads
#: them too: that module imports this one.)
WAITING_REASONS = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RunContainerError",
    "CrashLoopBackOff",
)
#: Component reasons the summary passes on, so that Ready says why rather than "Progressing"
#: (the pods' own reasons: ``pod_problems``).
SURFACED_REASONS = (
    "PodsRefused",
    "ModelDownloadFailed",
    *WAITING_REASONS,
    "Unschedulable",
    "FailedAttachVolume",
    "FailedMount",
    "Evicted",
)


def summary_conditions(
    redis: Condition,
    runtime: Condition,
    *,
    problem: str | None,
    stalled: str | None = None,
    stalled_reason: str = "ReconcileFailed",
) -> list[Condition]:
    """Ready, Reconciling and Stalled from the two component conditions and a transient problem.

    ``stalled`` is a problem that retrying cannot fix (the API server refused a child or the
    pods, or an immutable field changed): the user has to act, so Stalled is True and
    Reconciling False.
    """
    if stalled is not None:
        return [
            Condition("Ready", False, stalled_reason, stalled),
            Condition("Reconciling", False, stalled_reason, "waiting for a change"),
            Condition("Stalled", True, stalled_reason, stalled),
            redis,
            runtime,
        ]
    ready = redis.status and runtime.status and problem is None
    if ready:
        message = "Redis and every runtime pod are ready"
    else:
        message = problem or "; ".join(c.message for c in (redis, runtime) if not c.status)
    surfaced = [c.reason for c in (redis, runtime) if c.reason in SURFACED_REASONS]
    progress = surfaced[0] if surfaced else "Progressing"
    reason = "Ready" if ready else ("ReconcileFailed" if problem else progress)
    return [
        Condition("Ready", ready, reason, message),
        Condition("Reconciling", not ready, reason, message),
        Condition("Stalled", False, "Reconciled", "the spec is valid"),
        redis,
        runtime,
    ]


#: The reason of a service whose pod template change waits for other fleets' rollouts.
ROLLOUT_QUEUED = "RolloutQueued"


def queued_conditions(conditions: Iterable[Condition], message: str) -> list[Condition]:
    """``conditions`` of a service whose rollout waits its turn: not Ready (its pods do not run
    the spec yet), Reconciling with the reason and why."""
    replaced = {
        "Ready": Condition("Ready", False, ROLLOUT_QUEUED, message),
        "Reconciling": Condition("Reconciling", True, ROLLOUT_QUEUED, message),
    }
    return [replaced.get(c.type, c) for c in conditions]


def stalled_conditions(message: str, reason: str = "InvalidSpec") -> list[Condition]:
    """A spec that cannot be reconciled until someone edits it (or, with another ``reason``,
    until the platform or a lost Secret allows it: see ``refusals``)."""
    waiting = "waiting for the spec to be fixed" if reason == "InvalidSpec" else message
    not_reconciled = (
        "not reconciled: the spec is invalid" if reason == "InvalidSpec" else "not reconciled"
    )
    return [
        Condition("Ready", False, reason, message),
        Condition("Reconciling", False, reason, waiting),
        Condition("Stalled", True, reason, message),
        Condition("RedisReady", False, reason, not_reconciled),
        Condition("RuntimeReady", False, reason, not_reconciled),
    ]


def timestamp_now() -> str:
    """Now, in the RFC 3339 form Kubernetes uses for status times."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
