"""Whether kopf is active here, or paused in favour of a peer: the periodic task asks first.

kopf pauses its watchers and handlers when a peering object shows a live peer of higher (or
equal) priority (kopf's peering documentation), but an operator-level task of ours runs beside
kopf and would go on applying: a standby replica would fight the leader. kopf keeps its pause
state private, so this reads the same peering object and applies kopf's documented rule: the
status maps each peer's id to its ``priority``, ``lifetime`` (seconds) and ``lastseen`` time; a
peer is dead past lastseen + lifetime; any other live peer with a priority at least ours pauses
us. With ``--standalone`` (the chart's default) there is no peering and kopf is always active.
"""

from __future__ import annotations

import datetime
import getpass
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachefleet.operator.reconcile.kube import Kube, KubeError

PEERING_GROUP = "kopf.dev/v1"


@dataclass(frozen=True)
class Peering:
    """kopf's peering settings as the command line left them."""

    standalone: bool
    name: str
    priority: int
    clusterwide: bool
    namespace: str | None = None


def own_ids() -> tuple[str, ...]:
    """How kopf names this process in a peering object: POD_ID, else user@host (a prefix)."""
    pod = os.environ.get("POD_ID")
    if pod:
        return (pod,)
    return (f"{getpass.getuser()}@{socket.gethostname()}",)


def paused_by_peers(
    peering: Mapping[str, Any] | None,
    *,
    priority: int,
    ids: tuple[str, ...],
    now: datetime.datetime | None = None,
) -> bool:
    """kopf's rule: another live peer of higher or the same priority pauses this operator."""
    if peering is None:
        return False
    now = now or datetime.datetime.now(datetime.UTC)
    for peer_id, info in (peering.get("status") or {}).items():
        if any(peer_id == own or peer_id.startswith(f"{own}/") for own in ids):
            continue
        if not isinstance(info, Mapping) or _dead(info, now):
            continue
        if int(info.get("priority") or 0) >= priority:
            return True
    return False


def _dead(info: Mapping[str, Any], now: datetime.datetime) -> bool:
    raw = info.get("lastseen")
    if not raw:
        return False
    try:
        seen = datetime.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return False
    if seen.tzinfo is None:
        seen = seen.replace(tzinfo=datetime.UTC)
    return seen + datetime.timedelta(seconds=int(info.get("lifetime") or 60)) <= now


@dataclass(frozen=True)
class PeeringGate:
    """``active()`` for the periodic task: True unless kopf is paused by a peer."""

    kube: Kube
    peering: Peering

    def active(self) -> bool:
        if self.peering.standalone:
            return True
        try:
            body = self._peering_object()
        except KubeError:
            return False  # cannot tell: a standby must not write
        return not paused_by_peers(body, priority=self.peering.priority, ids=own_ids())

    def _peering_object(self) -> dict[str, Any] | None:
        if self.peering.clusterwide:
            return self.kube.get_cluster(PEERING_GROUP, "ClusterKopfPeering", self.peering.name)
        namespace = self.peering.namespace or "default"
        return self.kube.get(PEERING_GROUP, "KopfPeering", namespace, self.peering.name)
