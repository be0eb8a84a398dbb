"""The request and cache-lookup metrics the runtime writes as plain numbers read exactly as
prometheus-client's own Counter, Histogram and Gauge would have read for the same requests
(names, labels, bucket bounds and values), so dashboards, alerts and autoscaling queries see no
difference; and Triton's request counters, read from the request codes, count as before."""

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


def test_cache_lookup_figures_read_as_prometheus_client_metrics_would() -> None:
    ours = RuntimeMetrics()
    lookups = [("local", 0.00002, True), ("local", 0.0004, False), ("redis", 0.003, True)]
    for tier, seconds, hit in lookups:
        ours.cache_lookups.lookup("simple", "1", tier).observe(seconds)
        if hit:
            ours.cache_lookups.hits("simple", "1", tier).inc()
    ours.cache_lookups.hits("simple", "1", "memo")  # bound and never hit: exported as 0

    reference = CollectorRegistry()
    labels = ("model", "version", "tier")
    hits = Counter("cachefleet_cache_hits", "-", labels, registry=reference)
    seconds_metric = Histogram(
        "cachefleet_cache_lookup_seconds", "-", labels, buckets=_LATENCY_BUCKETS_S,
        registry=reference,
    )  # fmt: skip
    for tier, seconds, hit in lookups:
        seconds_metric.labels("simple", "1", tier).observe(seconds)
        if hit:
            hits.labels("simple", "1", tier).inc()
    hits.labels("simple", "1", "memo")

    names = {
        "cachefleet_cache_hits_total",
        "cachefleet_cache_lookup_seconds_bucket",
        "cachefleet_cache_lookup_seconds_count",
        "cachefleet_cache_lookup_seconds_sum",
    }
    assert _samples(ours.registry, names) == _samples(reference, names)


def test_tritons_request_counters_are_the_request_codes() -> None:
    ours = RuntimeMetrics()
    with ours.requests.lock:
        for code, seconds in ANSWERS:
            ours.requests.of("simple", "1").answered(code, seconds)
        ours.requests.of("idle", "1").pending += 1  # none answered: no Triton sample
    samples = _samples(
        ours.registry, {"nv_inference_request_success", "nv_inference_request_failure"}
    )
    model = (("model", "simple"), ("version", "1"))
    assert samples == {
        ("nv_inference_request_success", model, 4.0),
        ("nv_inference_request_failure", model, 1.0),
    }
