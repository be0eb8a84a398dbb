"""Redis faults never fail a request: killed, paused, out of memory, or holding garbage."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.exceptions as redis_exceptions
from support.cache_doubles import Model, ask, metric, request, settings, shared_tier
from support.processes import RedisProcess
from support.waiting import wait_for_async

from cachefleet.runtime.cache.api import CacheDirectives, CacheStatus
from cachefleet.runtime.cache.entry import encode_entry
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.key import KeySpace, compute_key
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.cache.redis_tier import RedisTier
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor


async def started(
    mode: str, redis: RedisProcess, *, caching: dict[str, Any] | None = None, **redis_settings: Any
) -> tuple[ReadThroughCache, RuntimeMetrics]:
    metrics = RuntimeMetrics()
    config = settings(mode, redis.url, **(caching or {}))
    config = config.model_copy(update={"redis": config.redis.model_copy(update=redis_settings)})
    cache = build_cache(config, metrics)
    assert isinstance(cache, ReadThroughCache)
    await cache.start()
    return cache, metrics


def expected(value: int) -> list[Tensor]:
    req = request(value)
    return [Tensor.from_numpy("OUTPUT0", req.inputs[0].to_numpy() * 2)]


async def test_killed_redis_opens_the_breaker_and_restart_closes_it(
    redis_server: RedisProcess,
) -> None:
    # Admission never recomputes a request here (a recompute is a bypass, not stored): the
    # last request's insert must reach Redis whatever the lookups before it cost.
    always = {"admission": "always"}
    cache, metrics = await started("tiered", redis_server, caching=always)
    try:
        await ask(cache, request(0), Model())
        await cache.writes.join()
        redis_server.kill()
        for value in range(1, 30):
            outputs, status = await ask(cache, request(value), Model())
            assert (outputs, status) == (expected(value), CacheStatus.MISS)
        await cache.writes.join()
        assert metric(metrics, "cachefleet_redis_circuit_open") == 1
        assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="connection")
        # A Redis-only copy is lost with the process; the local tier still answers.
        assert (await ask(cache, request(0), Model()))[1] is CacheStatus.HIT_LOCAL

        redis_server.start()
        await asyncio.sleep(0.3)  # past breaker_reset_s: the next lookup is the probe
        values = iter(range(100, 10_000))

        async def closed() -> bool:  # each lookup while open may be the probe that closes it
            await ask(cache, request(next(values)), Model())
            return metric(metrics, "cachefleet_redis_circuit_open") == 0

        await wait_for_async(closed, "the breaker to close after Redis came back")
        await ask(cache, request(500), Model())
        await cache.writes.join()
        other, _ = await started("tiered", redis_server)
        try:
            assert (await ask(other, request(500), Model()))[1] is CacheStatus.HIT_REDIS
        finally:
            await other.close()
    finally:
        await cache.close()


async def test_redis_down_at_start_does_not_stop_the_cache(redis_server: RedisProcess) -> None:
    redis_server.kill()
    cache, _ = await started("tiered", redis_server)
    try:
        assert (await ask(cache, request(1), Model()))[1] is CacheStatus.MISS
        assert (await ask(cache, request(1), Model()))[1] is CacheStatus.HIT_LOCAL
    finally:
        await cache.close()


async def test_paused_redis_costs_at_most_the_socket_timeout(redis_server: RedisProcess) -> None:
    cache, metrics = await started("redis", redis_server, socket_timeout_s=0.2)
    try:
        redis_server.command("CLIENT", "PAUSE", "5000", "ALL")
        # Bounded well below the 5 s pause: socket timeout + compute + scheduling slack.
        outputs, status = await asyncio.wait_for(ask(cache, request(1), Model()), timeout=2.0)
        assert (outputs, status) == (expected(1), CacheStatus.MISS)
        assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="timeout") >= 1
    finally:
        redis_server.command("CLIENT", "UNPAUSE")
        await cache.close()


async def test_redis_out_of_memory_fails_inserts_not_requests(make_redis: Any) -> None:
    redis = make_redis("--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
    client = redis.client()
    with pytest.raises(redis_exceptions.OutOfMemoryError):  # noqa: PT012 - fill until full
        for index in range(10_000):
            client.set(f"filler:{index}", b"x" * 10_000)
    cache, metrics = await started("redis", redis)
    try:
        for value in range(5):
            outputs, status = await ask(cache, request(value), Model())
            assert (outputs, status) == (expected(value), CacheStatus.MISS)
        await cache.writes.join()
        # Five inserts, and the fleet lease the first miss asked for (a write too; the model
        # then measures too cheap for the fleet, so the other misses ask for none).
        assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="oom") == 6
        assert metric(metrics, "cachefleet_redis_circuit_open") == 0  # Redis is up: keep reading
        client.config_set("maxmemory", "100mb")  # the operator raises maxmemory live
        await ask(cache, request(9), Model())
        await cache.writes.join()
        assert (await ask(cache, request(9), Model()))[1] is CacheStatus.HIT_REDIS
    finally:
        await cache.close()


@pytest.mark.parametrize("planted", [b"garbage", b"CFE1" + bytes(80), "foreign"])
async def test_corrupt_entry_is_a_miss_and_is_deleted(
    redis_server: RedisProcess, planted: bytes | str
) -> None:
    req = request(3)
    key = compute_key(req.model, req.version, req.fingerprint, req.inputs, req.parameters)
    where = KeySpace().redis_key(key)
    if planted == "foreign":  # a valid entry, but for another request
        planted = encode_entry(bytes(32), expected(4))
    client = redis_server.client()
    client.set(where, planted)
    cache, metrics = await started("redis", redis_server)
    try:
        lookup_only = CacheDirectives(lookup=True, store=False)
        outputs, status = await ask(cache, req, Model(), lookup_only)
        assert (outputs, status) == (expected(3), CacheStatus.MISS)
        await cache.writes.join()
        assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="corrupt") == 1
        assert client.get(where) is None
        await ask(cache, req, Model())
        await cache.writes.join()
        assert (await ask(cache, req, Model())) == (expected(3), CacheStatus.HIT_REDIS)
    finally:
        await cache.close()


async def test_a_saturated_pool_leaves_the_hot_commands_alone(
    redis_server: RedisProcess,
) -> None:
    """GET and SET go over the tier's own connection, not redis-py's pool: with the pool's
    only connection busy, lookups and inserts still work, and nothing opens the breaker."""
    cache, metrics = await started("redis", redis_server, pool_size=1)
    try:
        store = shared_tier(cache).store
        assert isinstance(store, RedisTier)
        pool = store.client.connection_pool
        held = await pool.get_connection()  # the only one, busy
        try:
            for value in range(5):
                outputs, status = await asyncio.wait_for(
                    ask(cache, request(value), Model()), timeout=2.0
                )
                assert (outputs, status) == (expected(value), CacheStatus.MISS)
            await cache.writes.join()
            assert (await ask(cache, request(3), Model()))[1] is CacheStatus.HIT_REDIS
        finally:
            await pool.release(held)
        assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="pool") == 0
        assert metric(metrics, "cachefleet_redis_circuit_open") == 0
    finally:
        await cache.close()
