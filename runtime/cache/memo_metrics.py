"""The answer memo's figures in ``/metrics``, read when scraped, under ``tier="memo"``.

A collector, as for admission: the memo keeps plain integers under its lock and pays nothing
per request for the metrics. Its hits are not in ``cachefleet_cache_hits_total``: every memo
hit is confirmed by the local entry it was rendered from and counted there once, as the local
hit it is (``X-Cache: hit-local``); these families say how much of that the memo answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cachefleet.runtime.cache.memo import MemoFigures, ResponseMemo

#: name (as exposed) -> (type, help, the figure it reads); labelled ``tier``.
FAMILIES: dict[str, tuple[str, str, Callable[[MemoFigures], int]]] = {
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


class MemoCollector(Collector):
    """Every family of :data:`FAMILIES`, for the one memo, as ``tier="memo"``."""

    def __init__(self, memo: ResponseMemo) -> None:
        self._memo = memo

    def collect(self) -> Iterator[Metric]:
        figures = self._memo.figures()
        for name, (kind, documentation, read) in FAMILIES.items():
            family: GaugeMetricFamily | CounterMetricFamily
            if kind == "counter":
                family = CounterMetricFamily(name[: -len("_total")], documentation, labels=["tier"])
            else:
                family = GaugeMetricFamily(name, documentation, labels=["tier"])
            family.add_metric(["memo"], read(figures))
            yield family
