"""The cache's metric children (counters and histograms) per model version, bound once.

``Counter.labels(...)`` costs a lock and a dict lookup per call; a local hit would pay it four
times. Binding each model version's children once keeps the hit path to plain increments.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Histogram

from cachefleet.runtime.metrics import RuntimeMetrics


@dataclass(frozen=True, slots=True)
class ModelCacheMetrics:
    """The labelled children of one (model, version)."""

    model: str
    version: str
    hits_local: Counter
    hits_redis: Counter
    misses: Counter
    bypass: Counter
    coalesced: Counter
    inserts_local: Counter
    inserts_redis: Counter
    insert_dropped: Counter
    lookup_local: Histogram
    lookup_redis: Histogram
    row_hits_local: Counter
    row_hits_redis: Counter
    row_misses: Counter


class CacheMetrics:
    """Binds and remembers :class:`ModelCacheMetrics` per model version."""

    def __init__(self, metrics: RuntimeMetrics) -> None:
        self.metrics = metrics
        self._bound: dict[tuple[str, str], ModelCacheMetrics] = {}

    def of(self, model: str, version: str) -> ModelCacheMetrics:
        bound = self._bound.get((model, version))
        if bound is None:
            bound = self._bind(model, version)
            self._bound[(model, version)] = bound
        return bound

    def _bind(self, model: str, version: str) -> ModelCacheMetrics:
        m, labels = self.metrics, (model, version)
        return ModelCacheMetrics(
            model=model,
            version=version,
            hits_local=m.cache_hits.labels(*labels, "local"),
            hits_redis=m.cache_hits.labels(*labels, "redis"),
            misses=m.cache_misses.labels(*labels),
            bypass=m.cache_bypass.labels(*labels),
            coalesced=m.cache_coalesced.labels(*labels),
            inserts_local=m.cache_inserts.labels(*labels, "local"),
            inserts_redis=m.cache_inserts.labels(*labels, "redis"),
            insert_dropped=m.cache_insert_dropped.labels(*labels),
            lookup_local=m.cache_lookup_seconds.labels(*labels, "local"),
            lookup_redis=m.cache_lookup_seconds.labels(*labels, "redis"),
            row_hits_local=m.cache_row_hits.labels(*labels, "local"),
            row_hits_redis=m.cache_row_hits.labels(*labels, "redis"),
            row_misses=m.cache_row_misses.labels(*labels),
        )
