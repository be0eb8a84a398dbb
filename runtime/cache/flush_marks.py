"""When each model was last flushed, so that no answer read or computed before a flush outlives it.

A flush marks the model at its start and again once every tier is walked. An answer computed,
or a shared-tier entry read, by work that started before the last mark may still answer that
request, but is never kept: not inserted (at once or from the write-behind queue), not promoted
to an earlier tier.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class FlushMarks:
    """The monotonic time of each model's last flush mark."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._marked: dict[str, float] = {}

    def now(self) -> float:
        """The time a piece of work starts, to compare with the marks later."""
        return self._clock()

    def mark(self, model: str) -> None:
        self._marked[model] = self._clock()

    def stale(self, model: str, since: float) -> bool:
        """Whether work on ``model`` that started at ``since`` began before its last flush."""
        return self._marked.get(model, -1.0) >= since
