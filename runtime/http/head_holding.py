"""uvicorn's httptools protocol, writing a response's head and body in one socket write.

uvicorn writes the status line and headers when the application sends
``http.response.start``, and the body when it sends ``http.response.body``: two ``send``
system calls per response, each a TCP segment the client reads separately. For a cache hit
whose own work is a few microseconds, the second call costs more than the hit. Here the
protocol's transport holds a response head back and writes it together with whatever comes
next, which for every response of ours is its body, in the same event-loop step.

Nothing is held for long: a held head goes out with the next write, when the connection
closes, or at the next turn of the event loop (a ``HEAD`` answer or ``100 Continue`` has no
body to wait for), whichever comes first. Everything else is uvicorn's, unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: How every head uvicorn writes starts and ends (its status lines are all HTTP/1.1).
_HEAD_START = b"HTTP/1.1 "
_HEAD_END = b"\r\n\r\n"


class HeadHoldingHttpToolsProtocol(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` over a :class:`HeadHoldingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = HeadHoldingTransport(transport, self.loop)  # type: ignore[assignment]


class HeadHoldingTransport:
    """A transport that holds a written response head until the next write (see module)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head + data)
        elif data.startswith(_HEAD_START) and data.endswith(_HEAD_END):
            self._head = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write a held head now."""
        head = self._head
        if head is not None:
            self._head = None
            if not self._transport.is_closing():
                self._transport.write(head)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        """Everything else is the real transport's (``get_extra_info``, ``set_protocol``...)."""
        return getattr(self._transport, name)
