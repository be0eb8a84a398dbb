"""What the shared tier keeps its entries in: a store of bytes by string key (Redis is one).

The shared tier (``shared_tier``) seals and checks entries, keeps the breakers and queues its
writes behind the response; a store only moves bytes. It answers a lookup (``get``, ``get_many``
for a batched request's rows), takes writes that complete later (``set_soon``, ``delete_soon``:
futures, so a drain of writes needs no task per write), drops one model's entries
(``flush_model``) and tells the other replicas (``publish`` on the namespace's flush channel).
Every fault leaves a store as a :class:`~cachefleet.runtime.cache.errors.CacheTierError` with a
``kind``, which the shared tier counts and tells the breaker of the key's shard (``shard_of``:
one name for a store that is not sharded).

:class:`~cachefleet.runtime.cache.redis_tier.RedisTier` is the store of ``--cache redis`` and
``tiered``; another store (memcached, a test's dictionary) is a module with these methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from cachefleet.runtime.cache.key import KeySpace


class Store(Protocol):
    """A shared store of entries' bytes (see the module docstring)."""

    @property
    def where(self) -> str:
        """Where it is, without credentials, for messages."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise :class:`CacheTierError` unless the store answers."""
        ...

    def shard_of(self, key: str) -> str:
        """The shard that holds ``key`` (its breaker's name)."""
        ...

    async def get(self, key: str) -> bytes | None: ...

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """``get`` of keys of one shard, in one round trip."""
        ...

    def set_soon(self, key: str, value: bytes, ttl_s: float) -> asyncio.Future[Any]:
        """Write ``value`` under ``key`` for ``ttl_s`` seconds (0: no expiry); the future
        completes (or fails with :class:`CacheTierError`) once the store has it."""
        ...

    def delete_soon(self, key: str) -> asyncio.Future[Any]: ...

    async def flush_model(self, model: str, keys: KeySpace) -> int:
        """Drop every entry of ``model`` in ``keys``' namespace; how many went."""
        ...

    async def publish(self, channel: str, message: str) -> None: ...
