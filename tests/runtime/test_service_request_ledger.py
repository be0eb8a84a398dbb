"""The request ledger has one way to be written, from whichever thread answers: the gRPC server's
threads write down the requests they answer from the memo with the same calls the event loop
makes, at the same time as the loop, and nothing is lost; an unload waiting on the loop for the
model's requests is woken by the last one to finish, on whatever thread it finished.

In-process, on the real sample repository and statistics, with no clock: the loop runs in debug
mode, where asyncio refuses a call from another thread that is not thread-safe.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.repository import load_repository
from cachefleet.runtime.models.types import Model, ModelRepository
from cachefleet.runtime.service import InFlight, ModelControl, StatisticsRegistry
from cachefleet.runtime.service.request_ledger import RequestLedger

THREADS = 4
EACH = 2_000


@pytest.fixture
def repository(model_repository: Path) -> ModelRepository:
    return load_repository(model_repository, ModelSettings(execution_provider="cpu"))


@pytest.fixture
def ledger() -> RequestLedger:
    return RequestLedger(RuntimeMetrics(), StatisticsRegistry(), InFlight())


@pytest.fixture
def often_switching() -> Iterator[None]:
    """Threads take turns as often as the interpreter allows: a write that is not atomic loses."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def answered_hit(ledger: RequestLedger, model: Model) -> None:
    """What the gRPC server's thread does for a memoized hit."""
    passage = ledger.open(model, "grpc", time.perf_counter_ns())
    passage.cache_status = CacheStatus.HIT_LOCAL
    passage.cache_ns = 1_000
    ledger.succeeded(passage)


def in_threads(work: Callable[[], None], count: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=work) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


@pytest.mark.usefixtures("often_switching")
async def test_threads_and_the_loop_write_at_once_and_nothing_is_lost(
    repository: ModelRepository, ledger: RequestLedger
) -> None:
    asyncio.get_running_loop().set_debug(True)
    model = repository.get("simple")

    def hits() -> None:
        for _ in range(EACH):
            answered_hit(ledger, model)

    threads = in_threads(hits, THREADS)
    for _ in range(EACH):  # the loop answers requests of the same model meanwhile
        answered_hit(ledger, model)
        await asyncio.sleep(0)
    for thread in threads:
        await asyncio.to_thread(thread.join)

    stats = ledger.statistics.for_version("simple", "1")
    total = (THREADS + 1) * EACH
    assert stats.success.count == total
    assert stats.queue.count == total
    assert stats.cache_hit.count == total
    assert ledger.in_flight.count("simple") == 0


async def test_an_unload_is_woken_by_the_last_request_finishing_on_a_thread(
    repository: ModelRepository, ledger: RequestLedger
) -> None:
    asyncio.get_running_loop().set_debug(True)
    model = repository.get("simple")
    opened = ledger.open(model, "grpc", time.perf_counter_ns())  # a memo hit on a gRPC thread
    with ThreadPoolExecutor(max_workers=1) as loads:
        control = ModelControl(repository, ledger.statistics, ledger.in_flight, "explicit", loads)
        unload = asyncio.create_task(control.unload("simple"))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not unload.done(), "unload returned while a request was still answered"

        opened.cache_status = CacheStatus.HIT_LOCAL
        finishing = threading.Thread(target=ledger.succeeded, args=(opened,))
        finishing.start()
        await asyncio.to_thread(finishing.join)
        await asyncio.wait_for(unload, 10)
    assert ledger.in_flight.count("simple") == 0


def test_a_reloaded_model_version_is_counted_afresh(
    ledger: RequestLedger, repository: ModelRepository
) -> None:
    """The ledger binds each model version's figures once; when the statistics are dropped (an
    unload or a reload), the next request binds the new ones: its statistics start from zero,
    as in Triton, while the request metrics, which outlive a reload, keep counting."""
    model = repository.get("simple")
    answered_hit(ledger, model)
    before = ledger.statistics.for_version(model.name, model.version)
    assert before.success.count == 1

    ledger.statistics.forget(model.name)
    answered_hit(ledger, model)
    answered_hit(ledger, model)
    after = ledger.statistics.for_version(model.name, model.version)
    assert after is not before
    assert (before.success.count, after.success.count, after.cache_hit.count) == (1, 2, 2)
    with ledger._lock:
        assert ledger._requests.of(model.name, model.version).codes == {"200": 3}
