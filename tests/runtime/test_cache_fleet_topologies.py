"""One computation per fleet on a real Redis Cluster and behind a real Sentinel: the lease
lives in its entry's slot (one script touches both), the fills message of a holder on any
primary reaches replicas subscribed on other nodes, and Sentinel's primary holds the leases."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
from support.cache_doubles import Model, ask, request
from support.redis_nodes import MASTER_NAME, ClusterProcesses, SentinelProcesses

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics

pytest_plugins = ("support.redis_topology",)


@pytest.fixture
async def replicas() -> AsyncIterator[Any]:
    """``await replicas(n, redis_settings)``: n started caches, subscribed to the fills."""
    async with AsyncExitStack() as stack:

        async def make(count: int, redis: dict[str, Any]) -> list[ReadThroughCache]:
            made = []
            for _ in range(count):
                config = RuntimeSettings.model_validate(
                    {
                        "cache": {"mode": "redis", "fleet_max_wait_s": 30},
                        # A slow machine must not turn lookups into timeouts.
                        "redis": {"breaker_reset_s": 0.2, "socket_timeout_s": 1.0, **redis},
                    }
                )
                cache = build_cache(config, RuntimeMetrics())
                assert isinstance(cache, ReadThroughCache)
                assert cache.fleet is not None
                await cache.start()
                stack.push_async_callback(cache.close)
                await asyncio.wait_for(cache.fleet.listener.subscribed.wait(), 20)
                made.append(cache)
            return made

        yield make


async def bursts_run_once(caches: list[ReadThroughCache], values: range) -> None:
    for value in values:  # keys on every primary of a cluster
        model = Model(delay_s=0.2)
        req = request(value)
        answers = await asyncio.gather(*(ask(cache, req, model) for cache in caches))
        assert model.runs == 1, value
        assert sorted(status for _, status in answers) == [CacheStatus.HIT_REDIS] * (
            len(caches) - 1
        ) + [CacheStatus.MISS]


async def test_cluster_replicas_compute_each_key_once(
    redis_cluster: ClusterProcesses, replicas: Any
) -> None:
    caches = await replicas(3, {"url": redis_cluster.url, "mode": "cluster"})
    await bursts_run_once(caches, range(6))


async def test_sentinel_replicas_compute_each_key_once(
    redis_sentinel: SentinelProcesses, replicas: Any
) -> None:
    redis = {"url": redis_sentinel.url, "mode": "sentinel", "sentinel_master": MASTER_NAME}
    caches = await replicas(3, redis)
    await bursts_run_once(caches, range(3))
