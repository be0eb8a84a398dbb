"""The admission policy's decisions and figures in ``/metrics``, read when scraped.

A collector rather than gauges set per request: the hot path updates plain floats
(``admission.py``) and pays nothing for the metrics; a scrape reads them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cachefleet.runtime.cache.admission import AdmissionPolicy

_TIER = ("model", "version", "tier")


class AdmissionCollector(Collector):
    """``cachefleet_cache_admitted{model,version,tier}`` (1 used, 0 skipped) and the moving
    averages it is decided on."""

    def __init__(self, policy: AdmissionPolicy) -> None:
        self._policy = policy

    def collect(self) -> Iterator[Metric]:
        admitted = GaugeMetricFamily(
            "cachefleet_cache_admitted",
            "1 while the tier is used for the model, 0 while admission skips it.",
            labels=_TIER,
        )
        saving = GaugeMetricFamily(
            "cachefleet_cache_admission_saving_seconds",
            "Seconds a lookup of the tier is expected to save the model (negative: to cost).",
            labels=_TIER,
        )
        hit_ratio = GaugeMetricFamily(
            "cachefleet_cache_admission_hit_ratio",
            "Moving average of the tier's hit ratio for the model, as admission measures it.",
            labels=_TIER,
        )
        lookup = GaugeMetricFamily(
            "cachefleet_cache_admission_lookup_seconds",
            "Moving average of one lookup of the tier for the model.",
            labels=_TIER,
        )
        insert = GaugeMetricFamily(
            "cachefleet_cache_admission_insert_seconds",
            "Moving average of one insert into the tier for the model (this server's share).",
            labels=_TIER,
        )
        compute = GaugeMetricFamily(
            "cachefleet_cache_admission_compute_seconds",
            "Moving average of one computed answer of the model (what a hit saves).",
            labels=("model", "version"),
        )
        computed: set[tuple[str, str]] = set()
        for each in self._policy.snapshot():
            labels = [each.model, each.version, each.tier]
            admitted.add_metric(labels, 1.0 if each.admitted else 0.0)
            if each.expected_saving_s is not None:
                saving.add_metric(labels, each.expected_saving_s)
            hit_ratio.add_metric(labels, each.hit_ratio)
            lookup.add_metric(labels, each.lookup_s)
            insert.add_metric(labels, each.insert_s)
            if (each.model, each.version) not in computed:
                computed.add((each.model, each.version))
                compute.add_metric([each.model, each.version], each.compute_s)
        yield from (admitted, saving, hit_ratio, lookup, insert, compute)
