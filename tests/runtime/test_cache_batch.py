"""Redis commands of one event-loop turn share one round trip, against a real Redis; each
caller still gets its own reply or its own error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.processes import RedisProcess

from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.cache.redis_tier import RedisTier
from cachefleet.runtime.cache.writebehind import WriteBehind
from cachefleet.runtime.config import RedisSettings


class CountingTier(RedisTier):
    """The real tier, recording the size of every round trip it makes."""

    def __init__(self, settings: RedisSettings) -> None:
        super().__init__(settings)
        self.round_trips: list[int] = []

    async def _send(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        self.round_trips.append(len(commands))
        return await super()._send(commands)


async def tier_for(redis: RedisProcess) -> CountingTier:
    tier = CountingTier(RedisSettings(url=redis.url))
    await tier.start()
    return tier


@pytest.fixture
async def tier(redis_server: RedisProcess) -> AsyncIterator[CountingTier]:
    made = await tier_for(redis_server)
    yield made
    await made.close()


async def test_concurrent_lookups_share_one_round_trip(tier: CountingTier) -> None:
    await tier.set("k0", b"zero", 60)
    await tier.set("k1", b"one", 0)
    tier.round_trips.clear()

    found = await asyncio.gather(*(tier.get(f"k{index}") for index in range(20)))

    assert found[:2] == [b"zero", b"one"]
    assert found[2:] == [None] * 18
    assert tier.round_trips == [20]
    assert await tier.get("k0") == b"zero"  # a lone lookup is a plain GET
    assert tier.round_trips == [20, 1]


async def fill(tier: RedisTier) -> CacheTierError:
    """Write until Redis, at maxmemory with noeviction, refuses; returns the refusal."""
    for index in range(10_000):
        try:
            await tier.set(f"filler{index}", bytes(64 * 1024), 0)
        except CacheTierError as error:
            return error
    raise AssertionError("Redis never refused a write")


async def test_one_failing_command_fails_only_its_caller(make_redis: Any) -> None:
    redis = make_redis("--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    tier = await tier_for(redis)
    try:
        await tier.set("kept", b"value", 60)
        refused = await fill(tier)
        assert refused.kind == "oom"
        tier.round_trips.clear()

        results = await asyncio.gather(
            tier.get("kept"), tier.set("more", bytes(64 * 1024), 60), return_exceptions=True
        )

        assert tier.round_trips == [2]
        assert results[0] == b"value"
        assert isinstance(results[1], CacheTierError)
        assert results[1].kind == "oom"
    finally:
        await tier.close()


async def test_a_dead_redis_fails_every_caller_of_the_batch(redis_server: RedisProcess) -> None:
    tier = await tier_for(redis_server)
    try:
        redis_server.kill()
        results = await asyncio.gather(
            *(tier.get(f"k{i}") for i in range(5)), return_exceptions=True
        )
        assert all(isinstance(result, CacheTierError) for result in results)
        assert {result.kind for result in results if isinstance(result, CacheTierError)} == {
            "connection"
        }
    finally:
        await tier.close()


async def test_a_cancelled_caller_leaves_the_others_their_replies(tier: CountingTier) -> None:
    await tier.set("k", b"v", 60)
    impatient = asyncio.ensure_future(tier.get("k"))
    patient = asyncio.ensure_future(tier.get("k"))
    await asyncio.sleep(0)
    impatient.cancel()
    assert await patient == b"v"


async def test_one_drain_of_write_behind_inserts_is_one_round_trip(tier: CountingTier) -> None:
    writes = WriteBehind(100)
    for index in range(30):
        assert writes.submit(lambda index=index: tier.set(f"w{index}", b"x", 60))  # type: ignore[misc]
    tier.round_trips.clear()
    await writes.start()
    await writes.join()
    await writes.close()

    assert sum(tier.round_trips) == 30
    assert len(tier.round_trips) <= 4  # one per worker at most, not one per insert
    assert await tier.get("w29") == b"x"
