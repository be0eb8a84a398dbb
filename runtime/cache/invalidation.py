"""Flush fan-out: a Redis pub/sub channel that tells every replica to drop a model locally.

``flush`` removes a model's entries from Redis, but each replica's in-process tier still holds
its own copies; every server subscribes to its namespace's channel
(:attr:`~cachefleet.runtime.cache.key.KeySpace.flush_channel`) and drops the named model's local
entries when a flush is published there; other namespaces' flushes are never heard. The
subscriber reconnects by itself after Redis restarts (in cluster mode to any reachable node,
since a cluster delivers messages to every node; in sentinel mode to the current primary); a
flush published while a replica is disconnected is not replayed to it (its local entries then
live out their TTL).
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


class InvalidationListener:
    """Calls ``on_flush(model)`` for every flush published on ``channel``."""

    def __init__(
        self,
        settings: RedisSettings,
        channel: str,
        on_flush: Callable[[str], None],
        retry_s: float,
    ) -> None:
        self._settings = settings
        self._channel = channel
        self._on_flush = on_flush
        self._retry_s = max(retry_s, 0.1)
        self._task: asyncio.Task[None] | None = None
        #: Set while subscribed; tests wait on it before publishing.
        self.subscribed = asyncio.Event()
        self._healthy = True
        self._source = SubscriberSource(settings)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="cache-invalidation")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._source.close()

    async def _run(self) -> None:
        while True:
            try:
                await self._listen()
            except Exception as error:  # any client fault: reconnect (never end the task)
                if self._healthy:
                    logger.warning("cache flush channel lost, reconnecting: %s", error)
                self._healthy = False
            self.subscribed.clear()
            await asyncio.sleep(self._retry_s)

    async def _listen(self) -> None:
        client = await self._source.connect()
        try:
            async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(self._channel)
                self.subscribed.set()
                if not self._healthy:
                    logger.info("cache flush channel restored")
                    self._healthy = True
                while True:
                    message = await pubsub.get_message(timeout=_POLL_S)
                    if message is not None and message.get("type") == "message":
                        model = message["data"]
                        self._on_flush(model.decode() if isinstance(model, bytes) else str(model))
        finally:
            await client.aclose()
