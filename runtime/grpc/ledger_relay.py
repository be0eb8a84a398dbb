"""Writes down, on the event loop, the requests the gRPC server's threads answered from the memo.

The request ledger (in-flight counts, Triton's statistics) is the event loop's and takes no
locks, so a thread must not write to it. A thread that answered a request hands the ledger
relay what happened (model, start, time in the cache, end), and the relay writes it down on the
loop: one queue under a lock, and one loop callback per batch (scheduled only when the queue
was empty), so under load many answers share one wake-up of the loop.

The record is handed over before the response is sent, so by the time a client has its answer
the loop has the record queued ahead of anything the client asks next (a statistics call) and
counts it first. The request's duration is the thread's (start to end), not the relay's wait:
its passage opens shifted by that wait. A record of a model that was unloaded meanwhile is
dropped with the model's statistics.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import NamedTuple

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.models.types import Model
from cachefleet.runtime.service import InferenceService
from cachefleet.runtime.service.request_ledger import RequestLedger


class Answered(NamedTuple):
    """A local hit a thread answered: ``perf_counter_ns()`` values."""

    model: Model
    started_ns: int
    confirmed_ns: int
    finished_ns: int


class LedgerRelay:
    """Queues :class:`Answered` records from any thread; writes them down on ``loop``."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, ledger: RequestLedger, service: InferenceService
    ) -> None:
        self._loop = loop
        self._ledger = ledger
        self._service = service
        self._pending: list[Answered] = []
        self._lock = threading.Lock()

    def record(self, answered: Answered) -> None:
        """From any thread: write ``answered`` down soon, on the loop."""
        with self._lock:
            self._pending.append(answered)
            if len(self._pending) > 1:
                return  # a drain is already scheduled
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
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

    def _loaded(self, model: Model) -> bool:
        try:
            return self._service.model(model.name, model.version) is model
        except ServingError:
            return False
