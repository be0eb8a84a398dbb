"""Builds the response cache that the settings ask for.

The Redis tier and what hangs on it (the flush listener, fleet coalescing) are imported only
when the settings ask for Redis: redis-py's import is about a third of a server's start-up, and a
server with the local tier alone never uses it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachefleet.runtime.cache.admission import AdmissionPolicy, Tier
from cachefleet.runtime.cache.admission_metrics import AdmissionCollector
from cachefleet.runtime.cache.api import NullCache, ResponseCache
from cachefleet.runtime.cache.breakers import ShardBreakers
from cachefleet.runtime.cache.entry import EntryMac
from cachefleet.runtime.cache.errors import CacheConfigError
from cachefleet.runtime.cache.key import KeySpace
from cachefleet.runtime.cache.local import LocalTier
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics

if TYPE_CHECKING:
    from cachefleet.runtime.cache.redis_tier import RedisTier


def build_admission(settings: RuntimeSettings) -> AdmissionPolicy:
    """The admission policy over the tiers of ``settings.cache.mode`` (``--cache-admission``)."""
    mode = settings.cache.mode
    tiers: tuple[Tier, ...] = (
        *(("local",) if mode in ("local", "tiered") else ()),
        *(("redis",) if mode in ("redis", "tiered") else ()),
    )
    return AdmissionPolicy(settings.cache.admission, tiers)


def build_cache(
    settings: RuntimeSettings, metrics: RuntimeMetrics, admission: AdmissionPolicy | None = None
) -> ResponseCache:
    """The cache for ``settings.cache.mode``. Nothing connects here: ``start()`` does.

    ``admission``: the policy the statistics report too (made here when not given); its
    figures are exported in ``metrics``."""
    mode = settings.cache.mode
    if mode == "none":
        return NullCache()
    local = None
    if mode in ("local", "tiered"):
        local = LocalTier(settings.cache.local_size_bytes, on_size=metrics.cache_local_bytes.set)
    redis = None
    if mode in ("redis", "tiered"):
        if settings.redis.url is None:
            raise CacheConfigError(f"--cache {mode} needs --redis-url (or CACHEFLEET_REDIS_URL)")
        from cachefleet.runtime.cache.redis_tier import RedisTier

        redis = RedisTier(settings.redis)
    breakers = ShardBreakers(
        settings.redis.breaker_failure_threshold,
        settings.redis.breaker_reset_s,
        on_any_open=lambda is_open: metrics.redis_circuit_open.set(1 if is_open else 0),
    )
    secret = settings.cache.secret
    admission = admission if admission is not None else build_admission(settings)
    metrics.registry.register(AdmissionCollector(admission))
    cache = ReadThroughCache(
        metrics,
        local=local,
        redis=redis,
        breakers=breakers,
        insert_queue_size=settings.cache.insert_queue_size,
        insert_queue_bytes=settings.cache.insert_queue_bytes,
        keys=KeySpace(settings.cache.namespace),
        mac=None if secret is None else EntryMac(secret.get_secret_value()),
        admission=admission,
    )
    if redis is not None:
        _attach_redis_parts(cache, redis, settings)
    return cache


def _attach_redis_parts(
    cache: ReadThroughCache, redis: RedisTier, settings: RuntimeSettings
) -> None:
    """The flush listener (with a local tier to drop) and fleet coalescing (unless off)."""
    from cachefleet.runtime.cache.fleet_setup import build_fleet
    from cachefleet.runtime.cache.invalidation import InvalidationListener

    if cache.local is not None:
        cache.listener = InvalidationListener(
            settings.redis,
            cache.keys.flush_channel,
            cache.drop_local,
            settings.redis.breaker_reset_s,
        )
    if settings.cache.fleet_coalescing == "auto":
        cache.fleet = build_fleet(cache, redis, settings)
