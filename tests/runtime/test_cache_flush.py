"""Flush: one model's entries leave both tiers, on every replica, from the API or the CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from support.cache_doubles import Model, ask, key_of, local_tier, request, settings
from support.processes import RedisProcess
from support.waiting import wait_for_async

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics


async def started(mode: str, redis: RedisProcess) -> ReadThroughCache:
    cache = build_cache(settings(mode, redis.url), RuntimeMetrics())
    assert isinstance(cache, ReadThroughCache)
    await cache.start()
    if cache.listener is not None:
        await asyncio.wait_for(cache.listener.subscribed.wait(), 5)
    return cache


async def fill(cache: ReadThroughCache, model: str, values: range) -> None:
    for value in values:
        await ask(cache, request(value, model=model), Model())
    await cache.writes.join()


def redis_keys(redis: RedisProcess, model: str) -> list[bytes]:
    return list(redis.client().scan_iter(match=f"cachefleet:v2:default:{model}:*"))


async def eventually_miss(cache: ReadThroughCache, value: int, model: str) -> None:
    local = local_tier(cache)
    assert local is not None
    key = key_of(request(value, model=model))

    async def dropped() -> bool:
        return local.entry(key) is None

    await wait_for_async(dropped, "the flush to reach this replica", timeout_s=5)


async def test_flush_removes_one_model_from_both_tiers(redis_server: RedisProcess) -> None:
    cache = await started("tiered", redis_server)
    try:
        await fill(cache, "simple", range(5))
        await fill(cache, "other", range(3))
        removed = await cache.flush("simple")
        assert removed == 10  # 5 local copies + 5 Redis entries
        assert redis_keys(redis_server, "simple") == []
        assert len(redis_keys(redis_server, "other")) == 3
        assert (await ask(cache, request(0, model="simple"), Model()))[1] is CacheStatus.MISS
        assert (await ask(cache, request(0, model="other"), Model()))[1] is CacheStatus.HIT_LOCAL
    finally:
        await cache.close()


async def test_flush_reaches_every_replicas_local_tier(redis_server: RedisProcess) -> None:
    first = await started("tiered", redis_server)
    second = await started("tiered", redis_server)
    try:
        await fill(first, "simple", range(3))
        for value in range(3):  # promoted into the second replica's local tier
            assert (await ask(second, request(value), Model()))[1] is CacheStatus.HIT_REDIS
        await first.flush("simple")
        for value in range(3):
            await eventually_miss(second, value, "simple")
        assert (await ask(second, request(0), Model()))[1] is CacheStatus.MISS
    finally:
        await first.close()
        await second.close()


async def test_answers_computed_before_a_flush_are_not_stored(redis_server: RedisProcess) -> None:
    cache = await started("tiered", redis_server)
    try:
        slow = asyncio.ensure_future(ask(cache, request(1), Model(delay_s=0.3)))
        await asyncio.sleep(0.1)
        await cache.flush("simple")
        assert (await slow)[1] is CacheStatus.MISS
        await cache.writes.join()
        assert (await ask(cache, request(1), Model()))[1] is CacheStatus.MISS
    finally:
        await cache.close()


async def test_flush_with_redis_down_says_so(redis_server: RedisProcess) -> None:
    cache = await started("redis", redis_server)
    try:
        redis_server.kill()
        with pytest.raises(CacheTierError) as raised:
            await cache.flush("simple")
        # The service answers it as a 503: tests/reliability/test_redis_security.py.
        assert raised.value.kind == "connection"
    finally:
        await cache.close()


async def test_cli_flush_empties_redis_and_notifies_servers(redis_server: RedisProcess) -> None:
    cache = await started("tiered", redis_server)
    try:
        await fill(cache, "simple", range(4))
        await fill(cache, "other", range(2))
        command = [sys.executable, "-m", "cachefleet.cli.main", "flush", "--model", "simple",
                   "--redis-url", redis_server.url]  # fmt: skip
        result = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert "removed 4 entries" in result.stdout
        assert redis_keys(redis_server, "simple") == []
        assert len(redis_keys(redis_server, "other")) == 2
        await eventually_miss(cache, 0, "simple")
    finally:
        await cache.close()


def test_cli_flush_needs_somewhere_to_flush() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cachefleet.cli.main", "flush", "--model", "simple"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "--redis-url" in result.stderr


async def test_flush_takes_exactly_the_named_model(redis_server: RedisProcess) -> None:
    cache = await started("tiered", redis_server)
    try:
        await fill(cache, "a", range(2))
        await fill(cache, "a:b", range(3))  # its keys also match the glob cachefleet:v2:default:a:*
        assert await cache.flush("a") == 4
        assert len(redis_keys(redis_server, "a:b")) == 3
        assert (await ask(cache, request(0, model="a:b"), Model()))[1] is CacheStatus.HIT_LOCAL
    finally:
        await cache.close()


async def test_a_redis_hit_read_while_a_flush_runs_is_answered_but_never_kept(
    redis_server: RedisProcess,
) -> None:
    """The lookup's GET and the flush's SCAN queue behind a paused Redis, GET first: the GET
    returns the entry the flush is about to remove. It answers that request, but the copy must
    not land in the local tier the flush has just emptied, where it would outlive the flush."""
    patient = RuntimeSettings.model_validate(
        {"cache": {"mode": "tiered"}, "redis": {"url": redis_server.url, "socket_timeout_s": 5}}
    )
    writer, reader = (build_cache(patient, RuntimeMetrics()) for _ in range(2))
    assert isinstance(writer, ReadThroughCache)
    assert isinstance(reader, ReadThroughCache)
    # Its own flush message would drop the copy a little later: this is about the copy itself
    # (a replica whose channel is down keeps it, and a GET answered after the message too).
    reader.listener = None
    await writer.start()
    await reader.start()
    try:
        await fill(writer, "simple", range(1))
        # The reader's connections are open before the pause: a handshake queued behind it
        # would let the flush's SCAN overtake the GET.
        await ask(reader, request(0, model="other"), Model())
        await reader.flush("other")
        redis_server.command("CLIENT", "PAUSE", "300", "ALL")
        lookup = asyncio.create_task(ask(reader, request(0), Model()))
        await asyncio.sleep(0.05)  # the GET is queued in Redis first
        flush = asyncio.create_task(reader.flush("simple"))
        assert (await lookup)[1] is CacheStatus.HIT_REDIS
        await flush
        assert local_tier(reader).entry(key_of(request(0))) is None
        assert (await ask(reader, request(0), Model()))[1] is CacheStatus.MISS
    finally:
        await writer.close()
        await reader.close()
