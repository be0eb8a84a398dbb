"""The operator's own Redis calls: live memory settings (CONFIG SET) and INFO figures.

maxmemory and maxmemory-policy are changed on the running Redis so that resizing the cache never
restarts it (a restart empties the cache). redis-py errors become :class:`RedisLiveError` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from cachefleet.runtime.config import format_bytes


class RedisLiveError(Exception):
    """Redis could not be reached or refused a command; the message names the address."""


@dataclass(frozen=True)
class RedisAddress:
    host: str
    port: int
    password: str | None
    timeout_s: float

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class CacheFigures:
    """What Redis INFO says about the cache, as the status shows it."""

    used_memory_bytes: int
    maxmemory_bytes: int
    maxmemory_policy: str
    evicted_keys: int
    keyspace_hits: int
    keyspace_misses: int

    @property
    def hit_ratio(self) -> float | None:
        lookups = self.keyspace_hits + self.keyspace_misses
        return self.keyspace_hits / lookups if lookups else None

    def to_status(self) -> dict[str, Any]:
        ratio = self.hit_ratio
        return {
            "usedMemory": format_bytes(self.used_memory_bytes) if self.used_memory_bytes else "0",
            "usedMemoryBytes": self.used_memory_bytes,
            "maxmemoryBytes": self.maxmemory_bytes,
            "maxmemoryPolicy": self.maxmemory_policy,
            "evictedKeys": self.evicted_keys,
            "keyspaceHits": self.keyspace_hits,
            "keyspaceMisses": self.keyspace_misses,
            "hitRatio": "" if ratio is None else f"{ratio:.2f}",
        }


def apply_memory_settings(address: RedisAddress, *, maxmemory_bytes: int, policy: str) -> bool:
    """Set maxmemory and the eviction policy where they differ; True when anything changed."""
    wanted = {"maxmemory": str(maxmemory_bytes), "maxmemory-policy": policy}
    with _connect(address) as client:
        try:
            current: dict[str, str] = {}
            for name in wanted:
                current.update(client.config_get(name))
            changed = {k: v for k, v in wanted.items() if current.get(k) != v}
            for name, value in changed.items():
                client.config_set(name, value)
        except redis.RedisError as error:
            raise RedisLiveError(f"CONFIG SET on Redis at {address} failed: {error}") from None
    return bool(changed)


def read_cache_figures(address: RedisAddress) -> CacheFigures:
    with _connect(address) as client:
        try:
            memory = client.info("memory")
            stats = client.info("stats")
        except redis.RedisError as error:
            raise RedisLiveError(f"INFO on Redis at {address} failed: {error}") from None
    return CacheFigures(
        used_memory_bytes=int(memory.get("used_memory", 0)),
        maxmemory_bytes=int(memory.get("maxmemory", 0)),
        maxmemory_policy=str(memory.get("maxmemory_policy", "")),
        evicted_keys=int(stats.get("evicted_keys", 0)),
        keyspace_hits=int(stats.get("keyspace_hits", 0)),
        keyspace_misses=int(stats.get("keyspace_misses", 0)),
    )


def _connect(address: RedisAddress) -> redis.Redis:
    return redis.Redis(
        host=address.host,
        port=address.port,
        password=address.password,
        socket_connect_timeout=address.timeout_s,
        socket_timeout=address.timeout_s,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )
