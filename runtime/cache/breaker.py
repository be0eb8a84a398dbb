"""A circuit breaker: stop asking a failing dependency, and probe it to come back.

Closed: every call goes through; ``failure_threshold`` consecutive failures open it. Open:
calls are refused at once (no waiting on a dead Redis) until ``reset_s`` has passed; then one
probe is let through (half-open), and one more every ``reset_s`` if a probe never reports.
The probe's success closes the breaker, its failure reopens it. Only opening and closing are
logged above debug level, so an outage logs twice however long it lasts.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class CircuitBreaker:
    """Single event loop use: no locks, no awaits inside."""

    def __init__(
        self,
        name: str,
        failure_threshold: int,
        reset_s: float,
        on_change: Callable[[BreakerState], None] = lambda state: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.failure_threshold = failure_threshold
        self.reset_s = reset_s
        self._on_change = on_change
        self._clock = clock
        self.state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0

    def allow(self) -> bool:
        """Whether a call may go out now (in half-open, only the one probe may)."""
        if self.state is BreakerState.CLOSED:
            return True
        if self._clock() - self._opened_at < self.reset_s:
            return False
        # Open long enough, or a half-open probe that never reported back: probe (again).
        self._opened_at = self._clock()
        if self.state is BreakerState.OPEN:
            self._change(BreakerState.HALF_OPEN, "probing")
        return True

    @property
    def healthy(self) -> bool:
        """Closed, and no failure since the last success: worth a call that is optional."""
        return self.state is BreakerState.CLOSED and self._failures == 0

    def record_success(self) -> None:
        self._failures = 0
        if self.state is not BreakerState.CLOSED:
            self._change(BreakerState.CLOSED, "recovered")

    def record_failure(self, reason: str) -> None:
        self._failures += 1
        if self.state is BreakerState.HALF_OPEN or (
            self.state is BreakerState.CLOSED and self._failures >= self.failure_threshold
        ):
            self._opened_at = self._clock()
            self._change(BreakerState.OPEN, reason)

    def _change(self, state: BreakerState, reason: str) -> None:
        previous, self.state = self.state, state
        # An outage logs twice (open, closed); the probes in between are debug noise.
        level = logging.DEBUG
        if state is BreakerState.CLOSED:
            level = logging.INFO
        elif previous is BreakerState.CLOSED:
            level = logging.WARNING
        logger.log(level, "%s circuit %s -> %s: %s", self.name, previous.value, state.value, reason)
        self._on_change(state)
