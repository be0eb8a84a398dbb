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

import logging
from collections.abc import Callable

from cachefleet.runtime.cache.channel_listener import ChannelListener
from cachefleet.runtime.config import RedisSettings

logger = logging.getLogger(__name__)


class InvalidationListener(ChannelListener):
    """Calls ``on_flush(model)`` for every flush published on ``channel``."""

    task_name = "cache-invalidation"

    def __init__(
        self,
        settings: RedisSettings,
        channel: str,
        on_flush: Callable[[str], None],
        retry_s: float,
    ) -> None:
        super().__init__(settings, channel, retry_s)
        self._on_flush = on_flush
        self._healthy = True

    def _heard(self, text: str) -> None:
        self._on_flush(text)

    def _lost(self, error: Exception) -> None:
        if self._healthy:
            logger.warning("cache flush channel lost, reconnecting: %s", error)
        self._healthy = False

    def _up(self) -> None:
        if not self._healthy:
            logger.info("cache flush channel restored")
            self._healthy = True
