"""The shared tier: Redis through redis-py's asyncio client, with every fault translated here.

One round trip per operation (``GET``; ``SET key value PX ttl``; ``UNLINK``), and fewer under
load: the commands issued during one event-loop turn for one shard share one pipelined round
trip (see ``batch``; one batch per shard, so a failing shard never fails another's commands).
In standalone and sentinel modes those batches go over one shared, pipelined connection
(``pipelined``): written at once, replies matched in order, no pool checkout, no task and no
timeout context per command; a stalled or dead connection fails every command waiting on it
within ``socket_timeout_s``. In cluster mode they go through redis-py's cluster client, which
routes keys to their nodes and follows MOVED/ASK. The lookups of a batched request's rows take
the same way, as one batch. The rest (PING, PUBLISH, the SCAN of a flush) uses redis-py's client
in every mode.

No client-side retries (a retry doubles the time a dead Redis costs; the circuit breaker
decides when to try again), and pools that fail fast when saturated instead of queueing
requests. The client itself (one server, a Redis Cluster or Sentinel) is built by
``redis_clients``; the commands here are the same for all three. Every redis-py error leaves
this module as a :class:`CacheTierError` with a ``kind``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import redis.exceptions as rexc

from cachefleet.runtime.cache.batch import TurnBatch
from cachefleet.runtime.cache.errors import CacheTierError, ErrorKind
from cachefleet.runtime.cache.key import KeySpace
from cachefleet.runtime.cache.pipelined import PipelinedConnection
from cachefleet.runtime.cache.redis_clients import RedisConnection, connect
from cachefleet.runtime.config import RedisSettings, redact

logger = logging.getLogger(__name__)
_UNLINK_BATCH = 500
_SCAN_COUNT = 1000
#: What a redis-py call is caught for: anything but cancellation. Besides its own errors, socket
#: errors and our deadline, the cluster client raises ``RedisClusterException`` (not a RedisError)
#: and, while its topology is changing, even AttributeError or KeyError (redis-py issues 3815,
#: 3835): none of it may reach a request, which only ever calls the commands below.
_FAULTS = (Exception,)


def error_kind(error: BaseException) -> ErrorKind:
    """How a Redis call failed, as the ``kind`` label and the breaker see it."""
    if isinstance(error, rexc.TimeoutError | asyncio.TimeoutError | TimeoutError):
        return "timeout"
    if isinstance(error, rexc.MaxConnectionsError) or (
        isinstance(error, rexc.ConnectionError) and "No connection available" in str(error)
    ):
        return "pool"  # every pooled connection is busy (the blocking pool gave up waiting)
    if isinstance(error, rexc.ConnectionError | OSError):
        return "connection"
    if isinstance(error, rexc.ClusterDownError | rexc.RedisClusterException):
        return "connection"  # the cluster cannot serve this key now: a shard is down
    if isinstance(error, rexc.OutOfMemoryError) or str(error).startswith("OOM"):
        return "oom"
    if not isinstance(error, rexc.RedisError):
        logger.debug("redis client raised %r", error, exc_info=error)
    return "other"


def _round_trip(commands: list[tuple[Any, ...]]) -> str:
    """What a round trip sent, for messages: ``GET``, or ``GET+pipeline`` for a batch."""
    return str(commands[0][0]) if len(commands) == 1 else f"{commands[0][0]}+pipeline"


@functools.cache
def _sha1(source: str) -> str:
    """The name Redis gives a script (its SHA-1), for ``EVALSHA``."""
    return hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


class RedisTier:
    """Connections to Redis (one server, a cluster or Sentinel's primary), made in :meth:`start`."""

    def __init__(self, settings: RedisSettings) -> None:
        if settings.url is None:
            raise ValueError("RedisTier needs settings.url")
        self.settings = settings
        self.url = settings.url
        # The whole operation, pool wait included, never outlives one connect plus one read.
        self.deadline_s = settings.connect_timeout_s + 2 * settings.socket_timeout_s + 0.05
        self._connection: RedisConnection | None = None
        #: The shared connection of the hot commands (none in cluster mode).
        self._pipe: PipelinedConnection | None = None
        #: One batch of same-turn commands per shard (one in all but cluster mode).
        self._batches: dict[str, TurnBatch] = {}

    async def start(self) -> None:
        self._connection = connect(
            self.settings,
            socket_timeout_s=self.settings.socket_timeout_s,
            pool_size=self.settings.pool_size,
        )
        await self._connection.start()
        self._pipe = self._connection.pipelined(
            stall_s=self.settings.socket_timeout_s, connect_timeout_s=self.deadline_s
        )

    async def close(self) -> None:
        if self._pipe is not None:
            pipe, self._pipe = self._pipe, None
            await pipe.close()
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.close()

    @property
    def client(self) -> Any:
        """``redis.asyncio.Redis`` or ``RedisCluster``; the commands used here exist on both."""
        if self._connection is None:
            raise CacheTierError("the Redis tier is not started", "connection")
        return self._connection.client

    def shard_of(self, key: str) -> str:
        """The node that serves ``key`` (in cluster mode), for per-shard circuit breakers."""
        if self._connection is None:
            return "redis"
        return self._connection.shard_of(key)

    def _batch(self, key: str) -> TurnBatch:
        shard = self.shard_of(key)
        batch = self._batches.get(shard)
        if batch is None:
            batch = self._batches[shard] = TurnBatch(self._send)
        return batch

    async def get(self, key: str) -> bytes | None:
        value = await self._batch(key).run(("GET", key))
        if value is None or isinstance(value, bytes):
            return value
        raise CacheTierError(f"redis GET {key}: decoded reply, expected bytes", "other")

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """GET of several keys in one round trip (a pipeline, not MGET, so that keys never need
        to share a cluster slot)."""
        if not keys:
            return []
        values = await self._send([("GET", key) for key in keys])
        for value in values:
            if isinstance(value, CacheTierError):
                raise value
        if all(value is None or isinstance(value, bytes) for value in values):
            return list(values)
        raise CacheTierError("redis GET: decoded reply, expected bytes", "other")

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self.set_soon(key, value, ttl_s)

    def set_soon(self, key: str, value: bytes, ttl_s: float) -> asyncio.Future[Any]:
        """:meth:`set` without a coroutine: the future fails with its :class:`CacheTierError`."""
        command: tuple[Any, ...] = ("SET", key, value)
        if ttl_s > 0:
            command += ("PX", int(ttl_s * 1000))
        return self._batch(key).submit(command)

    def _send(self, commands: list[tuple[Any, ...]]) -> Awaitable[list[Any]]:
        """One round trip for ``commands``: the command itself, or a pipeline of them.

        A reply that is an error comes back as a :class:`CacheTierError` in its place; a fault
        of the round trip itself raises one for all of them.
        """
        pipe = self._pipe
        if pipe is None:
            return self._send_through_client(commands)
        replies: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        pipe.send(commands).add_done_callback(functools.partial(self._translate, commands, replies))
        return replies

    def _translate(
        self,
        commands: list[tuple[Any, ...]],
        replies: asyncio.Future[list[Any]],
        sent: asyncio.Future[list[Any]],
    ) -> None:
        """The pipelined connection's replies, errors made :class:`CacheTierError`."""
        name, key = commands[0][0], commands[0][1]
        if sent.cancelled():
            replies.set_exception(CacheTierError(f"redis {name} {key}: cancelled", "other"))
            return
        fault = sent.exception()
        if fault is not None:
            replies.set_exception(self._error(_round_trip(commands), key, fault))
            return
        translated = sent.result()
        for index, reply in enumerate(translated):
            if isinstance(reply, Exception):
                if str(reply).startswith("READONLY") and self._pipe is not None:
                    self._pipe.retire()  # a demoted primary: ask Sentinel again
                translated[index] = self._error(commands[index][0], commands[index][1], reply)
        replies.set_result(translated)

    async def _send_through_client(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        key = commands[0][1]
        async with self._translated(_round_trip(commands), key):
            if len(commands) == 1:
                return [await self.client.execute_command(*commands[0])]
            pipeline = self.client.pipeline(transaction=False)
            for command in commands:
                pipeline.execute_command(*command)
            replies = await pipeline.execute(raise_on_error=False)
        return [
            self._error(command[0], command[1], reply) if isinstance(reply, Exception) else reply
            for command, reply in zip(commands, replies, strict=True)
        ]

    async def evaluate(self, source: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """The reply of the Lua script ``source`` run on the shard of ``keys`` (which share one
        slot in cluster mode), batched with that shard's other commands: ``EVALSHA``, then
        ``EVAL`` where Redis does not hold the script yet (a restarted Redis, another node)."""
        batch = self._batch(keys[0])
        try:
            return await batch.run(("EVALSHA", _sha1(source), len(keys), *keys, *args))
        except CacheTierError as error:
            if "NOSCRIPT" not in str(error) and "No matching script" not in str(error):
                raise  # (redis-py's clients drop the NOSCRIPT code from the message)
        return await batch.run(("EVAL", source, len(keys), *keys, *args))

    async def delete(self, key: str) -> None:
        await self.delete_soon(key)

    def delete_soon(self, key: str) -> asyncio.Future[Any]:
        """:meth:`delete` without a coroutine, queued behind the commands queued before it."""
        return self._batch(key).submit(("UNLINK", key))

    async def ping(self) -> None:
        async with self._translated("PING", ""):
            await self.client.ping()

    async def publish(self, channel: str, message: str) -> None:
        async with self._translated("PUBLISH", channel):
            await self.client.publish(channel, message)

    async def flush_model(self, model: str, keys: KeySpace) -> int:
        """UNLINK every key of ``model`` in the namespace of ``keys`` (SCAN MATCH in batches);
        returns how many went.

        In cluster mode redis-py's ``scan_iter`` walks every primary and ``unlink`` splits a
        batch by slot, so every shard is emptied; a shard that cannot be reached fails the flush.
        """
        removed = 0
        batch: list[bytes] = []
        try:
            async for key in self.client.scan_iter(
                match=keys.model_pattern(model), count=_SCAN_COUNT
            ):
                if not keys.holds(key, model):
                    continue  # model "a" must not take "a:b" with it
                batch.append(key)
                if len(batch) >= _UNLINK_BATCH:
                    removed += int(await self.client.unlink(*batch))
                    batch.clear()
            if batch:
                removed += int(await self.client.unlink(*batch))
        except _FAULTS as error:
            raise self._error("SCAN/UNLINK", model, error) from None
        return removed

    @asynccontextmanager
    async def _translated(self, command: str, key: str) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(self.deadline_s):
                yield
        except _FAULTS as error:
            raise self._error(command, key, error) from None

    def _error(self, command: str, key: str, error: BaseException) -> CacheTierError:
        kind = error_kind(error)
        detail = str(error) or type(error).__name__
        return CacheTierError(f"redis {command} {key} at {self.where}: {detail}", kind)

    @property
    def where(self) -> str:
        """The URL without credentials, for messages."""
        scheme, _, rest = redact(self.url).partition("://")
        where = f"{scheme}://{rest.rpartition('@')[2]}"
        if self.settings.mode == "cluster":
            return f"cluster seeded by {where}"
        if self.settings.mode == "sentinel":
            return f"primary {self.settings.sentinel_master!r} of Sentinel {where}"
        return where
