"""The shared, pipelined connection of the Redis tier, against a real Redis: replies matched in
order under concurrency, error replies failing only their own command, and a paused or killed
Redis failing every waiting command by the deadline while requests still succeed as misses."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rexc
from support.cache_doubles import Model, ask, metric, request, settings, shared_tier
from support.processes import RedisProcess, free_port, openssl

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.pipelined import PipelinedConnection
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.cache.redis_clients import StandaloneConnection
from cachefleet.runtime.cache.redis_tier import RedisTier
from cachefleet.runtime.config import RedisSettings
from cachefleet.runtime.metrics import RuntimeMetrics

SOCKET_TIMEOUT_S = 0.2


@pytest.fixture
async def tier(redis_server: RedisProcess) -> AsyncIterator[RedisTier]:
    made = RedisTier(RedisSettings(url=redis_server.url, socket_timeout_s=SOCKET_TIMEOUT_S))
    await made.start()
    yield made
    await made.close()


def cachefleet_connections(redis: RedisProcess) -> int:
    return sum(1 for client in redis.client().client_list() if client["name"] == "cachefleet")


@contextmanager
def paused(redis: RedisProcess) -> Iterator[None]:
    """SIGSTOP: the socket stays open and nothing answers, as a frozen node behaves."""
    assert redis.process is not None
    os.kill(redis.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(redis.process.pid, signal.SIGCONT)


async def test_concurrent_commands_share_one_connection_and_get_their_own_replies(
    tier: RedisTier, redis_server: RedisProcess
) -> None:
    async def round_trip(index: int) -> bytes | None:
        await asyncio.sleep(index % 7 * 0.001)  # spread over several loop turns
        await tier.set(f"own{index}", f"value{index}".encode(), 60)
        return await tier.get(f"own{index}")

    found = await asyncio.gather(*(round_trip(index) for index in range(300)))

    assert found == [f"value{index}".encode() for index in range(300)]
    assert cachefleet_connections(redis_server) == 1


async def test_an_error_reply_fails_only_its_own_command(
    tier: RedisTier, redis_server: RedisProcess
) -> None:
    redis_server.client().rpush("a-list", "x")  # GET on a list is a WRONGTYPE error reply
    await tier.set("plain", b"value", 60)

    results = await asyncio.gather(
        tier.get("plain"), tier.get("a-list"), tier.get("plain"), return_exceptions=True
    )

    assert results[0] == results[2] == b"value"
    assert isinstance(results[1], CacheTierError)
    assert results[1].kind == "other"
    assert "WRONGTYPE" in str(results[1])
    assert await tier.get("plain") == b"value"  # the connection is still in step


async def test_a_paused_redis_fails_every_waiting_command_by_the_deadline(
    tier: RedisTier, redis_server: RedisProcess
) -> None:
    await tier.set("k", b"v", 60)
    with paused(redis_server):
        started = time.monotonic()
        results = await asyncio.gather(
            *(tier.get(f"k{index}") for index in range(20)), return_exceptions=True
        )
        waited_s = time.monotonic() - started
    assert all(isinstance(result, CacheTierError) for result in results), results
    assert {result.kind for result in results if isinstance(result, CacheTierError)} == {"timeout"}
    assert waited_s < tier.deadline_s + 1.0  # not the minutes a frozen socket can hang
    assert await tier.get("k") == b"v"  # a new connection once Redis answers again


async def test_a_killed_redis_fails_the_commands_in_flight(
    tier: RedisTier, redis_server: RedisProcess
) -> None:
    await tier.set("k", b"v", 60)
    assert redis_server.process is not None
    os.kill(redis_server.process.pid, signal.SIGSTOP)
    waiting = [asyncio.ensure_future(tier.get(f"k{index}")) for index in range(10)]
    await asyncio.sleep(0.01)  # written, not answered
    assert not any(each.done() for each in waiting)
    redis_server.kill()  # SIGKILL ends a stopped process too
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(result, CacheTierError) for result in results), results
    assert {result.kind for result in results if isinstance(result, CacheTierError)} <= {
        "connection",
        "timeout",
    }


async def test_requests_are_misses_while_redis_is_paused(redis_server: RedisProcess) -> None:
    metrics = RuntimeMetrics()
    config = settings("redis", redis_server.url)
    config = config.model_copy(
        update={"redis": config.redis.model_copy(update={"socket_timeout_s": SOCKET_TIMEOUT_S})}
    )
    cache = build_cache(config, metrics)
    assert isinstance(cache, ReadThroughCache)
    await cache.start()
    try:
        model = Model()
        assert (await ask(cache, request(1), model))[1] is CacheStatus.MISS
        await cache.writes.join()
        with paused(redis_server):
            answers = await asyncio.wait_for(
                asyncio.gather(*(ask(cache, request(value), model) for value in range(2, 12))),
                timeout=10,
            )
        assert {status for _, status in answers} == {CacheStatus.MISS}
        assert metric(metrics, "cachefleet_cache_errors_total", tier="redis", kind="timeout") >= 1
        await cache.writes.join()
        deadline = time.monotonic() + 10
        while (await ask(cache, request(1), model))[1] is not CacheStatus.HIT_REDIS:
            assert time.monotonic() < deadline, "hits never came back after the pause"
            await asyncio.sleep(0.1)
    finally:
        await cache.close()


def uvloop_round_trip(settings: RedisSettings) -> list[bytes | None]:
    """SET then GET through a tier on uvloop, as the server runs it (its transports differ)."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> list[bytes | None]:
        tier = RedisTier(settings)
        await tier.start()
        try:
            await asyncio.gather(*(tier.set(f"uv{index}", b"v", 60) for index in range(3)))
            return list(await asyncio.gather(*(tier.get(f"uv{index}") for index in range(4))))
        finally:
            await tier.close()

    result: list[bytes | None] = uvloop.run(main())
    return result


def test_the_shared_connection_on_uvloop_over_tcp_tls_and_a_unix_socket(
    make_redis: Callable[..., RedisProcess], certificates: Path, tmp_path: Path
) -> None:
    tls_port = free_port()
    socket_path = tmp_path / "redis.sock"
    redis = make_redis("--tls-port", str(tls_port),
                       "--tls-cert-file", str(certificates / "node.crt"),
                       "--tls-key-file", str(certificates / "node.key"),
                       "--tls-ca-cert-file", str(certificates / "ca.crt"),
                       "--unixsocket", str(socket_path), "--unixsocketperm", "700")  # fmt: skip
    tls: dict[str, Any] = {
        "tls_ca_file": str(certificates / "ca.crt"),
        "tls_cert_file": str(certificates / "node.crt"),
        "tls_key_file": str(certificates / "node.key"),
        "connect_timeout_s": 2.0,
        "socket_timeout_s": 1.0,
    }
    for each in (
        RedisSettings(url=redis.url),
        RedisSettings(url=f"rediss://127.0.0.1:{tls_port}/0", **tls),
        RedisSettings(url=f"unix://{socket_path}?db=1"),
    ):
        assert uvloop_round_trip(each) == [b"v", b"v", b"v", None], each.url


async def test_the_inserts_of_one_drain_are_one_write_and_all_counted(
    redis_server: RedisProcess,
) -> None:
    metrics = RuntimeMetrics()
    # Write-behind batching: a fleet lease's holder would write its answer at once instead.
    cache = build_cache(settings("redis", redis_server.url, fleet_coalescing="off"), metrics)
    assert isinstance(cache, ReadThroughCache)
    tier = shared_tier(cache).store
    assert isinstance(tier, RedisTier)
    await tier.start()  # the tier, but not the write-behind workers: inserts queue up
    sent: list[list[tuple[Any, ...]]] = []
    send = tier._send

    def counting(commands: list[tuple[Any, ...]]) -> Any:
        sent.append(commands)
        return send(commands)

    tier._send = counting  # type: ignore[method-assign]
    try:
        for value in range(30):
            assert (await ask(cache, request(value), Model()))[1] is CacheStatus.MISS
        sent.clear()
        await cache.writes.start()
        await cache.writes.join()

        assert [len(commands) for commands in sent] == [30]
        assert {commands[0] for commands in sent[0]} == {"SET"}
        inserts = metric(metrics, "cachefleet_cache_inserts_total", model="simple", version="1",
                         tier="redis")  # fmt: skip
        assert inserts == 30
        assert (await ask(cache, request(29), Model()))[1] is CacheStatus.HIT_REDIS
    finally:
        await cache.close()


def _pipe(settings: RedisSettings) -> PipelinedConnection:
    return StandaloneConnection(settings, socket_timeout_s=1.0, pool_size=2).pipelined(
        stall_s=1.0, connect_timeout_s=2.0
    )


async def test_the_connection_says_hello_2_itself_with_auth_name_and_database(
    make_redis: Callable[..., RedisProcess],
) -> None:
    """Its own socket, its own HELLO 2 with an ACL user, SETNAME and SELECT: Redis lists it
    as a RESP2 client named cachefleet on the URL's database, and the key lands there."""
    redis = make_redis("--user", "app", "on", ">s3cret", "~*", "+@all", password="admin")
    url = f"redis://app:s3cret@127.0.0.1:{redis.port}/3"
    pipe = _pipe(RedisSettings(url=url))
    try:
        assert await pipe.send([("SET", "k", "v"), ("GET", "k")]) == [b"OK", b"v"]
        admin = aioredis.Redis(port=redis.port, username="app", password="s3cret", db=3)
        try:
            clients = [c for c in await admin.client_list() if c["name"] == "cachefleet"]
            assert [(c["resp"], c["db"], c["user"]) for c in clients] == [("2", "3", "app")]
            assert await admin.get("k") == b"v"
        finally:
            await admin.aclose()
    finally:
        await pipe.close()


async def test_a_wrong_password_fails_the_waiting_commands_as_a_connection_error(
    make_redis: Callable[..., RedisProcess],
) -> None:
    redis = make_redis(password="right")
    pipe = _pipe(RedisSettings(url=f"redis://:wrong@127.0.0.1:{redis.port}/0"))
    try:
        with pytest.raises(rexc.ConnectionError, match="WRONGPASS"):
            await pipe.send([("GET", "k")])
    finally:
        await pipe.close()


async def test_push_frames_never_mismatch_replies(redis_server: RedisProcess) -> None:
    """Client-side tracking makes Redis push invalidations at a RESP3 connection between the
    replies (as redis-py 8's RESP3 default with maintenance notifications does): on the tier's
    RESP2 connection no push is sent, so every later reply is its own command's."""
    pipe = _pipe(RedisSettings(url=redis_server.url))
    other = redis_server.client()
    try:
        keys = [f"tracked{index}" for index in range(50)]
        other.mset({key: f"value-{key}" for key in keys})
        await pipe.send([("CLIENT", "TRACKING", "ON")])
        await pipe.send([("GET", key) for key in keys])  # now tracked
        for key in keys:  # each write invalidates a key that connection has read
            other.set(key, f"value-{key}")
        for _ in range(5):
            replies = await pipe.send([("GET", key) for key in keys])
            assert replies == [f"value-{key}".encode() for key in keys]
        await pipe.send([("CLIENT", "TRACKING", "OFF")])
    finally:
        await pipe.close()


async def test_tls_checks_the_servers_name(
    make_redis: Callable[..., RedisProcess], certificates: Path
) -> None:
    """A certificate signed by the right CA but for another name is refused: the connection
    checks the hostname (redis-py before 6 did not by default)."""
    folder = certificates
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "other.key", "-out", "other.csr",
            "-subj", "/CN=elsewhere.example", cwd=folder)  # fmt: skip
    (folder / "other.ext").write_text("subjectAltName=DNS:elsewhere.example\n")
    openssl("x509", "-req", "-in", "other.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "other.crt", "-days", "2", "-extfile", "other.ext",
            cwd=folder)  # fmt: skip
    tls_port = free_port()
    redis = make_redis("--tls-port", str(tls_port),
                       "--tls-cert-file", str(folder / "other.crt"),
                       "--tls-key-file", str(folder / "other.key"),
                       "--tls-ca-cert-file", str(folder / "ca.crt"),
                       "--tls-auth-clients", "no")  # fmt: skip
    assert redis.port != tls_port
    pipe = _pipe(
        RedisSettings(url=f"rediss://127.0.0.1:{tls_port}/0", tls_ca_file=folder / "ca.crt")
    )
    try:
        with pytest.raises(rexc.ConnectionError, match="certificate"):
            await pipe.send([("PING",)])
    finally:
        await pipe.close()
