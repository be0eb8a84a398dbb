"""The server's own view of a run: cache hits by tier and misses, from ``/metrics``.

It also reads the cache admission decisions (``cachefleet_cache_admitted``, with
``cachefleet_cache_admission_saving_seconds`` saying whether the tier has been measured yet),
which are a state at the time of reading, not counters.

The load generator only knows what it sent; the server's counters say what the cache did, so
the report shows the measured hit ratio next to the asked one. Triton exports no
``cachefleet_*`` counters; its own ``nv_cache_num_{hits,misses}_per_model`` stand in for them.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class CacheMetrics:
    """Cumulative counters of one model; empty when the server exports none (yet)."""

    hits_by_tier: dict[str, float] = field(default_factory=dict)
    misses: float = 0.0
    available: bool = False
    #: ``cachefleet_cache_errors_total`` by ``tier/kind``: why a hit can turn into a miss.
    errors: dict[str, float] = field(default_factory=dict)
    #: Requests answered by an identical one in flight: neither the model nor a tier was asked.
    coalesced: float = 0.0
    #: The admission decision per tier (``local v1`` when versions differ): ``admitted``,
    #: ``skipped``, or ``not measured`` (admitted by default, its saving not measured yet).
    admission: dict[str, str] = field(default_factory=dict)

    def minus(self, before: CacheMetrics) -> CacheMetrics:
        return CacheMetrics(
            _difference(self.hits_by_tier, before.hits_by_tier),
            self.misses - before.misses,
            self.available and before.available,
            {k: v for k, v in _difference(self.errors, before.errors).items() if v},
            self.coalesced - before.coalesced,
            self.admission,  # a state: the latest reading
        )

    @property
    def hit_ratio(self) -> float | None:
        """Requests the model did not run for: hits, and requests that joined one in flight."""
        hits = sum(self.hits_by_tier.values()) + self.coalesced
        total = hits + self.misses
        return hits / total if self.available and total > 0 else None


def read(metrics_url: str, model: str) -> CacheMetrics:
    """Scrape ``metrics_url`` for ``model``'s cache counters."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return CacheMetrics()
    hits: dict[str, float] = {}
    misses = coalesced = 0.0
    found = False
    errors: dict[str, float] = {}
    admitted: dict[tuple[str, str], bool] = {}
    measured: set[tuple[str, str]] = set()
    for family in text_string_to_metric_families(text):
        found = found or family.name in ("cachefleet_cache_hits", "cachefleet_cache_misses")
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            if sample.name == "cachefleet_cache_hits_total":
                tier = sample.labels.get("tier", "?")
                hits[tier] = hits.get(tier, 0.0) + sample.value
            elif sample.name == "cachefleet_cache_misses_total":
                misses += sample.value
            elif sample.name == "cachefleet_cache_coalesced_total":
                coalesced += sample.value
            elif sample.name == "cachefleet_cache_admitted":
                admitted[_tier_version(sample.labels)] = sample.value > 0
            elif sample.name == "cachefleet_cache_admission_saving_seconds":
                measured.add(_tier_version(sample.labels))
        for sample in family.samples:
            if sample.name == "cachefleet_cache_errors_total":
                kind = f"{sample.labels.get('tier', '?')}/{sample.labels.get('kind', '?')}"
                errors[kind] = errors.get(kind, 0.0) + sample.value
    if not found:
        return _triton(text, model)
    return CacheMetrics(hits, misses, found, errors, coalesced, _admission(admitted, measured))


ADMITTED, SKIPPED, NOT_MEASURED = "admitted", "skipped", "not measured"


def _tier_version(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("tier", "?"), labels.get("version", "?")


def _admission(
    admitted: dict[tuple[str, str], bool], measured: set[tuple[str, str]]
) -> dict[str, str]:
    """Each tier's decision; per version only where the model has more than one."""
    versions = {version for _, version in admitted}
    decisions = {}
    for (tier, version), used in sorted(admitted.items()):
        name = tier if len(versions) == 1 else f"{tier} v{version}"
        if not used:
            decisions[name] = SKIPPED
        else:
            decisions[name] = ADMITTED if (tier, version) in measured else NOT_MEASURED
    return decisions


def _triton(text: str, model: str) -> CacheMetrics:
    """Triton's per-model cache counters as hits (tier ``triton``) and misses."""
    hits = misses = 0.0
    found = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            name = sample.name.removesuffix("_total")  # the parser adds it to counters
            if name == "nv_cache_num_hits_per_model":
                hits, found = hits + sample.value, True
            elif name == "nv_cache_num_misses_per_model":
                misses, found = misses + sample.value, True
    return CacheMetrics({"triton": hits} if found else {}, misses, found)


def _difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {key: after.get(key, 0.0) - before.get(key, 0.0) for key in set(after) | set(before)}
