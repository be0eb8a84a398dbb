"""Every tier's figures in ``/metrics``, read when scraped, labelled ``tier``.

A collector, as for admission: each tier keeps plain integers (under its lock where it has one)
and pays nothing per request for these families; :meth:`~cachefleet.runtime.cache.tier.Tier.figures`
is read at scrape time, for every tier the cache has (``memo``, ``local``, ``redis``). A figure a
tier cannot tell cheaply (what a shared Redis holds) is left out, not reported as zero.

These say what each tier did as a store. The per-model hit, miss and lookup-time families
(``cachefleet_cache_hits_total{tier}`` and the rest) count requests; a memo hit is confirmed by
the local entry it was rendered from and counted there, once, as the local hit it is
(``X-Cache: hit-local``), so the memo's hits appear here only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cachefleet.runtime.cache.tier import Kept, TierFigures

#: name (as exposed) -> (type, help, the figure it reads); labelled ``tier``.
FAMILIES: dict[str, tuple[str, str, Callable[[TierFigures], int | None]]] = {
    "cachefleet_cache_tier_entries": (
        "gauge", "Entries a tier holds.", lambda each: each.entries,
    ),
    "cachefleet_cache_tier_bytes": (
        "gauge", "Bytes a tier holds, entries and their overhead.", lambda each: each.bytes,
    ),
    "cachefleet_cache_tier_hits_total": (
        "counter", "Lookups a tier answered.", lambda each: each.hits,
    ),
    "cachefleet_cache_tier_misses_total": (
        "counter", "Lookups a tier could not answer (stale entries included).",
        lambda each: each.misses,
    ),
    "cachefleet_cache_tier_evictions_total": (
        "counter", "Entries a tier dropped to make room.", lambda each: each.evictions,
    ),
}  # fmt: skip


class TierCollector(Collector):
    """Every family of :data:`FAMILIES`, for each of ``tiers``, as ``tier="<its name>"``."""

    def __init__(self, tiers: Sequence[Kept]) -> None:
        self._tiers = tuple(tiers)

    def collect(self) -> Iterator[Metric]:
        figures = [(tier.name, tier.figures()) for tier in self._tiers]
        for name, (kind, documentation, read) in FAMILIES.items():
            family: GaugeMetricFamily | CounterMetricFamily
            if kind == "counter":
                family = CounterMetricFamily(name[: -len("_total")], documentation, labels=["tier"])
            else:
                family = GaugeMetricFamily(name, documentation, labels=["tier"])
            for tier, each in figures:
                value = read(each)
                if value is not None:
                    family.add_metric([tier], value)
            yield family
