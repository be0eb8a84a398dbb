"""What the operator's own last apply of each child returned, to tell its own writes apart.

The child watches see every change, the operator's included. An event whose resourceVersion is
the one our apply got back is our own write; one whose generation is the one we applied changed
only metadata or status (a controller counting pods). Any other change (a new generation, or
an object without one: a HorizontalPodAutoscaler, unless a newer feature gate gives it one;
ConfigMaps, Services) is judged by content: when the live object still holds every field the
operator sent, with the values it sent, the change was someone else's status, metadata or
fields (the HPA controller writes its status about every 15 s; an HPA or KEDA scaling an
autoscaled fleet moves the Deployment's generation through the scale subresource, and the
replicas are the autoscaler's, never sent by the operator). None of these needs restoring;
anything else is someone's edit of the operator's fields, and the child is re-applied.
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Mapping
from typing import Any

Key = tuple[str, str, str]


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(obj.get("kind")), str(meta.get("namespace")), str(meta.get("name")))


class AppliedVersions:
    """Thread-safe: handler threads record applies while watch handlers ask."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._versions: dict[Key, tuple[str | None, int | None]] = {}
        #: What was sent, compressed: kept for every child of every fleet, and read only when
        #: a change's generation and version are not ours (``is_own``).
        self._sent: dict[Key, bytes] = {}
        self._uids: dict[Key, Any] = {}

    def record(
        self, key: Key, response: Mapping[str, Any], sent: Mapping[str, Any] | None = None
    ) -> bool:
        """Remember an apply's response (and what was sent); True when it changed the object
        (or it is new to us, or was re-created). An object with a generation changed when its
        generation moved: its resourceVersion also moves with every status write of its
        controller (a Deployment counting ready pods), which is no change of ours."""
        packed = None if sent is None else zlib.compress(json.dumps(sent).encode(), 1)
        meta = response.get("metadata") or {}
        version = meta.get("resourceVersion")
        generation = None if meta.get("generation") is None else int(meta["generation"])
        with self._guard:
            before = self._versions.get(key)
            self._versions[key] = (version, generation)
            before_uid, self._uids[key] = self._uids.get(key), meta.get("uid")
            if packed is not None:
                self._sent[key] = packed
        if before is None or version is None or before_uid != meta.get("uid"):
            return True
        if generation is not None and before[1] is not None:
            return before[1] != generation
        return bool(before[0] != version)

    def knows(self, key: Key) -> bool:
        """Whether this process has applied the child before (a restarted operator has not:
        its first apply of each child cannot tell a change from a re-apply)."""
        with self._guard:
            return key in self._versions

    def is_own(self, obj: Mapping[str, Any]) -> bool:
        """Whether this version of a child is what our last apply left (status aside)."""
        meta = obj.get("metadata") or {}
        with self._guard:
            known = self._versions.get(key_of(obj))
        if known is None:
            return False
        version, generation = known
        if version is not None and meta.get("resourceVersion") == version:
            return True
        live_generation = meta.get("generation")
        if (
            generation is not None
            and live_generation is not None
            and (int(live_generation) == generation)
        ):
            return True
        # A new generation, or none: still ours if every field we sent holds what we sent. The
        # spec fields of other managers (the replicas an HPA or KEDA scales through the scale
        # subresource, which bumps the generation) are no drift of ours.
        with self._guard:
            packed = self._sent.get(key_of(obj))
        return packed is not None and carries(obj, json.loads(zlib.decompress(packed)))


def carries(live: Any, sent: Any) -> bool:
    """Whether ``live`` holds every field of ``sent`` with the same value (lists item by item);
    fields others added (status, defaults, annotations) do not matter. Quantities are compared
    as sent, so a server that normalises one ("1000m" to "1") makes this False: a re-apply,
    which is always safe."""
    if isinstance(sent, Mapping):
        return isinstance(live, Mapping) and all(
            key in live and carries(live[key], value) for key, value in sent.items()
        )
    if isinstance(sent, list):
        return (
            isinstance(live, list)
            and len(live) == len(sent)
            and all(carries(a, b) for a, b in zip(live, sent, strict=True))
        )
    return bool(live == sent)
