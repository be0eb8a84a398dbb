"""Whole answers on the wire: what a client can tell of how the server writes them.

Raw sockets against a real server, so that what uvicorn's protocol puts on the wire is read
byte for byte: heads with and without bodies, the interim ``100 Continue``, pipelined requests
on one connection and ``Connection: close``.
"""

from __future__ import annotations

from support import raw_http
from support.processes import ServerProcess


def test_pipelined_requests_get_whole_responses_in_order(server: ServerProcess) -> None:
    with raw_http.connect(server) as stream:
        requests = b"".join(
            b"GET %s HTTP/1.1\r\nHost: test\r\n\r\n" % path
            for path in (b"/v2/health/live", b"/v2", b"/v2/models/simple", b"/v2/health/ready")
        )
        stream.sendall(requests)
        buffer = bytearray()
        answers = [raw_http.read_response(stream, buffer) for _ in range(4)]
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 4
    assert b'"name":"simple"' in answers[2].replace(b" ", b"")
    assert not buffer


def test_a_head_answer_without_a_body_still_goes_out(server: ServerProcess) -> None:
    with raw_http.connect(server) as stream:
        stream.sendall(b"HEAD /v2 HTTP/1.1\r\nHost: test\r\n\r\n")
        buffer = bytearray()
        answer = raw_http.read_response(stream, buffer, head_only=True)
        assert answer.startswith(b"HTTP/1.1 ")
        stream.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n")
        assert raw_http.read_response(stream, buffer).startswith(b"HTTP/1.1 200 OK")


def test_continue_then_the_answer(server: ServerProcess) -> None:
    body = b'{"inputs": []}'
    with raw_http.connect(server) as stream:
        stream.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: test\r\n"
            b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        buffer = bytearray()
        interim = raw_http.read_response(stream, buffer, head_only=True)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        stream.sendall(body)
        answer = raw_http.read_response(stream, buffer)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert answer.endswith(b"}")
    assert b"x-cache" not in answer.lower()  # a refusal: no cache tier answered it


def test_connection_close_gets_the_whole_answer_then_the_end(server: ServerProcess) -> None:
    with raw_http.connect(server) as stream:
        stream.sendall(b"GET /v2 HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        received = bytearray()
        while chunk := stream.recv(65536):
            received += chunk
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"connection: close" in head.lower()
    assert body.startswith(b"{")
    assert body.endswith(b"}")
