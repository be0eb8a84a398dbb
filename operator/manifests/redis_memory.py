"""How much of the Redis container's memory Redis may fill with cache entries.

Redis needs room beyond ``maxmemory``: allocator fragmentation, client and replication buffers,
and, with persistence, the copy-on-write pages of the forked child that writes the RDB/AOF file
while writes continue. Without that room the kernel kills Redis and the whole cache is lost, so a
``maxmemory`` that does not leave it is refused rather than applied.
"""

from __future__ import annotations

from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.spec import Redis
from cachefleet.runtime.config import QuantityError, format_bytes, parse_bytes

# Share of the memory limit given to maxmemory when it is not set.
SHARE_WITHOUT_PERSISTENCE = 0.75
SHARE_WITH_PERSISTENCE = 0.5
# An explicit maxmemory may go up to this share of the limit (and never within MIN_HEADROOM).
CEILING_WITHOUT_PERSISTENCE = 0.9
CEILING_WITH_PERSISTENCE = 0.75
MIN_HEADROOM_BYTES = 32 * 2**20


def maxmemory_bytes(redis: Redis) -> int:
    """The maxmemory to configure, derived from the memory limit when not given."""
    persistent = redis.persistence_or_default.enabled
    limit = _memory_limit(redis)
    if redis.maxmemory is not None:
        wanted = _bytes(redis.maxmemory, "cache.redis.maxmemory")
        if limit is not None and wanted > ceiling_bytes(limit, persistent):
            raise SpecError(_too_big(wanted, limit, persistent))
        return wanted
    if limit is None:
        raise SpecError(
            "set cache.redis.maxmemory or cache.redis.resources.limits.memory: without a memory "
            "limit the operator cannot size Redis"
        )
    share = SHARE_WITH_PERSISTENCE if persistent else SHARE_WITHOUT_PERSISTENCE
    return int(limit * share)


def ceiling_bytes(limit: int, persistent: bool) -> int:
    share = CEILING_WITH_PERSISTENCE if persistent else CEILING_WITHOUT_PERSISTENCE
    return min(int(limit * share), limit - MIN_HEADROOM_BYTES)


def _memory_limit(redis: Redis) -> int | None:
    raw = redis.resources_or_default.limits.get("memory")
    return None if raw is None else _bytes(raw, "cache.redis.resources.limits.memory")


def _bytes(value: str | int, where: str) -> int:
    try:
        return parse_bytes(value)
    except QuantityError as error:
        raise SpecError(f"{where}: {error}") from None


def _too_big(wanted: int, limit: int, persistent: bool) -> str:
    ceiling = ceiling_bytes(limit, persistent)
    why = "its own overhead and the fork of persistence" if persistent else "its own overhead"
    return (
        f"cache.redis.maxmemory {format_bytes(wanted)} does not fit in the Redis memory limit "
        f"{format_bytes(limit)}: Redis needs headroom for {why}. Lower maxmemory to at most "
        f"{format_bytes(ceiling)} ({ceiling} bytes) or raise cache.redis.resources.limits.memory"
    )
