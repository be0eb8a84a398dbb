"""Builds fleet-wide coalescing for a read-through cache with a Redis tier."""

from __future__ import annotations

from cachefleet.runtime.cache.fleet import FleetCoalescing
from cachefleet.runtime.cache.fleet_fills import FillListener
from cachefleet.runtime.cache.fleet_lease import FleetLeases
from cachefleet.runtime.cache.fleet_policy import AdmittedCompute
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.cache.redis_tier import RedisTier, error_kind
from cachefleet.runtime.config import RuntimeSettings


def build_fleet(
    cache: ReadThroughCache, redis: RedisTier, settings: RuntimeSettings
) -> FleetCoalescing:
    """The fleet's leases, fills subscription and policy for ``cache`` (nothing connects here).

    Faults are the cache's own: counted in ``cachefleet_cache_errors_total{tier="redis"}`` and
    told to the key's breaker, as a lookup's are.
    """
    leases = FleetLeases(redis, cache.keys)

    def subscription_lost(error: BaseException) -> None:
        cache.metrics.cache_errors.labels("redis", error_kind(error)).inc()

    listener = FillListener(
        settings.redis,
        leases.channel,
        retry_s=settings.redis.breaker_reset_s,
        on_fault=subscription_lost,
    )
    policy = AdmittedCompute(
        cache.admission,
        min_compute_s=settings.cache.fleet_min_compute_s,
        max_wait_s=settings.cache.fleet_max_wait_s,
    )
    return FleetCoalescing(
        leases,
        listener,
        policy,
        cache.metrics,
        breaker_of=cache.redis_breaker,
        on_fault=cache.redis_fault,
    )
