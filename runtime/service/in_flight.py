"""Requests in flight per model, so that unloading a model can wait for them to finish."""

from __future__ import annotations

import asyncio


class InFlight:
    """Counts requests per model name; :meth:`drained` waits until a model has none.

    Used from the event loop only. ``enter`` and ``leave`` are plain calls (no context manager)
    because they sit on every request's path.
    """

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._idle: dict[str, asyncio.Event] = {}

    def enter(self, name: str) -> None:
        self._counts[name] = self._counts.get(name, 0) + 1

    def leave(self, name: str) -> None:
        count = self._counts[name] - 1
        if count:
            self._counts[name] = count
            return
        del self._counts[name]
        idle = self._idle.pop(name, None)
        if idle is not None:
            idle.set()

    def count(self, name: str) -> int:
        return self._counts.get(name, 0)

    async def drained(self, name: str) -> None:
        """Return once no request of ``name`` is in flight (at once if none is)."""
        while self._counts.get(name):
            idle = self._idle.setdefault(name, asyncio.Event())
            await idle.wait()
