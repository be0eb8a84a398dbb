"""The operator's periodic work: resync every service and refresh its cache figures.

One operator-level task (started by the startup handler, cancelled at cleanup) instead of kopf
timers. kopf gives every timer a finalizer, so that it can stop the timer when the object goes,
and a finalizer makes deleting a service (or its namespace) hang whenever the operator is not
running. This task needs none: a service that is gone simply drops out of the next snapshot.

The figures pass also asks each ready runtime pod which model files it serves (``served``).

Each pass takes a snapshot of the services the operator watches (kopf's index of them, so the
namespaces are kopf's own and no list call is made) and handles them one at a time, each under
its per-object lock, in a worker thread (the calls block). One service's failure is logged and
the pass goes on.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cachefleet.operator.manifests.meta import GROUP, KIND, VERSION
from cachefleet.operator.reconcile.conditions import timestamp_now
from cachefleet.operator.reconcile.kube import KubeError
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.redis_live import RedisLiveError
from cachefleet.operator.reconcile.reporting import Reporter

log = logging.getLogger(__name__)

Snapshot = Callable[[], list[Mapping[str, Any]]]
"""The services to visit now; called in the event loop (kopf updates its index there)."""
Active = Callable[[], bool]
"""Whether kopf is active (not paused by a peer); called in a worker thread."""


#: What the passes read of a service's metadata and status (``indexed_service``).
INDEXED_METADATA = ("name", "namespace", "uid", "generation", "deletionTimestamp")
INDEXED_STATUS = ("cache", "served")


def indexed_service(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the passes read of a service, copied for kopf's index of them: its identity, spec
    and the status fields they compare before writing. Not the whole body: its managedFields
    and kopf's annotations (the last-handled spec again) are most of it, kept for every
    service the operator serves, and the resync reads the service afresh anyway."""
    meta, status = body.get("metadata") or {}, body.get("status")
    if not isinstance(status, Mapping):
        status = {}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {key: meta[key] for key in INDEXED_METADATA if key in meta},
        # As the user wrote it, whatever it is: a spec that is no object is the reconcile's to
        # refuse (InvalidSpec), not the index's to fail on.
        "spec": copy.deepcopy(body.get("spec")),
        "status": {key: copy.deepcopy(status[key]) for key in INDEXED_STATUS if key in status},
    }


def status_changes(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level status fields that differ: an unchanged status is never written again."""
    return {key: value for key, value in wanted.items() if current.get(key) != value}


def object_key(body: Mapping[str, Any]) -> str:
    """The per-object lock key, shared with the handlers."""
    return f"{body['metadata'].get('namespace')}/{body['metadata']['name']}"


def _keys(bodies: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(str(b["metadata"].get("namespace") or ""), str(b["metadata"]["name"])) for b in bodies]


def _counted(
    job: Callable[[Mapping[str, Any]], None], visit: Callable[[], None]
) -> Callable[[Mapping[str, Any]], None]:
    """``job``, marking each service visited (done or failed) for the pending figure."""

    def counted(body: Mapping[str, Any]) -> None:
        try:
            job(body)
        finally:
            visit()

    counted.__name__ = job.__name__
    return counted


def _age_s(stamp: Any) -> float:
    """Seconds since an RFC 3339 status time; infinite when there is none or it is unreadable."""
    try:
        then = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    if then.tzinfo is None:
        then = then.replace(tzinfo=datetime.UTC)
    return (datetime.datetime.now(datetime.UTC) - then).total_seconds()


class Backoff:
    """Passes to skip per service after its Redis failed: 1, 2, 4, ... up to ``most``, each
    up to doubled at random.

    An unreachable Redis costs its full timeout on every try; without this, each figures pass
    would spend it again for every such service, and the pass would outgrow its interval.
    """

    def __init__(self, most: int = 16) -> None:
        self._guard = threading.Lock()
        self._state: dict[str, tuple[int, int]] = {}  # key: (failures, passes left to skip)
        self.most = most

    def skip(self, key: str) -> bool:
        with self._guard:
            failures, left = self._state.get(key, (0, 0))
            if left <= 0:
                return False
            self._state[key] = (failures, left - 1)
            return True

    def failed(self, key: str) -> int:
        with self._guard:
            failures = self._state.get(key, (0, 0))[0] + 1
            passes = int(min(2 ** (failures - 1), self.most))
            # Up to twice that, at random: Redis servers that failed together (a network
            # outage) would otherwise all be tried again in the same pass.
            passes += random.randrange(passes + 1)
            self._state[key] = (failures, passes)
            return passes

    def succeeded(self, key: str) -> None:
        with self._guard:
            self._state.pop(key, None)


@dataclass(frozen=True)
class Periodic:
    """Resync (re-apply everything, prune what the spec does not ask for) and cache-figure
    refresh of every service."""

    reconciler: Reconciler
    locks: KeyedLocks
    backoff: Backoff = field(default_factory=Backoff)
    #: Counts each resync's outcome and each pass (the operator's metrics), when given.
    reporter: Reporter | None = None

    async def run(self, services: Snapshot, active: Active = lambda: True) -> None:
        """Until cancelled: a resync pass every resync interval (the first one interval after
        start, since the resume handlers have just reconciled everything), a figures pass every
        cache interval (the first one at once), and a served-models pass every resync interval
        (the first one a cache interval after start): it reads the pods from the operator's pod
        index and writes a status only where it changed, but asks every ready runtime pod, so
        at the figures' pace it would put a config request a pod every 30 s on every fleet. A
        pass is skipped while ``active()`` says kopf is paused (a peer leads): a standby must
        not write."""
        settings = self.reconciler.settings
        await asyncio.gather(
            self._every(settings.resync_interval_s, settings.resync_interval_s, services,
                        self.resync, active),
            self._every(settings.cache_figures_interval_s, 0.0, services, self.refresh_figures,
                        active),
            self._every(settings.resync_interval_s, settings.cache_figures_interval_s,
                        self._shuffled(services), self.refresh_served, active),
        )  # fmt: skip

    async def _every(
        self,
        interval_s: float,
        first_delay_s: float,
        services: Snapshot,
        job: Callable[[Mapping[str, Any]], None],
        active: Active,
    ) -> None:
        await asyncio.sleep(first_delay_s)
        while True:
            if await asyncio.to_thread(active):
                began, visited = time.monotonic(), services()
                await self.run_pass(job, visited)
                took = time.monotonic() - began
                log.info(
                    "periodic %s pass: %d services in %.1f s", job.__name__, len(visited), took
                )
            await asyncio.sleep(interval_s)

    @staticmethod
    def _shuffled(services: Snapshot) -> Snapshot:
        """``services`` in a new order each time: a pass cut short by its budget leaves other
        services out each time."""

        def shuffled() -> list[Mapping[str, Any]]:
            found = list(services())
            random.shuffle(found)
            return found

        return shuffled

    async def run_pass(
        self, job: Callable[[Mapping[str, Any]], None], visited: Sequence[Mapping[str, Any]]
    ) -> None:
        """Each service in a worker thread of the pass's own, a few at a time.

        Not in the event loop's default executor: kopf runs the sync handlers there, and a pass
        waiting on slow Redis servers must not hold up the handlers of new and changed services.
        The served pass mostly waits on pods: it handles more services at once, and stops
        starting new ones when its budget is spent.
        """
        if self.reporter is not None:
            if job.__name__ == "resync":  # every service is in the snapshot: forget the rest
                self.reporter.metrics.readiness.keep_only(_keys(visited))
            with self.reporter.metrics.periodic_pass(job.__name__, len(visited)) as visit:
                await self._run_pass(_counted(job, visit), visited)
            return
        await self._run_pass(job, visited)

    async def _run_pass(
        self, job: Callable[[Mapping[str, Any]], None], visited: Sequence[Mapping[str, Any]]
    ) -> None:
        loop = asyncio.get_running_loop()
        settings = self.reconciler.settings
        workers, budget_s = max(1, settings.periodic_workers), None
        if job == self.refresh_served:
            workers, budget_s = max(1, settings.served_concurrency), settings.served_pass_budget_s
        pool = ThreadPoolExecutor(workers, thread_name_prefix=f"periodic-{job.__name__}")
        try:
            await asyncio.wait_for(
                asyncio.gather(
                    *(loop.run_in_executor(pool, self._guarded, job, body) for body in visited)
                ),
                budget_s,
            )
        except TimeoutError:
            log.warning(
                "periodic %s pass stopped after its budget of %.0f s: the services it did not "
                "reach wait for the next pass", job.__name__, budget_s,
            )  # fmt: skip
        finally:
            # Not ``with``: its exit waits for the threads, and when the pass is cancelled (the
            # operator stops) that would block the event loop until a service's API calls or
            # Redis timeouts finish. Services not started yet are dropped; a running one ends
            # on its own.
            pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _guarded(job: Callable[[Mapping[str, Any]], None], body: Mapping[str, Any]) -> None:
        try:
            job(body)
        except Exception:  # one service's failure must not stop the others' resync
            meta = body.get("metadata") or {}
            name = f"{meta.get('namespace')}/{meta.get('name')}"
            log.exception("periodic %s of %s failed", job.__name__, name)

    def resync(self, indexed: Mapping[str, Any]) -> None:
        """Re-apply every child (drift the watches missed), and delete the children the spec
        does not ask for, found in the watches' index (previous runtime ConfigMaps whose
        rollout is over, and whatever a missed prune left).

        The service is read first: kopf's index may hold a service whose DELETED event was
        missed (re-applying its children would re-create them every pass), or an older spec
        than the API server's (re-applying it would revert a newer one until kopf caught up).
        """
        meta = indexed["metadata"]
        body = self.reconciler.kube.get(
            f"{GROUP}/{VERSION}", KIND, meta.get("namespace") or "default", meta["name"]
        )
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        with self.locks(object_key(body)):
            outcome = self.reconciler.reconcile(body, consistent=False)
            self._write_status(body, outcome.status)
        if self.reporter is not None:
            self.reporter.outcome("resync", body, outcome)  # counted; the events are logged
        for event in outcome.events:
            level = logging.WARNING if event.warning else logging.INFO
            log.log(level, "%s: %s: %s", object_key(body), event.reason, event.message)

    def refresh_figures(self, body: Mapping[str, Any]) -> None:
        """Redis INFO figures into the status, written when they changed, at most once per
        write interval; a Redis that failed is left alone for a growing number of passes."""
        if body["metadata"].get("deletionTimestamp"):
            return
        key = object_key(body)
        if self.backoff.skip(key):
            return
        try:  # (outside the lock: a Redis timing out must not hold up the service's handlers)
            figures = self.reconciler.cache_figures(body)
        except (RedisLiveError, KubeError) as error:
            passes = self.backoff.failed(key)
            log.info("%s: cache figures not refreshed (next try in %d passes): %s",
                     key, passes, error)  # fmt: skip
            return
        self.backoff.succeeded(key)
        with self.locks(key):
            current = dict((body.get("status") or {}).get("cache") or {})
            written = current.pop("updatedAt", None)
            if figures is None or figures == current:  # an idle cache costs no writes
                return
            interval = self.reconciler.settings.cache_figures_write_interval_s
            if current and _age_s(written) < interval:
                return  # busy: the figures move with every request; written once an interval
            self._write_status(body, {"cache": {**figures, "updatedAt": timestamp_now()}})

    def refresh_served(self, body: Mapping[str, Any]) -> None:
        """What each ready runtime pod serves into ``status.served``, written only when it
        changed (a rollout shows as the fingerprints moving from pod to pod)."""
        if body["metadata"].get("deletionTimestamp"):
            return
        try:
            served = self.reconciler.served(body)  # (outside the lock: asking pods takes a while)
            if served is not None:
                with self.locks(object_key(body)):
                    self._write_status(body, {"served": served})
        except KubeError as error:  # a Secret not read or the status not written: next pass
            log.info("%s: served models not refreshed: %s", object_key(body), error)

    def _write_status(self, body: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        changes = status_changes(body.get("status") or {}, status)
        if changes:
            self.reconciler.kube.patch_status(body, changes)
