"""Single-flight: concurrent calls for the same key share one execution.

The shared work runs in its own task, so a caller that goes away (a client disconnect cancels
its request) cancels neither the work nor the other callers' wait. Everyone gets the same
result, or the same exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """One in-flight task per key, in one event loop."""

    def __init__(self) -> None:
        self._calls: dict[Hashable, asyncio.Task[T]] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, key: Hashable) -> bool:
        """Whether a call for ``key`` is in flight: a ``do`` now would join it."""
        return key in self._calls

    async def do(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> T:
        task = self._calls.get(key)
        if task is None:
            task = asyncio.ensure_future(work())
            self._calls[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
        return await asyncio.shield(task)

    def _finished(self, key: Hashable, task: asyncio.Task[T]) -> None:
        if self._calls.get(key) is task:
            del self._calls[key]
        if not task.cancelled():
            task.exception()  # retrieved here, so an unawaited failure is not logged as lost
