"""The upstream's circuit breaker: once it cannot be reached, fail at once instead of waiting.

The same rule as the Redis tier's breaker (``cache.breaker``): ``failure_threshold`` consecutive
failures open it; while open, calls are refused at once until ``reset_s`` has passed, then one
probe goes through, whose outcome closes or reopens it. This one is called from the model
threads that forward misses and from the refresh thread, so its state changes under a lock.
Only reaching the upstream counts: an answer that is an error (a bad request, an unknown model)
is the upstream working.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class UpstreamBreaker:
    """Closed, open, or half-open (one probe out); thread-safe."""

    def __init__(
        self,
        target: str,
        failure_threshold: int,
        reset_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._target = target
        self._threshold = failure_threshold
        self._reset_s = reset_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._open = False
        self._probe_at = 0.0

    @property
    def is_open(self) -> bool:
        return self._open

    def allow(self) -> bool:
        """Whether a call may go out now: always while closed; while open, one probe per
        ``reset_s``."""
        with self._lock:
            if not self._open:
                return True
            now = self._clock()
            if now < self._probe_at:
                return False
            self._probe_at = now + self._reset_s
            return True

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            if self._open:
                self._open = False
                logger.info("upstream %s reachable again: breaker closed", self._target)

    def record_failure(self, reason: str) -> None:
        with self._lock:
            self._failures += 1
            if self._open:
                self._probe_at = self._clock() + self._reset_s
            elif self._failures >= self._threshold:
                self._open = True
                self._probe_at = self._clock() + self._reset_s
                logger.warning("upstream %s unreachable: breaker open: %s", self._target, reason)
