"""Reading request bodies within the size limit, and the binary extension's header length.

The limit is checked twice: against ``Content-Length`` before reading anything, and against the
bytes actually received (chunked bodies have no length; a compressed body is limited after
decompression too), so an oversized body is refused without ever being held in memory.
"""

from __future__ import annotations

import zlib
from typing import Protocol

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from cachefleet.runtime.errors import BadRequestError, PayloadTooLargeError

#: zlib ``wbits`` per Content-Encoding: gzip framing, or zlib framing for "deflate".
_DECOMPRESSORS = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}


class ClientGoneError(Exception):
    """The client disconnected before its body arrived: there is no one to answer."""


class Hasher(Protocol):
    """What :func:`receive_parts` feeds each piece of a body to (a BLAKE3 hasher)."""

    def update(self, data: bytes, /) -> object: ...


async def read_body(request: Request, limit: int) -> bytes:
    """The (decompressed) body of a routed request, or PayloadTooLargeError past ``limit``
    bytes: :func:`receive_parts` and :func:`joined`, as the infer endpoint reads it."""
    headers = request.headers
    try:
        parts = await receive_parts(request.receive, headers.get("content-length"), limit, None)
    except ClientGoneError:
        raise ClientDisconnect from None
    return joined(parts, headers.get("content-encoding"), limit)


async def receive_parts(
    receive: Receive, declared: str | None, limit: int, hasher: Hasher | None
) -> list[bytes]:
    """The raw body straight from ASGI ``receive``, as the pieces it came in (within
    ``limit``: the declared length first, then the bytes received), each fed to ``hasher``
    on arrival.

    A caller that only needs the body's digest never joins (copies) it; one that needs the
    body joins it with :func:`joined`. Raises ClientGoneError if the client hangs up first.
    """
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
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
            parts.append(chunk)
            if hasher is not None:
                hasher.update(chunk)
        if not message.get("more_body", False):
            return parts


def joined(parts: list[bytes], encoding: str | None, limit: int) -> bytes:
    """The body of :func:`receive_parts`' pieces, decompressed per ``encoding``."""
    body = parts[0] if len(parts) == 1 else b"".join(parts)
    if encoding is None or encoding == "identity":
        return body
    return _decompress(body, encoding, limit)


def parse_header_length(value: str | None) -> int | None:
    """The ``Inference-Header-Content-Length`` value as an int (None: absent)."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise BadRequestError(
            f"Inference-Header-Content-Length must be an integer, got {value!r}"
        ) from None


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    wbits = _DECOMPRESSORS.get(encoding.strip().lower())
    if wbits is None:
        raise BadRequestError(
            f"unsupported Content-Encoding {encoding!r} (use gzip, deflate or identity)"
        )
    decompressor = zlib.decompressobj(wbits)
    try:
        data = decompressor.decompress(body, limit + 1)
    except zlib.error as error:
        raise BadRequestError(f"cannot decompress the {encoding} body: {error}") from None
    if len(data) > limit:
        raise _too_large(len(data), limit, at_least=True)
    if not decompressor.eof:
        raise BadRequestError(f"the {encoding} body is truncated")
    return data


def _too_large(size: int, limit: int, *, at_least: bool = False) -> PayloadTooLargeError:
    more = "more than " if at_least else ""
    return PayloadTooLargeError(
        f"request body of {more}{size} bytes is over the limit of {limit} bytes "
        "(--max-request-size)"
    )
