"""What the operator's own last apply of each child returned, to tell its own writes apart.

The child watches see every change, the operator's included. An event whose resourceVersion is
the one our apply got back is our own write; one whose generation is the one we applied changed
only metadata or status (a controller counting pods). Neither needs restoring; anything else is
someone's edit, and the child is re-applied.
"""

from __future__ import annotations

import threading
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

    def record(self, key: Key, response: Mapping[str, Any]) -> bool:
        """Remember an apply's response; True when it changed the object (or it is new to us)."""
        meta = response.get("metadata") or {}
        version = meta.get("resourceVersion")
        generation = meta.get("generation")
        with self._guard:
            before = self._versions.get(key)
            self._versions[key] = (version, None if generation is None else int(generation))
        return before is None or before[0] != version or version is None

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
        return (
            generation is not None
            and live_generation is not None
            and (int(live_generation) == generation)
        )
