"""The cache over a real Sentinel-watched primary with a replica: answers shared, a failover
followed without a restart, and flush reaching the other caches through the new primary."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from support.cache_doubles import Model, ask, key_of, redis_store, request, shared_tier
from support.redis_nodes import MASTER_NAME, SentinelProcesses, command

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.config import RuntimeSettings, SettingsError, load_settings
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor

pytest_plugins = ("support.redis_topology",)


async def started(mode: str, sentinel: SentinelProcesses, **redis: Any) -> ReadThroughCache:
    config = RuntimeSettings.model_validate(
        {
            # The tier's own behaviour, whatever admission would decide for a cheap model.
            "cache": {"mode": mode, "admission": "always"},
            "redis": {
                "url": sentinel.url,
                "mode": "sentinel",
                "sentinel_master": MASTER_NAME,
                "breaker_reset_s": 0.2,
                # A slow machine must not turn hits into timeouts: dead nodes refuse at once.
                "socket_timeout_s": 1.0,
                **redis,
            },
        }
    )
    cache = build_cache(config, RuntimeMetrics())
    assert isinstance(cache, ReadThroughCache)
    await cache.start()
    return cache


def expected(value: int) -> list[Tensor]:
    return [Tensor.from_numpy("OUTPUT0", request(value).inputs[0].to_numpy() * 2)]


def test_sentinel_mode_needs_the_primary_name() -> None:
    environ = {"CACHEFLEET_REDIS_MODE": "sentinel", "CACHEFLEET_REDIS_URL": "redis://s:26379"}
    with pytest.raises(SettingsError, match="--redis-sentinel-master"):
        load_settings(None, environ)
    settings = load_settings(None, {**environ, "CACHEFLEET_REDIS_SENTINEL_MASTER": "main"})
    assert (settings.redis.mode, settings.redis.sentinel_master) == ("sentinel", "main")
    with pytest.raises(SettingsError, match="redis:// or rediss://"):
        load_settings(
            None, {"CACHEFLEET_REDIS_MODE": "cluster", "CACHEFLEET_REDIS_URL": "unix:///r"}
        )


async def test_a_sentinel_failover_is_followed_without_a_restart(
    redis_sentinel: SentinelProcesses,
) -> None:
    writer = await started("redis", redis_sentinel)
    reader = await started("tiered", redis_sentinel)
    try:
        for value in range(20):
            assert await ask(writer, request(value), Model()) == (expected(value), CacheStatus.MISS)
        await writer.writes.join()
        for value in range(20):
            assert (await ask(reader, request(value), Model()))[1] is CacheStatus.HIT_REDIS
        old = redis_sentinel.primary_port()
        command(old, "WAIT", "1", "2000")

        # Keep asking while Sentinel promotes the replica: answers stay right throughout.
        stop = asyncio.Event()

        async def keep_asking() -> int:
            asked = 0
            while not stop.is_set():
                value = asked % 20
                outputs, _ = await ask(writer, request(value), Model())
                assert outputs == expected(value)
                asked += 1
                await asyncio.sleep(0.005)
            return asked

        load = asyncio.create_task(keep_asking())
        new = await asyncio.to_thread(redis_sentinel.failover)
        stop.set()
        assert await load > 0
        assert new != old

        # Without a restart, writes reach the new primary (the old one is a replica now)...
        deadline = time.monotonic() + 10
        value = 100
        while True:
            await ask(writer, request(value), Model())
            await writer.writes.join()
            if (
                command(new, "EXISTS", shared_tier(writer).keys.redis_key(key_of(request(value))))
                == 1
            ):
                break
            assert time.monotonic() < deadline, (
                "writes never reached the new primary",
                new,
                redis_store(shared_tier(writer)).client.connection_pool.master_address,
                redis_sentinel.primary_port(),
            )
            value += 1
            await asyncio.sleep(0.05)
        # ... and lookups hit there: it holds the entries replicated before the failover.
        hits_before = int(command(new, "INFO", "stats")["keyspace_hits"])
        for value in range(20):
            assert await ask(writer, request(value), Model()) == (
                expected(value),
                CacheStatus.HIT_REDIS,
            )
        assert int(command(new, "INFO", "stats")["keyspace_hits"]) >= hits_before + 20

        # The flush channel followed the failover too: the other cache drops its local copies.
        assert reader.listener is not None
        assert (await ask(reader, request(1), Model()))[1] is CacheStatus.HIT_LOCAL
        deadline = time.monotonic() + 20
        while True:
            await asyncio.wait_for(reader.listener.subscribed.wait(), 20)
            await writer.flush("simple")
            await asyncio.sleep(0.2)
            if (await ask(reader, request(1), Model()))[1] is not CacheStatus.HIT_LOCAL:
                break
            assert time.monotonic() < deadline, "the flush never reached the other cache"
    finally:
        await writer.close()
        await reader.close()
