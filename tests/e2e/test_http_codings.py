"""Content and transfer codings on the wire, against a real server over raw sockets.

``Accept-Encoding`` is honoured with its weights (RFC 9110: ``q=0`` refuses a coding, ``*``
stands for the rest, ``identity`` may be refused too), and a request whose transfer coding is
anything but ``chunked`` alone is answered 501 and its connection closed (RFC 9112), on every
route: the parser under the server would otherwise hand the application a gzipped body as if it
were plain.
"""

from __future__ import annotations

import gzip
import zlib

import orjson
import pytest
from support import raw_http
from support.processes import ServerProcess

#: ``simple`` as JSON: OUTPUT0 is the sum of the inputs.
DOCUMENT = orjson.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [3] * 16},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
        ],
        "outputs": [{"name": "OUTPUT0"}],
    }
)


def _infer(*extra: bytes) -> bytes:
    head = [
        b"POST /v2/models/simple/infer HTTP/1.1",
        b"Host: test",
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(DOCUMENT),
        *extra,
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + DOCUMENT


def _chunked(path: bytes, body: bytes, *codings: bytes, method: bytes = b"POST") -> bytes:
    """A request whose body goes in one chunk, under the ``Transfer-Encoding`` lines given."""
    head = [b"%s %s HTTP/1.1" % (method, path), b"Host: test"]
    head += [b"Transfer-Encoding: " + coding for coding in codings]
    return b"\r\n".join(head) + b"\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def _decoded(coding: bytes | None, body: bytes) -> bytes:
    if coding == b"gzip":
        return gzip.decompress(body)
    if coding == b"deflate":
        return zlib.decompress(body)
    return body


ACCEPTED = [
    (b"gzip", b"gzip"),
    (b"GZip;Q=1.0", b"gzip"),
    (b"gzip;q=0", None),
    (b"gzip;q=0.000", None),
    (b"gzip;q=0, deflate", b"deflate"),
    (b"deflate;q=0.5, gzip;q=0.4", b"deflate"),
    (b"gzip;q=0.001", b"gzip"),
    (b"*", b"gzip"),
    (b"*;q=0", None),
    (b"*;q=0, deflate;q=0.2", b"deflate"),
    (b"gzip;q=0, *", b"deflate"),
    (b"identity", None),
    (b"identity, gzip;q=0.5", None),
    (b"identity;q=0", None),  # nothing we have is acceptable: sent plain, readable
    (b"gzip;q=1.5", None),  # not a weight: the element is ignored
    (b"br, zstd", None),
]


def test_accept_encoding_weights_decide_the_answers_coding(server: ServerProcess) -> None:
    with raw_http.connect(server) as stream:
        buffer = bytearray()
        for accept, expected in ACCEPTED:
            stream.sendall(_infer(b"Accept-Encoding: " + accept))
            status, headers, body = raw_http.read(stream, buffer)
            assert status == 200, body
            assert headers.get(b"content-encoding") == expected, accept
            plain = _decoded(expected, body)
            assert orjson.loads(plain)["outputs"][0]["data"] == [4] * 16, accept


ROUTES = [
    (b"POST", b"/v2/models/simple/infer"),
    (b"POST", b"/v2/repository/index"),
    (b"GET", b"/v2/health/live"),
    (b"POST", b"/v2/nowhere"),
]


@pytest.mark.parametrize(
    "codings",
    [(b"gzip, chunked",), (b"gzip", b"chunked"), (b"identity, chunked",), (b"x-ours, chunked",)],
)
def test_a_transfer_coding_other_than_chunked_is_501_on_every_route(
    server: ServerProcess, codings: tuple[bytes, ...]
) -> None:
    """(Codings the HTTP parser refuses itself, ``deflate`` alone or ``chunked, chunked``,
    get its 400 before any route is asked.)"""
    for method, path in ROUTES:
        with raw_http.connect(server) as stream:
            stream.sendall(_chunked(path, gzip.compress(DOCUMENT), *codings, method=method))
            buffer = bytearray()
            status, headers, body = raw_http.read(stream, buffer)
            assert status == 501, (path, body)
            assert headers[b"connection"] == b"close"
            assert b"Transfer-Encoding" in orjson.loads(body)["error"].encode()
            assert stream.recv(1) == b""  # closed: where the body ends is not agreed


def test_chunked_alone_is_still_read(server: ServerProcess) -> None:
    with raw_http.connect(server) as stream:
        buffer = bytearray()
        for coding in (b"chunked", b"Chunked "):
            stream.sendall(_chunked(b"/v2/models/simple/infer", DOCUMENT, coding))
            status, _, body = raw_http.read(stream, buffer)
            assert status == 200, body
            assert orjson.loads(body)["outputs"][0]["data"] == [4] * 16
