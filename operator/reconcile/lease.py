"""Leader election on a coordination.k8s.io Lease, for running several operator replicas.

kopf's peering pauses every replica of the same priority, so it cannot pick one leader among
identical pods. Replicas started with ``--leader-election`` instead wait until they hold the
Lease (the scheme client-go's leader election uses: holderIdentity, renewTime and
leaseDurationSeconds, updates guarded by resourceVersion), then run kopf standalone while
renewing it; a replica that cannot renew within the lease's duration stops, and its pod restarts
as a standby. So exactly one replica writes at a time.
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


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _format(when: datetime.datetime) -> str:
    """MicroTime, as the Lease's fields are written."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(raw: Any) -> datetime.datetime | None:
    if not raw:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def held_by_another(lease: Mapping[str, Any], identity: str, now: datetime.datetime) -> bool:
    """Whether someone else holds the lease and has renewed it within its duration."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder or holder == identity:
        return False
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    duration = datetime.timedelta(seconds=int(spec.get("leaseDurationSeconds") or 15))
    return renewed is not None and renewed + duration > now


@dataclass
class LeaseElector:
    kube: Kube
    namespace: str
    name: str
    identity: str
    duration_s: int = 15
    renew_every_s: float = 5.0
    sleep: Callable[[float], None] = time.sleep
    _renewed_at: float = field(default=0.0, init=False)

    def try_acquire(self) -> bool:
        """One attempt: take or renew the lease when it is free, expired or ours."""
        now = _now()
        lease = self.kube.get(API_VERSION, "Lease", self.namespace, self.name)
        if lease is not None and held_by_another(lease, self.identity, now):
            return False
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_s,
            "renewTime": _format(now),
        }
        try:
            if lease is None:
                spec.update(acquireTime=_format(now), leaseTransitions=0)
                self.kube.create(self._object(spec))
            else:
                old = lease.get("spec") or {}
                if old.get("holderIdentity") != self.identity:
                    transitions = int(old.get("leaseTransitions") or 0) + 1
                    spec.update(acquireTime=_format(now), leaseTransitions=transitions)
                version = lease["metadata"].get("resourceVersion")
                patch = {"metadata": {"resourceVersion": version}, "spec": spec}
                self.kube.merge_patch(self._object({}), patch)
        except KubeError as error:
            if error.status in (409, 404):  # another replica was faster: try again later
                return False
            raise
        self._renewed_at = time.monotonic()
        return True

    def acquire(self) -> None:
        """Block until this replica holds the lease."""
        while not self.try_acquire():
            self.sleep(self.renew_every_s)
        log.info("leader election: %s holds lease %s/%s", self.identity, self.namespace, self.name)

    def keep(self, on_lost: Callable[[], None], stop: threading.Event) -> None:
        """Renew until ``stop``; call ``on_lost`` once the lease could not be renewed in time."""
        while not stop.wait(self.renew_every_s):
            try:
                renewed = self.try_acquire()
            except KubeError as error:
                log.warning("leader election: renewing failed: %s", error)
                renewed = False
            if not renewed and time.monotonic() - self._renewed_at > self.duration_s:
                log.error("leader election: lease %s lost; stopping", self.name)
                on_lost()
                return

    def _object(self, spec: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
        }
        if spec:
            obj["spec"] = spec
        return obj
