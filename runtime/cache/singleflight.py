"""Single-flight: concurrent calls for the same key share one execution.

The shared work runs in its own task, so a caller that goes away (a client disconnect cancels
its request) cancels neither the work nor the other callers' wait. Only when every caller has
gone is the work cancelled too: nobody waits for it, and a model execution it queued for can
then be dropped before it runs. Everyone gets the same result, or the same exception.
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
        self._waiting: dict[asyncio.Task[T], int] = {}

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
        self._waiting[task] = self._waiting.get(task, 0) + 1
        try:
            return await asyncio.shield(task)
        finally:
            left = self._waiting.get(task, 1) - 1
            if left > 0:
                self._waiting[task] = left
            else:
                self._waiting.pop(task, None)
                if not task.done():
                    task.cancel()  # every caller has gone

    def _finished(self, key: Hashable, task: asyncio.Task[T]) -> None:
        if self._calls.get(key) is task:
            del self._calls[key]
        if not task.cancelled():
            task.exception()  # retrieved here, so an unawaited failure is not logged as lost
