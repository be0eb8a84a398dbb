"""Commands issued during one event-loop turn, sent together in one round trip.

Under concurrent load many requests look Redis up at nearly the same moment; each round trip
costs the client far more CPU (packing, parsing, wake-ups, system calls) than Redis spends
answering. A :class:`TurnBatch` collects the commands callers issue until the event loop
gets round to it (``call_soon``), then sends them all through one ``send`` call and hands each
caller its own reply or error. ``send`` may return a plain future (the pipelined connection
does: the batch is written there and then, and its replies resolve the future), which costs no
task; any other awaitable is run as a task of its own. A lone command costs one future and one
scheduled callback more than a direct call; a batch of N costs one round trip instead of N.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from cachefleet.runtime.cache.errors import CacheTierError

logger = logging.getLogger(__name__)
Command = tuple[Any, ...]
Send = Callable[[list[Command]], Awaitable[list[Any]]]
_Waiting = list[tuple[Command, asyncio.Future[Any]]]


class TurnBatch:
    """Coalesces the commands of one event-loop turn into one ``send``."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._queued: _Waiting = []
        #: Batches sent through tasks; kept so that the tasks are not collected mid-flight.
        self._sending: set[asyncio.Future[list[Any]]] = set()

    async def run(self, command: Command) -> Any:
        """``command``'s reply; raises the :class:`CacheTierError` of its reply or round trip."""
        return await self.submit(command)

    def submit(self, command: Command) -> asyncio.Future[Any]:
        """Queue ``command``; the future gets its reply or its :class:`CacheTierError`. For a
        caller that needs no coroutine of its own (a write-behind insert)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queued.append((command, future))
        if len(self._queued) == 1:
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        batch, self._queued = self._queued, []
        live = [(command, future) for command, future in batch if not future.done()]
        if not live:
            return  # every caller went away before the loop came round
        try:
            sent = self._send([command for command, _ in live])
        except CacheTierError as error:
            _fail(live, error)
            return
        if not isinstance(sent, asyncio.Future):
            sent = asyncio.ensure_future(sent)
            self._sending.add(sent)
            sent.add_done_callback(self._sending.discard)
        sent.add_done_callback(functools.partial(_deliver, live))


def _deliver(live: _Waiting, sent: asyncio.Future[list[Any]]) -> None:
    if sent.cancelled():
        _fail(live, CacheTierError("redis batch cancelled", "other"))
        return
    error = sent.exception()
    if error is not None:
        if not isinstance(error, CacheTierError):  # a bug: no caller may hang on it
            logger.error("redis batch failed", exc_info=error)
            error = CacheTierError(f"redis batch failed: {error!r}", "other")
        _fail(live, error)
        return
    for (_, future), reply in zip(live, sent.result(), strict=True):
        if future.done():
            continue
        if isinstance(reply, CacheTierError):
            future.set_exception(reply)
        else:
            future.set_result(reply)


def _fail(live: _Waiting, error: CacheTierError) -> None:
    for _, future in live:
        if not future.done():
            future.set_exception(error)
