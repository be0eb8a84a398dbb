"""Leader election on a coordination.k8s.io Lease, for running several operator replicas.

kopf's peering pauses every replica of the same priority, so it cannot pick one leader among
identical pods. Replicas started with ``--leader-election`` instead wait until they hold the
Lease, then run kopf standalone while renewing it. The rules are client-go's leader election:

- A candidate judges expiry by when *it* last saw the lease record change (holder, renewTime or
  resourceVersion), on its own monotonic clock, never by comparing the holder's renewTime with
  its own wall clock: clocks of two nodes may differ by more than a lease.
- Every write names the resourceVersion it read, so of two concurrent writers the server
  refuses one (409).
- The leader renews every retry period; when it cannot renew within the renew deadline (shorter
  than the lease duration), it stops leading before any standby may take over. The deadline
  bounds the whole attempt, retries included, as client-go's context does: every request's
  timeout is what is left of it, and the client makes one attempt per request (urllib3's default
  ``Retry(3)`` retried a read timeout three times, each with a fresh timeout, so a silent API
  server held one renewal for four timeouts, 40 s against a 15 s lease: two leaders for 24 s).
- On shutdown the leader releases the lease (no holder, a one-second duration), so a standby
  takes over at its next retry instead of after a whole lease duration.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cachefleet.operator.reconcile.kube import Kube, KubeError

log = logging.getLogger(__name__)
API_VERSION = "coordination.k8s.io/v1"


@dataclass(frozen=True)
class LeaseTimings:
    """client-go's defaults: a standby waits ``duration_s`` after the last change it saw; the
    leader gives up after ``renew_deadline_s`` without a renewal; both retry every
    ``retry_period_s``."""

    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.duration_s:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} / {self.renew_deadline_s} / {self.duration_s}"
            )


def _format(when: datetime.datetime) -> str:
    """MicroTime, as the Lease's fields are written."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(lease: Mapping[str, Any]) -> tuple[Any, ...]:
    """What identifies one state of the lease: a change of any of it restarts the wait."""
    spec = lease.get("spec") or {}
    version = (lease.get("metadata") or {}).get("resourceVersion")
    return (spec.get("holderIdentity"), spec.get("renewTime"), version)


@dataclass
class LeaseElector:
    kube: Kube
    namespace: str
    name: str
    identity: str
    timings: LeaseTimings = field(default_factory=LeaseTimings)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    _observed: tuple[Any, ...] | None = field(default=None, init=False)
    _observed_at: float = field(default=0.0, init=False)
    _version: str | None = field(default=None, init=False)

    def try_acquire(self, deadline: float | None = None) -> bool:
        """One attempt: take or renew the lease when it is free, expired (by our observation)
        or ours. The attempt ends by ``deadline`` (this elector's clock; a renew deadline from
        now when None): each request's timeout is what is left of it, so the GET and the write
        together never outlast it. The client must not retry on its own (``Kube`` built on
        ``single_attempt_client``), or each retry would get a fresh timeout."""
        if deadline is None:
            deadline = self.clock() + self.timings.renew_deadline_s
        lease = self.kube.get(
            API_VERSION, "Lease", self.namespace, self.name, timeout_s=self._left(deadline)
        )
        if lease is not None:
            self._observe(lease)
            if self._held_by_another(lease):
                return False
        now = _format(datetime.datetime.now(datetime.UTC))
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.timings.duration_s)),
            "renewTime": now,
        }
        try:
            if lease is None:
                spec.update(acquireTime=now, leaseTransitions=0)
                written = self.kube.create(self._object(spec), timeout_s=self._left(deadline))
            else:
                old = lease.get("spec") or {}
                if old.get("holderIdentity") != self.identity:
                    transitions = int(old.get("leaseTransitions") or 0) + 1
                    spec.update(acquireTime=now, leaseTransitions=transitions)
                written = self._update(lease, spec, self._left(deadline))
        except KubeError as error:
            if error.status in (409, 404):  # another replica was faster: try again later
                return False
            raise
        self._observe(written)
        return True

    def _left(self, deadline: float) -> float:
        """The timeout of the attempt's next request; a KubeError when the deadline passed."""
        left = deadline - self.clock()
        if left <= 0:
            raise KubeError(0, f"lease {self.name}: the attempt's deadline passed")
        return left

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Wait until this replica holds the lease (True), or until ``stop`` is set (False)."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                if self.try_acquire():
                    log.info("leader election: %s holds lease %s/%s",
                             self.identity, self.namespace, self.name)  # fmt: skip
                    return True
            except KubeError as error:
                log.warning("leader election: acquiring failed: %s", error)
            stop.wait(self.timings.retry_period_s)
        return False

    def renew(self) -> bool:
        """Renew within the renew deadline, retrying every retry period; False when it passed."""
        deadline = self.clock() + self.timings.renew_deadline_s
        while deadline - self.clock() > 0:
            try:
                if self.try_acquire(deadline):
                    return True
            except KubeError as error:
                log.warning("leader election: renewing failed: %s", error)
            self.sleep(min(self.timings.retry_period_s, max(0.0, deadline - self.clock())))
        return False

    def keep(self, on_lost: Callable[[], None], stop: threading.Event) -> None:
        """Renew every retry period until ``stop``; call ``on_lost`` once a renewal missed the
        renew deadline (before any standby can see the lease expire)."""
        while not stop.wait(self.timings.retry_period_s):
            if not self.renew() and not stop.is_set():
                log.error("leader election: lease %s not renewed in time; stopping", self.name)
                on_lost()
                return

    def release(self) -> None:
        """Give the lease up if we hold it, so a standby takes over at its next retry."""
        timeout = self.timings.retry_period_s
        try:
            lease = self.kube.get(
                API_VERSION, "Lease", self.namespace, self.name, timeout_s=timeout
            )
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            now = _format(datetime.datetime.now(datetime.UTC))
            spec = {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": now}
            self._update(lease, spec, timeout)
        except KubeError as error:
            log.warning("leader election: releasing failed: %s", error)
            return
        log.info("leader election: %s released lease %s", self.identity, self.name)

    def _held_by_another(self, lease: Mapping[str, Any]) -> bool:
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        if not holder or holder == self.identity:
            return False
        duration = float(spec.get("leaseDurationSeconds") or self.timings.duration_s)
        return self.clock() < self._observed_at + duration

    def _observe(self, lease: Mapping[str, Any]) -> None:
        record = _record(lease)
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()

    def _update(self, lease: Mapping[str, Any], spec: dict[str, Any], timeout: float) -> Any:
        """A merge patch guarded by the resourceVersion read: the server answers 409 when the
        lease changed since."""
        version = lease["metadata"].get("resourceVersion")
        patch = {"metadata": {"resourceVersion": version}, "spec": spec}
        return self.kube.merge_patch(self._object({}), patch, timeout_s=timeout)

    def _object(self, spec: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
        }
        if spec:
            obj["spec"] = spec
        return obj
