"""The cache over a real three-primary Redis Cluster: keys spread over the shards, answers shared,
flush empties every primary and reaches the other replicas, a dead shard costs only its own keys,
and a failover to a replica is followed without a restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest
from support.cache_doubles import Model, ask, key_of, local_tier, metric, request, shared_tier
from support.redis_nodes import ClusterProcesses, command

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor

pytest_plugins = ("support.redis_topology",)
KEYS = "cachefleet:v2:default:simple:*"


async def started(mode: str, url: str, **redis: Any) -> tuple[ReadThroughCache, RuntimeMetrics]:
    metrics = RuntimeMetrics()
    config = RuntimeSettings.model_validate(
        {
            # The tier's own behaviour, whatever admission would decide for a cheap model.
            "cache": {"mode": mode, "admission": "always"},
            "redis": {
                "url": url,
                "mode": "cluster",
                "breaker_reset_s": 0.2,
                # A slow machine must not turn hits into timeouts: dead nodes refuse at once.
                "socket_timeout_s": 1.0,
                **redis,
            },
        }
    )
    cache = build_cache(config, metrics)
    assert isinstance(cache, ReadThroughCache)
    await cache.start()
    return cache, metrics


def expected(value: int) -> list[Tensor]:
    return [Tensor.from_numpy("OUTPUT0", request(value).inputs[0].to_numpy() * 2)]


def shard(cache: ReadThroughCache, value: int) -> str:
    shared = shared_tier(cache)
    return shared.store.shard_of(shared.keys.redis_key(key_of(request(value))))


async def test_two_caches_share_answers_spread_over_the_primaries_and_flush_empties_them(
    redis_cluster: ClusterProcesses,
) -> None:
    first, _ = await started("redis", redis_cluster.url)
    second, metrics = await started("tiered", redis_cluster.url)
    try:
        for value in range(60):
            assert await ask(first, request(value), Model()) == (expected(value), CacheStatus.MISS)
        await first.writes.join()
        for value in range(60):
            got = await ask(second, request(value), Model())
            assert got == (expected(value), CacheStatus.HIT_REDIS)
        held = redis_cluster.keys_per_node(KEYS)
        assert sum(held.values()) == 60
        assert len([port for port, count in held.items() if count]) >= 2, held
        assert len({shard(first, value) for value in range(60)}) == 3

        assert second.listener is not None
        await asyncio.wait_for(second.listener.subscribed.wait(), 10)
        assert (await ask(second, request(0), Model()))[1] is CacheStatus.HIT_LOCAL
        removed = await first.flush("simple")
        assert removed == 60
        assert redis_cluster.keys_per_node(KEYS) == dict.fromkeys(held, 0)
        # The flush message crossed the cluster bus to whichever node the other one listens on.
        deadline = time.monotonic() + 10
        while (await ask(second, request(0), Model()))[1] is CacheStatus.HIT_LOCAL:
            assert time.monotonic() < deadline, "the flush never reached the other cache"
            await asyncio.sleep(0.05)
        assert metric(metrics, "cachefleet_redis_circuit_open") == 0
    finally:
        await first.close()
        await second.close()


async def test_a_dead_primary_costs_only_its_own_keys(redis_cluster: ClusterProcesses) -> None:
    writer, _ = await started("redis", redis_cluster.url)
    cache, metrics = await started("redis", redis_cluster.url)
    try:
        for value in range(60):
            await ask(writer, request(value), Model())
        await writer.writes.join()
        shards = {value: shard(cache, value) for value in range(60)}
        dead = shards[0]
        redis_cluster.node(int(dead.rsplit(":", 1)[1])).kill()

        for _ in range(3):
            for value in range(60):
                outputs, status = await ask(cache, request(value), Model())
                assert outputs == expected(value)
                if shards[value] == dead:
                    assert status is CacheStatus.MISS
                else:
                    assert status is CacheStatus.HIT_REDIS, (value, shards[value])
        assert metric(metrics, "cachefleet_redis_circuit_open") == 1
        assert shared_tier(cache).breakers.open_shards == [dead]
        assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="connection")
        # Failures stopped at the breaker's threshold plus one probe per reset: asking a dead
        # shard again and again does not mean one failed connection per request.
        failed = metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="connection")
        assert failed < 20
        # A flush cannot empty a shard it cannot reach: it says so (503) instead of half-working.
        with pytest.raises(CacheTierError, match="SCAN/UNLINK"):
            await cache.flush("simple")
    finally:
        await writer.close()
        await cache.close()


async def test_a_cluster_failover_to_a_replica_is_followed(
    redis_cluster_replicas: ClusterProcesses,
) -> None:
    cluster = redis_cluster_replicas
    cache, _ = await started("redis", cluster.url)
    try:
        for value in range(60):
            await ask(cache, request(value), Model())
        await cache.writes.join()
        before = {value: shard(cache, value) for value in range(60)}
        old = int(before[0].rsplit(":", 1)[1])
        replica = cluster.replica_of(old)
        assert replica is not None
        # Let the replica catch up, then swap roles as an operator does before maintenance.
        command(old, "WAIT", "1", "2000")
        command(replica, "CLUSTER", "FAILOVER")
        deadline = time.monotonic() + 30
        while old in cluster.primary_ports() or replica not in cluster.primary_ports():
            assert time.monotonic() < deadline, "CLUSTER FAILOVER did not finish"
            await asyncio.sleep(0.1)

        # The replica had every entry: the moved keys hit again, served by the new primary
        # (the client follows the MOVED reply and learns the new slot owner). On a busy machine
        # a lookup may time out once; answers are right throughout.
        moved = [value for value in range(60) if before[value] == before[0]]
        deadline = time.monotonic() + 20
        while True:
            statuses = []
            for value in moved:
                outputs, status = await ask(cache, request(value), Model())
                assert outputs == expected(value)
                statuses.append(status)
            if all(status is CacheStatus.HIT_REDIS for status in statuses):
                break
            assert time.monotonic() < deadline, f"hits did not resume: {statuses}"
            await asyncio.sleep(0.1)
        assert {shard(cache, value) for value in moved} == {f"127.0.0.1:{replica}"}
    finally:
        await cache.close()


async def test_a_cluster_down_at_start_does_not_stop_the_cache() -> None:
    from support.processes import free_port

    cache, metrics = await started("tiered", f"redis://127.0.0.1:{free_port()}/0")
    try:
        for _ in range(5):
            assert await ask(cache, request(1), Model()) == (expected(1), CacheStatus.MISS)
            local_tier(cache).flush("simple")  # so the next request asks Redis again
        assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="connection")
        assert metric(metrics, "cachefleet_redis_circuit_open") == 1
    finally:
        await cache.close()


async def test_row_lookups_span_the_shards_and_skip_only_a_dead_one(
    redis_cluster: ClusterProcesses,
) -> None:
    writer, _ = await started("redis", redis_cluster.url)
    cache, _ = await started("redis", redis_cluster.url)
    rows = [request(value) for value in range(30)]

    async def compute(indices: Sequence[int]) -> list[list[Tensor]]:
        return [expected(index) for index in indices]

    try:
        first = await writer.get_rows_or_compute(rows, compute)
        assert {status for _, status in first} == {CacheStatus.MISS}
        await writer.writes.join()
        # One pipelined round trip reads rows living on all three primaries.
        again = await cache.get_rows_or_compute(rows, compute)
        assert again == [(expected(v), CacheStatus.HIT_REDIS) for v in range(30)]

        shards = {value: shard(cache, value) for value in range(30)}
        dead = shards[0]
        redis_cluster.node(int(dead.rsplit(":", 1)[1])).kill()
        for _ in range(3):
            answers = await cache.get_rows_or_compute(rows, compute)
            assert [outputs for outputs, _ in answers] == [expected(v) for v in range(30)]
        # After the breaker of the dead shard opened, the live shards' rows still hit.
        statuses = [status for _, status in answers]
        for value in range(30):
            wanted = CacheStatus.MISS if shards[value] == dead else CacheStatus.HIT_REDIS
            assert statuses[value] is wanted, (value, shards[value])
        assert shared_tier(cache).breakers.open_shards == [dead]
    finally:
        await writer.close()
        await cache.close()
