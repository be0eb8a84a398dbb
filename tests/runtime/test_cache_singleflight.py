"""Single-flight in the caller's own task (work that ``RunsToCompletion``): identical calls
still share one run, a failure reaches all of them, and a leader cancelled before the work ran
leaves the others to start it themselves."""

from __future__ import annotations

import asyncio

import pytest

from cachefleet.runtime.cache.completion import RunsToCompletion
from cachefleet.runtime.cache.singleflight import SingleFlight


class Work:
    """Counts its runs; waits on ``gate`` first (the point where a leader can be cancelled)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.runs = 0
        self.gate = asyncio.Event()
        self.fail = fail

    async def __call__(self) -> str:
        await self.gate.wait()
        self.runs += 1
        if self.fail:
            raise RuntimeError("work failed")
        return "done"


async def test_inline_calls_share_one_run() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work()
    calls = [asyncio.ensure_future(flight.do("k", RunsToCompletion(work))) for _ in range(10)]
    await asyncio.sleep(0)
    assert "k" in flight
    work.gate.set()
    assert await asyncio.gather(*calls) == ["done"] * 10
    assert work.runs == 1
    assert "k" not in flight


async def test_an_inline_failure_reaches_every_caller_and_is_not_kept() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work(fail=True)
    calls = [asyncio.ensure_future(flight.do("k", RunsToCompletion(work))) for _ in range(5)]
    await asyncio.sleep(0)
    work.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(result, RuntimeError) for result in results)
    assert work.runs == 1
    work.fail = False
    assert await flight.do("k", RunsToCompletion(work)) == "done"


async def test_a_cancelled_inline_leader_hands_the_work_to_those_waiting() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work()
    leader = asyncio.ensure_future(flight.do("k", RunsToCompletion(work)))
    await asyncio.sleep(0)
    joiner = asyncio.ensure_future(flight.do("k", RunsToCompletion(work)))
    await asyncio.sleep(0)
    leader.cancel()
    await asyncio.sleep(0)
    work.gate.set()
    assert await joiner == "done"
    assert work.runs == 1
    with pytest.raises(asyncio.CancelledError):
        await leader


async def test_a_cancelled_joiner_leaves_the_leader_alone() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work()
    leader = asyncio.ensure_future(flight.do("k", RunsToCompletion(work)))
    await asyncio.sleep(0)
    joiner = asyncio.ensure_future(flight.do("k", RunsToCompletion(work)))
    await asyncio.sleep(0)
    joiner.cancel()
    work.gate.set()
    assert await leader == "done"
    with pytest.raises(asyncio.CancelledError):
        await joiner


async def test_the_works_type_chooses_the_callers_task_or_one_of_its_own() -> None:
    flight: SingleFlight[object] = SingleFlight()

    async def where() -> object:
        return asyncio.current_task()

    caller = asyncio.current_task()
    assert await flight.do("k", RunsToCompletion(where)) is caller
    assert await flight.do("k", where) is not caller, "ordinary work runs in a task of its own"
