"""The cache's metric children per model version, bound once.

``Counter.labels(...)`` costs a lock and a dict lookup per call; a local hit would pay it four
times. Binding each model version's children once keeps the hit path to plain increments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cachefleet.runtime.metrics import RuntimeMetrics


@dataclass(frozen=True, slots=True)
class ModelCounters:
    """The labelled children of one (model, version)."""

    model: str
    version: str
    hits_local: Any
    hits_redis: Any
    misses: Any
    bypass: Any
    coalesced: Any
    inserts_local: Any
    inserts_redis: Any
    insert_dropped: Any
    lookup_local: Any
    lookup_redis: Any
    row_hits_local: Any
    row_hits_redis: Any
    row_misses: Any


class CacheCounters:
    """Binds and remembers :class:`ModelCounters` per model version."""

    def __init__(self, metrics: RuntimeMetrics) -> None:
        self.metrics = metrics
        self._bound: dict[tuple[str, str], ModelCounters] = {}

    def of(self, model: str, version: str) -> ModelCounters:
        bound = self._bound.get((model, version))
        if bound is None:
            bound = self._bind(model, version)
            self._bound[(model, version)] = bound
        return bound

    def _bind(self, model: str, version: str) -> ModelCounters:
        m, labels = self.metrics, (model, version)
        return ModelCounters(
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
