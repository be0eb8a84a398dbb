"""Which changes the operator announces as Kubernetes events, and how often.

Every event is a write to the API server and an object etcd keeps for an hour, so an operator
that re-applies 1,000 services on each start and resync must announce only what changed:

- a reconcile announces the children it really changed, in one event per kind of change
  (Applied, Pruned), never one per child;
- a child this process has not applied before (the first reconcile after a restart) is
  announced only when the service's spec is not reconciled yet (a new service, or a spec changed
  while the operator was away): otherwise its apply is a re-apply of what is there;
- the same event of the same object is posted once per window (``EventFilter``), so a
  reconcile failing again and again says so once, as client-go's event correlator does.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: An identical event (object, reason, message) is posted again only after this long.
REPEAT_WINDOW_S = 600.0
#: Events remembered for the window; the oldest are forgotten beyond it (bounded memory).
REMEMBERED = 20_000


def unreconciled(body: Mapping[str, Any]) -> bool:
    """Whether the service's current spec has not been reconciled (its status says so)."""
    generation = (body.get("metadata") or {}).get("generation")
    observed = (body.get("status") or {}).get("observedGeneration")
    return observed is None or observed != generation


def announced(
    body: Mapping[str, Any], written: Sequence[str], first_seen: Sequence[str]
) -> list[str]:
    """The written children worth an event (see the module docstring)."""
    if unreconciled(body):
        return list(written)
    return [child for child in written if child not in first_seen]


class EventFilter:
    """Lets an event through unless the same one of the same object passed within the window.

    Thread-safe: kopf runs the sync handlers in a thread pool.
    """

    def __init__(
        self,
        window_s: float = REPEAT_WINDOW_S,
        remembered: int = REMEMBERED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._guard = threading.Lock()
        self._posted: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        self.window_s = window_s
        self.remembered = remembered
        self._clock = clock

    def admit(self, obj: Mapping[str, Any], reason: str, message: str) -> bool:
        meta = obj.get("metadata") or {}
        who = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        key = (who, reason, message)
        now = self._clock()
        with self._guard:
            last = self._posted.get(key)
            if last is not None and now - last < self.window_s:
                return False
            self._posted[key] = now
            self._posted.move_to_end(key)
            while len(self._posted) > self.remembered:
                self._posted.popitem(last=False)
            return True
