"""Live Redis settings and INFO figures against a real redis-server with a password."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cachefleet.operator.reconcile.redis_live import (
    RedisAddress,
    RedisLiveError,
    apply_memory_settings,
    read_cache_figures,
)

PASSWORD = "pa55word"


def address(redis: object, password: str | None = PASSWORD) -> RedisAddress:
    return RedisAddress("127.0.0.1", redis.port, password, 1.0)  # type: ignore[attr-defined]


def test_config_set_changes_maxmemory_and_policy_live(make_redis: Callable[..., object]) -> None:
    redis = make_redis("--maxmemory", "100mb", password=PASSWORD)
    client = redis.client()  # type: ignore[attr-defined]
    client.set("kept", "across the change")
    changed = apply_memory_settings(
        address(redis), maxmemory_bytes=64 * 2**20, policy="allkeys-lfu"
    )
    assert changed is True
    assert client.config_get("maxmemory")["maxmemory"] == str(64 * 2**20)
    assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "allkeys-lfu"
    assert client.get("kept") == b"across the change"  # no restart: the cache is still there
    again = apply_memory_settings(address(redis), maxmemory_bytes=64 * 2**20, policy="allkeys-lfu")
    assert again is False


def test_wrong_password_is_an_error_not_a_crash(make_redis: Callable[..., object]) -> None:
    redis = make_redis(password=PASSWORD)
    with pytest.raises(RedisLiveError, match=r"CONFIG SET on Redis at 127\.0\.0\.1"):
        apply_memory_settings(address(redis, "wrong"), maxmemory_bytes=1, policy="noeviction")


def test_unreachable_redis_is_an_error(make_redis: Callable[..., object]) -> None:
    redis = make_redis(password=PASSWORD)
    redis.kill()  # type: ignore[attr-defined]
    with pytest.raises(RedisLiveError):
        apply_memory_settings(address(redis), maxmemory_bytes=1, policy="noeviction")
    with pytest.raises(RedisLiveError):
        read_cache_figures(address(redis))


def test_info_figures_count_hits_misses_and_memory(make_redis: Callable[..., object]) -> None:
    redis = make_redis("--maxmemory", "50mb", password=PASSWORD)
    client = redis.client()  # type: ignore[attr-defined]
    client.set("a", "1")
    for _ in range(3):
        client.get("a")
    client.get("missing")
    figures = read_cache_figures(address(redis))
    assert (figures.keyspace_hits, figures.keyspace_misses) == (3, 1)
    assert figures.hit_ratio == pytest.approx(0.75)
    assert figures.maxmemory_bytes == 50 * 2**20  # redis reads "mb" as MiB
    assert figures.used_memory_bytes > 0
    status = figures.to_status()
    assert status["hitRatio"] == "0.75"
    assert status["evictedKeys"] == 0
