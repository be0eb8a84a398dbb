"""The operator's own Prometheus metrics: what an SRE alerts on.

Reconciles by trigger and result, warnings by reason, durations, handlers in progress, the
periodic passes' backlog and last run, the Kubernetes API requests the operator makes (by verb
and code), whether this replica leads, and each service that is not Ready (with the reason its
Ready condition gives). One registry per process, made on first use (never at import) and
served by ``cachefleet operator --metrics-port``; the chart's PrometheusRule alerts on these
names, and its test checks every name an alert reads against this registry.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Reconciles take from milliseconds (nothing changed) to the API client's timeouts.
_DURATION_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
NOT_READY = "cachefleet_operator_service_not_ready"


class ServiceReadiness(Collector):
    """``cachefleet_operator_service_not_ready{namespace, service, reason}``: 1 for each
    service whose Ready condition is False, with its reason; a Ready or deleted service has
    no series, so the figure stays one series per service that needs someone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: dict[tuple[str, str], str] = {}

    def observe(self, namespace: str, name: str, ready: bool, reason: str) -> None:
        with self._lock:
            if ready:
                self._reasons.pop((namespace, name), None)
            else:
                self._reasons[(namespace, name)] = reason

    def keep_only(self, services: Iterable[tuple[str, str]]) -> None:
        """Forget services not in ``services`` (deleted since their last reconcile)."""
        wanted = set(services)
        with self._lock:
            for key in [k for k in self._reasons if k not in wanted]:
                del self._reasons[key]

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            NOT_READY,
            "1 for each CachedInferenceService whose Ready condition is False, labelled with"
            " the condition's reason (ModelDownloadFailed, PodsRefused, RolloutQueued, ...).",
            labels=("namespace", "service", "reason"),
        )
        with self._lock:
            snapshot = dict(self._reasons)
        for (namespace, name), reason in sorted(snapshot.items()):
            family.add_metric((namespace, name, reason), 1.0)
        yield family


class OperatorMetrics:
    """The operator's metrics, registered in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(
            "cachefleet_operator_reconciles",
            "Reconciles by trigger (create, update, resume, restore, resync) and result (ok,"
            " retry: a transient failure retried later, stalled: the user must act, error: an"
            " unexpected exception).", ("trigger", "result"), registry=r,
        )  # fmt: skip
        self.reconcile_errors = Counter(
            "cachefleet_operator_reconcile_errors",
            "Problems reconciles found, by the reason of their Warning (ApplyFailed,"
            " ConfigSetFailed, InvalidSpec, ReconcileFailed, ...; Exception for an unexpected"
            " one).", ("reason",), registry=r,
        )  # fmt: skip
        self.reconcile_seconds = Histogram(
            "cachefleet_operator_reconcile_seconds",
            "Time of one reconcile, the wait for the service's lock included, by trigger.",
            ("trigger",), buckets=_DURATION_BUCKETS_S, registry=r,
        )  # fmt: skip
        self.in_progress = Gauge(
            "cachefleet_operator_handlers_in_progress",
            "Reconciles running or waiting for their service's lock, by trigger.",
            ("trigger",), registry=r,
        )  # fmt: skip
        self.periodic_pending = Gauge(
            "cachefleet_operator_periodic_pending",
            "Services the running periodic pass (resync, refresh_figures, refresh_served) has"
            " still to visit: the operator's own queue.", ("pass",), registry=r,
        )  # fmt: skip
        self.periodic_last_pass = Gauge(
            "cachefleet_operator_periodic_last_pass_timestamp_seconds",
            "When the last periodic pass of each kind ended (Unix time): a resync that stops"
            " ending means the operator stopped reconciling.", ("pass",), registry=r,
        )  # fmt: skip
        self.periodic_pass_seconds = Gauge(
            "cachefleet_operator_periodic_pass_seconds",
            "How long the last periodic pass of each kind took.", ("pass",), registry=r,
        )  # fmt: skip
        self.kube_requests = Counter(
            "cachefleet_operator_kube_requests",
            "Kubernetes API requests of the operator's reconciles, by verb (get, list, apply,"
            " patch, create, delete) and HTTP code (none: no answer came); kopf's own watches,"
            " status patches and events are not counted.", ("verb", "code"), registry=r,
        )  # fmt: skip
        self.leader = Gauge(
            "cachefleet_operator_leader",
            "1 while this replica runs the handlers (it holds the lease, or runs alone); 0 on a"
            " standby waiting for the lease.", registry=r,
        )  # fmt: skip
        self.readiness = ServiceReadiness()
        r.register(self.readiness)

    @contextlib.contextmanager
    def reconciling(self, trigger: str) -> Iterator[None]:
        """Count a reconcile in progress and time it; an exception is counted as an error."""
        gauge = self.in_progress.labels(trigger)
        gauge.inc()
        began = time.monotonic()
        try:
            yield
        except Exception:
            self.reconciles.labels(trigger, "error").inc()
            self.reconcile_errors.labels("Exception").inc()
            raise
        finally:
            gauge.dec()
            self.reconcile_seconds.labels(trigger).observe(time.monotonic() - began)

    @contextlib.contextmanager
    def periodic_pass(self, name: str, services: int) -> Iterator[Any]:
        """A periodic pass over ``services``; yields the callback that marks one visited."""
        pending = self.periodic_pending.labels(name)
        pending.set(services)
        began = time.monotonic()
        try:
            yield pending.dec
        finally:
            pending.set(0)
            self.periodic_pass_seconds.labels(name).set(time.monotonic() - began)
            self.periodic_last_pass.labels(name).set(time.time())

    def request(self, method: str, content_type: str, query: bool, status: int) -> None:
        """One Kubernetes API request, by the verb the API server would log for it."""
        self.kube_requests.labels(_verb(method, content_type, query), str(status or "none")).inc()


def _verb(method: str, content_type: str, query: bool) -> str:
    if method == "GET":
        return "list" if query else "get"
    if method == "PATCH":
        return "apply" if content_type.startswith("application/apply-patch") else "patch"
    return {"POST": "create", "DELETE": "delete", "PUT": "update"}.get(method, method.lower())


_guard = threading.Lock()
_process: OperatorMetrics | None = None


def process_metrics() -> OperatorMetrics:
    """The process's one set of operator metrics, made on first use.

    One process runs one operator, and its parts are built in places that cannot hand each
    other objects (the command line before kopf starts, kopf's startup handler after), so they
    meet here.
    """
    global _process
    with _guard:
        if _process is None:
            _process = OperatorMetrics()
        return _process


def serve_metrics(port: int, address: str = "0.0.0.0") -> None:
    """Serve the process's metrics at ``http://address:port/metrics`` from a daemon thread."""
    start_http_server(port, address, registry=process_metrics().registry)
