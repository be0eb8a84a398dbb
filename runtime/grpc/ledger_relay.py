"""Writes down, on the event loop, the requests the gRPC server's threads answered from the memo.

The request ledger (in-flight counts, Triton's statistics) is the event loop's and takes no
locks, so a thread must not write to it. A thread that answered a request hands the ledger
relay what happened (model, start, time in the cache, end): one append to a queue under a lock,
and nothing else. The loop is not woken for it: waking it (a write to its self-pipe, its
selector's return, a hand-over of the GIL) cost about a fifth of a memoized hit under load.

The loop pulls the queue instead, in two ways:

- whatever reads what the ledger writes settles it first: the relay is one of the ledger's
  pending sources (``RequestLedger.settle``), which the statistics (HTTP and ``ModelStatistics``)
  and ``/metrics`` call before they read, and model control before it unloads or replaces a
  model. The record is queued before the response is sent, so a client that has its answer and
  then asks for statistics or metrics sees its request counted;
- a periodic drain (every :data:`DRAIN_PERIOD_S` by default, from :meth:`LedgerRelay.start` to
  :meth:`LedgerRelay.stop`, which drains a last time) writes the queue down when nobody reads:
  the queue stays short, and counters scraped by no one trail the answers by at most a period.

The request's duration is the thread's (start to end), not the relay's wait: its passage opens
shifted by that wait. A record of a model that was unloaded or replaced meanwhile (between the
last drain and the swap, which a load does off the loop) is dropped with the model's statistics.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.models.types import Model
from cachefleet.runtime.service import InferenceService
from cachefleet.runtime.service.request_ledger import RequestLedger

#: Seconds between the loop's drains of the queue when nothing reads the ledger.
DRAIN_PERIOD_S = 0.05


class Answered(NamedTuple):
    """A local hit a thread answered: ``perf_counter_ns()`` values."""

    model: Model
    started_ns: int
    confirmed_ns: int
    finished_ns: int


class LedgerRelay:
    """Queues :class:`Answered` records from any thread; writes them down on ``loop``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ledger: RequestLedger,
        service: InferenceService,
        period_s: float = DRAIN_PERIOD_S,
    ) -> None:
        self._loop = loop
        self._period_s = period_s
        self._ledger = ledger
        self._service = service
        self._pending: list[Answered] = []
        self._lock = threading.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._unregister: Callable[[], None] | None = None

    def record(self, answered: Answered) -> None:
        """From any thread: queue ``answered``, to be written down on the loop (see the module)."""
        with self._lock:
            self._pending.append(answered)

    def start(self) -> None:
        """On the loop: become a pending source of the ledger and drain periodically."""
        if self._unregister is None:
            self._unregister = self._ledger.add_pending_source(self.drain)
            self._timer = self._loop.call_later(self._period_s, self._tick)

    def stop(self) -> None:
        """On the loop, once no thread records any more: drain a last time, and leave no timer
        and no pending source behind."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._unregister is not None:
            self._unregister()
            self._unregister = None
        self.drain()

    def drain(self) -> None:
        """On the loop: write down every queued record."""
        if not self._pending:  # a record appended meanwhile is the next drain's
            return
        with self._lock:
            batch, self._pending = self._pending, []
        now_ns = time.perf_counter_ns()
        for model, started_ns, confirmed_ns, finished_ns in batch:
            if not self._loaded(model):
                continue
            passage = self._ledger.open(model, "grpc", started_ns + now_ns - finished_ns)
            passage.cache_status = CacheStatus.HIT_LOCAL
            passage.cache_ns = confirmed_ns - started_ns
            self._ledger.succeeded(passage)

    def _tick(self) -> None:
        self._timer = self._loop.call_later(self._period_s, self._tick)
        self.drain()

    def _loaded(self, model: Model) -> bool:
        try:
            return self._service.model(model.name, model.version) is model
        except ServingError:
            return False
