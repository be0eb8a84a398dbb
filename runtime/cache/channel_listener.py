"""One task per process keeping a Redis pub/sub subscription alive, for the cache's channels.

The flush channel and the fleet's fills channel listen the same way: subscribe through a
:class:`~cachefleet.runtime.cache.redis_clients.SubscriberSource` (any node of a cluster,
Sentinel's current primary), hand each message's text on, and after any client fault
subscribe again a little later, never ending the task. What a message does and how a loss is
told differ; subclasses say that in four small hooks.
"""

from __future__ import annotations

import asyncio
import contextlib

from cachefleet.runtime.cache.redis_clients import SubscriberSource
from cachefleet.runtime.config import RedisSettings

_POLL_S = 1.0


class ChannelListener:
    """Subscribes to ``channel`` until closed; :meth:`_heard` gets each message's text."""

    #: The asyncio task's name, for debugging.
    task_name = "cache-channel"

    def __init__(self, settings: RedisSettings, channel: str, retry_s: float) -> None:
        self._channel = channel
        self._retry_s = max(retry_s, 0.1)
        self._source = SubscriberSource(settings)
        self._task: asyncio.Task[None] | None = None
        #: Set while subscribed; tests wait on it before publishing.
        self.subscribed = asyncio.Event()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.task_name)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._source.close()

    def _heard(self, text: str) -> None:
        raise NotImplementedError

    def _lost(self, error: Exception) -> None:
        """A client fault ended the subscription (or prevented it); ``subscribed`` still says
        whether there was one."""

    def _up(self) -> None:
        """Subscribed (again)."""

    def _down(self) -> None:
        """Not subscribed any more; the next attempt follows after ``retry_s``."""

    async def _run(self) -> None:
        while True:
            try:
                await self._listen()
            except Exception as error:  # any client fault: reconnect (never end the task)
                self._lost(error)
            self.subscribed.clear()
            self._down()
            await asyncio.sleep(self._retry_s)

    async def _listen(self) -> None:
        client = await self._source.connect()
        try:
            async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(self._channel)
                self.subscribed.set()
                self._up()
                while True:
                    message = await pubsub.get_message(timeout=_POLL_S)
                    if message is not None and message.get("type") == "message":
                        data = message["data"]
                        self._heard(data.decode() if isinstance(data, bytes) else str(data))
        finally:
            await client.aclose()
