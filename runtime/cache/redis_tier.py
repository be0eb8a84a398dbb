"""The shared tier: Redis through redis-py's asyncio client, with every fault translated here.

One round trip per operation (``GET``; ``SET key value PX ttl``), and fewer under load: the
lookups and inserts issued during one event-loop turn share one pipelined round trip (see
``batch``). No client-side retries (a retry doubles the time a dead Redis costs; the circuit
breaker decides when to try again), and a blocking pool with a short wait, so a saturated
pool fails fast instead of queueing requests.
Every redis-py error leaves this module as a :class:`CacheTierError` with a ``kind``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from cachefleet.runtime.cache.batch import TurnBatch
from cachefleet.runtime.cache.errors import CacheTierError, ErrorKind
from cachefleet.runtime.cache.key import key_of_model, redis_model_pattern
from cachefleet.runtime.config import RedisSettings

logger = logging.getLogger(__name__)
_UNLINK_BATCH = 500
_SCAN_COUNT = 1000


def connection_options(
    settings: RedisSettings, *, socket_timeout_s: float | None
) -> dict[str, Any]:
    """Keyword arguments for a redis-py pool or client built from ``settings.url``."""
    assert settings.url is not None
    options: dict[str, Any] = {
        "socket_connect_timeout": settings.connect_timeout_s,
        "socket_timeout": socket_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "client_name": "cachefleet",
    }
    if settings.password is not None:
        options["password"] = settings.password.get_secret_value()
    if settings.url.startswith("rediss://"):
        options["ssl_ca_certs"] = _path(settings.tls_ca_file)
        options["ssl_certfile"] = _path(settings.tls_cert_file)
        options["ssl_keyfile"] = _path(settings.tls_key_file)
    return options


def _path(value: object) -> str | None:
    return None if value is None else str(value)


def error_kind(error: BaseException) -> ErrorKind:
    """How a Redis call failed, as the ``kind`` label and the breaker see it."""
    if isinstance(error, rexc.TimeoutError | asyncio.TimeoutError | TimeoutError):
        return "timeout"
    if isinstance(error, rexc.ConnectionError) and "No connection available" in str(error):
        return "pool"  # redis-py's BlockingConnectionPool gave up waiting
    if isinstance(error, rexc.ConnectionError | OSError):
        return "connection"
    if isinstance(error, rexc.OutOfMemoryError) or str(error).startswith("OOM"):
        return "oom"
    return "other"


def is_outage(kind: ErrorKind) -> bool:
    """Faults that mean Redis is unreachable. An OOM reply means it is up (lookups still work);
    a saturated pool means this process is busy, not that Redis is down."""
    return kind in ("timeout", "connection")


class RedisTier:
    """A pool of connections to one Redis, made in :meth:`start` (nothing connects before)."""

    def __init__(self, settings: RedisSettings) -> None:
        if settings.url is None:
            raise ValueError("RedisTier needs settings.url")
        self.settings = settings
        self.url = settings.url
        # The whole operation, pool wait included, never outlives one connect plus one read.
        self.deadline_s = settings.connect_timeout_s + 2 * settings.socket_timeout_s + 0.05
        self._client: aioredis.Redis | None = None
        self._batch = TurnBatch(self._send)

    async def start(self) -> None:
        options = connection_options(self.settings, socket_timeout_s=self.settings.socket_timeout_s)
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url,
            max_connections=self.settings.pool_size,
            timeout=max(self.settings.socket_timeout_s, 0.01),
            **options,
        )
        self._client = aioredis.Redis(connection_pool=pool)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose(close_connection_pool=True)

    @property
    def client(self) -> aioredis.Redis:
        if self._client is None:
            raise CacheTierError("the Redis tier is not started", "connection")
        return self._client

    async def get(self, key: str) -> bytes | None:
        value = await self._batch.run(("GET", key))
        if value is None or isinstance(value, bytes):
            return value
        raise CacheTierError(f"redis GET {key}: decoded reply, expected bytes", "other")

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        command: tuple[Any, ...] = ("SET", key, value)
        if ttl_s > 0:
            command += ("PX", int(ttl_s * 1000))
        await self._batch.run(command)

    async def _send(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """One round trip for ``commands``: the command itself, or a pipeline of them.

        A reply that is an error comes back as a :class:`CacheTierError` in its place; a fault
        of the round trip itself raises one for all of them.
        """
        name, key = commands[0][0], commands[0][1]
        async with self._translated(name if len(commands) == 1 else f"{name}+pipeline", key):
            if len(commands) == 1:
                reply = await self.client.execute_command(*commands[0])  # type: ignore[no-untyped-call]
                return [reply]
            pipeline = self.client.pipeline(transaction=False)
            for command in commands:
                pipeline.execute_command(*command)
            replies = await pipeline.execute(raise_on_error=False)
        return [
            self._error(command[0], command[1], reply) if isinstance(reply, Exception) else reply
            for command, reply in zip(commands, replies, strict=True)
        ]

    async def delete(self, key: str) -> None:
        async with self._translated("UNLINK", key):
            await self.client.unlink(key)

    async def ping(self) -> None:
        async with self._translated("PING", ""):
            await self.client.ping()

    async def publish(self, channel: str, message: str) -> None:
        async with self._translated("PUBLISH", channel):
            await self.client.publish(channel, message)

    async def flush_model(self, model: str) -> int:
        """UNLINK every key of ``model`` (SCAN MATCH in batches); returns how many went."""
        removed = 0
        batch: list[bytes] = []
        try:
            async for key in self.client.scan_iter(
                match=redis_model_pattern(model), count=_SCAN_COUNT
            ):
                if not key_of_model(key, model):
                    continue  # model "a" must not take "a:b" with it
                batch.append(key)
                if len(batch) >= _UNLINK_BATCH:
                    removed += int(await self.client.unlink(*batch))
                    batch.clear()
            if batch:
                removed += int(await self.client.unlink(*batch))
        except (rexc.RedisError, OSError) as error:
            raise self._error("SCAN/UNLINK", model, error) from None
        return removed

    @asynccontextmanager
    async def _translated(self, command: str, key: str) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(self.deadline_s):
                yield
        except (rexc.RedisError, OSError, TimeoutError) as error:
            raise self._error(command, key, error) from None

    def _error(self, command: str, key: str, error: BaseException) -> CacheTierError:
        kind = error_kind(error)
        detail = str(error) or type(error).__name__
        return CacheTierError(f"redis {command} {key} at {self.where}: {detail}", kind)

    @property
    def where(self) -> str:
        """The URL without credentials, for messages."""
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://{rest.rpartition('@')[2]}"
