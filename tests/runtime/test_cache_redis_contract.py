"""One contract for the Redis tier's commands, run over both ways they reach Redis: the tier's
own pipelined connection (standalone and Sentinel modes) and redis-py's client (Cluster mode's
way, here against one server). Same answers, same errors, same expiry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from support.processes import RedisProcess

from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.cache.redis_tier import RedisTier
from cachefleet.runtime.config import RedisSettings


class ClientTier(RedisTier):
    """The tier with its hot commands through redis-py's client, as in Cluster mode."""

    async def start(self) -> None:
        await super().start()
        if self._pipe is not None:
            pipe, self._pipe = self._pipe, None
            await pipe.close()


@pytest.fixture(params=["own-connection", "redis-py"])
async def tier(
    request: pytest.FixtureRequest, redis_server: RedisProcess
) -> AsyncIterator[RedisTier]:
    kind = ClientTier if request.param == "redis-py" else RedisTier
    made = kind(RedisSettings(url=redis_server.url, socket_timeout_s=0.5, connect_timeout_s=1.0))
    await made.start()
    yield made
    await made.close()


async def test_a_value_set_is_got_and_a_missing_key_is_none(tier: RedisTier) -> None:
    await tier.set("contract:a", b"\x00value\xff", 60)
    assert await tier.get("contract:a") == b"\x00value\xff"
    assert await tier.get("contract:missing") is None
    assert await tier.get_many(["contract:a", "contract:missing"]) == [b"\x00value\xff", None]


async def test_concurrent_commands_get_their_own_replies(tier: RedisTier) -> None:
    async def round_trip(index: int) -> bytes | None:
        await tier.set(f"contract:c{index}", b"v%d" % index, 60)
        return await tier.get(f"contract:c{index}")

    replies = await asyncio.gather(*(round_trip(index) for index in range(200)))
    assert replies == [b"v%d" % index for index in range(200)]


async def test_entries_expire_after_their_ttl(tier: RedisTier) -> None:
    await tier.set("contract:ttl", b"v", 0.05)
    await asyncio.sleep(0.2)
    assert await tier.get("contract:ttl") is None


async def test_delete_removes_and_an_error_reply_fails_only_its_command(
    tier: RedisTier, redis_server: RedisProcess
) -> None:
    await tier.set("contract:d", b"v", 60)
    await tier.delete("contract:d")
    assert await tier.get("contract:d") is None
    redis_server.client().rpush("contract:list", "x")  # GET of a list: WRONGTYPE
    wrong = asyncio.ensure_future(tier.get("contract:list"))
    fine = asyncio.ensure_future(tier.get("contract:missing"))
    with pytest.raises(CacheTierError, match="WRONGTYPE"):
        await wrong
    assert await fine is None
