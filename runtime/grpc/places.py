"""A count of places held at once, taken without waiting: the caps' one counter.

``stream_cap`` (open streams) and ``control_cap`` (model loads and unloads) refuse a call at
once when every place is taken, rather than queue it behind the others: a queued call would
hold what the cap is there to bound. Thread-safe: grpcio's threads take and give back places.
"""

from __future__ import annotations

import threading


class Places:
    """At most ``limit`` places held at once."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a cap must be at least 1")
        self.limit = limit
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Places held now."""
        return self._held

    def try_take(self) -> bool:
        """Take a place, or False when all are taken."""
        with self._lock:
            if self._held >= self.limit:
                return False
            self._held += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self._held -= 1
