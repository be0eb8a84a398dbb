"""The cache's metric children (counters and histograms) per model version, bound once.

``Counter.labels(...)`` costs a lock and a dict lookup per call; a local hit would pay it four
times. Binding each model version's children once keeps the hit path to plain increments (the
hits and lookup times are the runtime's own plain numbers: ``metrics.CacheLookupCounters``). The
children labelled ``tier`` are bound for every tier the cache has, by the names it is given
(``factory`` lists the tiers), and read by the tier's ``name``, so a new tier needs no field
here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import Counter

from cachefleet.runtime.metrics import PlainCounter, PlainHistogram, RuntimeMetrics


@dataclass(frozen=True, slots=True)
class ModelCacheMetrics:
    """The labelled children of one (model, version)."""

    model: str
    version: str
    #: By tier name, as the rest below.
    hits: dict[str, PlainCounter]
    misses: Counter
    bypass: Counter
    coalesced: Counter
    inserts: dict[str, Counter]
    insert_dropped: Counter
    lookup: dict[str, PlainHistogram]
    row_hits: dict[str, Counter]
    row_misses: Counter
    row_coalesced: Counter


class CacheMetrics:
    """Binds and remembers :class:`ModelCacheMetrics` per model version."""

    def __init__(self, metrics: RuntimeMetrics, tiers: Sequence[str]) -> None:
        """``tiers``: the names of the tiers whose children are bound (those the cache has)."""
        self.metrics = metrics
        self.tiers = tuple(tiers)
        self._bound: dict[tuple[str, str], ModelCacheMetrics] = {}

    def of(self, model: str, version: str) -> ModelCacheMetrics:
        bound = self._bound.get((model, version))
        if bound is None:
            bound = self._bind(model, version)
            self._bound[(model, version)] = bound
        return bound

    def _bind(self, model: str, version: str) -> ModelCacheMetrics:
        m, labels, tiers = self.metrics, (model, version), self.tiers
        return ModelCacheMetrics(
            model=model,
            version=version,
            hits={tier: m.cache_lookups.hits(*labels, tier) for tier in tiers},
            misses=m.cache_misses.labels(*labels),
            bypass=m.cache_bypass.labels(*labels),
            coalesced=m.cache_coalesced.labels(*labels),
            inserts={tier: m.cache_inserts.labels(*labels, tier) for tier in tiers},
            insert_dropped=m.cache_insert_dropped.labels(*labels),
            lookup={tier: m.cache_lookups.lookup(*labels, tier) for tier in tiers},
            row_hits={tier: m.cache_row_hits.labels(*labels, tier) for tier in tiers},
            row_misses=m.cache_row_misses.labels(*labels),
            row_coalesced=m.cache_row_coalesced.labels(*labels),
        )
