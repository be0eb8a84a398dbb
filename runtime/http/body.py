"""Reading request bodies within the size limit.

The limit is checked twice: against ``Content-Length`` before reading anything, and against the
bytes actually received (chunked bodies have no length; a compressed body is limited after
decompression too), so an oversized body is refused without ever being held in memory.

A compressed body is inflated in bounded steps, each paid for (see ``body_charge``) before it
is made, and refused once it passes the limit: a small gzip body that would inflate a
thousandfold holds at most the limit, and its budget. The first :data:`INLINE_BYTES` are
inflated on the event loop (a small body is done there, at its old speed); the rest step by step
in a worker thread (zlib lets go of the GIL while it inflates), so other requests and the
health checks are served meanwhile.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Protocol

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from cachefleet.runtime.errors import BadRequestError, PayloadTooLargeError

#: zlib ``wbits`` per Content-Encoding: gzip framing, or zlib framing for "deflate".
_DECOMPRESSORS = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
#: Inflated bytes made on the event loop, before the rest is inflated in a worker thread.
INLINE_BYTES = 64 * 1024
#: Inflated bytes per step in a worker thread (each paid for before it is made).
STEP_BYTES = 1024 * 1024


class ClientGoneError(Exception):
    """The client disconnected before its body arrived: there is no one to answer."""


class Hasher(Protocol):
    """What :func:`receive_parts` feeds each piece of a body to (the memo's digest of it)."""

    def update(self, data: bytes, /) -> object: ...


class Charge(Protocol):
    """What pays for a body's bytes as they arrive and inflate (``body_charge.BodyCharge``)."""

    #: Body bytes already paid for.
    covered: int

    async def cover(self, size: int) -> None: ...

    async def cover_inflated(self, size: int) -> None: ...


def declared_length(value: bytes) -> int | None:
    """A ``Content-Length`` header's value as a number of bytes; None when it is not a plain
    decimal number (the server's HTTP parser refuses such a request before it gets here). The
    one reading of the header, for the infer route's description and for routed requests."""
    return int(value) if value.isdigit() else None  # bytes.isdigit: ASCII digits only


async def read_body(request: Request, limit: int) -> bytes:
    """The (decompressed) body of a routed request, or PayloadTooLargeError past ``limit``
    bytes: :func:`receive_parts`, then :func:`joined` or :func:`inflate`."""
    headers = request.headers
    length = headers.get("content-length")
    declared = None if length is None else declared_length(length.encode("latin-1"))
    try:
        parts = await receive_parts(request.receive, declared, limit, None)
    except ClientGoneError:
        raise ClientDisconnect from None
    encoding = headers.get("content-encoding")
    if encoding is None or encoding == "identity":
        return joined(parts)
    return await inflate(parts, encoding, limit, None)


async def receive_parts(
    receive: Receive,
    declared: int | None,
    limit: int,
    hasher: Hasher | None,
    charge: Charge | None = None,
) -> list[bytes]:
    """The raw body straight from ASGI ``receive``, as the pieces it came in (within
    ``limit``: the declared length first, then the bytes received), each fed to ``hasher``
    and paid for with ``charge`` on arrival.

    A caller that only needs the body's digest never joins (copies) it; one that needs the
    body joins it with :func:`joined`. Raises ClientGoneError if the client hangs up first.
    """
    if declared is not None and declared > limit:
        raise _too_large(declared, limit)
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        chunk: bytes = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise _too_large(size, limit, at_least=True)
            if charge is not None and size > charge.covered:
                await charge.cover(size)
            parts.append(chunk)
            if hasher is not None:
                hasher.update(chunk)
        if not message.get("more_body", False):
            return parts


def joined(parts: list[bytes]) -> bytes:
    """The plain body of :func:`receive_parts`' pieces (a compressed one: :func:`inflate`)."""
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def inflate(parts: list[bytes], encoding: str, limit: int, charge: Charge | None) -> bytes:
    """The body of :func:`receive_parts`' pieces, inflated per ``encoding`` in bounded steps,
    each paid for with ``charge`` first (see the module); PayloadTooLargeError past ``limit``
    inflated bytes, BadRequestError for an unknown encoding or a broken or truncated body."""
    wbits = _DECOMPRESSORS.get(encoding.strip().lower())
    if wbits is None:
        raise BadRequestError(
            f"unsupported Content-Encoding {encoding!r} (use gzip, deflate or identity)"
        )
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    decompressor = zlib.decompressobj(wbits)
    pieces: list[bytes] = []
    size = 0
    step = INLINE_BYTES
    while True:
        want = min(step, limit + 1 - size)  # one byte past the limit says "over"
        if charge is not None:
            await charge.cover_inflated(size + want)
        try:
            if step == INLINE_BYTES:
                piece = decompressor.decompress(data, want)
            else:
                piece = await asyncio.to_thread(decompressor.decompress, data, want)
        except zlib.error as error:
            raise BadRequestError(f"cannot decompress the {encoding} body: {error}") from None
        data = decompressor.unconsumed_tail
        size += len(piece)
        if size > limit:
            raise _too_large(size, limit, at_least=True)
        pieces.append(piece)
        if decompressor.eof or (not data and len(piece) < want):
            break
        step = STEP_BYTES
    if not decompressor.eof:
        raise BadRequestError(f"the {encoding} body is truncated")
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _too_large(size: int, limit: int, *, at_least: bool = False) -> PayloadTooLargeError:
    more = "more than " if at_least else ""
    return PayloadTooLargeError(
        f"request body of {more}{size} bytes is over the limit of {limit} bytes "
        "(--max-request-size)"
    )
