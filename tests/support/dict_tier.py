"""A tier defined outside the package: a shared tier over a dictionary, named ``dict``.

It exists to prove what the architecture page says of tiers: adding one is a module and a line
in the factory. This is the module (a :class:`~cachefleet.runtime.cache.store.Store` that keeps
bytes in a dictionary, with Redis's expiry and its flush by key prefix; the shared tier does the
rest: sealed entries, breakers, write-behind); :data:`KIND` is the line, registered with
``factory.register_tier`` by the tests that use it. Nothing in the package names it.

The store is a real one, shared by the caches built over it (as replicas share a Redis); only
its clock is the test's, so that expiry is tested without waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from cachefleet.runtime.cache.breakers import ShardBreakers
from cachefleet.runtime.cache.factory import Built, TierKind, TierParts
from cachefleet.runtime.cache.key import KeySpace
from cachefleet.runtime.cache.shared_tier import SharedTier

NAME = "dict"


class DictStore:
    """A :class:`~cachefleet.runtime.cache.store.Store` in a dictionary (one shard)."""

    where = "dict://"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: key -> (value, monotonic expiry or None).
        self.entries: dict[str, tuple[bytes, float | None]] = {}
        self.published: list[tuple[str, str]] = []
        self.started = False

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.started = False

    async def ping(self) -> None:
        return None

    def shard_of(self, key: str) -> str:
        return NAME

    async def get(self, key: str) -> bytes | None:
        return self._live(key)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self._live(key) for key in keys]

    def set_soon(self, key: str, value: bytes, ttl_s: float) -> asyncio.Future[Any]:
        self.entries[key] = (value, self._clock() + ttl_s if ttl_s > 0 else None)
        return _done()

    def delete_soon(self, key: str) -> asyncio.Future[Any]:
        self.entries.pop(key, None)
        return _done()

    async def flush_model(self, model: str, keys: KeySpace) -> int:
        doomed = [key for key in self.entries if keys.holds(key.encode(), model)]
        for key in doomed:
            del self.entries[key]
        return len(doomed)

    async def publish(self, channel: str, message: str) -> None:
        self.published.append((channel, message))

    def _live(self, key: str) -> bytes | None:
        found = self.entries.get(key)
        if found is None:
            return None
        value, expires_at = found
        if expires_at is not None and expires_at <= self._clock():
            del self.entries[key]
            return None
        return value


def _done() -> asyncio.Future[Any]:
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done


def dict_tier(parts: TierParts, store: DictStore) -> SharedTier:
    """The shared tier over ``store``, built from the factory's parts as Redis's is."""
    return SharedTier(
        store,
        parts.cache_metrics,
        breakers=ShardBreakers(
            parts.settings.redis.breaker_failure_threshold, parts.settings.redis.breaker_reset_s
        ),
        writes=parts.writes,
        marks=parts.marks,
        admission=parts.admission,
        keys=KeySpace(parts.settings.cache.namespace),
        wall_clock=parts.wall_clock,
        name=NAME,
    )


#: The store every cache built while :data:`KIND` is registered shares.
STORE = DictStore()

#: The factory's line for this tier: with ``--cache local``, after the local tier.
KIND = TierKind(
    NAME,
    lambda settings: settings.cache.mode == "local",
    lambda parts: Built(dict_tier(parts, STORE)),
)
