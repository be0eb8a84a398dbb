"""Builds fleet-wide coalescing around the shared tier."""

from __future__ import annotations

from cachefleet.runtime.cache.admission import AdmissionPolicy
from cachefleet.runtime.cache.fleet import FleetCoalescing, SharedFleet
from cachefleet.runtime.cache.fleet_fills import FillListener
from cachefleet.runtime.cache.fleet_lease import FleetLeases
from cachefleet.runtime.cache.fleet_policy import AdmittedCompute
from cachefleet.runtime.cache.redis_tier import RedisTier, error_kind
from cachefleet.runtime.cache.shared_tier import SharedTier
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics


def build_fleet(
    shared: SharedTier,
    redis: RedisTier,
    settings: RuntimeSettings,
    admission: AdmissionPolicy,
    metrics: RuntimeMetrics,
) -> SharedFleet | None:
    """The fleet's leases (in ``redis``, ``shared``'s store: leases are Redis scripts), fills
    subscription and policy around ``shared`` (nothing connects here); None when
    ``--cache-fleet-coalescing`` is off.

    Faults are the shared tier's own: counted in ``cachefleet_cache_errors_total{tier}`` (its
    name) and told to the key's breaker, as a lookup's are.
    """
    if settings.cache.fleet_coalescing != "auto":
        return None
    leases = FleetLeases(redis, shared.keys)

    def subscription_lost(error: BaseException) -> None:
        metrics.cache_errors.labels(shared.name, error_kind(error)).inc()

    listener = FillListener(
        settings.redis,
        leases.channel,
        retry_s=settings.redis.breaker_reset_s,
        on_fault=subscription_lost,
    )
    policy = AdmittedCompute(
        admission,
        min_compute_s=settings.cache.fleet_min_compute_s,
        max_wait_s=settings.cache.fleet_max_wait_s,
    )
    coalescing = FleetCoalescing(
        leases, listener, policy, metrics, breaker_of=shared.breaker, on_fault=shared.fault
    )
    return SharedFleet(coalescing, shared)
