"""Commands issued during one event-loop turn, sent together in one round trip.

Under concurrent load many requests look Redis up at nearly the same moment; each round trip
costs the client far more CPU (pool checkout, packing, parsing, wake-ups) than Redis spends
answering. A :class:`TurnBatch` collects the commands callers issue until the event loop
gets round to it (``call_soon``), then sends them all through one ``send`` call (a pipeline)
and hands each caller its own reply or error. A lone command costs one future and one
scheduled callback more than a direct call; a batch of N costs one round trip instead of N.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from cachefleet.runtime.cache.errors import CacheTierError

Command = tuple[Any, ...]
Send = Callable[[list[Command]], Awaitable[list[Any]]]


class TurnBatch:
    """Coalesces the commands of one event-loop turn into one ``send``."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._queued: list[tuple[Command, asyncio.Future[Any]]] = []
        #: Batches being sent; kept so that their tasks are not collected mid-flight.
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, command: Command) -> Any:
        """``command``'s reply; raises the :class:`CacheTierError` of its reply or round trip."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queued.append((command, future))
        if len(self._queued) == 1:
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        batch, self._queued = self._queued, []
        task = asyncio.ensure_future(self._deliver(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _deliver(self, batch: list[tuple[Command, asyncio.Future[Any]]]) -> None:
        live = [(command, future) for command, future in batch if not future.done()]
        if not live:
            return  # every caller went away before the loop came round
        try:
            replies = await self._send([command for command, _ in live])
        except CacheTierError as error:
            for _, future in live:
                if not future.done():
                    future.set_exception(error)
            return
        except BaseException as error:  # a bug or a cancellation: no caller may hang on it
            for _, future in live:
                if not future.done():
                    future.set_exception(CacheTierError(f"redis batch failed: {error!r}", "other"))
            raise
        for (_, future), reply in zip(live, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, CacheTierError):
                future.set_exception(reply)
            else:
                future.set_result(reply)
