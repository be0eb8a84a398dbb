"""Why a component's pods do not start, read from the pods' own status.

The Deployment and the StatefulSet only count pods: a pod that cannot start shows there as "not
ready" until the rollout's progress deadline, ten minutes later, says nothing more specific. The
pods say why at once, in their status: a container waiting with the kubelet's reason (a missing
Secret or key is ``CreateContainerConfigError``, a wrong image or pull secret ``ErrImagePull`` then
``ImagePullBackOff``, a container that keeps exiting ``CrashLoopBackOff``), a failed model
download (``init_failures``), a pod no node can take (``Unschedulable``, the scheduler's
message), or a pod the kubelet evicted (over its emptyDir limit, or node pressure). The first
such cause becomes the component's condition, with its own reason and message, which Ready
passes on.

A volume that cannot be attached or mounted (a ``pvc://`` claim already attached to another
node: Multi-Attach; a Secret volume whose Secret is missing, as a TLS Secret) leaves no trace in
the pod's status: the pod only waits in ``ContainerCreating``. Its cause is in the pod's events
(``FailedAttachVolume``, ``FailedMount``), read for a few such pods only, and only for pods
that wait so.

An eviction is said without the pod's name: a fleet whose model outgrows its volume is evicted
again with every new pod, and the same message then leaves the status as it is (one write, not
one per eviction).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cachefleet.operator.reconcile.conditions import WAITING_REASONS, Condition
from cachefleet.operator.reconcile.init_failures import MESSAGE_LIMIT, download_failure

EVICTED = "Evicted"
UNSCHEDULABLE = "Unschedulable"
#: Event reasons of a volume that cannot be attached (Multi-Attach) or mounted.
VOLUME_REASONS = ("FailedAttachVolume", "FailedMount")
#: Waiting reasons of a container whose pod has not started any container yet.
CREATING = ("ContainerCreating", "PodInitializing")
#: Pods waiting so whose events are read in one look (they share their volumes' fate).
EVENTS_READ_MOST = 2
#: Every reason this module gives (ModelDownloadFailed is ``init_failures``'s).
REASONS = (*WAITING_REASONS, UNSCHEDULABLE, *VOLUME_REASONS, EVICTED)
#: An evicted pod stays listed (phase Failed) until the pod garbage collector's threshold, which
#: is thousands of pods: only a recent eviction (or volume event) is taken as the present state.
EVICTION_FRESHNESS = datetime.timedelta(minutes=10)


EventsOf = Callable[[str], Iterable[Mapping[str, Any]]]
"""The events about the pod of this name (in the component's namespace)."""


def pod_problem(
    condition_type: str,
    pods: Iterable[Mapping[str, Any]],
    *,
    events_of: EventsOf | None = None,
    now: datetime.datetime | None = None,
) -> Condition | None:
    """The component's condition (``RuntimeReady`` or ``RedisReady``) from the first cause
    found: a failed download, a container waiting on a problem, a pod no node takes (pods by
    name), a volume that is not attached or mounted (with ``events_of``), then the newest
    recent eviction; None when the pods show none."""
    listed = sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name")))
    now = now or datetime.datetime.now(datetime.UTC)
    download = download_failure(listed)
    if download is not None:
        return Condition(condition_type, False, download.reason, download.message)
    for find in (_waiting, _unschedulable):
        for pod in listed:
            found = find(pod)
            if found is not None:
                return Condition(condition_type, False, *found)
    if events_of is not None:
        found = _volume(listed, events_of, now)
        if found is not None:
            return Condition(condition_type, False, *found)
    evicted = _newest_eviction(listed, now)
    if evicted is not None:
        return Condition(condition_type, False, EVICTED, f"a pod was evicted: {evicted}")
    return None


def _waiting(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the pod's first container waiting on a problem."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Failed", "Succeeded"):
        return None  # going away, or done: a replacement tells of itself
    containers = [*(status.get("initContainerStatuses") or ()),
                  *(status.get("containerStatuses") or ())]  # fmt: skip
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason not in WAITING_REASONS:
            continue
        detail = str(waiting.get("message") or "").strip()
        if reason == "CrashLoopBackOff":
            # The kubelet's message names its growing back-off; the last exit says why.
            detail = _last_exit(container) or "it keeps exiting"
        text = f"pod {meta.get('name')}, container {container.get('name')}: {reason}"
        return str(reason), (f"{text}: {detail}" if detail else text)[:MESSAGE_LIMIT]
    return None


def _unschedulable(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The scheduler's word on a pod no node can take (GPUs, selectors, taints, a claim)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if (condition.get("type"), condition.get("status")) != ("PodScheduled", "False"):
            continue
        if condition.get("reason") == UNSCHEDULABLE:
            name = (pod.get("metadata") or {}).get("name")
            message = str(condition.get("message") or "").strip()
            return UNSCHEDULABLE, f"pod {name}: {message}"[:MESSAGE_LIMIT]
    return None


def creating(pod: Mapping[str, Any]) -> bool:
    """Whether the pod is on a node and none of its containers has started: it waits for its
    volumes (or pulls its images, which its events also tell)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Pending":
        return False
    scheduled = any(
        (c.get("type"), c.get("status")) == ("PodScheduled", "True")
        for c in status.get("conditions") or ()
    )
    containers = [*(status.get("initContainerStatuses") or ()),
                  *(status.get("containerStatuses") or ())]  # fmt: skip
    states = [c.get("state") or {} for c in containers]
    return (
        scheduled
        and bool(states)
        and all((state.get("waiting") or {}).get("reason") in CREATING for state in states)
    )


def _volume(
    pods: Iterable[Mapping[str, Any]], events_of: EventsOf, now: datetime.datetime
) -> tuple[str, str] | None:
    """The newest recent volume event of the first waiting pods that have one."""
    waiting = [p for p in pods if creating(p)][:EVENTS_READ_MOST]
    for pod in waiting:
        name = str((pod.get("metadata") or {}).get("name"))
        newest: tuple[datetime.datetime, str, str] | None = None
        for event in events_of(name):
            reason = str(event.get("reason") or "")
            when = event_time(event)
            if reason not in VOLUME_REASONS or when is None or now - when > EVICTION_FRESHNESS:
                continue
            if newest is None or when > newest[0]:
                newest = (when, reason, str(event.get("message") or "").strip())
        if newest is not None:
            return newest[1], f"pod {name}: {newest[2]}"[:MESSAGE_LIMIT]
    return None


def _last_exit(container: Mapping[str, Any]) -> str:
    terminated = (container.get("lastState") or {}).get("terminated") or {}
    if not terminated:
        return ""
    message = str(terminated.get("message") or "").strip()
    code = f"{terminated.get('reason') or 'Error'}, exit code {terminated.get('exitCode')}"
    return f"{code}: {message}" if message else code


def _newest_eviction(pods: Iterable[Mapping[str, Any]], now: datetime.datetime) -> str | None:
    """The kubelet's message of the newest pod evicted within the freshness window."""
    newest: tuple[datetime.datetime, str] | None = None
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Failed" or status.get("reason") != EVICTED:
            continue
        when = _evicted_at(pod)
        if when is None or now - when > EVICTION_FRESHNESS:
            continue
        if newest is None or when > newest[0]:
            newest = (when, str(status.get("message") or "evicted by the kubelet").strip())
    return None if newest is None else newest[1][:MESSAGE_LIMIT]


def _evicted_at(pod: Mapping[str, Any]) -> datetime.datetime | None:
    """The latest time the pod's status or metadata gives (its eviction, or close to it)."""
    status = pod.get("status") or {}
    stamps = [c.get("lastTransitionTime") for c in status.get("conditions") or ()]
    stamps += [status.get("startTime"), (pod.get("metadata") or {}).get("creationTimestamp")]
    times = [t for t in (_parse(s) for s in stamps if s) if t is not None]
    return max(times) if times else None


def event_time(event: Mapping[str, Any]) -> datetime.datetime | None:
    """When an event last happened (core/v1 or events.k8s.io fields)."""
    series = event.get("series") or {}
    for stamp in (event.get("lastTimestamp"), series.get("lastObservedTime"),
                  event.get("eventTime"), event.get("firstTimestamp")):  # fmt: skip
        parsed = _parse(stamp) if stamp else None
        if parsed is not None:
            return parsed
    return None


def _parse(stamp: Any) -> datetime.datetime | None:
    try:
        parsed = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
