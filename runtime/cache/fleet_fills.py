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
import logging
from collections.abc import Callable

from cachefleet.runtime.cache.channel_listener import ChannelListener
from cachefleet.runtime.config import RedisSettings

logger = logging.getLogger(__name__)


class FillListener(ChannelListener):
    """Futures per hex digest, resolved when the digest is published on ``channel``."""

    task_name = "cache-fleet-fills"

    def __init__(
        self,
        settings: RedisSettings,
        channel: str,
        *,
        retry_s: float,
        on_fault: Callable[[BaseException], None],
    ) -> None:
        """``on_fault``: told of each lost subscription (counted once per loss)."""
        super().__init__(settings, channel, retry_s)
        self._on_fault = on_fault
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}

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

    def _heard(self, digest: str) -> None:
        for future in self._waiting.pop(digest, ()):
            if not future.done():
                future.set_result(None)

    def _down(self) -> None:
        """Redis went away under the subscription: every waiter looks again now (and, finding
        Redis gone, computes) instead of waiting for a message that cannot come."""
        for digest in list(self._waiting):
            self._heard(digest)

    def _lost(self, error: Exception) -> None:
        if self.subscribed.is_set():
            logger.warning("cache fills channel lost, reconnecting: %s", error)
            self._on_fault(error)
