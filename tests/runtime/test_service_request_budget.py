"""The request budget: a count and bytes in flight; over the bytes a request waits, then 503."""

from __future__ import annotations

import asyncio

import pytest

from cachefleet.runtime.errors import OverloadedError, PayloadTooLargeError
from cachefleet.runtime.service.request_budget import JSON_EXPANSION, RequestBudget, body_cost


def test_body_cost_counts_the_body_its_tensors_and_the_json_decode() -> None:
    assert body_cost(1000, None) == 1000 + JSON_EXPANSION * 1000
    assert body_cost(1000, 100) == 1000 + 900 + JSON_EXPANSION * 100


def test_requests_over_the_count_are_refused_at_once() -> None:
    budget = RequestBudget(max_requests=2, max_bytes=100)
    assert budget.try_enter(10)
    assert budget.try_enter(10)
    with pytest.raises(OverloadedError, match="max-requests-in-flight"):
        budget.try_enter(10)
    budget.leave(10)
    assert budget.try_enter(10)


def test_a_request_over_the_bytes_waits_for_room() -> None:
    async def scenario() -> None:
        budget = RequestBudget(max_requests=10, max_bytes=100, wait_s=5)
        assert budget.try_enter(80)
        assert not budget.try_enter(50)
        waiting = asyncio.create_task(budget.wait(50))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        budget.leave(80)
        await asyncio.wait_for(waiting, 1)
        assert (budget.requests, budget.bytes) == (1, 50)

    asyncio.run(scenario())


def test_a_request_that_waits_too_long_is_refused_and_leaves() -> None:
    async def scenario() -> None:
        budget = RequestBudget(max_requests=10, max_bytes=100, wait_s=0.1)
        assert budget.try_enter(100)
        assert not budget.try_enter(1)
        with pytest.raises(OverloadedError, match="max-inflight-bytes"):
            await budget.wait(1)
        assert (budget.requests, budget.bytes) == (1, 100)

    asyncio.run(scenario())


def test_a_request_takes_more_bytes_as_it_needs_them() -> None:
    async def scenario() -> None:
        budget = RequestBudget(max_requests=10, max_bytes=100, wait_s=5)
        assert budget.try_enter(30)
        assert budget.try_enter(30)
        assert budget.try_take(40)  # the first grows: 100 of 100
        assert not budget.try_take(10)  # the second must wait for room
        growing = asyncio.create_task(budget.take(10))
        await asyncio.sleep(0.05)
        assert not growing.done()
        budget.leave(70)  # the first is done
        await asyncio.wait_for(growing, 1)
        assert (budget.requests, budget.bytes) == (1, 40)

    asyncio.run(scenario())


def test_a_request_that_waits_too_long_to_grow_keeps_what_it_took() -> None:
    async def scenario() -> None:
        budget = RequestBudget(max_requests=10, max_bytes=100, wait_s=0.1)
        assert budget.try_enter(60)
        assert budget.try_enter(30)
        with pytest.raises(OverloadedError, match="max-inflight-bytes"):
            await budget.take(20)
        assert (budget.requests, budget.bytes) == (2, 90)
        budget.leave(30)
        assert (budget.requests, budget.bytes) == (1, 60)

    asyncio.run(scenario())


def test_a_request_larger_than_the_whole_budget_is_refused_and_counts_nothing() -> None:
    """No request holds the whole budget alone (a gRPC message is whole before it is counted;
    HTTP bodies are refused from their heads, ``http.body_charge``): 413, not a lone run."""
    budget = RequestBudget(max_requests=10, max_bytes=100)
    with pytest.raises(PayloadTooLargeError, match="max-inflight-bytes"):
        budget.try_enter(101)
    assert (budget.requests, budget.bytes) == (0, 0)
    assert budget.try_enter(100)
    assert not budget.try_enter(1)


def test_the_loop_and_the_grpc_threads_share_one_count_and_one_budget() -> None:
    async def scenario() -> None:
        budget = RequestBudget(max_requests=2, max_bytes=100, wait_s=30)
        assert await asyncio.to_thread(budget.enter_from_thread, 80)  # a gRPC memo hit
        assert (budget.requests, budget.bytes) == (1, 80)
        assert not budget.try_enter(50)  # a place, but not the bytes: it waits
        with pytest.raises(OverloadedError, match="max-requests-in-flight"):
            budget.try_enter(0)
        with pytest.raises(OverloadedError, match="max-requests-in-flight"):
            await asyncio.to_thread(budget.enter_from_thread, 0)
        waiting = asyncio.create_task(budget.wait(50))
        await asyncio.sleep(0)
        assert not waiting.done()
        # The thread's hit is done: room freed off the loop wakes the waiter on it.
        await asyncio.to_thread(budget.leave_from_thread, 80)
        await asyncio.wait_for(waiting, 20)  # well before its 30 s wait would end
        assert (budget.requests, budget.bytes) == (1, 50)
        assert not await asyncio.to_thread(budget.enter_from_thread, 60)  # nothing counted
        assert (budget.requests, budget.bytes) == (1, 50)
        budget.leave(50)
        assert (budget.requests, budget.bytes) == (0, 0)

    asyncio.run(scenario())


def test_the_loop_and_threads_entering_together_never_pass_the_limit() -> None:
    budget = RequestBudget(max_requests=3, max_bytes=1 << 30)
    seen: list[int] = []

    def hits() -> None:
        for _ in range(20_000):
            try:
                entered = budget.enter_from_thread(1)
            except OverloadedError:
                continue
            if entered:
                seen.append(budget.requests)
                budget.leave_from_thread(1)

    async def scenario() -> None:
        threads = [asyncio.create_task(asyncio.to_thread(hits)) for _ in range(3)]
        while not all(thread.done() for thread in threads):
            try:
                budget.try_enter(1)
            except OverloadedError:
                await asyncio.sleep(0)
                continue
            seen.append(budget.requests)
            budget.leave(1)
            await asyncio.sleep(0)
        await asyncio.gather(*threads)

    asyncio.run(scenario())
    assert seen
    assert max(seen) <= 3
    assert (budget.requests, budget.bytes) == (0, 0)
