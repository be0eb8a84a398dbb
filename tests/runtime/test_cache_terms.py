"""Sharing a computation shares only what cannot change another's outcome: a single-flight
leader's error of its own scheduling terms is not handed to those who joined it (they start
over and get their own answers), a content error is; identical requests on other terms never
share a computation, of a whole request or of a row."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from support.cache_doubles import request

from cachefleet.runtime.cache.api import CacheDirectives, CacheRequest, CacheStatus
from cachefleet.runtime.cache.completion import RunsToCompletion
from cachefleet.runtime.cache.local import LocalTier
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.cache.singleflight import SingleFlight
from cachefleet.runtime.cache.terms import OnTerms, flight_key, on_terms, terms_of
from cachefleet.runtime.cache.walk import TierWalk
from cachefleet.runtime.errors import ModelExecutionError, QueueTimeoutError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor


class Gated:
    """Work that waits on ``gate`` (and once more, so that callers can join a run that leads
    in its caller's task), then fails with ``error`` on its first run only."""

    def __init__(self, error: Exception | None = None) -> None:
        self.gate = asyncio.Event()
        self.error = error
        self.runs = 0

    async def __call__(self) -> str:
        await self.gate.wait()
        await asyncio.sleep(0)
        self.runs += 1
        if self.runs == 1 and self.error is not None:
            raise self.error
        return f"run {self.runs}"


async def _leader_and_joiners(wrap: Callable[[Gated], object], error: Exception) -> list[object]:
    flight: SingleFlight[str] = SingleFlight()
    work = Gated(error)
    calls = [asyncio.ensure_future(flight.do("k", wrap(work))) for _ in range(5)]  # type: ignore[arg-type]
    await asyncio.sleep(0)
    work.gate.set()
    return await asyncio.gather(*calls, return_exceptions=True)


async def test_a_leaders_own_terms_error_is_not_handed_to_its_joiners() -> None:
    """In a task of its own and in the leader's task alike: the leader alone gets its queue
    timeout; the four who joined start over, one of them leads, and all get its answer."""
    for wrap in (lambda work: work, RunsToCompletion):
        results = await _leader_and_joiners(wrap, QueueTimeoutError("Request timeout expired"))
        assert isinstance(results[0], QueueTimeoutError)
        assert results[1:] == ["run 2"] * 4


async def test_a_content_error_is_shared() -> None:
    """An error about what the request asks is the same for every identical request."""
    for wrap in (lambda work: work, RunsToCompletion):
        results = await _leader_and_joiners(wrap, ModelExecutionError("the model failed"))
        assert all(isinstance(result, ModelExecutionError) for result in results)


def test_terms_travel_with_the_work_and_the_neutral_ones_leave_it_plain() -> None:
    async def work() -> int:
        return 1

    assert on_terms(work, None) is work
    assert terms_of(work) is None
    marked = on_terms(work, (2, 0.0))
    assert isinstance(marked, OnTerms)
    assert terms_of(marked) == (2, 0.0)
    key = TierWalk.key(request(1))
    assert flight_key(key, None) == key
    assert flight_key(key, (2, 0.0)) != flight_key(key, (1, 0.0)) != key


class Model:
    """Computes held at ``gate``, counting each compute's runs by its terms."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.runs: list[object] = []
        self.rows: list[list[int]] = []

    def compute(self, req: CacheRequest, terms: object) -> Callable[[], Awaitable[list[Tensor]]]:
        async def run() -> list[Tensor]:
            await self.gate.wait()
            self.runs.append(terms)
            return list(req.inputs)

        return on_terms(run, terms)

    def rows_compute(
        self, rows: Sequence[CacheRequest], terms: object
    ) -> Callable[[Sequence[int]], Awaitable[list[list[Tensor]]]]:
        async def run(indices: Sequence[int]) -> list[list[Tensor]]:
            self.rows.append(list(indices))
            await self.gate.wait()
            return [list(rows[index].inputs) for index in indices]

        return on_terms(run, terms)


async def _cache() -> ReadThroughCache:
    cache = ReadThroughCache(RuntimeMetrics(), [LocalTier(max_bytes=1 << 20)])
    await cache.start()
    return cache


async def test_identical_requests_share_a_computation_only_on_the_same_terms() -> None:
    cache, model, directives = await _cache(), Model(), CacheDirectives()
    terms = [None, None, (2, 0.0), (2, 0.0), (1, 0.000001)]
    req = request(7)
    asked = [
        asyncio.ensure_future(cache.get_or_compute(req, directives, model.compute(req, t)))
        for t in terms
    ]
    await asyncio.sleep(0)
    model.gate.set()
    answers = await asyncio.gather(*asked)
    await cache.close()
    assert sorted(model.runs, key=repr) == sorted([None, (2, 0.0), (1, 0.000001)], key=repr)
    assert all(answer.outputs == answers[0].outputs for answer in answers)
    assert {answer.status for answer in answers} == {CacheStatus.MISS}


async def test_rows_are_shared_only_on_the_same_terms() -> None:
    """A batch on other terms than the batch computing a row computes that row itself."""
    cache, model = await _cache(), Model()
    first = [request(1), request(2)]
    second = [request(2), request(3)]
    third = [request(2), request(3)]
    asked = [
        asyncio.ensure_future(cache.get_rows_or_compute(first, model.rows_compute(first, None))),
        asyncio.ensure_future(
            cache.get_rows_or_compute(second, model.rows_compute(second, (2, 0.0)))
        ),
    ]
    for _ in range(3):
        await asyncio.sleep(0)
    # Same terms as ``first``: row 2 is followed, only row 3 is computed.
    asked.append(
        asyncio.ensure_future(cache.get_rows_or_compute(third, model.rows_compute(third, None)))
    )
    for _ in range(3):
        await asyncio.sleep(0)
    model.gate.set()
    answers = await asyncio.gather(*asked)
    await cache.close()
    assert model.rows == [[0, 1], [0, 1], [1]]
    assert [[status for _, status in each] for each in answers] == [[CacheStatus.MISS] * 2] * 3
