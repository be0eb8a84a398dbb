"""The admission policy's decisions and figures in ``/metrics``, read when scraped.

A collector rather than gauges set per request: the hot path updates plain floats
(``admission.py``) and pays nothing for the metrics; a scrape reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cachefleet.runtime.cache.admission import AdmissionFigures, AdmissionPolicy

_TIER = ("model", "version", "tier")

#: name -> (help, labels, the figure it reads; None leaves the series out).
GAUGES: dict[str, tuple[str, tuple[str, ...], Callable[[AdmissionFigures], float | None]]] = {
    "cachefleet_cache_admitted": (
        "1 while the tier is used for the model, 0 while admission skips it.",
        _TIER,
        lambda each: 1.0 if each.admitted else 0.0,
    ),
    "cachefleet_cache_admission_saving_seconds": (
        "Seconds a lookup of the tier is expected to save the model (negative: to cost).",
        _TIER,
        lambda each: each.expected_saving_s,
    ),
    "cachefleet_cache_admission_hit_ratio": (
        "Moving average of the tier's hit ratio for the model, as admission measures it.",
        _TIER,
        lambda each: each.hit_ratio,
    ),
    "cachefleet_cache_admission_lookup_seconds": (
        "Moving average of one lookup of the tier for the model.",
        _TIER,
        lambda each: each.lookup_s,
    ),
    "cachefleet_cache_admission_insert_seconds": (
        "Moving average of one insert into the tier for the model (this server's share).",
        _TIER,
        lambda each: each.insert_s,
    ),
    "cachefleet_cache_admission_compute_seconds": (
        "Moving average of one computed answer of the model (what a hit saves).",
        ("model", "version"),
        lambda each: each.compute_s,
    ),
}


class AdmissionCollector(Collector):
    """Every gauge of :data:`GAUGES`, per model version (and tier where labelled)."""

    def __init__(self, policy: AdmissionPolicy) -> None:
        self._policy = policy

    def collect(self) -> Iterator[Metric]:
        figures = self._policy.snapshot()
        for name, (documentation, labels, read) in GAUGES.items():
            family = GaugeMetricFamily(name, documentation, labels=labels)
            seen: set[tuple[str, ...]] = set()
            for each in figures:
                values = (each.model, each.version, each.tier)[: len(labels)]
                value = read(each)
                if value is not None and values not in seen:
                    seen.add(values)
                    family.add_metric(list(values), value)
            yield family
