"""``cachefleet_model_info{model,version,fingerprint}``: which files each loaded version serves.

Read from the repository when Prometheus scrapes, not kept in a gauge that loads and unloads
would have to update: a reload onto other files shows its new fingerprint at the next scrape,
and an unloaded version simply stops being listed. A rollout is then a change of this series
across the fleet's pods, and two pods serving the same name and version from other files show
two fingerprints side by side.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.models.types import ModelRepository

NAME = "cachefleet_model_info"
_READY = "READY"


class ModelInfo(Collector):
    """One sample, of value 1, per loaded model version, labelled with its fingerprint."""

    def __init__(self, repository: ModelRepository) -> None:
        self._repository = repository

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            NAME,
            "Loaded model versions (1) and the fingerprint of the files and config they serve.",
            labels=("model", "version", "fingerprint"),
        )
        for entry in self._repository.index():
            if entry.state != _READY:
                continue
            try:
                model = self._repository.get(entry.name, entry.version)
            except ServingError:
                continue  # unloaded between the index and now
            family.add_metric((entry.name, entry.version, model.fingerprint), 1.0)
        yield family
