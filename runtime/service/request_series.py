"""The request metric children of each model version, bound once.

``labels()`` takes a lock and a dict lookup per call; every answered request would pay it
twice. Both ways a request is answered (the memo and the full path) share one binder.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram

from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.types import Model


@dataclass(frozen=True, slots=True)
class ModelSeries:
    """``cachefleet_request_seconds``, ``cachefleet_requests_total{code="200"}`` and
    ``cachefleet_queue_pending`` of one model version."""

    request_seconds: Histogram
    ok: Counter
    pending: Gauge


class RequestSeries:
    """Binds and remembers :class:`ModelSeries` per model version."""

    def __init__(self, metrics: RuntimeMetrics) -> None:
        self._metrics = metrics
        self._bound: dict[tuple[str, str], ModelSeries] = {}

    def of(self, model: Model) -> ModelSeries:
        key = (model.name, model.version)
        series = self._bound.get(key)
        if series is None:
            series = ModelSeries(
                request_seconds=self._metrics.request_seconds.labels(*key),
                ok=self._metrics.requests.labels(*key, "200"),
                pending=self._metrics.queue_pending.labels(*key),
            )
            self._bound[key] = series
        return series
