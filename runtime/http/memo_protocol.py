"""uvicorn's httptools protocol answering memoized infer requests itself (see ``memo_front``).

When a request's head is in, the protocol asks the application's memo front (the served
application's ``memo_front``, when it has one) whether the request may be answered from the
memo. If so, it holds the body's pieces as the parser delivers them instead of building
uvicorn's request/response cycle; once the body is whole it asks the front for the answer and
writes the memoized response (status line, uvicorn's default headers, the entry's headers and
body) in one write. A request the front declines, or one whose body is not whole by the end of
the bytes received in one read, is handed to uvicorn as it would have made it: the cycle is
built and the application's task started from the same head, with the body received so far
(and the rest arriving as usual). The application then answers it on its ordinary path.

Only a request with no response still owed on its connection is held, so answers keep the
order of their requests on a pipelined connection, and none while the transport has asked for
writes to pause (a client that sends and does not read): the ordinary path waits for the
client, and stops reading from it, where answering here would pile answers up in memory. A held
request is always answered or handed on before ``data_received`` returns, and the connection
guard wraps this mixin (see ``httptools_protocol``), so the guard's deadlines and head bound see
the connection as they would without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cachefleet.runtime.http.memo_front import MemoFront, Ticket, header_lines

_STATUS_OK = b"HTTP/1.1 200 OK\r\n"


class MemoAnswering:
    """Mixed in before uvicorn's ``HttpToolsProtocol`` (see the module)."""

    # uvicorn's protocol attributes this mixin reads.
    app: Any
    parser: Any
    url: bytes
    headers: list[tuple[bytes, bytes]]
    cycle: Any
    pipeline: Any
    flow: Any
    expect_100_continue: bool
    root_path: str
    server_state: Any
    transport: Any
    _unset_keepalive_if_required: Callable[[], None]
    on_response_complete: Callable[[], None]

    _front: MemoFront | None = None
    #: The held request: its ticket and the body's pieces so far.
    _held: tuple[Ticket, list[bytes]] | None = None
    #: uvicorn's default headers (the date) last seen, and as header lines.
    _defaults: tuple[Any, bytes] = (None, b"")

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        front = getattr(self.app, "memo_front", None)
        self._front = front if isinstance(front, MemoFront) else None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        held = self._held
        if held is not None:  # the body goes on in the next read: the ordinary path's
            self._held = None
            if not self.transport.is_closing():
                self._hand_on(held[1], complete=False)

    def on_message_begin(self) -> None:
        # A request that follows a memoized answer in the same read: the keep-alive timeout
        # armed for the answer does not run while it is served.
        self._unset_keepalive_if_required()
        super().on_message_begin()  # type: ignore[misc]

    def on_headers_complete(self) -> None:
        ticket = self._ticket()
        if ticket is None:
            super().on_headers_complete()  # type: ignore[misc]
        else:
            self._held = (ticket, [])

    def on_body(self, body: bytes) -> None:
        held = self._held
        if held is None:
            super().on_body(body)  # type: ignore[misc]
        else:
            held[1].append(body)

    def on_message_complete(self) -> None:
        held = self._held
        if held is None:
            super().on_message_complete()  # type: ignore[misc]
            return
        self._held = None
        front = self._front
        found = front.answer(*held) if front is not None else None
        if found is None:
            self._hand_on(held[1], complete=True)
            return
        self.transport.write(
            b"".join((_STATUS_OK, self._default_lines(), header_lines(found), b"\r\n", found.body))
        )
        self.on_response_complete()

    def _ticket(self) -> Ticket | None:
        """The front's ticket for the request whose head is in, if it may be held."""
        front = self._front
        if front is None:
            return None
        cycle = self.cycle
        parser = self.parser
        if (
            (cycle is not None and not cycle.response_complete)  # a response still owed
            or self.pipeline
            or self.flow.write_paused  # the client is not reading: the ordinary path waits
            or self.expect_100_continue
            or self.root_path
            or parser.get_method() != b"POST"
            or parser.get_http_version() != "1.1"
            or not parser.should_keep_alive()
            or parser.should_upgrade()
        ):
            return None
        return front.ticket(self.url, self.headers)

    def _hand_on(self, body: list[bytes], *, complete: bool) -> None:
        """Give the held request to uvicorn: its cycle and task made from the same head, with
        the body received so far."""
        super().on_headers_complete()  # type: ignore[misc]
        cycle = self.cycle
        for piece in body:
            cycle.body += piece
        if complete:
            cycle.more_body = False
        if body or complete:
            cycle.message_event.set()

    def _default_lines(self) -> bytes:
        """uvicorn's default headers (the date, renewed every second) as header lines."""
        defaults = self.server_state.default_headers
        seen, lines = self._defaults
        if defaults is not seen:
            lines = b"".join(b"%s: %s\r\n" % pair for pair in defaults)
            self._defaults = (defaults, lines)
        return lines
