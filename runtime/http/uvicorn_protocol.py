"""Everything of the HTTP path that reaches below ASGI, in one module: uvicorn's protocols with
the connection guard. Nothing else in the project imports uvicorn's internals.

ASGI cannot express it: an application sees a request only once its head is in, and cannot
close a connection whose client stalls before that.

uvicorn closes a keep-alive connection that stays idle, and nothing else: a client that sends
its request head one byte a second, or its body that slowly, holds a connection (and whatever
it has sent) for as long as it likes. :class:`ConnectionGuard` adds, per connection:

- a **head deadline**: a request head must arrive whole within ``head_timeout_s`` of its first
  byte (of the connection, for the first request), and within :data:`MAX_HEAD_BYTES`;
- a **body deadline**: a body that delivers less than :data:`MIN_BODY_PROGRESS` bytes in
  ``body_timeout_s`` (while the server is reading it) is cut off, and so is one not whole
  ``body_deadline_s`` after its head, however steadily it trickles (a client may not hold a
  request, and its share of the budget of bytes in flight, for ever);
- a **connection cap**: past ``max_connections`` open connections, a new one is answered 503
  with ``Retry-After`` and closed before its request is read.

A cut-off connection is simply closed, as uvicorn closes an idle one; a request whose body was
being read then sees the client gone. The checks run on one timer per connection, every
:func:`tick_s` seconds, so a cut comes within a tick of its deadline; the hot path pays one
addition per ``data_received``.

(A transport that held a response's head back to write it with its body, saving a system call
per answer, lived here too; measured side by side under the same load it made no difference
beyond the noise, so it went: ``bench/results/2026-11-28-http-path.md``.)

The internals read here: the protocols' ``connections``, ``cycle`` (``more_body``,
``response_complete``), ``flow`` (``read_paused``), ``transport``, ``loop``, ``app`` and
``on_response_complete``. That is why uvicorn is bounded in ``pyproject.toml`` to the minor
releases the dependency-floor test runs (``tests/test_dependency_floors.py``: its lowest
release, and the development environment's highest);
``tests/runtime/test_http_connection_guard.py`` and ``tests/e2e/test_http_limits.py`` fail when
they move. The classes are defined at module level because uvicorn pickles the protocol class
to its worker processes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from cachefleet.runtime.config import LimitSettings

#: The most a request head may hold (request line and headers), as uvicorn's h11 default is
#: 16 KiB; tritonclient's heads are a few hundred bytes.
MAX_HEAD_BYTES = 64 * 1024
#: What a body must deliver per ``body_timeout_s`` to count as alive.
MIN_BODY_PROGRESS = 1024
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_BUSY_BODY = b'{"error":"too many connections (--max-connections); retry later"}'
BUSY_RESPONSE = _BUSY % (len(_BUSY_BODY), _BUSY_BODY)


def tick_s(limits: LimitSettings) -> float:
    """How often a connection's deadlines are checked: a quarter of the shortest, at most 1 s."""
    shortest = min(limits.head_timeout_s, limits.body_timeout_s, limits.body_deadline_s)
    return max(0.05, min(1.0, shortest / 4))


class ConnectionGuard:
    """Mixed in before a uvicorn HTTP protocol class. The limits are the served application's
    (``app.limits``, which :class:`~cachefleet.runtime.http.infer_front.InferFront` has):
    uvicorn builds protocols from a class it pickles to its worker processes, so the class
    itself cannot carry them."""

    limits: LimitSettings = LimitSettings()
    # uvicorn's protocol attributes this mixin reads.
    app: Any
    connections: set[Any]
    cycle: Any
    flow: Any
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    _received = 0
    _head_started: float | None = None
    _head_bytes_from = 0
    _cycle_at_head: Any = None
    _body_mark: tuple[float, int] | None = None
    #: The cycle whose body is being read, and when the guard first saw it so.
    _body_since: tuple[Any, float] | None = None
    _timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:  # asyncio.Transport, typed as uvicorn's
        self.limits = _limits_of(self.app)
        super().connection_made(transport)  # type: ignore[misc]
        if len(self.connections) > self.limits.max_connections:
            transport.write(BUSY_RESPONSE)
            transport.close()
            return
        self._head_started = self.loop.time()
        self._timer = self.loop.call_later(tick_s(self.limits), self._check)

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        if self._head_started is None:
            self._head_started = self.loop.time()
        super().data_received(data)  # type: ignore[misc]
        if (
            self.cycle is self._cycle_at_head
            and self._received - self._head_bytes_from > MAX_HEAD_BYTES
        ):
            self.transport.close()  # a head larger than any real one

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        # The next head starts with its first byte; until then uvicorn's keep-alive timeout
        # governs the idle connection.
        self._head_started = None
        self._head_bytes_from = self._received
        self._cycle_at_head = self.cycle
        self._body_mark = None
        self._body_since = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _check(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if self._expired(now):
            self.transport.close()
            return
        self._timer = self.loop.call_later(tick_s(self.limits), self._check)

    def _expired(self, now: float) -> bool:
        cycle = self.cycle
        if cycle is self._cycle_at_head:  # the head is still on its way
            started = self._head_started
            return started is not None and now - started > self.limits.head_timeout_s
        if not cycle.more_body or cycle.response_complete:
            self._body_mark = None  # the body is in, or answered
            return False
        since = self._body_since
        if since is None or since[0] is not cycle:
            since = self._body_since = (cycle, now)
        if now - since[1] > self.limits.body_deadline_s:
            return True  # whole or not, the body has had its time
        if self.flow.read_paused:
            self._body_mark = None  # the server is not reading: no progress is owed
            return False
        mark = self._body_mark
        if mark is None or self._received - mark[1] >= MIN_BODY_PROGRESS:
            self._body_mark = (now, self._received)
            return False
        return now - mark[0] > self.limits.body_timeout_s


def _limits_of(app: Any) -> LimitSettings:
    """The limits of the served application, looked for through the middlewares uvicorn may
    wrap it in (each keeps the next as ``app``); the defaults when none has any."""
    for _ in range(8):
        limits = getattr(app, "limits", None)
        if isinstance(limits, LimitSettings):
            return limits
        app = getattr(app, "app", None)
        if app is None:
            break
    return ConnectionGuard.limits


class GuardedH11Protocol(ConnectionGuard, H11Protocol):
    """uvicorn's h11 protocol with the guard (where httptools is not installed)."""


class GuardedHttpToolsProtocol(ConnectionGuard, HttpToolsProtocol):
    """uvicorn's httptools protocol with the guard."""
