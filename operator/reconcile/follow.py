"""Status in seconds: a service's conditions follow its workloads and pods as they change.

kopf watches the operator's Deployments and StatefulSets and the fleets' pods, each kind with
one cluster-wide watch that the API server filters by the managed-by label: no list per
service, and nothing of other workloads reaches the operator. For each event the part of the
object that decides the status (counts, conditions, container states: not timestamps, not
restart counts) is compared with the last one seen; when it moved, the owning service is marked,
and after a short delay, which gathers a burst (a rollout moves many pods at once), its status is
computed again from the live objects (``Reconciler.refresh``: nothing is applied) and written
only where it changed. A service marked again while its refresh runs is refreshed once more
after it, never twice at once.

A pod that waits on a node with no container started (``pod_problems.creating``) may be waiting
for a volume, whose cause (Multi-Attach, a missing Secret) comes in events, not as a change of
the pod: its service is looked at again a few times, further and further apart, while the pod
stays so.

The objects listed when a watch starts are only remembered: the resume handlers reconcile every
service then, and an operator restart must not cost a second pass over the whole fleet.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cachefleet.operator.manifests.meta import GROUP, KIND, MANAGER, VERSION
from cachefleet.operator.reconcile.kube import KubeError
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.periodic import status_changes
from cachefleet.operator.reconcile.pod_problems import creating
from cachefleet.operator.reconcile.reconciler import Reconciler

log = logging.getLogger(__name__)

ServiceKey = tuple[str, str]
"""(namespace, name) of a CachedInferenceService."""
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
MANAGED_BY = "app.kubernetes.io/managed-by"
#: The components whose workloads and pods decide the status.
COMPONENTS = ("runtime", "redis")
#: How long a marked service waits for more changes before its status is computed again.
DELAY_S = 1.0
#: When a pod waiting for its volumes has its service looked at again (seconds after it began
#: waiting); later, the resync does.
FOLLOW_UPS_S = (5.0, 15.0, 45.0, 135.0)


def service_of(body: Mapping[str, Any]) -> ServiceKey | None:
    """The service a workload or pod belongs to, by the labels the operator gives both."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY) != MANAGER or labels.get(COMPONENT) not in COMPONENTS:
        return None
    if not labels.get(INSTANCE) or not meta.get("namespace"):
        return None
    return str(meta["namespace"]), str(labels[INSTANCE])


def signature(body: Mapping[str, Any]) -> bytes:
    """The part of a workload or pod that decides the service's status, as a digest (kept for
    every workload and pod of every fleet: 16 bytes each, not the text it digests)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    if body.get("kind") == "Pod":
        relevant: dict[str, Any] = {
            key: status.get(key) for key in ("phase", "reason", "message", "podIP")
        }
        relevant["deleting"] = bool(meta.get("deletionTimestamp"))
        relevant["conditions"] = _conditions(status)
        relevant["containers"] = [
            _container(c)
            for c in [*(status.get("initContainerStatuses") or ()),
                      *(status.get("containerStatuses") or ())]
        ]  # fmt: skip
    else:
        counts = {k: v for k, v in status.items() if k != "conditions"}
        relevant = {
            "generation": meta.get("generation"),
            "replicas": (body.get("spec") or {}).get("replicas"),
            "status": counts,
            "conditions": _conditions(status),
        }
    text = json.dumps(relevant, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _conditions(status: Mapping[str, Any]) -> list[list[Any]]:
    """Conditions without their timestamps (a Deployment's move with every step of a rollout)."""
    found = [
        [c.get("type"), c.get("status"), c.get("reason"), c.get("message")]
        for c in status.get("conditions") or ()
    ]
    return sorted(found, key=str)


def _container(status: Mapping[str, Any]) -> dict[str, Any]:
    def state(value: Any) -> dict[str, Any]:
        return {
            kind: {k: (detail or {}).get(k) for k in ("reason", "message", "exitCode")}
            for kind, detail in (value or {}).items()
        }

    return {
        "name": status.get("name"),
        "ready": status.get("ready"),
        "state": state(status.get("state")),
        "last": state({"terminated": (status.get("lastState") or {}).get("terminated")}),
    }


class StatusRefresh:
    """One service's status computed again from its live children and written if it changed.

    Blocking (API calls, and Redis when it has just become ready): run it in a worker thread.
    """

    def __init__(self, reconciler: Reconciler, locks: KeyedLocks) -> None:
        self.reconciler = reconciler
        self.locks = locks

    def __call__(self, key: ServiceKey) -> None:
        namespace, name = key
        kube = self.reconciler.kube
        # Read under the lock: a reconcile that just wrote the status must be what we compare.
        with self.locks(f"{namespace}/{name}"):
            if key not in self.reconciler.decided:
                return  # no finished reconcile (one being created): the handlers write it
            body = kube.get(f"{GROUP}/{VERSION}", KIND, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return
            outcome = self.reconciler.refresh(body)
            if outcome is None:
                return  # no finished reconcile of this generation: the handlers write it
            changes = status_changes(body.get("status") or {}, outcome.status)
            if changes:
                kube.patch_status(body, changes)
        for event in outcome.events:
            level = logging.WARNING if event.warning else logging.INFO
            log.log(level, "%s/%s: %s: %s", namespace, name, event.reason, event.message)


class Follower:
    """Marks services whose workloads or pods changed and refreshes each once per burst.

    Lives in kopf's event loop (its methods are called there); the refreshes run in a small
    pool of its own, not the loop's default executor, where kopf runs the sync handlers.
    """

    def __init__(
        self, refresh: Callable[[ServiceKey], None], *, delay_s: float, workers: int = 2
    ) -> None:
        self._refresh = refresh
        self._delay_s = delay_s
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="status-refresh")
        self._signatures: dict[tuple[str, str, str], bytes] = {}
        self._pending: dict[ServiceKey, asyncio.TimerHandle] = {}
        self._running: dict[ServiceKey, asyncio.Future[None]] = {}
        self._again: set[ServiceKey] = set()
        self._follow_ups: dict[tuple[str, str, str], list[asyncio.TimerHandle]] = {}
        self._closed = False

    def seen(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A watch event of a workload or pod: mark its service if its status part moved."""
        key = service_of(body)
        if key is None:
            return
        meta = body.get("metadata") or {}
        ident = (str(body.get("kind")), key[0], str(meta.get("name")))
        if event_type == "DELETED":
            self._signatures.pop(ident, None)
            self._cancel_follow_ups(ident)
            self.mark(key)
            return
        mark = signature(body)
        before = self._signatures.get(ident)
        self._signatures[ident] = mark
        if event_type is None or before == mark:  # None: listed when the watch started
            return
        self.mark(key)
        self._cancel_follow_ups(ident)
        if body.get("kind") == "Pod" and creating(body):
            loop = asyncio.get_running_loop()
            self._follow_ups[ident] = [
                loop.call_later(delay, self.mark, key) for delay in FOLLOW_UPS_S
            ]

    def _cancel_follow_ups(self, ident: tuple[str, str, str]) -> None:
        for handle in self._follow_ups.pop(ident, ()):
            handle.cancel()

    def mark(self, key: ServiceKey) -> None:
        """Refresh ``key`` after the delay, once however often it is marked meanwhile."""
        if self._closed:
            return
        if key in self._running:
            self._again.add(key)
            return
        if key not in self._pending:
            loop = asyncio.get_running_loop()
            self._pending[key] = loop.call_later(self._delay_s, self._start, key)

    def _start(self, key: ServiceKey) -> None:
        del self._pending[key]
        future = asyncio.get_running_loop().run_in_executor(self._pool, self._guarded, key)
        self._running[key] = future
        future.add_done_callback(lambda done: self._finished(key, done))

    def _finished(self, key: ServiceKey, future: asyncio.Future[None]) -> None:
        del self._running[key]
        if key in self._again and not future.cancelled():
            self._again.discard(key)
            self.mark(key)

    def _guarded(self, key: ServiceKey) -> None:
        try:
            self._refresh(key)
        except KubeError as error:
            log.info("%s/%s: status not refreshed: %s", key[0], key[1], error)
        except Exception:  # one service's failure must not stop the others' refreshes
            log.exception("status refresh of %s/%s failed", *key)

    def close(self) -> None:
        """Cancel what is waiting; a refresh already running ends on its own."""
        self._closed = True
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()
        for ident in list(self._follow_ups):
            self._cancel_follow_ups(ident)
        self._again.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
