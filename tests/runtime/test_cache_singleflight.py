"""Single-flight in the caller's own task (``inline``): identical calls still share one run,
a failure reaches all of them, and a leader cancelled before the work ran leaves the others
to start it themselves."""

from __future__ import annotations

import asyncio

import pytest

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
    calls = [asyncio.ensure_future(flight.do("k", work, inline=True)) for _ in range(10)]
    await asyncio.sleep(0)
    assert "k" in flight
    work.gate.set()
    assert await asyncio.gather(*calls) == ["done"] * 10
    assert work.runs == 1
    assert "k" not in flight


async def test_an_inline_failure_reaches_every_caller_and_is_not_kept() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work(fail=True)
    calls = [asyncio.ensure_future(flight.do("k", work, inline=True)) for _ in range(5)]
    await asyncio.sleep(0)
    work.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(result, RuntimeError) for result in results)
    assert work.runs == 1
    work.fail = False
    assert await flight.do("k", work, inline=True) == "done"


async def test_a_cancelled_inline_leader_hands_the_work_to_those_waiting() -> None:
    flight: SingleFlight[str] = SingleFlight()
    work = Work()
    leader = asyncio.ensure_future(flight.do("k", work, inline=True))
    await asyncio.sleep(0)
    joiner = asyncio.ensure_future(flight.do("k", work, inline=True))
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
    leader = asyncio.ensure_future(flight.do("k", work, inline=True))
    await asyncio.sleep(0)
    joiner = asyncio.ensure_future(flight.do("k", work, inline=True))
    await asyncio.sleep(0)
    joiner.cancel()
    work.gate.set()
    assert await leader == "done"
    with pytest.raises(asyncio.CancelledError):
        await joiner
