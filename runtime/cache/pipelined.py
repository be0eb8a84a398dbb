"""One Redis connection that every command in flight shares: written at once, answered in order.

Redis answers the commands of a connection in the order it read them, so the hot commands (GET,
SET, UNLINK) need no connection of their own: a :class:`PipelinedConnection` writes each batch
as soon as it is handed over and matches the replies, parsed with hiredis, to the waiting batches
in order. Compared with redis-py's client that saves, per command, a pool checkout, a
``Connection`` round of ``send``/``read_response`` coroutines, a timeout context and the
wake-ups between them: what is left is one future per batch and the socket I/O.

The connection is the runtime's own: opened on its own socket (TCP, TLS or unix) to the node an
:class:`~cachefleet.runtime.cache.redis_endpoint.Endpoint` names (Sentinel's primary is asked
for on each connect), with its own ``HELLO 2``/``AUTH``/``SELECT`` (see ``redis_endpoint``), so
it reaches into no private part of redis-py and its replies are RESP2 whatever redis-py
defaults to: no push frame can arrive and be taken for the reply of a command. It is closed when
it fails or is retired, and opened again by the next command.

A dead or stalled connection fails every waiting batch at once: a watchdog ticks every half
``stall_s`` while replies are awaited, and when three ticks have passed since both the oldest
waiting batch was written and Redis last sent a byte (``stall_s`` to 1.5 ``stall_s`` of
silence, as redis-py's socket timeout allows one read), the connection is aborted and every
waiting batch fails with a timeout. Replies that come after that are never matched to the wrong
command, because the connection is gone. An error reply is the reply of its own command only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import hiredis
import redis.exceptions as rexc

from cachefleet.runtime.cache.redis_endpoint import Endpoint

logger = logging.getLogger(__name__)
Command = tuple[Any, ...]
#: The node to connect to now (Sentinel mode asks which node is the primary).
Locate = Callable[[], Awaitable[Endpoint]]


class _Batch:
    """Commands written together, and the future their replies go to, in order."""

    __slots__ = ("count", "future", "replies", "tick")

    def __init__(self, count: int, future: asyncio.Future[list[Any]], tick: int) -> None:
        self.count = count
        self.future = future
        self.replies: list[Any] = []
        self.tick = tick


class _Link(asyncio.Protocol):
    """The protocol of one connection: writes batches, hands replies back in order."""

    def __init__(self, address: tuple[str, int], stall_s: float, on_end: Callable[[_Link], None]):
        #: The node's address (Sentinel mode checks it is still the primary's).
        self.address = address
        self._loop = asyncio.get_running_loop()
        self._period_s = stall_s / 2
        self._on_end = on_end
        self._reader = hiredis.Reader(replyError=rexc.ResponseError)
        self._pending: deque[_Batch] = deque()
        self._transport: asyncio.Transport | None = None
        self.open = False
        self._retired = False
        #: Watchdog state: ticks so far, and the tick during which Redis last sent anything.
        self._tick = 0
        self._heard_at = 0
        self._watch: asyncio.TimerHandle | None = None
        self._due = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is one without being an asyncio.Transport subclass).
        self._transport = cast(asyncio.Transport, transport)
        self.open = True

    def write(self, data: bytes, count: int, future: asyncio.Future[list[Any]]) -> None:
        assert self._transport is not None
        if not self._pending and self._watch is None:
            self._arm()
        self._pending.append(_Batch(count, future, self._tick))
        self._transport.write(data)

    async def ask(self, commands: Sequence[Command]) -> list[Any]:
        """Replies of ``commands`` (the connection's own set-up), errors as values."""
        future: asyncio.Future[list[Any]] = self._loop.create_future()
        self.write(b"".join([hiredis.pack_command(c) for c in commands]), len(commands), future)
        return await future

    def retire(self) -> None:
        """Take no more commands; close once the waiting ones have their replies."""
        self._retired = True
        self.open = False
        if not self._pending and self._transport is not None:
            self._transport.close()

    def abort(self, error: Exception) -> None:
        self._fail(error)
        if self._transport is not None:
            self._transport.abort()

    def data_received(self, data: bytes) -> None:
        self._heard_at = self._tick
        reader = self._reader
        reader.feed(data)
        pending = self._pending
        try:
            while (reply := reader.gets()) is not False:
                batch = pending[0]
                batch.replies.append(reply)
                if len(batch.replies) == batch.count:
                    pending.popleft()
                    if not batch.future.done():
                        batch.future.set_result(batch.replies)
        except (hiredis.ProtocolError, IndexError) as error:  # garbage, or a reply nobody asked
            self.abort(rexc.ConnectionError(f"unreadable reply from Redis: {error!r}"))
            return
        if self._retired and not pending and self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        detail = f": {exc}" if exc is not None else ""
        self._fail(rexc.ConnectionError(f"Connection closed by server{detail}."))
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self._on_end(self)

    def _fail(self, error: Exception) -> None:
        self.open = False
        pending, self._pending = self._pending, deque()
        for batch in pending:
            if not batch.future.done():
                batch.future.set_exception(error)

    def _arm(self) -> None:
        self._due = self._loop.time() + self._period_s
        self._watch = self._loop.call_at(self._due, self._check)

    def _check(self) -> None:
        self._watch = None
        if not self._pending:
            return
        late = self._loop.time() - self._due > self._period_s
        self._tick += 1
        stalled = self._tick - max(self._pending[0].tick, self._heard_at) >= 3
        if stalled and not late:  # a late tick means the loop was busy, not that Redis was
            self.abort(rexc.TimeoutError("Timeout reading from Redis (no reply in time)"))
            return
        self._arm()


class PipelinedConnection:
    """Commands to one Redis node over one shared connection, (re)connected when needed."""

    def __init__(self, locate: Locate, *, stall_s: float, connect_timeout_s: float) -> None:
        self._locate = locate
        self._stall_s = stall_s
        self._connect_timeout_s = connect_timeout_s
        self._link: _Link | None = None
        #: Batches handed over while connecting, written once the connection is up.
        self._backlog: list[tuple[bytes, int, asyncio.Future[list[Any]]]] = []
        self._connecting: asyncio.Task[None] | None = None

    def send(self, commands: Sequence[Command]) -> asyncio.Future[list[Any]]:
        """A future of ``commands``' replies in order, each a value or the error it got."""
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        data = b"".join([hiredis.pack_command(command) for command in commands])
        link = self._link
        if link is not None and link.open:
            link.write(data, len(commands), future)
            return future
        self._backlog.append((data, len(commands), future))
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        return future

    def retire(self, keep: Callable[[tuple[str, int]], bool] = lambda address: False) -> None:
        """Send later commands over a new connection (after a failover, to the new primary),
        unless ``keep`` says the node of the connection in use is still the right one."""
        link = self._link
        if link is not None and not keep(link.address):
            self._link = None
            link.retire()

    async def close(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        link, self._link = self._link, None
        if link is not None:
            link.abort(rexc.ConnectionError("the Redis tier is closing"))

    async def _connect(self) -> None:
        link: _Link | None = None
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                node = await self._locate()
                link = _Link(node.address, self._stall_s, self._ended)
                await node.open(lambda: link)
                await _introduce(link, node)
        except BaseException as error:
            if link is not None:
                link.abort(rexc.ConnectionError("the connection could not be set up"))
            self._fail_backlog(_connect_error(error))
            if not isinstance(error, Exception):
                raise
            return
        finally:
            self._connecting = None
        self._link = link
        backlog, self._backlog = self._backlog, []
        for data, count, future in backlog:
            link.write(data, count, future)

    def _fail_backlog(self, error: BaseException) -> None:
        backlog, self._backlog = self._backlog, []
        failure = error if isinstance(error, Exception) else rexc.ConnectionError("cancelled")
        for _, _, future in backlog:
            if not future.done():
                future.set_exception(failure)

    def _ended(self, link: _Link) -> None:
        if self._link is link:
            self._link = None


async def _introduce(link: _Link, node: Endpoint) -> None:
    """``HELLO 2`` (with AUTH and SETNAME), or what it does on a Redis without it; then SELECT.
    Raises the error reply that refused the connection (a wrong password, say)."""
    (hello,) = await link.ask([node.hello()])
    commands: list[Command] = []
    if isinstance(hello, rexc.ResponseError):
        if "unknown command" not in str(hello).lower():
            raise hello
        commands = node.without_hello()
    if node.db:
        commands.append(("SELECT", node.db))
    for reply in await link.ask(commands) if commands else ():
        if isinstance(reply, rexc.ResponseError):
            raise reply


def _connect_error(error: BaseException) -> BaseException:
    """What the waiting commands fail with: a refusal by Redis or a socket error as a
    connection error (the tier counts it so), a timeout as a timeout."""
    if isinstance(error, TimeoutError):
        return rexc.TimeoutError("Timeout connecting to Redis")
    if isinstance(error, rexc.ResponseError | OSError):
        return rexc.ConnectionError(f"Error connecting to Redis: {error}")
    return error
