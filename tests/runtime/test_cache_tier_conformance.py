"""Every tier keeps the one tier interface (``tier.Tier``) the same way, and a tier the package
has never heard of is served like the shipped ones once it is a module and a line in the factory.

The conformance test runs on every tier: the local tier, the shared tier over Redis (a real
redis-server on a loopback port) and over the tests' own store (``support.dict_tier``). Then
that test-only tier is registered with the factory (``register_tier``, the factory's line) and
walked through the whole cache from outside: its hit is ``hit-dict``, counted as a hit by the
request ledger, in ``/metrics`` and admission's figures under its name, and promoted to the
local tier in front of it; a flush reaches it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import dict_tier
from support.cache_doubles import Model, ask, key_of, metric, request, settings
from support.processes import RedisProcess

from cachefleet.runtime.cache.admission import AdmissionPolicy
from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.cache.breakers import ShardBreakers
from cachefleet.runtime.cache.factory import TIER_KINDS, build_cache, register_tier
from cachefleet.runtime.cache.flush_marks import FlushMarks
from cachefleet.runtime.cache.key import KeySpace
from cachefleet.runtime.cache.local import LocalTier
from cachefleet.runtime.cache.metrics import CacheMetrics
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.cache.shared_tier import SharedTier
from cachefleet.runtime.cache.store import Store
from cachefleet.runtime.cache.tier import Tier
from cachefleet.runtime.cache.writebehind import WriteBehind
from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.repository import load_repository
from cachefleet.runtime.service import InFlight, StatisticsRegistry
from cachefleet.runtime.service.request_ledger import RequestLedger

TIERS = ("local", "redis", "dict")


class Clock:
    """Wall and monotonic time that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Subject:
    """A tier under test, and how to wait until what it was given is in place."""

    tier: Tier
    settle: Callable[[], Awaitable[None]]


@pytest.fixture(scope="module")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    redis = RedisProcess(tmp_path_factory.mktemp("redis"))
    redis.start()
    yield redis
    redis.stop()


@pytest.fixture(params=TIERS)
async def subject(
    request: pytest.FixtureRequest, shared_redis: RedisProcess, clock: Clock
) -> AsyncIterator[Subject]:
    name: str = request.param
    if name == "local":
        yield Subject(LocalTier(1 << 20, clock=clock), _nothing)
        return
    store: Store
    if name == "redis":
        from cachefleet.runtime.cache.redis_tier import RedisTier

        store = RedisTier(settings("redis", shared_redis.url).redis)
    else:
        store = dict_tier.DictStore(clock)
    writes = WriteBehind(64)
    tier = SharedTier(
        store,
        CacheMetrics(RuntimeMetrics(), (name,)),
        breakers=ShardBreakers(3, 0.2),
        writes=writes,
        marks=FlushMarks(),
        admission=AdmissionPolicy("always", (name,)),
        keys=KeySpace(f"conformance/{name}"),  # each tier its own keys in one Redis
        wall_clock=clock,
        name=name,
    )
    await tier.start()
    await writes.start()
    try:
        yield Subject(tier, writes.join)
    finally:
        await writes.close()
        await tier.close()


def test_the_suite_runs_on_every_tier_the_server_has() -> None:
    """A tier added to the server (``factory.TIER_KINDS``) is not covered until it is here."""
    assert {kind.name for kind in TIER_KINDS} <= set(TIERS)


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def _nothing() -> None:
    return None


async def _looked_up(tier: Tier, value: int, model: str = "simple") -> list[int] | None:
    found = tier.lookup(key_of(request(value, model=model)))
    if found is not None and not isinstance(found, tuple):
        found = await found
    return None if found is None else [int(each) for each in found.outputs[0].to_numpy().ravel()]


async def test_every_tier_keeps_the_one_interface(subject: Subject, clock: Clock) -> None:
    tier, settle = subject.tier, subject.settle
    assert tier.name in TIERS
    before = tier.figures()
    key = key_of(request(1))
    assert tier.asks(key), "a healthy tier is asked"
    assert await _looked_up(tier, 1) is None, "an absent key is a miss"

    for value in (1, 2, 3):
        assert tier.insert(key_of(request(value)), request(value).inputs, 60)
    assert tier.insert(key_of(request(7, model="other")), request(7).inputs, 60)
    await settle()
    assert await _looked_up(tier, 2) == [2] * 16, "what went in comes out"
    identity = tier.entry(key_of(request(2)))
    assert (identity is None) == tier.shared, "only an in-process tier vouches for entries"

    many = tier.lookup_many([key_of(request(value)) for value in (1, 9, 3)])
    if not isinstance(many, list):
        many = await many
    assert [found is not None for found in many] == [True, False, True], "many at once"

    tier.delete(key_of(request(3)))
    await settle()
    assert await _looked_up(tier, 3) is None, "a deleted entry is gone"

    removed = tier.flush("simple")
    removed = removed if isinstance(removed, int) else await removed
    assert removed == 2, "a flush drops exactly the model's entries (1 and 2)"
    assert await _looked_up(tier, 1) is None
    assert await _looked_up(tier, 7, model="other") == [7] * 16, "another model's entry stays"

    assert tier.insert(key_of(request(5)), request(5).inputs, 60)
    await settle()
    clock.now += 61
    assert await _looked_up(tier, 5) is None, "an entry past its TTL is never served"

    after = tier.figures()
    assert after.hits - before.hits >= 4, "hits: of 2, two of the three, the other model"
    assert after.misses - before.misses >= 4


@pytest.fixture
def with_dict_tier() -> Iterator[None]:
    """The test-only tier registered with the factory (its one line), and taken out after."""
    dict_tier.STORE.entries.clear()
    unregister = register_tier(dict_tier.KIND, after="local")
    yield
    unregister()


@pytest.mark.usefixtures("with_dict_tier")
async def test_a_tier_added_outside_the_package_is_served_as_any_tier(
    model_repository: Path,
) -> None:
    metrics = RuntimeMetrics()
    cache = build_cache(settings("local"), metrics)
    assert isinstance(cache, ReadThroughCache)
    assert [tier.name for tier in cache.tiers] == ["local", "dict"]
    await cache.start()
    try:
        model = Model()
        assert (await ask(cache, request(4), model))[1] is CacheStatus.MISS
        await cache.writes.join()
        assert dict_tier.STORE.entries, "the miss was kept in the new tier"
        cache.near[0].flush("simple")  # the local copy goes; the shared one stays

        status = (await ask(cache, request(4), model))[1]
        assert status == "hit-dict"
        assert status is CacheStatus.hit("dict")
        assert status.tier == "dict"
        assert status.is_hit
        assert (await ask(cache, request(4), model))[1] is CacheStatus.HIT_LOCAL, "promoted"
        assert model.runs == 1

        labels = {"model": "simple", "version": "1", "tier": "dict"}
        assert metric(metrics, "cachefleet_cache_hits_total", **labels) == 1
        assert metric(metrics, "cachefleet_cache_tier_hits_total", tier="dict") == 1
        assert "dict" in cache.admission.tiers
        assert {each.tier for each in cache.admission.figures("simple", "1")} == {"local", "dict"}

        await cache.flush("simple")
        assert not dict_tier.STORE.entries, "a flush reaches the new tier"
        assert dict_tier.STORE.published, "and tells the other replicas through it"
    finally:
        await cache.close()

    # The request ledger counts its hit as a hit, as it counts hit-local and hit-redis.
    repository = load_repository(model_repository, ModelSettings(execution_provider="cpu"))
    ledger = RequestLedger(RuntimeMetrics(), StatisticsRegistry(), InFlight())
    passage = ledger.open(repository.get("simple"), "http", 0)
    passage.cache_status = status
    ledger.succeeded(passage)
    assert ledger.statistics.for_version("simple", "1").cache_hit.count == 1


def test_statuses_are_made_from_tier_names_and_the_shipped_ones_stay_exact() -> None:
    assert [str(each) for each in (CacheStatus.HIT_LOCAL, CacheStatus.HIT_REDIS)] == [
        "hit-local",
        "hit-redis",
    ]
    assert CacheStatus.hit("local") is CacheStatus.HIT_LOCAL
    assert CacheStatus.of("miss") is CacheStatus.MISS
    assert CacheStatus.MISS.tier is None
    assert not CacheStatus.PARTIAL.is_hit
    assert not CacheStatus.BYPASS.is_hit
    assert CacheStatus.HIT_REDIS.value == "hit-redis"
    assert type(CacheStatus.MISS.value) is str
