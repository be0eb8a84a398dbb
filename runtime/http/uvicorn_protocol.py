"""Everything of the HTTP path that reaches below ASGI, in one module: uvicorn's protocols with
the connection guard. Nothing else in the project imports uvicorn's internals.

ASGI cannot express it: an application sees a request only once its head is in, cannot close a
connection whose client stalls before that, and never learns whether its answer was written.

uvicorn closes a keep-alive connection that stays idle after an answer, and nothing else: a
client that sends its request head one byte a second, or its body that slowly, or never reads
its answers, holds a connection (and whatever it has sent, and the answers waiting for it) for
as long as it likes. :class:`ConnectionGuard` follows each connection through its phases and
gives every one a deadline and a bound:

- **reading a head**: a request head must arrive whole within ``head_timeout_s`` of its first
  byte (of the connection, for the first request), and within :data:`MAX_HEAD_BYTES`;
- **reading a body**: a body that delivers less than :data:`MIN_BODY_PROGRESS` bytes in
  ``body_timeout_s`` (while the server reads it) is cut off, and so is one not whole
  ``body_deadline_s`` after its head (of time the server read), however steadily it trickles
  (a client may not hold a request, and its share of the budget of bytes in flight, for ever);
- **between requests**: once a message is whole the next head's clock starts with its first
  byte; an idle connection is uvicorn's to close (``timeout_keep_alive``,
  ``--keep-alive-timeout``);
- **writing answers**: answer bytes that wait in the connection's write buffer (the client does
  not read them) must all be taken within ``write_timeout_s``, or the connection is reset (its
  buffers dropped: a plain close would wait for the buffer to be written, for ever). This also
  frees a pipelined request whose answer waits in uvicorn's ``drain()`` behind an unread one.
  :data:`WRITTEN` in a request's ASGI scope lets the application wait until its answer is
  written (or the connection gone), to hold the answer's bytes against the budget until then;
- **a connection cap**: past ``max_connections`` open connections, a new one is answered 503
  with ``Retry-After`` and closed before its request is read.

The phases follow the parser, not the request being answered: with pipelining the parser reads
a request's head and body while an earlier one is still answered (uvicorn queues it), and its
clocks run only while the server reads from the connection (uvicorn stops reading while a
pipelined request waits its turn), so a pipelined request's head and body get the same
deadlines as a first request's, and its body bytes never count as head bytes. httptools tells
the phases by its parser callbacks (``on_message_begin``, ``on_headers_complete``,
``on_message_complete``), h11 by its connection's ``their_state``.

A connection cut off while reading is closed, as uvicorn closes an idle one; a request whose body
was being read then sees the client gone. The checks run on one timer per connection, every
:func:`tick_s` seconds, so a cut comes within a tick of its deadline; the hot path pays one
addition per ``data_received`` and a few attribute writes per request.

(A transport that held a response's head back to write it with its body, saving a system call
per answer, lived here too; measured side by side under the same load it made no difference
beyond the noise, so it went: ``bench/results/2026-11-28-http-path.md``.)

The internals read here: the protocols' ``connections``, ``cycle`` (its ``scope``), the parser
callbacks above (httptools), ``conn`` (h11: ``their_state``, ``trailing_data``), ``flow``
(``read_paused``), ``transport``, ``loop``, ``app``, ``on_response_complete`` and
``resume_writing``. That is why uvicorn is bounded in ``pyproject.toml``
to the minor releases the dependency-floor test runs (``tests/test_dependency_floors.py``: its
lowest release, and the development environment's highest);
``tests/runtime/test_http_connection_guard.py`` and ``tests/e2e/test_http_limits.py`` fail when
they move. The classes are defined at module level because uvicorn pickles the protocol class
to its worker processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
from typing import Any

import h11
import httptools
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from cachefleet.runtime.config import LimitSettings
from cachefleet.runtime.http.answer_charge import AnswerCharge
from cachefleet.runtime.http.infer_front import AnswerNow, InferFront
from cachefleet.runtime.http.infer_request import HEAD, InferHead
from cachefleet.runtime.http.written import WRITTEN

#: The most a request head may hold (request line and headers), as uvicorn's h11 default is
#: 16 KiB; tritonclient's heads are a few hundred bytes.
MAX_HEAD_BYTES = 64 * 1024
#: What a body must deliver per ``body_timeout_s`` to count as alive.
MIN_BODY_PROGRESS = 1024
#: The largest body a memo hit is answered with below ASGI (see
#: :class:`GuardedHttpToolsProtocol`): under uvicorn's own read buffer (64 KiB).
ANSWER_NOW_BYTES = 64 * 1024
#: The write buffer over which uvicorn waits (``drain``) before it writes more, as asyncio's
#: default; the buffer's low mark is 0, so the protocol hears when it is empty.
WRITE_HIGH_WATER = 64 * 1024
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_BUSY_BODY = b'{"error":"too many connections (--max-connections); retry later"}'
BUSY_RESPONSE = _BUSY % (len(_BUSY_BODY), _BUSY_BODY)


def tick_s(limits: LimitSettings) -> float:
    """How often a connection's deadlines are checked: a quarter of the shortest, at most 1 s."""
    shortest = min(
        limits.head_timeout_s, limits.body_timeout_s, limits.body_deadline_s,
        limits.write_timeout_s,
    )  # fmt: skip
    return max(0.05, min(1.0, shortest / 4))


class Reading(enum.Enum):
    """What the parser is reading from the connection."""

    HEAD = "head"  #: a request head, at least its first byte (or the connection is new)
    BODY = "body"  #: the body of the request whose head came last
    BETWEEN = "between"  #: nothing: the last message is whole, no byte of the next has come


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
    _reading = Reading.HEAD
    #: Seconds the current phase has had while the server read from the connection, and when
    #: they were last counted.
    _phase_s = 0.0
    _counted_at = 0.0
    _head_bytes_from = 0
    #: The cycle whose body is being read.
    _body_cycle: Any = None
    _body_mark: tuple[float, int] | None = None
    #: Since when answer bytes have waited in the write buffer.
    _write_since: float | None = None
    _write_waiters: list[asyncio.Future[None]] | None = None
    _written: Any = None
    #: Answers written below ASGI whose bytes wait in the write buffer, charged until written.
    _answer_charges: list[AnswerCharge] | None = None
    _timer: asyncio.TimerHandle | None = None
    _gone = False

    def connection_made(self, transport: Any) -> None:  # asyncio.Transport, typed as uvicorn's
        self.limits = _limits_of(self.app)
        super().connection_made(transport)  # type: ignore[misc]
        if len(self.connections) > self.limits.max_connections:
            transport.write(BUSY_RESPONSE)
            transport.close()
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=0)
        #: Bound once: every request's scope carries it (:data:`WRITTEN`).
        self._written = self.written
        self._enter(Reading.HEAD)  # the first head's clock runs from the connection's start
        self._timer = self.loop.call_later(tick_s(self.limits), self._check)

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        super().data_received(data)  # type: ignore[misc]
        self._check_head_size()

    def _check_head_size(self) -> None:
        if (
            self._reading is Reading.HEAD
            and self._received - self._head_bytes_from > MAX_HEAD_BYTES
        ):
            self.transport.close()  # a head larger than any real one

    def _message_begun(self) -> None:
        if self._reading is Reading.BETWEEN:
            self._enter(Reading.HEAD)

    def _head_complete(self, cycle: Any) -> None:
        """A head is whole and ``cycle`` made for it: its body is read from now on."""
        if cycle is None or cycle is self._body_cycle:
            return
        # uvicorn's scope has no extensions of its own (an app's middleware may add some).
        scope = cycle.scope
        extensions = scope.get("extensions")
        if extensions is None:
            scope["extensions"] = {WRITTEN: self._written}
        else:
            extensions[WRITTEN] = self._written
        self._body_cycle = cycle
        self._enter(Reading.BODY)

    def _message_complete(self) -> None:
        if self._reading is not Reading.BETWEEN:
            self._enter(Reading.BETWEEN)
            # The next head's bytes count from here (within this chunk's end).
            self._head_bytes_from = self._received

    def _enter(self, reading: Reading) -> None:
        self._reading = reading
        self._phase_s = 0.0
        self._counted_at = self.loop.time()
        self._body_mark = None

    def written(self) -> asyncio.Future[None] | None:
        """None when nothing waits in the write buffer; else a future done once the buffer is
        empty or the connection gone (see :data:`WRITTEN`)."""
        transport = self.transport
        if self._gone or transport.get_write_buffer_size() == 0:
            return None
        waiter = self.loop.create_future()
        if self._write_waiters is None:
            self._write_waiters = []
        self._write_waiters.append(waiter)
        return waiter

    def resume_writing(self) -> None:
        super().resume_writing()  # type: ignore[misc]
        if self.transport.get_write_buffer_size() == 0:
            self._written_out()

    def _written_out(self) -> None:
        self._write_since = None
        charges, self._answer_charges = self._answer_charges, None
        for charge in charges or ():
            charge.release()
        waiters, self._write_waiters = self._write_waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._written_out()
        super().connection_lost(exc)  # type: ignore[misc]

    def _check(self) -> None:
        self._timer = None
        transport = self.transport
        now = self.loop.time()
        if transport.get_write_buffer_size() == 0:
            self._written_out()
            if transport.is_closing():
                return  # closed, and written: connection_lost comes
        elif self._write_since is None:
            self._write_since = now
        elif now - self._write_since > self.limits.write_timeout_s:
            _reset(transport)  # the client does not read: drop what waits for it
            return
        if not transport.is_closing() and self._expired(now):
            transport.close()
        self._timer = self.loop.call_later(tick_s(self.limits), self._check)

    def _expired(self, now: float) -> bool:
        reading = self._reading
        if reading is Reading.BETWEEN:
            return False
        paused = self.flow.read_paused
        if not paused:  # a phase's clock runs only while the server reads
            self._phase_s += now - self._counted_at
        self._counted_at = now
        if reading is Reading.HEAD:
            return self._phase_s > self.limits.head_timeout_s
        if self._phase_s > self.limits.body_deadline_s:
            return True  # whole or not, the body has had its time
        if paused:
            self._body_mark = None  # the server is not reading: no progress is owed
            return False
        mark = self._body_mark
        if mark is None or self._received - mark[1] >= MIN_BODY_PROGRESS:
            self._body_mark = (now, self._received)
            return False
        return now - mark[0] > self.limits.body_timeout_s


def _reset(transport: asyncio.Transport) -> None:
    """Abort ``transport`` with a reset: the bytes in the kernel's send queue go too (a plain
    close would leave them there, an orphan socket sending to a client that does not read), and
    the client learns that its answer was cut off."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


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
    """uvicorn's h11 protocol with the guard (where httptools is not installed). h11 parses a
    pipelined request only once the answer before it is complete; the phase is read from its
    state after each step."""

    conn: h11.Connection

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        H11Protocol.data_received(self, data)
        self._follow_parser()
        self._check_head_size()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow_parser()  # h11 parses a pipelined request only now

    def _follow_parser(self) -> None:
        """Bring the phase up to h11's state (httptools' callbacks bring it themselves)."""
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._reading is Reading.BODY:
                self._message_complete()
            if self._reading is Reading.BETWEEN and self.conn.trailing_data[0]:
                self._enter(Reading.HEAD)
                self._head_bytes_from = self._received - len(self.conn.trailing_data[0])
        elif state is h11.SEND_BODY:
            self._head_complete(self.cycle)
        else:  # DONE, or closing: nothing more is read for now
            self._head_complete(self.cycle)
            self._message_complete()


class GuardedHttpToolsProtocol(ConnectionGuard, HttpToolsProtocol):
    """uvicorn's httptools protocol with the guard; the phase follows the parser's callbacks
    (the parser reads pipelined requests as they come, and uvicorn queues them). They run for
    every request, so each is written out here (``_enter`` inlined, uvicorn's callback called
    directly): a few attribute writes and one clock read each.

    **Memo hits below ASGI.** A small infer request that the memo may answer, with nothing
    before it on its connection, has its head held back from uvicorn (no cycle, no task) while
    the rest of the bytes of the same read are parsed. When its body is whole within that read,
    the infer front's ``answer_now`` (the infer endpoint's own admission and the service's
    memo answer, counted as every hit is) is asked; a hit is written at once, head and body in
    one write, its bytes charged until written as an ASGI answer's are (``answer_charge``).
    Everything else (a miss, a refusal, a body still to come, a request that
    ``answer_now`` declines) is handed to uvicorn as it would have been, head then body, before
    the read returns, its scope carrying the head the front described (and, after a memo miss,
    the memo key it was looked up by: ``infer_request.HEAD``), so the ASGI path makes neither
    again: nothing is held between reads, nothing is decided here, and a client sees
    the same answer either way (bytes, headers, order on the connection). About 20 us of a
    40 us in-process hit go (``bench/results/2026-12-02-small-hit-profile.md``).
    """

    #: The front's ``answer_now`` and ``heads``, when the served app is the infer front itself
    #: (anything wrapped around it must see every request) and does not trace.
    _answer_now: AnswerNow | None = None
    _front: InferFront | None = None
    #: The request held back from uvicorn, and its body so far.
    _held: InferHead | None = None
    _held_body: list[bytes] | None = None
    #: The head just described by :meth:`_hold` (None in it: no infer request), handed on
    #: with the request when it is not held; None: not described.
    _described: tuple[InferHead | None] | None = None

    def connection_made(self, transport: Any) -> None:  # asyncio.Transport, typed as uvicorn's
        super().connection_made(transport)
        app = self.app
        if isinstance(app, InferFront) and app.answer_now is not None and not self.root_path:
            self._front, self._answer_now = app, app.answer_now

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._held is not None:  # its body is not whole yet: uvicorn's from here on
            self._hand_over()

    def on_message_begin(self) -> None:
        HttpToolsProtocol.on_message_begin(self)
        if self._reading is Reading.BETWEEN:
            self._reading = Reading.HEAD
            self._phase_s = 0.0
            self._counted_at = self.loop.time()

    def on_headers_complete(self) -> None:
        self._described = None
        if self._answer_now is not None and self._hold():
            self._body_phase()
            return
        HttpToolsProtocol.on_headers_complete(self)
        self._head_handed(self._described)

    def on_body(self, body: bytes) -> None:
        held = self._held_body
        if held is None:
            HttpToolsProtocol.on_body(self, body)
        else:
            held.append(body)

    def on_message_complete(self) -> None:
        head = self._held
        if head is not None:
            body = self._held_body or []
            self._held = self._held_body = None
            if self._answer(head, body):
                return
            self._replay(head, body)
        HttpToolsProtocol.on_message_complete(self)
        if self._reading is not Reading.BETWEEN:
            self._reading = Reading.BETWEEN
            # The next head's bytes count from here (within this chunk's end).
            self._head_bytes_from = self._received

    def _head_handed(self, described: tuple[InferHead | None] | None) -> None:
        """uvicorn has made a cycle for the head (or not, for an upgrade); ``described``: the
        request's head as the infer front described it here (None in it: no infer request),
        which the front reads from the scope instead of describing the request again
        (``infer_request.HEAD``); None: not described here."""
        cycle = self.cycle
        if cycle is None or cycle is self._body_cycle:
            return  # no new request (an upgrade)
        # uvicorn's scope has no extensions of its own.
        if described is None:
            cycle.scope["extensions"] = {WRITTEN: self._written}
        else:
            cycle.scope["extensions"] = {WRITTEN: self._written, HEAD: described[0]}
        self._body_cycle = cycle
        self._body_phase()

    def _body_phase(self) -> None:
        self._reading = Reading.BODY
        self._phase_s = 0.0
        self._counted_at = self.loop.time()
        self._body_mark = None

    def _hold(self) -> bool:
        """Hold the head back from uvicorn when the memo may answer it at once: a small
        infer request that the front would serve, with no answer before it in flight."""
        cycle = self.cycle
        parser = self.parser
        if (
            (cycle is not None and not cycle.response_complete)
            or parser.get_method() != b"POST"
            or parser.get_http_version() != "1.1"
            or not parser.should_keep_alive()
            or parser.should_upgrade()
            or self.expect_100_continue
        ):
            return False
        path = httptools.parse_url(self.url).path.decode("ascii")
        if "%" in path:
            return False  # uvicorn unquotes it: leave it to uvicorn
        front = self._front
        assert front is not None
        sound, head = front.describe(path, self.headers)
        if not sound:
            return False  # a transfer coding the ASGI path refuses
        self._described = (head,)  # handed on with the request when it is not held
        if (
            head is None
            or not front.may_answer_now(head)
            or head.declared is None
            or head.declared > ANSWER_NOW_BYTES
        ):
            return False
        self._held, self._held_body = head, []
        return True

    def _answer(self, head: InferHead, body: list[bytes]) -> bool:
        """Write the memo's answer to ``head``'s request if it has one now."""
        assert self._answer_now is not None
        answer = self._answer_now(head, body)
        if answer is None:
            return False
        entry, charge = answer
        headers = entry.headers or [(b"content-length", b"%d" % len(entry.body))]
        content = [STATUS_LINE[200]]
        for name, value in (*self.server_state.default_headers, *headers):
            content += (name, b": ", value, b"\r\n")
        content += (b"\r\n", entry.body)
        charge.hold(entry.body)
        transport = self.transport
        transport.write(b"".join(content))
        if transport.get_write_buffer_size() == 0:
            charge.release()
        else:  # released once written, or the connection gone (the write deadline bounds it)
            if self._answer_charges is None:
                self._answer_charges = []
            self._answer_charges.append(charge)
        self._reading = Reading.BETWEEN
        self._head_bytes_from = self._received
        self.on_response_complete()  # as uvicorn after an answer: keep-alive, next request
        return True

    def _replay(self, head: InferHead, body: list[bytes]) -> None:
        """Give uvicorn the held head, then the body that came with it; the request's scope
        carries ``head`` (and the memo key it was looked up by, if it was)."""
        # As uvicorn's data_received: no keep-alive deadline while a request is answered (an
        # answer given below ASGI earlier in this read has set one).
        self._unset_keepalive_if_required()
        HttpToolsProtocol.on_headers_complete(self)
        cycle = self.cycle
        self._head_handed((head,))
        if cycle is not None:
            for part in body:
                HttpToolsProtocol.on_body(self, part)

    def _hand_over(self) -> None:
        """The held request's body goes on past this read: uvicorn reads it from here."""
        head, body = self._held, self._held_body or []
        assert head is not None  # only a held request is handed over
        self._held = self._held_body = None
        phase_s, counted_at = self._phase_s, self._counted_at
        self._replay(head, body)
        self._phase_s, self._counted_at = phase_s, counted_at  # its body's clock runs on
