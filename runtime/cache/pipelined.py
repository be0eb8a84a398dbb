"""One Redis connection that every command in flight shares: written at once, answered in order.

Redis answers the commands of a connection in the order it read them, so the hot commands (GET,
SET, UNLINK) need no connection of their own: a :class:`PipelinedConnection` writes each batch
as soon as it is handed over and matches the replies, parsed with hiredis, to the waiting batches
in order. Compared with redis-py's client that saves, per command, a pool checkout, a
``Connection`` round of ``send``/``read_response`` coroutines, a timeout context and the
wake-ups between them: what is left is one future per batch and the socket I/O.

Setting the connection up stays redis-py's (TLS, AUTH with an ACL user, SELECT, CLIENT SETNAME,
Sentinel's primary lookup): the connection is leased from a redis-py pool, already connected,
and its transport is taken over. It goes back to the pool, closed, when it fails or is retired.

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
from typing import Any

import hiredis
import redis.exceptions as rexc

logger = logging.getLogger(__name__)
Command = tuple[Any, ...]
#: A connected redis-py connection from a pool (``get_connection``), and giving it back.
Lease = Callable[[], Awaitable[Any]]
Release = Callable[[Any], Awaitable[None]]


class _Batch:
    """Commands written together, and the future their replies go to, in order."""

    __slots__ = ("count", "future", "replies", "tick")

    def __init__(self, count: int, future: asyncio.Future[list[Any]], tick: int) -> None:
        self.count = count
        self.future = future
        self.replies: list[Any] = []
        self.tick = tick


class _Link(asyncio.Protocol):
    """The protocol of one taken-over transport: writes batches, hands replies back in order."""

    def __init__(self, connection: Any, stall_s: float, on_end: Callable[[_Link], None]) -> None:
        self.connection = connection  # kept: redis-py closes the socket of a collected one
        self._loop = asyncio.get_running_loop()
        self._period_s = stall_s / 2
        self._on_end = on_end
        self._reader = hiredis.Reader(replyError=rexc.ResponseError)
        self._pending: deque[_Batch] = deque()
        self._transport: asyncio.Transport = connection._writer.transport
        self._transport.set_protocol(self)
        # Detached from redis-py, whose streams no longer see the socket: its pool would
        # otherwise wait for their close, and never see it. They are kept, though: a collected
        # StreamWriter closes its transport.
        self._streams = (connection._reader, connection._writer)
        connection._reader = connection._writer = None
        #: Whether the connection went back to its pool (once only).
        self.returned = False
        self.open = not self._transport.is_closing()
        self._retired = False
        #: Watchdog state: ticks so far, and the tick during which Redis last sent anything.
        self._tick = 0
        self._heard_at = 0
        self._watch: asyncio.TimerHandle | None = None
        self._due = 0.0

    def write(self, data: bytes, count: int, future: asyncio.Future[list[Any]]) -> None:
        if not self._pending and self._watch is None:
            self._arm()
        self._pending.append(_Batch(count, future, self._tick))
        self._transport.write(data)

    def retire(self) -> None:
        """Take no more commands; close once the waiting ones have their replies."""
        self._retired = True
        self.open = False
        if not self._pending:
            self._transport.close()

    def abort(self, error: Exception) -> None:
        self._fail(error)
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
        if self._retired and not pending:
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

    def __init__(
        self, lease: Lease, release: Release, *, stall_s: float, connect_timeout_s: float
    ) -> None:
        self._lease = lease
        self._release = release
        self._stall_s = stall_s
        self._connect_timeout_s = connect_timeout_s
        self._link: _Link | None = None
        #: Batches handed over while connecting, written once the connection is up.
        self._backlog: list[tuple[bytes, int, asyncio.Future[list[Any]]]] = []
        self._connecting: asyncio.Task[None] | None = None
        self._ending: set[asyncio.Task[None]] = set()

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

    def retire(self, keep: Callable[[Any], bool] = lambda connection: False) -> None:
        """Send later commands over a new connection (after a failover, to the new primary),
        unless ``keep`` says the redis-py connection in use is still the right one."""
        link = self._link
        if link is not None and not keep(link.connection):
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
            await self._give_back(link)
        for task in list(self._ending):
            with contextlib.suppress(Exception):
                await task

    async def _connect(self) -> None:
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                connection = await self._lease()
            link = _Link(connection, self._stall_s, self._ended)
            if not link.open:  # closed between the pool's check and the takeover
                await self._give_back(link)
                raise rexc.ConnectionError("Connection closed by server.")
        except BaseException as error:
            self._fail_backlog(error)
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
        task = asyncio.ensure_future(self._give_back(link))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _give_back(self, link: _Link) -> None:
        if link.returned:
            return
        link.returned = True
        try:
            await link.connection.disconnect(nowait=True)  # resets its parser for a reconnect
            await self._release(link.connection)
        except Exception as error:  # a pool closed meanwhile: nothing left to give back to
            logger.debug("redis: returning a closed connection failed: %r", error)
