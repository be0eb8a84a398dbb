"""Why a component's pods do not start, read from the pods' own status.

The Deployment and the StatefulSet only count pods: a pod that cannot start shows there as "not
ready" until the rollout's progress deadline, ten minutes later, says nothing more specific. The
pods say why at once, in their status: a container waiting with the kubelet's reason (a missing
Secret or key is ``CreateContainerConfigError``, a wrong image or pull secret ``ErrImagePull`` then
``ImagePullBackOff``, a container that keeps exiting ``CrashLoopBackOff``), a failed model
download (``init_failures``), or a pod the kubelet evicted (over its emptyDir limit, or node
pressure). The first such cause becomes the component's condition, with the kubelet's own reason
and message, which Ready passes on.

An eviction is said without the pod's name: a fleet whose model outgrows its volume is evicted
again with every new pod, and the same message then leaves the status as it is (one write, not
one per eviction).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from cachefleet.operator.reconcile.conditions import Condition
from cachefleet.operator.reconcile.init_failures import MESSAGE_LIMIT, download_failure

#: Waiting reasons of a container that will not start without a change somewhere (a Secret, an
#: image, a pull secret, the program itself). ``ContainerCreating`` and ``PodInitializing`` are
#: the normal way to start and are not problems.
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
EVICTED = "Evicted"
#: Every reason this module gives (ModelDownloadFailed is ``init_failures``'s).
REASONS = (*WAITING_REASONS, EVICTED)
#: An evicted pod stays listed (phase Failed) until the pod garbage collector's threshold, which
#: is thousands of pods: only a recent eviction is taken as the present state.
EVICTION_FRESHNESS = datetime.timedelta(minutes=10)


def pod_problem(
    condition_type: str,
    pods: Iterable[Mapping[str, Any]],
    *,
    now: datetime.datetime | None = None,
) -> Condition | None:
    """The component's condition (``RuntimeReady`` or ``RedisReady``) from the first cause
    found: a failed download, then a container waiting on a problem (pods by name), then the
    newest recent eviction; None when the pods show none."""
    listed = sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name")))
    download = download_failure(listed)
    if download is not None:
        return Condition(condition_type, False, download.reason, download.message)
    for pod in listed:
        found = _waiting(pod)
        if found is not None:
            reason, message = found
            return Condition(condition_type, False, reason, message)
    evicted = _newest_eviction(listed, now or datetime.datetime.now(datetime.UTC))
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


def _parse(stamp: Any) -> datetime.datetime | None:
    try:
        parsed = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
