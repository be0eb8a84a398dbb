"""Hears the fleet's fills: one pub/sub subscription per process, one future per awaited key.

A replica waiting for another's answer must learn the moment it is in Redis without a
subscription (a connection) per waiting request: one task subscribes to the namespace's fills
channel and resolves the futures registered for the digest each message names. Messages are
fire-and-forget (one published while the subscription is being made again is lost), so a
waiter never relies on them alone: it also looks now and then, and gives up at its deadline.
The subscription reconnects by itself, to any node of a cluster or to Sentinel's primary
(:class:`~cachefleet.runtime.cache.redis_clients.SubscriberSource`, as the flush channel does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from cachefleet.runtime.cache.redis_clients import SubscriberSource
from cachefleet.runtime.config import RedisSettings

logger = logging.getLogger(__name__)
_POLL_S = 1.0


class FillListener:
    """Futures per hex digest, resolved when the digest is published on ``channel``."""

    def __init__(
        self,
        settings: RedisSettings,
        channel: str,
        *,
        retry_s: float,
        on_fault: Callable[[BaseException], None],
    ) -> None:
        """``on_fault``: told of each lost subscription (counted once per loss)."""
        self._channel = channel
        self._retry_s = max(retry_s, 0.1)
        self._on_fault = on_fault
        self._source = SubscriberSource(settings)
        self._task: asyncio.Task[None] | None = None
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}
        #: Set while subscribed; tests wait on it before publishing.
        self.subscribed = asyncio.Event()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="cache-fleet-fills")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._source.close()

    def watch(self, digest: str) -> asyncio.Future[None]:
        """A future resolved when ``digest`` is announced; hand it back to :meth:`unwatch`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(digest, set()).add(future)
        return future

    def unwatch(self, digest: str, future: asyncio.Future[None]) -> None:
        waiting = self._waiting.get(digest)
        if waiting is not None:
            waiting.discard(future)
            if not waiting:
                del self._waiting[digest]

    def _announced(self, digest: str) -> None:
        for future in self._waiting.pop(digest, ()):
            if not future.done():
                future.set_result(None)

    def _wake_all(self) -> None:
        """Redis went away under the subscription: every waiter looks again now (and, finding
        Redis gone, computes) instead of waiting for a message that cannot come."""
        for digest in list(self._waiting):
            self._announced(digest)

    async def _run(self) -> None:
        while True:
            try:
                await self._listen()
            except Exception as error:  # any client fault: reconnect (never end the task)
                if self.subscribed.is_set():
                    logger.warning("cache fills channel lost, reconnecting: %s", error)
                    self._on_fault(error)
            self.subscribed.clear()
            self._wake_all()
            await asyncio.sleep(self._retry_s)

    async def _listen(self) -> None:
        client = await self._source.connect()
        try:
            async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(self._channel)
                self.subscribed.set()
                while True:
                    message = await pubsub.get_message(timeout=_POLL_S)
                    if message is not None and message.get("type") == "message":
                        data = message["data"]
                        self._announced(data.decode() if isinstance(data, bytes) else str(data))
        finally:
            await client.aclose()
