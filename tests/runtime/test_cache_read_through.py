"""The cache's request path over real tiers: statuses, tier promotion, directives, coalescing,
write-behind, and that only successful answers are stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from support.cache_doubles import (
    Model,
    ask,
    local_tier,
    metric,
    redis_key,
    request,
    settings,
    shared_tier,
)
from support.processes import RedisProcess

from cachefleet.runtime.cache.api import CacheDirectives, CacheRequest, CacheStatus
from cachefleet.runtime.cache.completion import RunsToCompletion
from cachefleet.runtime.cache.factory import (
    TIER_KINDS,
    Built,
    TierKind,
    build_admission,
    build_cache,
    read_through,
)
from cachefleet.runtime.cache.local import LocalTier
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.cache.writebehind import WriteBehind
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor


@pytest.fixture
async def caches(
    redis_server: RedisProcess,
) -> AsyncIterator[Callable[..., Any]]:
    started: list[ReadThroughCache] = []

    async def make(mode: str = "tiered", **cache: Any) -> tuple[ReadThroughCache, RuntimeMetrics]:
        metrics = RuntimeMetrics()
        built = build_cache(settings(mode, redis_server.url, **cache), metrics)
        assert isinstance(built, ReadThroughCache)
        await built.start()
        started.append(built)
        return built, metrics

    yield make
    for cache in started:
        await cache.close()


async def test_local_mode_misses_then_hits_locally(caches: Callable[..., Any]) -> None:
    cache, metrics = await caches("local")
    model = Model()
    first = await ask(cache, request(1), model)
    second = await ask(cache, request(1), model)
    assert first[1] is CacheStatus.MISS
    assert second == (first[0], CacheStatus.HIT_LOCAL)
    assert model.runs == 1
    assert metric(metrics, "cachefleet_cache_hits_total", model="simple", version="1", tier="local")
    assert metric(metrics, "cachefleet_cache_misses_total", model="simple", version="1") == 1
    assert metric(metrics, "nv_cache_num_hits_per_model", model="simple", version="1") == 1
    assert metric(metrics, "cachefleet_cache_local_bytes") > 0


async def test_tiered_replicas_share_redis_and_promote_hits(caches: Callable[..., Any]) -> None:
    first, _ = await caches("tiered")
    second, metrics = await caches("tiered")
    model = Model()
    answer, status = await ask(first, request(7), model)
    assert status is CacheStatus.MISS
    await first.writes.join()
    assert await ask(second, request(7), model) == (answer, CacheStatus.HIT_REDIS)
    assert await ask(second, request(7), model) == (answer, CacheStatus.HIT_LOCAL)
    assert model.runs == 1
    labels = {"model": "simple", "version": "1"}
    assert metric(metrics, "cachefleet_cache_hits_total", **labels, tier="redis") == 1
    assert metric(metrics, "cachefleet_cache_inserts_total", **labels, tier="local") == 1


async def test_redis_mode_hits_redis_only(caches: Callable[..., Any]) -> None:
    cache, metrics = await caches("redis")
    model = Model()
    answer, _ = await ask(cache, request(3), model)
    await cache.writes.join()
    assert await ask(cache, request(3), model) == (answer, CacheStatus.HIT_REDIS)
    assert metric(metrics, "cachefleet_cache_inserts_total", model="simple", version="1",
                  tier="redis") == 1  # fmt: skip


async def test_redis_entries_carry_the_ttl(
    caches: Callable[..., Any], redis_server: RedisProcess
) -> None:
    cache, _ = await caches("redis")
    req = request(4)
    await ask(cache, req, Model())
    await cache.writes.join()
    ttl_ms = redis_server.client().pttl(redis_key(req))
    assert 0 < ttl_ms <= 60_000


async def test_models_without_caching_bypass_and_store_nothing(caches: Callable[..., Any]) -> None:
    cache, metrics = await caches("tiered")
    model = Model()
    for _ in range(2):
        _, status = await ask(cache, request(1, enabled=False), model)
        assert status is CacheStatus.BYPASS
    assert model.runs == 2
    assert len(local_tier(cache)) == 0
    assert metric(metrics, "cachefleet_cache_bypass_total", model="simple", version="1") == 2


async def test_no_cache_skips_the_lookup_but_stores(caches: Callable[..., Any]) -> None:
    cache, _ = await caches("tiered")
    model = Model()
    await ask(cache, request(1), model)
    no_cache = CacheDirectives(lookup=False, store=True)
    assert (await ask(cache, request(1), model, no_cache))[1] is CacheStatus.BYPASS
    assert (await ask(cache, request(2), model, no_cache))[1] is CacheStatus.BYPASS
    assert (await ask(cache, request(2), model))[1] is CacheStatus.HIT_LOCAL
    assert model.runs == 3


async def test_no_store_skips_lookup_and_store(caches: Callable[..., Any]) -> None:
    cache, _ = await caches("tiered")
    model = Model()
    no_store = CacheDirectives(lookup=False, store=False)
    assert (await ask(cache, request(5), model, no_store))[1] is CacheStatus.BYPASS
    await cache.writes.join()
    assert (await ask(cache, request(5), model))[1] is CacheStatus.MISS


async def test_failed_compute_propagates_and_stores_nothing(caches: Callable[..., Any]) -> None:
    cache, _ = await caches("tiered")
    with pytest.raises(RuntimeError, match="model failed"):
        await ask(cache, request(1), Model(fail=True))
    await cache.writes.join()
    model = Model()
    assert (await ask(cache, request(1), model))[1] is CacheStatus.MISS
    assert model.runs == 1


async def test_concurrent_identical_misses_run_the_model_once(caches: Callable[..., Any]) -> None:
    cache, metrics = await caches("tiered")
    model = Model(delay_s=0.2)
    results = await asyncio.gather(*(ask(cache, request(9), model) for _ in range(20)))
    assert model.runs == 1
    assert {status for _, status in results} == {CacheStatus.MISS}
    assert all(outputs == results[0][0] for outputs, _ in results)
    labels = {"model": "simple", "version": "1"}
    assert metric(metrics, "cachefleet_cache_misses_total", **labels) == 1
    assert metric(metrics, "cachefleet_cache_coalesced_total", **labels) == 19


async def test_coalesced_failure_reaches_every_caller(caches: Callable[..., Any]) -> None:
    cache, _ = await caches("tiered")
    model = Model(delay_s=0.1, fail=True)
    results = await asyncio.gather(
        *(ask(cache, request(9), model) for _ in range(10)), return_exceptions=True
    )
    assert model.runs == 1
    assert all(isinstance(result, RuntimeError) for result in results)
    assert (await ask(cache, request(9), Model()))[1] is CacheStatus.MISS


async def test_a_cancelled_caller_does_not_cancel_the_others(caches: Callable[..., Any]) -> None:
    cache, _ = await caches("local")
    model = Model(delay_s=0.2)
    impatient = asyncio.ensure_future(ask(cache, request(2), model))
    patient = asyncio.ensure_future(ask(cache, request(2), model))
    await asyncio.sleep(0.05)
    impatient.cancel()
    assert (await patient)[1] is CacheStatus.MISS
    assert (await ask(cache, request(2), model))[1] is CacheStatus.HIT_LOCAL
    assert model.runs == 1


async def test_full_write_behind_queue_drops_and_counts(redis_server: RedisProcess) -> None:
    metrics = RuntimeMetrics()
    # Write-behind accounting: a fleet lease's holder would write its answer at once instead.
    cache = build_cache(
        settings("redis", redis_server.url, insert_queue_size=2, fleet_coalescing="off"), metrics
    )
    assert isinstance(cache, ReadThroughCache)
    await shared_tier(
        cache
    ).store.start()  # the tier, not the write-behind workers: the queue fills
    try:
        for value in range(5):
            assert (await ask(cache, request(value), Model()))[1] is CacheStatus.MISS
        dropped = metric(metrics, "cachefleet_cache_insert_dropped_total", model="simple",
                         version="1")  # fmt: skip
        assert dropped == 3
        await cache.writes.start()
        await cache.writes.join()
        assert (await ask(cache, request(0), Model()))[1] is CacheStatus.HIT_REDIS
        assert (await ask(cache, request(4), Model()))[1] is CacheStatus.MISS
    finally:
        await cache.close()


async def test_write_behind_runs_jobs_and_refuses_when_full() -> None:
    ran: list[int] = []
    writes = WriteBehind(max_size=1, workers=1)

    def job(index: int) -> Callable[[], Any]:
        async def run() -> None:
            ran.append(index)

        return run

    assert writes.submit(job(1))
    assert not writes.submit(job(2))
    await writes.start()
    await writes.join()
    assert writes.submit(job(3))
    await writes.close()
    assert ran == [1, 3]


async def test_write_behind_is_bounded_in_bytes_until_jobs_have_run() -> None:
    ran: list[int] = []
    writes = WriteBehind(max_size=100, max_bytes=1000, workers=1)

    def job(index: int) -> Callable[[], Any]:
        async def run() -> None:
            ran.append(index)

        return run

    assert writes.submit(job(1), 600)
    assert not writes.submit(job(2), 600), "600 + 600 bytes is over the 1000"
    assert writes.submit(job(3), 400)
    assert writes.size_bytes == 1000
    await writes.start()
    await writes.join()
    assert writes.size_bytes == 0
    assert writes.submit(job(4), 1000)
    await writes.close()
    assert ran == [1, 3, 4]


async def test_large_answers_are_dropped_past_the_byte_bound(redis_server: RedisProcess) -> None:
    metrics = RuntimeMetrics()
    cache = build_cache(settings("redis", redis_server.url, insert_queue_bytes=1000), metrics)
    assert isinstance(cache, ReadThroughCache)
    await shared_tier(cache).store.start()  # no workers: what is queued stays queued
    try:
        for value in range(5):
            assert (await ask(cache, request(value), Model()))[1] is CacheStatus.MISS
        dropped = metric(metrics, "cachefleet_cache_insert_dropped_total", model="simple",
                         version="1")  # fmt: skip
        assert dropped > 0
        assert cache.writes.size_bytes <= 1000
    finally:
        await cache.close()


def test_build_cache_needs_a_redis_url_for_redis_modes() -> None:
    from cachefleet.runtime.cache.api import NullCache
    from cachefleet.runtime.cache.errors import CacheConfigError

    assert isinstance(build_cache(settings("none"), RuntimeMetrics()), NullCache)
    assert isinstance(build_cache(settings("local"), RuntimeMetrics()), ReadThroughCache)
    with pytest.raises(CacheConfigError, match="redis-url"):
        build_cache(settings("tiered"), RuntimeMetrics())


class FakeClock:
    """Wall and monotonic time that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


async def test_promoted_copy_expires_with_the_redis_entry(redis_server: RedisProcess) -> None:
    clock = FakeClock()

    def replica() -> ReadThroughCache:
        tiered = settings("tiered", redis_server.url)
        local = LocalTier(1 << 20, clock=clock.monotonic)
        kinds = [
            TierKind("local", lambda _: True, lambda parts: Built(local)),
            *(kind for kind in TIER_KINDS if kind.name == "redis"),
        ]
        return read_through(
            tiered, RuntimeMetrics(), build_admission(tiered), wall_clock=clock.wall, kinds=kinds
        )

    first, second = replica(), replica()
    await first.start()
    await second.start()
    try:
        short = replace(request(8), ttl_s=600)
        await ask(first, short, Model())
        await first.writes.join()
        long = replace(short, ttl_s=3600)
        assert (await ask(second, long, Model()))[1] is CacheStatus.HIT_REDIS
        clock.now += 599
        assert (await ask(second, long, Model()))[1] is CacheStatus.HIT_LOCAL
        # Ten minutes on, Redis drops the entry (its PX); the copy promoted for a replica that
        # asked for an hour must be gone too, since the entry it copied had ten minutes left.
        clock.now += 2
        redis_server.command("DEL", redis_key(short))
        assert (await ask(second, long, Model()))[1] is CacheStatus.MISS
    finally:
        await first.close()
        await second.close()


async def test_a_compute_that_runs_to_completion_is_filled_in_the_callers_task() -> None:
    """The fill around compute keeps its mark, so the single-flight leads it in this task."""
    cache = ReadThroughCache(RuntimeMetrics(), [LocalTier(max_bytes=1 << 20)])
    await cache.start()
    ran_in: list[object] = []

    def compute_for(req: CacheRequest) -> Callable[[], Awaitable[list[Tensor]]]:
        async def compute() -> list[Tensor]:
            ran_in.append(asyncio.current_task())
            return list(req.inputs)

        return compute

    caller, directives = asyncio.current_task(), CacheDirectives()
    marked = RunsToCompletion(compute_for(request(1)))
    first = await cache.get_or_compute(request(1), directives, marked)
    second = await cache.get_or_compute(request(2), directives, compute_for(request(2)))
    await cache.close()
    assert (first.status, second.status) == (CacheStatus.MISS, CacheStatus.MISS)
    assert ran_in[0] is caller
    assert ran_in[1] is not caller, "an ordinary compute runs in a task of its own"
