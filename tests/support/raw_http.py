"""HTTP/1.1 over a raw socket, for tests that must see what goes on the wire byte for byte
(pipelining, one write per response, connections left open or closed)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from support.processes import ServerProcess

#: A parsed response: status, headers (lower-case names), body.
Response = tuple[int, dict[bytes, bytes], bytes]


def connect(server: ServerProcess) -> socket.socket:
    address = urlsplit(server.base_url)
    assert address.hostname is not None
    assert address.port is not None
    return socket.create_connection((address.hostname, address.port), timeout=10)


def read_response(stream: socket.socket, buffer: bytearray, *, head_only: bool = False) -> bytes:
    """One response (head and Content-Length body) off ``stream``, as received; the rest stays
    in ``buffer``."""
    while b"\r\n\r\n" not in buffer:
        chunk = stream.recv(65536)
        assert chunk, f"connection closed after {bytes(buffer)!r}"
        buffer += chunk
    end = buffer.index(b"\r\n\r\n") + 4
    total = end if head_only else end + int(parse(bytes(buffer[:end]))[1].get(b"content-length", 0))
    while len(buffer) < total:
        chunk = stream.recv(65536)
        assert chunk, "connection closed mid-body"
        buffer += chunk
    response = bytes(buffer[:total])
    del buffer[:total]
    return response


def parse(raw: bytes) -> Response:
    """A response read by :func:`read_response`, split into status, headers and body."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def read(stream: socket.socket, buffer: bytearray) -> Response:
    """One response off ``stream``, parsed."""
    return parse(read_response(stream, buffer))
