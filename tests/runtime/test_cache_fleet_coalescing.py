"""One computation per fleet, against a real Redis: caches built as servers build them stand in
for replicas (each its own process's cache: own single-flight, metrics and subscription), and
the stand-in model counts its runs across them. Faults: a holder that fails, a slow holder, a
paused Redis, an open breaker."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from typing import Any

import pytest
from support.cache_doubles import Model, ask, metric, request, settings, shared_tier
from support.processes import RedisProcess
from support.waiting import wait_for_async

from cachefleet.runtime.cache.api import CacheDirectives, CacheRequest, CacheStatus, RowsCompute
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.fleet_lease import FleetLeases, lease_key
from cachefleet.runtime.cache.key import KeySpace, compute_key
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.cache.redis_tier import RedisTier
from cachefleet.runtime.cache.terms import on_terms
from cachefleet.runtime.config import RedisSettings
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor

#: Generous: a bound on a loaded 2-core machine, not a speed measurement.
MARGIN_S = 2.0


@pytest.fixture
async def replicas(redis_server: RedisProcess) -> AsyncIterator[Any]:
    """``await replicas(n, **cache_settings)``: n started caches on one Redis, subscribed."""
    async with AsyncExitStack() as stack:

        async def make(count: int, mode: str = "redis", **cache: Any) -> list[ReadThroughCache]:
            made = []
            for _ in range(count):
                built = build_cache(settings(mode, redis_server.url, **cache), RuntimeMetrics())
                assert isinstance(built, ReadThroughCache)
                await built.start()
                stack.push_async_callback(built.close)
                assert built.fleet is not None
                await asyncio.wait_for(built.fleet.listener.subscribed.wait(), 10)
                made.append(built)
            return made

        yield make


async def _runs(model: Model) -> int:
    return model.runs


def waits(cache: ReadThroughCache, result: str, model: str = "simple") -> float:
    return metric(
        cache.metrics,
        "cachefleet_cache_fleet_waits_total",
        model=model,
        version="1",
        result=result,
    )


def leases(cache: ReadThroughCache) -> float:
    return metric(cache.metrics, "cachefleet_cache_fleet_leases_total", model="simple", version="1")


@pytest.fixture
async def fleet_leases(redis_server: RedisProcess) -> AsyncIterator[FleetLeases]:
    tier = RedisTier(RedisSettings(url=redis_server.url, socket_timeout_s=0.2))
    await tier.start()
    yield FleetLeases(tier, KeySpace())
    await tier.close()


def key_of(value: int) -> Any:
    req = request(value)
    return compute_key(req.model, req.version, req.fingerprint, req.inputs, req.parameters)


async def test_a_lease_is_taken_once_among_contenders(fleet_leases: FleetLeases) -> None:
    key = key_of(1)
    taken = await asyncio.gather(*(fleet_leases.take(key, f"t{n}", 5.0) for n in range(20)))
    assert taken.count(True) == 1
    assert taken.count(False) == 19


async def test_only_the_holder_releases_its_lease(
    fleet_leases: FleetLeases, redis_server: RedisProcess
) -> None:
    key = key_of(2)
    name = lease_key(KeySpace(), key)
    assert await fleet_leases.take(key, "mine", 5.0) is True
    assert await fleet_leases.release(key, "theirs") is False
    assert redis_server.client().get(name) == b"mine"
    assert await fleet_leases.release(key, "mine") is True
    assert redis_server.client().exists(name) == 0


async def test_a_lease_expires_by_itself(
    fleet_leases: FleetLeases, redis_server: RedisProcess
) -> None:
    key = key_of(3)
    assert await fleet_leases.take(key, "slow", 0.05) is True
    assert 0 < redis_server.client().pttl(lease_key(KeySpace(), key)) <= 50
    await asyncio.sleep(0.1)
    assert await fleet_leases.take(key, "next", 5.0) is True


async def test_a_lease_request_answers_with_the_entry_once_it_is_there(
    fleet_leases: FleetLeases, redis_server: RedisProcess
) -> None:
    key = key_of(4)
    redis_server.client().set(KeySpace().redis_key(key), b"an entry")
    assert await fleet_leases.take(key, "t", 5.0) == b"an entry"
    assert redis_server.client().exists(lease_key(KeySpace(), key)) == 0


def test_lease_keys_share_the_entry_slot_and_escape_model_flushes() -> None:
    from redis.crc import key_slot

    keys = KeySpace("team/fleet")
    for value in range(50):
        key = key_of(value)
        entry, lease = keys.redis_key(key), lease_key(keys, key)
        assert lease.startswith(entry + ":")
        assert key_slot(lease.encode()) == key_slot(entry.encode())
        assert keys.holds(entry.encode(), "simple")
        assert not keys.holds(lease.encode(), "simple")


async def test_identical_misses_on_several_replicas_run_the_model_once(replicas: Any) -> None:
    caches = await replicas(4)
    model = Model(delay_s=0.3)
    req = request(10)
    answers = await asyncio.gather(*(ask(cache, req, model) for cache in caches))
    assert model.runs == 1
    statuses = sorted(status for _, status in answers)
    assert statuses == [CacheStatus.HIT_REDIS] * 3 + [CacheStatus.MISS]
    expected = answers[0][0][0].to_numpy()
    assert all((outputs[0].to_numpy() == expected).all() for outputs, _ in answers)
    assert sum(leases(cache) for cache in caches) == 1
    assert sum(waits(cache, "filled") for cache in caches) == 3


async def test_in_tiered_mode_a_waiter_keeps_the_fleet_answer_locally(replicas: Any) -> None:
    first, second = await replicas(2, mode="tiered")
    model = Model(delay_s=0.3)
    req = request(19)
    answers = await asyncio.gather(ask(first, req, model), ask(second, req, model))
    assert model.runs == 1
    assert sorted(status for _, status in answers) == [CacheStatus.HIT_REDIS, CacheStatus.MISS]
    assert {(await ask(cache, req, model))[1] for cache in (first, second)} == {
        CacheStatus.HIT_LOCAL
    }


async def test_a_waiter_is_answered_when_the_holder_publishes_not_at_its_deadline(
    replicas: Any,
) -> None:
    first, second = await replicas(2, fleet_max_wait_s=30)
    model = Model(delay_s=0.3)
    req = request(11)
    holder = asyncio.ensure_future(ask(first, req, model))
    await asyncio.sleep(0.1)  # the holder has its lease and computes
    started = time.monotonic()
    _, status = await ask(second, req, model)
    assert status is CacheStatus.HIT_REDIS
    assert time.monotonic() - started < 30 / 2  # woken by the message, far before the deadline
    await holder
    assert model.runs == 1


async def test_a_slow_holder_delays_waiters_no_longer_than_the_deadline(replicas: Any) -> None:
    first, second = await replicas(2, fleet_max_wait_s=0.5)
    slow, quick = Model(delay_s=5.0), Model()
    req = request(12)
    holder = asyncio.ensure_future(ask(first, req, slow))
    # The holder has the lease and computes (a fixed 0.1 s was not always enough under load).
    await wait_for_async(lambda: _runs(slow), "the holder to compute")
    started = time.monotonic()
    _, status = await ask(second, req, quick)
    assert status is CacheStatus.MISS
    assert time.monotonic() - started < 0.5 + MARGIN_S
    assert quick.runs == 1
    assert waits(second, "deadline") == 1
    holder.cancel()


async def test_when_the_holder_fails_a_waiter_takes_the_lease_and_computes(
    replicas: Any,
) -> None:
    first, second = await replicas(2, fleet_max_wait_s=30)
    failing, working = Model(delay_s=0.3, fail=True), Model()
    req = request(13)
    holder = asyncio.ensure_future(ask(first, req, failing))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    _, status = await ask(second, req, working)
    assert status is CacheStatus.MISS
    assert time.monotonic() - started < 30 / 2  # told at once, not at the deadline
    assert working.runs == 1
    assert waits(second, "lead") == 1
    with pytest.raises(RuntimeError):
        await holder


async def test_a_paused_redis_never_holds_a_request_past_the_deadline(
    replicas: Any, redis_server: RedisProcess
) -> None:
    caches = await replicas(3, fleet_max_wait_s=1.0)
    model = Model(delay_s=0.4)
    req = request(14)
    started = time.monotonic()
    burst = [asyncio.ensure_future(ask(cache, req, model)) for cache in caches]
    await asyncio.sleep(0.15)  # one holds the lease, the others wait
    assert redis_server.process is not None
    os.kill(redis_server.process.pid, signal.SIGSTOP)
    try:
        answers = await asyncio.wait_for(asyncio.gather(*burst), 1.0 + 0.4 + MARGIN_S)
        elapsed = time.monotonic() - started
        # And a new burst while Redis stays paused: computed at once, after failing lookups.
        late = await asyncio.wait_for(ask(caches[0], request(15), model), 1.0 + MARGIN_S)
    finally:
        os.kill(redis_server.process.pid, signal.SIGCONT)
    assert elapsed < 1.0 + 0.4 + MARGIN_S
    assert [status for _, status in answers].count(CacheStatus.MISS) >= 1
    assert late[1] is CacheStatus.MISS
    errors = sum(
        metric(cache.metrics, "cachefleet_cache_errors_total", tier="redis", kind="timeout")
        for cache in caches
    )
    assert errors >= 1  # counted, never raised
    expected = (request(14).inputs[0].to_numpy() * 2).tolist()
    assert all(outputs[0].to_numpy().tolist() == expected for outputs, _ in answers)


async def test_a_killed_redis_ends_the_waits_at_once_not_at_the_deadline(
    replicas: Any, redis_server: RedisProcess
) -> None:
    first, second = await replicas(2, fleet_max_wait_s=120)  # a look every 30 s at most
    model = Model(delay_s=1.0)
    req = request(20)
    holder = asyncio.ensure_future(ask(first, req, model))
    await asyncio.sleep(0.2)
    waiter = asyncio.ensure_future(ask(second, req, model))
    await asyncio.sleep(0.2)  # waiting for the holder's message
    started = time.monotonic()
    redis_server.kill()
    answers = await asyncio.wait_for(asyncio.gather(holder, waiter), 30)
    assert time.monotonic() - started < 10  # well before the first look without a message
    assert [status for _, status in answers] == [CacheStatus.MISS, CacheStatus.MISS]
    assert waits(second, "error") == 1


async def test_an_open_breaker_computes_at_once_without_a_lease(
    replicas: Any, redis_server: RedisProcess
) -> None:
    (cache,) = await replicas(1)
    breaker = shared_tier(cache).breakers.of("redis")
    breaker.reset_s = 60  # open for the whole test: no probe, however slow the machine
    for _ in range(breaker.failure_threshold):
        breaker.record_failure("test")
    model = Model()
    _, status = await ask(cache, request(16), model)
    assert status is CacheStatus.MISS
    assert leases(cache) == 0
    assert redis_server.client().keys("*:lease:*") == []


async def test_a_model_measured_cheap_is_not_coalesced(
    replicas: Any, redis_server: RedisProcess
) -> None:
    (cache,) = await replicas(1, fleet_min_compute_s=1.0)
    model = Model()
    await ask(cache, request(17), model)  # not measured yet: coalesced, and now measured
    assert leases(cache) == 1
    await ask(cache, request(18), model)
    assert leases(cache) == 1  # measured far below 1 s: no lease any more


async def test_off_builds_no_fleet(redis_server: RedisProcess) -> None:
    cache = build_cache(
        settings("redis", redis_server.url, fleet_coalescing="off"), RuntimeMetrics()
    )
    assert isinstance(cache, ReadThroughCache)
    assert cache.fleet is None


async def test_a_row_two_replicas_miss_together_runs_once_in_the_fleet(replicas: Any) -> None:
    """The row cache takes its turn in the fleet per row: a row both replicas' batches miss
    runs on one of them, and the other answers it from Redis; the rows only one batch holds
    run there. In tiered mode the waiter keeps the row it was answered locally."""
    first, second = await replicas(2, mode="tiered")
    runs: list[int] = []

    def batch(*values: int) -> tuple[list[CacheRequest], RowsCompute]:
        rows = [request(value) for value in values]

        async def compute(missing: Sequence[int]) -> list[list[Tensor]]:
            assert list(missing) == sorted(missing), "in the request's order"
            runs.extend(values[i] for i in missing)
            await asyncio.sleep(0.3)  # long enough for the other replica to wait for it
            return [
                [Tensor.from_numpy("OUTPUT0", rows[i].inputs[0].to_numpy() * 2)] for i in missing
            ]

        return rows, compute

    (rows_a, compute_a), (rows_b, compute_b) = batch(40, 41), batch(41, 42)
    answers = await asyncio.gather(
        first.get_rows_or_compute(rows_a, compute_a),
        second.get_rows_or_compute(rows_b, compute_b),
    )
    assert sorted(runs) == [40, 41, 42], "row 41 ran once in the fleet"
    for rows, answered in zip((rows_a, rows_b), answers, strict=True):
        for (outputs, _), row in zip(answered, rows, strict=True):
            assert (outputs[0].to_numpy() == row.inputs[0].to_numpy() * 2).all()
    statuses = sorted(status for answered in answers for _, status in answered)
    assert statuses == [CacheStatus.HIT_REDIS] + [CacheStatus.MISS] * 3
    assert sum(leases(cache) for cache in (first, second)) == 3
    row_hits = sum(
        metric(cache.metrics, "cachefleet_cache_row_hits_total", model="simple", version="1",
               tier="redis")
        for cache in (first, second)
    )  # fmt: skip
    assert row_hits == 1
    shared_row = [request(41)]
    for cache in (first, second):
        again = await cache.get_rows_or_compute(shared_row, compute_a)
        assert [status for _, status in again] == [CacheStatus.HIT_LOCAL]
    assert sorted(runs) == [40, 41, 42]


async def test_a_request_on_its_own_terms_neither_waits_for_a_lease_nor_takes_one(
    replicas: Any, redis_server: RedisProcess
) -> None:
    """A lease holder elsewhere runs on the neutral terms (no priority, no timeout of its
    own): a request on other terms is not held by it, nor holds the others."""
    first, second = await replicas(2, fleet_max_wait_s=60)
    req = request(19)
    gate = asyncio.Event()

    async def held() -> list[Tensor]:
        await gate.wait()
        return [Tensor.from_numpy("OUTPUT0", req.inputs[0].to_numpy() * 2)]

    holder = asyncio.ensure_future(first.get_or_compute(req, CacheDirectives(), held))

    async def leased() -> bool:
        return leases(first) == 1

    await wait_for_async(leased, "the first replica's lease")
    own_terms = Model()
    outputs, status, _ = await second.get_or_compute(
        req, CacheDirectives(), on_terms(own_terms.for_request(req), (2, 0.0))
    )
    assert (status, own_terms.runs) == (CacheStatus.MISS, 1)  # computed, not held
    assert leases(second) == 0
    assert sum(waits(second, result) for result in ("filled", "lead", "deadline", "error")) == 0
    gate.set()
    assert (await holder).outputs[0].to_numpy().tolist() == outputs[0].to_numpy().tolist()

    async def released() -> bool:
        return redis_server.client().keys("*:lease:*") == []

    await wait_for_async(released, "the holder's lease given back")  # the only one taken
