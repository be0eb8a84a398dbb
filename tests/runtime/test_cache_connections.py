"""Ways to reach Redis: TLS (rediss:// with CA, client certificate and key), a unix socket,
a password from the settings, an ACL user in the URL; and a wrong credential never fails a
request."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.cache_doubles import Model, ask, metric, request
from support.processes import RedisProcess, free_port

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics

MakeRedis = Callable[..., RedisProcess]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


async def round_trip(redis: dict[str, Any]) -> tuple[list[CacheStatus], RuntimeMetrics]:
    """Two tiered caches on ``redis`` settings, one request each: a miss, then a Redis hit."""
    statuses = []
    metrics = RuntimeMetrics()
    settings = RuntimeSettings.model_validate({"cache": {"mode": "tiered"}, "redis": redis})
    for _ in range(2):
        cache = build_cache(settings, metrics)
        assert isinstance(cache, ReadThroughCache)
        await cache.start()
        try:
            statuses.append((await ask(cache, request(1), Model()))[1])
            await cache.writes.join()
        finally:
            await cache.close()
    return statuses, metrics


async def test_tls_with_client_certificate(make_redis: MakeRedis, certificates: Path) -> None:
    tls_port = free_port()
    make_redis("--tls-port", str(tls_port), "--tls-cert-file", str(certificates / "node.crt"),
               "--tls-key-file", str(certificates / "node.key"),
               "--tls-ca-cert-file", str(certificates / "ca.crt"))  # fmt: skip
    statuses, _ = await round_trip(
        {
            "url": f"rediss://127.0.0.1:{tls_port}/0",
            "tls_ca_file": str(certificates / "ca.crt"),
            "tls_cert_file": str(certificates / "node.crt"),
            "tls_key_file": str(certificates / "node.key"),
            "connect_timeout_s": 2.0,
            "socket_timeout_s": 1.0,
        }
    )
    assert statuses == [CacheStatus.MISS, CacheStatus.HIT_REDIS]


async def test_tls_with_an_untrusted_server_is_a_miss(
    make_redis: MakeRedis, certificates: Path, tmp_path: Path
) -> None:
    tls_port = free_port()
    make_redis("--tls-port", str(tls_port), "--tls-cert-file", str(certificates / "node.crt"),
               "--tls-key-file", str(certificates / "node.key"),
               "--tls-ca-cert-file", str(certificates / "ca.crt"))  # fmt: skip
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other.key", "-out",
            "other.crt", "-days", "2", "-subj", "/CN=other-ca", cwd=tmp_path)  # fmt: skip
    statuses, metrics = await round_trip(
        {
            "url": f"rediss://127.0.0.1:{tls_port}/0",
            "tls_ca_file": str(tmp_path / "other.crt"),
            "tls_cert_file": str(certificates / "node.crt"),
            "tls_key_file": str(certificates / "node.key"),
            "connect_timeout_s": 2.0,
        }
    )
    assert statuses == [CacheStatus.MISS, CacheStatus.MISS]
    assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="connection") >= 1


async def test_unix_socket(make_redis: MakeRedis, tmp_path: Path) -> None:
    socket_path = tmp_path / "redis.sock"
    make_redis("--unixsocket", str(socket_path), "--unixsocketperm", "700")
    statuses, _ = await round_trip({"url": f"unix://{socket_path}?db=1"})
    assert statuses == [CacheStatus.MISS, CacheStatus.HIT_REDIS]


async def test_password_from_settings(make_redis: MakeRedis) -> None:
    redis = make_redis(password="s3cret")
    url = f"redis://127.0.0.1:{redis.port}/0"
    statuses, _ = await round_trip({"url": url, "password": "s3cret"})
    assert statuses == [CacheStatus.MISS, CacheStatus.HIT_REDIS]


async def test_wrong_password_is_a_miss_and_counted(make_redis: MakeRedis) -> None:
    redis = make_redis(password="s3cret")
    url = f"redis://127.0.0.1:{redis.port}/0"
    statuses, metrics = await round_trip({"url": url, "password": "wrong"})
    assert statuses == [CacheStatus.MISS, CacheStatus.MISS]
    assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="connection") >= 1


async def test_acl_user_in_the_url(make_redis: MakeRedis) -> None:
    redis = make_redis()
    redis.client().acl_setuser(
        "fleet", enabled=True, passwords=["+pw"], keys=["cachefleet:*"],
        channels=["cachefleet:*"], commands=["+@all"],
    )  # fmt: skip
    statuses, _ = await round_trip({"url": f"redis://fleet:pw@127.0.0.1:{redis.port}/0"})
    assert statuses == [CacheStatus.MISS, CacheStatus.HIT_REDIS]
