"""Requests in flight per model, so that unloading a model can wait for them to finish."""

from __future__ import annotations

import asyncio


class InFlight:
    """Counts requests per model name; :meth:`drained` waits until a model has none.

    Written by the request ledger, under its lock, from the event loop or a gRPC thread;
    :meth:`drained` waits on the loop, and the last request to leave wakes it through that
    loop (``call_soon_threadsafe``), whichever thread it left on. ``enter`` and ``leave`` are
    plain calls (no context manager) because they sit on every request's path.
    """

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._idle: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}

    def enter(self, name: str) -> None:
        self._counts[name] = self._counts.get(name, 0) + 1

    def leave(self, name: str) -> None:
        count = self._counts[name] - 1
        if count:
            self._counts[name] = count
            return
        del self._counts[name]
        waiting = self._idle.pop(name, None)
        if waiting is not None:
            loop, idle = waiting
            loop.call_soon_threadsafe(idle.set)

    def count(self, name: str) -> int:
        return self._counts.get(name, 0)

    async def drained(self, name: str) -> None:
        """Return once no request of ``name`` is in flight (at once if none is)."""
        loop = asyncio.get_running_loop()
        while self._counts.get(name):
            waiting = self._idle.get(name)
            if waiting is None or waiting[1].is_set():
                waiting = self._idle[name] = (loop, asyncio.Event())
            if not self._counts.get(name):  # the last one left meanwhile, on a gRPC thread
                break
            await waiting[1].wait()
