"""Every Prometheus metric the runtime exports, in one registry per server.

Names are a contract (design section 7). A registry is made per app, not at import, so tests
and several apps in one process never share counters. Triton's per-model cache counters are
exported under Triton's own names (no ``_total`` suffix), so existing Triton dashboards work;
so are Triton's inference counters (``nv_inference_*``).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

_LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
#: The ``le`` labels of those bounds, as prometheus-client writes them, and ``+Inf``.
_LATENCY_BUCKET_LABELS = (*(repr(bound) for bound in _LATENCY_BUCKETS_S), "+Inf")
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128)
_MODEL = ("model", "version")


class TritonCounters(Collector):
    """Counters under Triton's own names (no ``_total`` suffix), kept in plain floats behind
    one lock; labels ``model`` and ``version``."""

    #: name -> help text, set by each subclass.
    NAMES: dict[str, str] = {}

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[tuple[str, str], float]] = {
            name: defaultdict(float) for name in self.NAMES
        }

    def add(self, name: str, model: str, version: str, amount: float = 1.0) -> None:
        with self._lock:
            self._values[name][(model, version)] += amount

    def value(self, name: str, model: str, version: str) -> float:
        with self._lock:
            return self._values[name].get((model, version), 0.0)

    def _snapshot(self) -> dict[str, dict[tuple[str, str], float]]:
        """Every series' values now, by name: what :meth:`collect` exports."""
        with self._lock:
            return {name: dict(values) for name, values in self._values.items()}

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot()
        for name, documentation in self.NAMES.items():
            family = Metric(name, documentation, "counter")
            for (model, version), value in snapshot[name].items():
                family.add_sample(name, {"model": model, "version": version}, value)
            yield family


class TritonCacheCounters(TritonCounters):
    """Triton's ``nv_cache_*_per_model`` counters."""

    NAMES = {
        "nv_cache_num_hits_per_model": "Number of response cache hits per model",
        "nv_cache_num_misses_per_model": "Number of response cache misses per model",
        "nv_cache_hit_duration_per_model": "Cumulative time spent on cache hits, microseconds",
        "nv_cache_miss_duration_per_model": "Cumulative time spent on cache misses, microseconds",
    }

    def __init__(self) -> None:
        super().__init__()
        values = self._values
        self._hit_series = (
            values["nv_cache_num_hits_per_model"],
            values["nv_cache_hit_duration_per_model"],
        )
        self._miss_series = (
            values["nv_cache_num_misses_per_model"],
            values["nv_cache_miss_duration_per_model"],
        )

    def record(self, model: str, version: str, *, hit: bool, duration_s: float) -> None:
        # The two series of each kind, looked up without building their names per call.
        counts, durations = self._hit_series if hit else self._miss_series
        labels = (model, version)
        with self._lock:
            counts[labels] += 1
            durations[labels] += duration_s * 1e6


class TritonInferenceCounters(TritonCounters):
    """Triton's inference counters: requests (cache hits included, as in Triton), and the rows
    and executions the model ran (fewer executions than requests when batching merges them)."""

    SUCCESS = "nv_inference_request_success"
    FAILURE = "nv_inference_request_failure"
    COUNT = "nv_inference_count"
    EXEC_COUNT = "nv_inference_exec_count"
    NAMES = {
        SUCCESS: "Number of successful inference requests, all batch sizes",
        FAILURE: "Number of failed inference requests, all batch sizes",
        COUNT: "Number of inferences performed (rows; cache hits not included)",
        EXEC_COUNT: "Number of model executions performed (cache hits not included)",
    }

    def __init__(self, requests: RequestCounters) -> None:
        super().__init__()
        #: Where the request outcomes are counted (by HTTP status): Triton's success and
        #: failure counts are read from them at scrape, so a request writes them once.
        self._requests = requests

    def executed(self, model: str, version: str, rows: int) -> None:
        with self._lock:
            self._values[self.COUNT][(model, version)] += rows
            self._values[self.EXEC_COUNT][(model, version)] += 1

    def _snapshot(self) -> dict[str, dict[tuple[str, str], float]]:
        outcomes = self._requests.outcomes()
        derived = {
            name: {
                labels: float(counts[kind]) for labels, counts in outcomes.items() if counts[kind]
            }
            for name, kind in ((self.SUCCESS, 0), (self.FAILURE, 1))
        }
        return {**super()._snapshot(), **derived}


class RequestSeries:
    """One model version's request figures, as plain numbers (see :class:`RequestCounters`)."""

    __slots__ = ("buckets", "codes", "pending", "seconds")

    def __init__(self) -> None:
        #: Requests accepted and not yet answered.
        self.pending = 0
        #: Answered requests by HTTP status code.
        self.codes: dict[str, int] = {}
        #: Requests per latency bucket (the last one past every bound), and their total time.
        self.buckets = [0] * (len(_LATENCY_BUCKETS_S) + 1)
        self.seconds = 0.0

    def answered(self, code: str, seconds: float) -> None:
        """One request answered with ``code`` after ``seconds``."""
        self.codes[code] = self.codes.get(code, 0) + 1
        self.buckets[bisect_left(_LATENCY_BUCKETS_S, seconds)] += 1
        self.seconds += seconds


class RequestCounters(Collector):
    """``cachefleet_requests_total``, ``cachefleet_request_seconds`` and
    ``cachefleet_queue_pending``, kept in plain numbers and turned into metrics at scrape.

    Why not prometheus-client's own metric objects: every request writes all three, and each of
    those takes a lock of its own per increment (five per request, a few microseconds in all on
    a path whose whole budget for a cache hit is tens of them). The request ledger writes these
    under the one lock it holds anyway (:attr:`lock`), and a scrape reads them under it.
    """

    REQUESTS = "cachefleet_requests"
    SECONDS = "cachefleet_request_seconds"
    PENDING = "cachefleet_queue_pending"
    #: name -> (type, help, labels), in the order :meth:`collect` yields them (the metrics
    #: reference reads them too).
    FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
        REQUESTS: ("counter", "Inference requests by model and HTTP status.", (*_MODEL, "code")),
        SECONDS: ("histogram", "Inference request latency, end to end, by model.", _MODEL),
        PENDING: (
            "gauge",
            "Inference requests accepted and not yet answered (in a cache lookup, waiting for"
            " the model or a batch, or running), by model: what autoscaling on queue reads.",
            _MODEL,
        ),
    }

    def __init__(self) -> None:
        #: Held by every write (the request ledger's lock) and by :meth:`collect`.
        self.lock = threading.Lock()
        self._series: dict[tuple[str, str], RequestSeries] = {}

    def of(self, model: str, version: str) -> RequestSeries:
        """The figures of one model version, made on first use (under :attr:`lock`)."""
        key = (model, version)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = RequestSeries()
        return series

    def outcomes(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Per model version, the requests answered 200 and those answered anything else."""
        with self.lock:
            answered = [(labels, dict(series.codes)) for labels, series in self._series.items()]
        return {
            labels: (codes.get("200", 0), sum(codes.values()) - codes.get("200", 0))
            for labels, codes in answered
        }

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            rows = [
                (labels, s.pending, dict(s.codes), list(s.buckets), s.seconds)
                for labels, s in self._series.items()
            ]
        (_, requests_help, request_labels), (_, seconds_help, _), (_, pending_help, _) = (
            self.FAMILIES.values()
        )
        requests = CounterMetricFamily(self.REQUESTS, requests_help, labels=request_labels)
        seconds = HistogramMetricFamily(self.SECONDS, seconds_help, labels=_MODEL)
        pending = GaugeMetricFamily(self.PENDING, pending_help, labels=_MODEL)
        for labels, in_flight, codes, buckets, total_s in rows:
            for code, count in codes.items():
                requests.add_metric([*labels, code], count)
            seconds.add_metric(list(labels), _cumulative(buckets), total_s)
            pending.add_metric(list(labels), in_flight)
        yield requests
        yield seconds
        yield pending


def _cumulative(buckets: list[int]) -> list[tuple[str, int]]:
    """Per-bucket counts (the last past every bound) as a histogram's cumulative ``le`` pairs."""
    cumulative, running = [], 0
    for bound, count in zip(_LATENCY_BUCKET_LABELS, buckets, strict=True):
        running += count
        cumulative.append((bound, running))
    return cumulative


class PlainCounter:
    """One labelled counter as a plain number under its family's one lock: what a
    prometheus-client child's ``inc`` does, without a lock object per child."""

    __slots__ = ("_lock", "value")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value += amount


class PlainHistogram:
    """One labelled latency histogram (the ``_LATENCY_BUCKETS_S`` bounds) as plain numbers
    under its family's one lock. prometheus-client's ``observe`` walks the bounds in Python and
    takes a lock per bucket and one for the sum; this is one bisection and one lock."""

    __slots__ = ("_lock", "buckets", "sum")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        #: Observations per bucket, the last one past every bound.
        self.buckets = [0] * (len(_LATENCY_BUCKETS_S) + 1)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        with self._lock:
            self.buckets[bisect_left(_LATENCY_BUCKETS_S, amount)] += 1
            self.sum += amount


_Child = TypeVar("_Child", PlainCounter, PlainHistogram)


class CacheLookupCounters(Collector):
    """``cachefleet_cache_hits_total`` and ``cachefleet_cache_lookup_seconds``, by model,
    version and tier, kept in plain numbers (:class:`PlainCounter`, :class:`PlainHistogram`)
    and turned into metrics at scrape.

    Why: every cache hit writes both, the local ones among the cheapest answers the server
    gives; prometheus-client's children cost about 3 microseconds for the pair (a lock per
    bucket walked), these a fraction of one. Children are made when a model version is first
    bound (``cache.metrics``) and exported from then on, zero or not, as prometheus-client
    exports a labelled child."""

    HITS = "cachefleet_cache_hits"
    LOOKUP = "cachefleet_cache_lookup_seconds"
    #: name -> (type, help, labels), as :attr:`RequestCounters.FAMILIES`.
    FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
        HITS: ("counter", "Response cache hits.", (*_MODEL, "tier")),
        LOOKUP: ("histogram", "Time to look a request up, by tier.", (*_MODEL, "tier")),
    }

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._hits: dict[tuple[str, str, str], PlainCounter] = {}
        self._lookups: dict[tuple[str, str, str], PlainHistogram] = {}

    def hits(self, model: str, version: str, tier: str) -> PlainCounter:
        """The hit counter of one model version's tier, made on first use."""
        return self._child(self._hits, (model, version, tier), PlainCounter)

    def lookup(self, model: str, version: str, tier: str) -> PlainHistogram:
        """The lookup-time histogram of one model version's tier, made on first use."""
        return self._child(self._lookups, (model, version, tier), PlainHistogram)

    def _child(
        self,
        children: dict[tuple[str, str, str], _Child],
        labels: tuple[str, str, str],
        make: Callable[[threading.Lock], _Child],
    ) -> _Child:
        with self.lock:
            made = children.get(labels)
            if made is None:
                made = children[labels] = make(self.lock)
            return made

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            hits = [(labels, counter.value) for labels, counter in self._hits.items()]
            lookups = [
                (labels, list(each.buckets), each.sum) for labels, each in self._lookups.items()
            ]
        (_, hits_help, labels), (_, lookup_help, _) = self.FAMILIES.values()
        hit_family = CounterMetricFamily(self.HITS, hits_help, labels=labels)
        for names, value in hits:
            hit_family.add_metric(list(names), value)
        lookup_family = HistogramMetricFamily(self.LOOKUP, lookup_help, labels=labels)
        for names, buckets, total_s in lookups:
            lookup_family.add_metric(list(names), _cumulative(buckets), total_s)
        yield hit_family
        yield lookup_family


class RuntimeMetrics:
    """The runtime's metrics, registered in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        #: ``cachefleet_requests_total``, ``_request_seconds`` and ``_queue_pending``.
        self.requests = RequestCounters()
        r.register(self.requests)
        self.inference_seconds = Histogram(
            "cachefleet_inference_seconds", "Model execution time (cache misses only).",
            _MODEL, buckets=_LATENCY_BUCKETS_S, registry=r,
        )  # fmt: skip
        #: ``cachefleet_cache_hits_total`` and ``cachefleet_cache_lookup_seconds``.
        self.cache_lookups = CacheLookupCounters()
        r.register(self.cache_lookups)
        self.cache_misses = Counter(
            "cachefleet_cache_misses", "Response cache misses (model executed).", _MODEL, registry=r
        )
        self.cache_bypass = Counter(
            "cachefleet_cache_bypass", "Requests that skipped the cache lookup.", _MODEL, registry=r
        )
        self.cache_coalesced = Counter(
            "cachefleet_cache_coalesced",
            "Requests answered by an identical request already in flight (single-flight): the"
            " model or Redis was asked once for all of them.", _MODEL, registry=r,
        )  # fmt: skip
        self.cache_inserts = Counter(
            "cachefleet_cache_inserts", "Entries written to a tier.", (*_MODEL, "tier"), registry=r
        )
        self.cache_insert_dropped = Counter(
            "cachefleet_cache_insert_dropped",
            "Inserts dropped because the write-behind queue was full.", _MODEL, registry=r,
        )  # fmt: skip
        self.cache_errors = Counter(
            "cachefleet_cache_errors",
            "Cache faults by tier and kind (timeout, connection, oom, corrupt, ...).",
            ("tier", "kind"), registry=r,
        )  # fmt: skip
        self.cache_local_bytes = Gauge(
            "cachefleet_cache_local_bytes", "Bytes held by the in-process tier.", registry=r
        )
        self.redis_circuit_open = Gauge(
            "cachefleet_redis_circuit_open",
            "1 while the Redis circuit breaker is open.",
            registry=r,
        )
        #: Read at each scrape from the upstream's breaker (``watch_upstream_breaker``); 0 when
        #: there is no upstream.
        self.upstream_circuit_open = Gauge(
            "cachefleet_upstream_circuit_open",
            "1 while the upstream's circuit breaker is open: misses are refused at once (503 /"
            " UNAVAILABLE) but for one probe per breaker_reset_s.",
            registry=r,
        )
        self.cache_row_hits = Counter(
            "cachefleet_cache_row_hits", "Rows of batched requests answered by the row cache.",
            (*_MODEL, "tier"), registry=r,
        )  # fmt: skip
        self.cache_row_misses = Counter(
            "cachefleet_cache_row_misses",
            "Rows of batched requests the row cache did not hold, run by the request that missed"
            " them.",
            _MODEL, registry=r,
        )  # fmt: skip
        self.cache_row_coalesced = Counter(
            "cachefleet_cache_row_coalesced",
            "Rows of batched requests answered by the computation of the same row already in"
            " flight (another request's, or an earlier row of the same batch).", _MODEL,
            registry=r,
        )  # fmt: skip
        self.batch_size = Histogram(
            "cachefleet_inference_batch_size",
            "Rows per model execution (dynamic batching merges requests into one execution).",
            _MODEL, buckets=_BATCH_BUCKETS, registry=r,
        )  # fmt: skip
        self.pending_requests = Gauge(
            "nv_inference_pending_request_count",
            "Requests waiting in the dynamic batcher's queue (Triton's name).",
            _MODEL, registry=r,
        )  # fmt: skip
        self.cache_fleet_waits = Counter(
            "cachefleet_cache_fleet_waits",
            "Misses that waited for another replica's answer, by how the wait ended: filled"
            " (answered from Redis), lead (the lease came free: computed here), deadline or"
            " error (computed here).",
            (*_MODEL, "result"), registry=r,
        )  # fmt: skip
        self.cache_fleet_leases = Counter(
            "cachefleet_cache_fleet_leases",
            "Fleet leases taken: misses computed here while other replicas waited.",
            _MODEL, registry=r,
        )  # fmt: skip
        self.triton = TritonCacheCounters()
        r.register(self.triton)
        self.inference = TritonInferenceCounters(self.requests)
        r.register(self.inference)
