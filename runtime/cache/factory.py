"""Builds the response cache that the settings ask for: the one place its tiers are listed.

The tiers, in the order a request meets them: the answer memo and the local tier (``local``,
``tiered``: the memo holds only answers a local entry vouches for), then Redis (``redis``,
``tiered``). The memo is built apart (:func:`build_memo`), since the transports consult it
before there is a request to hand the cache, and handed to :func:`build_cache`, which flushes it
with the other tiers and exports every tier's figures (``tier_metrics``). What composes around
the tiers (admission, single-flight, the write-behind queue, fleet coalescing, the flush
listener) is built here too and handed to the cache at construction; nothing is wired
afterwards.

The Redis tier and what hangs on it (the flush listener, fleet coalescing) are imported only
when the settings ask for Redis: redis-py's import is about a third of a server's start-up, and a
server with the local tier alone never uses it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from cachefleet.runtime.cache.admission import AdmissionPolicy, Tier
from cachefleet.runtime.cache.admission_metrics import AdmissionCollector
from cachefleet.runtime.cache.api import NullCache, ResponseCache
from cachefleet.runtime.cache.breakers import ShardBreakers
from cachefleet.runtime.cache.entry import EntryMac
from cachefleet.runtime.cache.errors import CacheConfigError
from cachefleet.runtime.cache.flush_marks import FlushMarks
from cachefleet.runtime.cache.key import KeySpace
from cachefleet.runtime.cache.local import LocalTier
from cachefleet.runtime.cache.memo import ResponseMemo
from cachefleet.runtime.cache.metrics import CacheMetrics
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.cache.tier_metrics import TierCollector
from cachefleet.runtime.cache.writebehind import WriteBehind
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


def build_memo(settings: RuntimeSettings) -> ResponseMemo | None:
    """The one answer memo, an eighth of the local tier's bound; None unless a local tier
    (``local``, ``tiered``) can vouch for what it keeps."""
    if settings.cache.mode not in ("local", "tiered"):
        return None
    return ResponseMemo(settings.cache.local_size_bytes // 8)


def check_cache_settings(settings: RuntimeSettings) -> None:
    """Raise CacheConfigError, naming the flag, for settings no cache can be built from (also
    checked before the server starts, so the user sees one line, not a failed start)."""
    mode = settings.cache.mode
    if mode in ("redis", "tiered") and settings.redis.url is None:
        raise CacheConfigError(f"--cache {mode} needs --redis-url (or CACHEFLEET_REDIS_URL)")


def build_cache(
    settings: RuntimeSettings,
    metrics: RuntimeMetrics,
    admission: AdmissionPolicy | None = None,
    memo: ResponseMemo | None = None,
) -> ResponseCache:
    """The cache for ``settings.cache.mode``. Nothing connects here: ``start()`` does.

    ``admission``: the policy the statistics report too (made here when not given); its
    figures are exported in ``metrics``, as every tier's are. ``memo``: the answer memo in
    front (:func:`build_memo`), flushed with the other tiers."""
    mode = settings.cache.mode
    if mode == "none":
        return NullCache()
    local = None
    if mode in ("local", "tiered"):
        local = LocalTier(settings.cache.local_size_bytes, on_size=metrics.cache_local_bytes.set)
    redis = None
    check_cache_settings(settings)
    if mode in ("redis", "tiered"):
        from cachefleet.runtime.cache.redis_tier import RedisTier

        redis = RedisTier(settings.redis)
    admission = admission if admission is not None else build_admission(settings)
    metrics.registry.register(AdmissionCollector(admission))
    cache = read_through(settings, metrics, admission, local, redis, memo=memo)
    metrics.registry.register(TierCollector((*cache.front, *cache.tiers)))
    return cache


def read_through(
    settings: RuntimeSettings,
    metrics: RuntimeMetrics,
    admission: AdmissionPolicy,
    local: LocalTier | None,
    redis: RedisTier | None,
    *,
    memo: ResponseMemo | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> ReadThroughCache:
    """The read-through cache over ``local`` and ``redis`` (either may be None), with the
    parts that compose around them, behind ``memo``; ``wall_clock``: Unix time for Redis
    entries' expiry."""
    front = [memo] if memo is not None else []
    cache_metrics = CacheMetrics(metrics)
    marks = FlushMarks()
    near = [local] if local is not None else []
    if redis is None:
        return ReadThroughCache(
            metrics,
            near,
            cache_metrics=cache_metrics,
            marks=marks,
            admission=admission,
            front=front,
        )
    from cachefleet.runtime.cache.fleet_setup import build_fleet
    from cachefleet.runtime.cache.invalidation import InvalidationListener
    from cachefleet.runtime.cache.shared_tier import SharedTier

    secret = settings.cache.secret
    keys = KeySpace(settings.cache.namespace)
    shared = SharedTier(
        redis,
        cache_metrics,
        breakers=ShardBreakers(
            settings.redis.breaker_failure_threshold,
            settings.redis.breaker_reset_s,
            on_any_open=lambda is_open: metrics.redis_circuit_open.set(1 if is_open else 0),
        ),
        writes=WriteBehind(settings.cache.insert_queue_size, settings.cache.insert_queue_bytes),
        marks=marks,
        admission=admission,
        keys=keys,
        mac=None if secret is None else EntryMac(secret.get_secret_value()),
        wall_clock=wall_clock,
    )

    def listen(on_flush: Callable[[str], None]) -> InvalidationListener:
        return InvalidationListener(
            settings.redis, keys.flush_channel, on_flush, settings.redis.breaker_reset_s
        )

    fleet = build_fleet(shared, settings, admission, metrics)
    return ReadThroughCache(
        metrics,
        near,
        shared,
        cache_metrics=cache_metrics,
        marks=marks,
        admission=admission,
        fleet=fleet,
        listen=listen if near else None,
        front=front,
    )
