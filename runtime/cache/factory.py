"""Builds the response cache that the settings ask for: the one place its tiers are listed.

The tiers are data: :data:`TIER_KINDS` lists every kind the server can build, in the order a
request meets them, each a :class:`TierKind` (its name, which settings use it, how it is
built). The answer memo and the local tier (``local``, ``tiered``: the memo holds only answers a
local entry vouches for), then the shared tier over Redis (``redis``, ``tiered``). Everything
else (admission, the metrics' children, hit statuses, the walk) is keyed by the names of the
tiers built here, so adding a tier is a module and a line in :data:`TIER_KINDS` (and, for a
tier users choose, the setting that turns it on); :func:`register_tier` is that line for a
tier defined outside the package (the tests' own). The memo is built apart
(:func:`build_memo`), since the transports consult it before there is a request to hand the
cache, and handed to :func:`build_cache`, which flushes it with the other tiers and exports
every tier's figures (``tier_metrics``). What composes around the tiers (admission,
single-flight, the write-behind queue, fleet coalescing, the flush listener) is built here too
and handed to the cache at construction; nothing is wired afterwards.

The Redis tier and what hangs on it (the flush listener, fleet coalescing) are imported only
when the settings ask for Redis: redis-py's import is about a third of a server's start-up, and a
server with the local tier alone never uses it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from cachefleet.runtime.cache.admission import AdmissionPolicy
from cachefleet.runtime.cache.admission_metrics import AdmissionCollector
from cachefleet.runtime.cache.api import NullCache, ResponseCache
from cachefleet.runtime.cache.breakers import ShardBreakers
from cachefleet.runtime.cache.entry import EntryMac
from cachefleet.runtime.cache.errors import CacheConfigError
from cachefleet.runtime.cache.fleet import SharedFleet
from cachefleet.runtime.cache.flush_marks import FlushMarks
from cachefleet.runtime.cache.key import KeySpace
from cachefleet.runtime.cache.local import LocalTier
from cachefleet.runtime.cache.memo import ResponseMemo
from cachefleet.runtime.cache.metrics import CacheMetrics
from cachefleet.runtime.cache.read_through import Listen, ReadThroughCache
from cachefleet.runtime.cache.tier import Tier
from cachefleet.runtime.cache.tier_metrics import TierCollector
from cachefleet.runtime.cache.writebehind import WriteBehind
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics


@dataclass(frozen=True, slots=True)
class TierParts:
    """What the factory hands every tier's builder: the settings and the parts the tiers of
    one cache share."""

    settings: RuntimeSettings
    metrics: RuntimeMetrics
    cache_metrics: CacheMetrics
    marks: FlushMarks
    admission: AdmissionPolicy
    #: The write-behind queue of the shared tiers' inserts and deletes.
    writes: WriteBehind
    #: Unix time, for shared entries' expiry (injectable: tests move it).
    wall_clock: Callable[[], float]


@dataclass(frozen=True, slots=True)
class Built:
    """A tier, and what hangs on it: fleet coalescing (on a shared tier) and the listener of
    other replicas' flushes (made only when the cache has in-process tiers to drop)."""

    tier: Tier
    fleet: SharedFleet | None = None
    listen: Listen | None = None


@dataclass(frozen=True, slots=True)
class TierKind:
    """One kind of tier: a line of :data:`TIER_KINDS`."""

    #: The tier's name: ``X-Cache: hit-<name>``, the metrics' ``tier`` label, admission's key.
    name: str
    #: Whether a server with these settings has this tier.
    used: Callable[[RuntimeSettings], bool]
    build: Callable[[TierParts], Built]


def _local(parts: TierParts) -> Built:
    settings = parts.settings
    return Built(
        LocalTier(settings.cache.local_size_bytes, on_size=parts.metrics.cache_local_bytes.set)
    )


def _redis(parts: TierParts) -> Built:
    """The shared tier over Redis, its fleet coalescing and its flush listener."""
    from cachefleet.runtime.cache.fleet_setup import build_fleet
    from cachefleet.runtime.cache.invalidation import InvalidationListener
    from cachefleet.runtime.cache.redis_tier import RedisTier
    from cachefleet.runtime.cache.shared_tier import SharedTier

    settings, metrics = parts.settings, parts.metrics
    secret = settings.cache.secret
    keys = KeySpace(settings.cache.namespace)
    redis = RedisTier(settings.redis)
    shared = SharedTier(
        redis,
        parts.cache_metrics,
        breakers=ShardBreakers(
            settings.redis.breaker_failure_threshold,
            settings.redis.breaker_reset_s,
            on_any_open=lambda is_open: metrics.redis_circuit_open.set(1 if is_open else 0),
        ),
        writes=parts.writes,
        marks=parts.marks,
        admission=parts.admission,
        keys=keys,
        mac=None if secret is None else EntryMac(secret.get_secret_value()),
        wall_clock=parts.wall_clock,
        name="redis",
    )

    def listen(on_flush: Callable[[str], None]) -> InvalidationListener:
        return InvalidationListener(
            settings.redis, keys.flush_channel, on_flush, settings.redis.breaker_reset_s
        )

    return Built(shared, build_fleet(shared, redis, settings, parts.admission, metrics), listen)


#: Every kind of tier, in the order a request meets them (in-process ones first).
TIER_KINDS: list[TierKind] = [
    TierKind("local", lambda settings: settings.cache.mode in ("local", "tiered"), _local),
    TierKind("redis", lambda settings: settings.cache.mode in ("redis", "tiered"), _redis),
]


def register_tier(kind: TierKind, *, after: str | None = None) -> Callable[[], None]:
    """Add ``kind`` to :data:`TIER_KINDS` (after the kind named ``after``, else last): the
    line of :data:`TIER_KINDS` for a tier defined outside this package. Returns what takes it
    out again."""
    names = [each.name for each in TIER_KINDS]
    if kind.name in names:
        raise ValueError(f"a tier named {kind.name!r} is registered already")
    TIER_KINDS.insert(names.index(after) + 1 if after is not None else len(names), kind)
    return lambda: TIER_KINDS.remove(kind)


def tier_names(settings: RuntimeSettings) -> tuple[str, ...]:
    """The names of the tiers a server with ``settings`` has, in order."""
    if settings.cache.mode == "none":
        return ()
    return tuple(kind.name for kind in TIER_KINDS if kind.used(settings))


def build_admission(settings: RuntimeSettings) -> AdmissionPolicy:
    """The admission policy over the tiers of ``settings`` (``--cache-admission``)."""
    return AdmissionPolicy(settings.cache.admission, tier_names(settings))


def build_memo(settings: RuntimeSettings) -> ResponseMemo | None:
    """The one answer memo, an eighth of the local tier's bound; None unless a local tier
    (``local``, ``tiered``) can vouch for what it keeps."""
    if "local" not in tier_names(settings):
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
    if settings.cache.mode == "none":
        return NullCache()
    check_cache_settings(settings)
    admission = admission if admission is not None else build_admission(settings)
    metrics.registry.register(AdmissionCollector(admission))
    cache = read_through(settings, metrics, admission, memo=memo)
    metrics.registry.register(TierCollector((*cache.front, *cache.tiers)))
    return cache


def read_through(
    settings: RuntimeSettings,
    metrics: RuntimeMetrics,
    admission: AdmissionPolicy,
    *,
    memo: ResponseMemo | None = None,
    wall_clock: Callable[[], float] = time.time,
    kinds: list[TierKind] | None = None,
) -> ReadThroughCache:
    """The read-through cache over the tiers of ``settings`` (of :data:`TIER_KINDS`, or
    ``kinds``), with the parts that compose around them, behind ``memo``; ``wall_clock``:
    Unix time for shared entries' expiry."""
    chosen = [kind for kind in (TIER_KINDS if kinds is None else kinds) if kind.used(settings)]
    cache_metrics = CacheMetrics(metrics, [kind.name for kind in chosen])
    writes = WriteBehind(settings.cache.insert_queue_size, settings.cache.insert_queue_bytes)
    parts = TierParts(settings, metrics, cache_metrics, FlushMarks(), admission, writes, wall_clock)
    built = [kind.build(parts) for kind in chosen]
    tiers = [each.tier for each in built]
    fleets = [each.fleet for each in built if each.fleet is not None]
    listeners = [each.listen for each in built if each.listen is not None]
    return ReadThroughCache(
        metrics,
        tiers,
        cache_metrics=cache_metrics,
        marks=parts.marks,
        admission=admission,
        writes=writes if any(tier.shared for tier in tiers) else None,
        fleet=fleets[0] if fleets else None,
        listen=listeners[0] if listeners and not all(tier.shared for tier in tiers) else None,
        front=[memo] if memo is not None else [],
    )
