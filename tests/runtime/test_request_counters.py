"""The request metrics the ledger writes as plain numbers read exactly as prometheus-client's
own Counter, Histogram and Gauge would have read for the same requests (names, labels, bucket
bounds and values), so dashboards, alerts and autoscaling queries see no difference."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cachefleet.runtime.metrics import _LATENCY_BUCKETS_S, RuntimeMetrics

ANSWERS = [("200", 0.00009), ("200", 0.0001), ("200", 0.0003), ("503", 2.5), ("200", 7.0)]


Sample = tuple[str, tuple[tuple[str, str], ...], float]


def _samples(registry: CollectorRegistry, names: set[str]) -> set[Sample]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in names
    }


def test_request_figures_read_as_prometheus_client_metrics_would() -> None:
    ours = RuntimeMetrics()
    with ours.requests.lock:
        series = ours.requests.of("simple", "1")
        series.pending += 2
        for code, seconds in ANSWERS:
            series.answered(code, seconds)

    reference = CollectorRegistry()
    labels = ("model", "version")
    seconds_metric = Histogram(
        "cachefleet_request_seconds", "-", labels, buckets=_LATENCY_BUCKETS_S, registry=reference
    )
    requests_metric = Counter("cachefleet_requests", "-", (*labels, "code"), registry=reference)
    pending = Gauge("cachefleet_queue_pending", "-", labels, registry=reference)
    pending.labels("simple", "1").inc(2)
    for code, seconds in ANSWERS:
        requests_metric.labels("simple", "1", code).inc()
        seconds_metric.labels("simple", "1").observe(seconds)

    names = {
        "cachefleet_requests_total",
        "cachefleet_request_seconds_bucket",
        "cachefleet_request_seconds_count",
        "cachefleet_request_seconds_sum",
        "cachefleet_queue_pending",
    }
    assert _samples(ours.registry, names) == _samples(reference, names)
