"""The request ledger: the one place a request's passage through the server is written down.

Every way a request is answered is written down here, and only here: the service's answer
(:meth:`RequestLedger.accounted`) and a memoized answer (:meth:`RequestLedger.memo_hit`), each
opening a :class:`Passage` when its model is resolved and closing it with
:meth:`~RequestLedger.succeeded` or :meth:`~RequestLedger.failed`; the ledger alone counts, so
every path reports the same:

- in flight: the model's count (``in_flight``), which an unload waits on, and the gauge
  ``cachefleet_queue_pending`` (what autoscaling on ``queue`` reads);
- metrics: ``cachefleet_requests_total{code}`` and ``cachefleet_request_seconds`` (Triton's
  ``nv_inference_request_success`` / ``_failure`` are read from the codes at scrape);
- statistics (Triton's extension, see ``statistics``): ``success`` (and ``queue.count``, cache
  hits included) or ``fail`` with the request's duration, and ``cache_hit`` (the lookup's time)
  or ``cache_miss`` (the cache's time minus the model's) from the passage's cache outcome. Model
  executions are recorded by the scheduler, once per execution, as ``compute_*``.

A passage knows the model, version, transport, cache outcome, and its time in the cache and in
(or waiting for) model executions: what anything that follows requests (a tracer) needs, at the
two calls every request makes. The request metrics are plain numbers
(``metrics.RequestCounters``) written under the ledger's one lock and read at scrape, so a
request pays a few additions, not a metric object's lock per increment.

The ledger has one way to be written, whichever thread answers: the event loop (HTTP, and
every gRPC call the service answers) or one of the gRPC server's threads (a repeated
``ModelInfer`` answered from the memo) opens a passage and closes it before its answer is
sent, so a client that has its answer and then reads statistics or ``/metrics`` sees its
request counted. Each write holds one lock for its few increments (measured at well under a
microsecond uncontended: see
``bench/results/2026-11-28-grpc-server.md``); a scrape copies the request figures under it,
and reads of the statistics take none and see every write that finished.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.metrics import RequestSeries, RuntimeMetrics
from cachefleet.runtime.models.types import Model
from cachefleet.runtime.service.in_flight import InFlight
from cachefleet.runtime.service.statistics import ModelStatistics, StatisticsRegistry

Outcome = TypeVar("Outcome")
Entry = TypeVar("Entry")
_MISSES = (CacheStatus.MISS, CacheStatus.PARTIAL)


class _Figures:
    """What a request of one model version writes, bound once: its request figures and its
    statistics (looked up by name and version for every request, they cost more than the
    writes). Bound again when the statistics are dropped (an unload or reload)."""

    __slots__ = ("name", "series", "stats")

    def __init__(self, name: str, series: RequestSeries, stats: ModelStatistics) -> None:
        self.name = name
        self.series = series
        self.stats = stats


@dataclass(slots=True)
class Passage:
    """One request from its model's resolution to its answer."""

    model: Model
    #: ``"http"`` or ``"grpc"``.
    transport: str
    #: ``time.perf_counter_ns()`` when the request started (its body in).
    started_ns: int
    #: Its model version's figures, bound when it opened.
    figures: _Figures
    #: How the cache answered; None until it did (or when the request failed before).
    cache_status: CacheStatus | None = None
    #: Nanoseconds in the cache's ``get_or_compute`` (the model's run included).
    cache_ns: int = 0
    #: Nanoseconds waiting for and in model executions (0 for a hit).
    model_ns: int = 0


class RequestLedger:
    """Opens and closes every request's :class:`Passage` (see the module)."""

    def __init__(
        self, metrics: RuntimeMetrics, statistics: StatisticsRegistry, in_flight: InFlight
    ) -> None:
        self.statistics = statistics
        self.in_flight = in_flight
        self._requests = metrics.requests
        #: Held by each write: requests are written down from the loop and the gRPC threads.
        #: It is the request figures' own lock, so their few numbers need no other.
        self._lock = metrics.requests.lock
        self._bound: dict[tuple[str, str], _Figures] = {}

    async def accounted(
        self,
        model: Model,
        transport: str,
        started_ns: int,
        work: Callable[[Passage], Awaitable[Outcome]],
    ) -> Outcome:
        """Run ``work`` for the resolved ``model`` in a passage, which counts its success or
        failure and holds the model loaded while it runs. Call it right after resolving the
        model: it opens the passage before its first await."""
        passage = self.open(model, transport, started_ns)
        try:
            outcome = await work(passage)
        except ServingError as error:
            self.failed(passage, error)
            raise
        except BaseException:
            self.abandoned(passage)
            raise
        self.succeeded(passage)
        return outcome

    def memo_hit(
        self,
        model: Model,
        transport: str,
        started_ns: int,
        confirm: Callable[[Entry, int], int | None],
        entry: Entry,
        status: CacheStatus,
    ) -> bool:
        """Write down an answer from the memo, rendered for ``model``, on whichever thread
        serves it: in flight first (so that an unload waits for it), then ``confirm(entry,
        started_ns)`` (its model still resolves to ``model`` and its local entry lives: the
        ``perf_counter_ns()`` it confirmed at, else None; a callable bound once and its
        argument, so that a hit makes no closure); a local hit, counted, or stale and closed
        uncounted (False: the request takes the service's path, which counts it). ``status``:
        how the cache answered the request the entry was kept for (``MemoEntry.status``),
        which the counts here do not read (``confirm`` counts the hit of the entry it
        confirms) and a tracing ledger annotates."""
        # open() and succeeded() without a Passage to carry between them: a hit is the
        # cheapest answer there is, and these few lines are most of what it costs.
        lock = self._lock
        with lock:
            figures = self._figures(model)
            self.in_flight.enter(figures.name)
            series = figures.series
            series.pending += 1
        confirmed_ns = confirm(entry, started_ns)
        if confirmed_ns is None:
            with lock:
                self.in_flight.leave(figures.name)
                series.pending -= 1
            return False
        elapsed_ns = time.perf_counter_ns() - started_ns
        with lock:
            self.in_flight.leave(figures.name)
            series.pending -= 1
            series.answered("200", elapsed_ns / 1e9)
            stats = figures.stats
            stats.record_success(elapsed_ns)
            stats.record_cache_hit(confirmed_ns - started_ns)
        return True

    def open(self, model: Model, transport: str, started_ns: int) -> Passage:
        """Start a request's passage: it is in flight until closed. No await may come between
        the model's resolution and this call, or an unload could slip between them (off the
        loop: open first, then check that the model still resolves to ``model``)."""
        with self._lock:
            figures = self._figures(model)
            self.in_flight.enter(figures.name)
            figures.series.pending += 1
        return Passage(model, transport, started_ns, figures)

    def succeeded(self, passage: Passage) -> int:
        """Close an answered request; returns the ``perf_counter_ns()`` it closed at."""
        now_ns = time.perf_counter_ns()
        elapsed_ns = now_ns - passage.started_ns
        status = passage.cache_status
        figures = passage.figures
        with self._lock:
            self.in_flight.leave(figures.name)
            series = figures.series
            series.pending -= 1
            series.answered("200", elapsed_ns / 1e9)
            stats = figures.stats
            stats.record_success(elapsed_ns)
            if status is not None and status.is_hit:  # of any tier: ``hit-<tier>``
                stats.record_cache_hit(passage.cache_ns)
            elif status in _MISSES:
                stats.record_cache_miss(passage.cache_ns - passage.model_ns)
        return now_ns

    def failed(self, passage: Passage, error: ServingError) -> None:
        """Close a refused or failed request."""
        elapsed_ns = time.perf_counter_ns() - passage.started_ns
        code = str(error.status_code)
        figures = passage.figures
        with self._lock:
            self.in_flight.leave(figures.name)
            figures.series.pending -= 1
            figures.series.answered(code, elapsed_ns / 1e9)
            figures.stats.record_failure(elapsed_ns)

    def abandoned(self, passage: Passage) -> None:
        """Close a request that neither succeeded nor was refused (cancelled, or a bug, which
        the transport reports): no longer in flight, counted nowhere."""
        with self._lock:
            self.in_flight.leave(passage.figures.name)
            passage.figures.series.pending -= 1

    def _figures(self, model: Model) -> _Figures:
        """``model``'s figures (under the lock), bound on first use and after its statistics
        were dropped."""
        key = (model.name, model.version)
        figures = self._bound.get(key)
        if figures is None or figures.stats.retired:
            stats = self.statistics.for_version(*key)
            figures = self._bound[key] = _Figures(key[0], self._requests.of(*key), stats)
        return figures
