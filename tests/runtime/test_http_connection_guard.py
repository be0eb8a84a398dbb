"""The connection guard on both of uvicorn's HTTP protocols (httptools, and h11 where httptools is
not installed), served by a real uvicorn on loopback with a plain ASGI application: a slow head
and a slow body are cut off, a request that keeps its pace is answered, connections past the
cap get a 503 with Retry-After, a pipelined request gets a first request's deadlines (and its
large body is read as a body), and a client that does not read its answer is cut off."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from support.slow_clients import closed_within, dribble_until_closed
from support.uvicorn_thread import serving

from cachefleet.runtime.config import LimitSettings
from cachefleet.runtime.http.uvicorn_protocol import GuardedH11Protocol, GuardedHttpToolsProtocol

LIMITS = LimitSettings(
    head_timeout_s=0.6, body_timeout_s=0.6, body_deadline_s=2.0, write_timeout_s=1.0,
    max_connections=3,
)  # fmt: skip
#: What ``GET /big`` answers: more than a non-reading client's socket buffers take.
BIG = 16 << 20


class Echo:
    """Reads the whole body and answers its length; carries the limits as the front door does."""

    limits = LIMITS

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"%d" % size if scope["path"] != "/big" else bytes(BIG)
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture(params=[GuardedHttpToolsProtocol, GuardedH11Protocol], ids=["httptools", "h11"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    config = uvicorn.Config(
        Echo(), host="127.0.0.1", port=0, http=request.param, lifespan="off",
        log_level="warning", timeout_keep_alive=5,  # proxy headers on: one middleware more
    )  # fmt: skip
    with serving(config) as chosen:
        yield chosen


HEAD = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"


def test_a_slow_head_is_cut_off(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        assert dribble_until_closed(sock, HEAD * 5, every_s=0.1) < 1.5


def test_a_slow_body_is_cut_off(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(HEAD)
        assert dribble_until_closed(sock, b"x" * 5000, every_s=0.1) < 1.5


def test_a_body_that_keeps_its_pace_is_answered(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(HEAD)
        # 500 bytes per 0.1 s for a second: longer than the deadline (1 KiB per 0.6 s), and
        # twice as fast as it asks, so that a busy machine's late wake-ups do not cut it off.
        for _ in range(10):
            time.sleep(0.1)
            sock.sendall(b"x" * 500)
        answer = b""
        while not answer.endswith(b"5000"):
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b"5000")


def test_a_steady_trickle_is_cut_off_at_the_whole_body_deadline(port: int) -> None:
    """500 bytes per 0.1 s keeps the 1 KiB-per-0.6 s pace, but a 50,000-byte body at that
    rate takes 10 s: the connection is closed once the body's 2 s are over, unanswered."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(HEAD.replace(b"5000", b"50000"))
        started = time.monotonic()
        sock.settimeout(0.1)
        answer = b""
        for _ in range(80):  # 8 s at most: well past the deadline, well short of the body
            try:
                sock.sendall(b"x" * 500)
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            if not chunk:
                break
            answer += chunk
        else:
            raise AssertionError("the trickling body was never cut off")
        took = time.monotonic() - started
    assert answer == b""
    assert took >= 1.5, took


def test_connections_past_the_cap_get_503(port: int) -> None:
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        time.sleep(0.1)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as extra:
            answer = extra.recv(65536)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 1" in answer
    finally:
        for sock in held:
            sock.close()


def _answers(sock: socket.socket, count: int) -> list[bytes]:
    """The bodies of ``count`` answers read from ``sock`` (each with a content-length)."""
    buffer = b""
    bodies: list[bytes] = []
    while len(bodies) < count:
        head_end = buffer.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buffer[:head_end].lower()
            length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            if len(buffer) >= head_end + 4 + length:
                assert head.startswith(b"http/1.1 200 "), head
                bodies.append(buffer[head_end + 4 : head_end + 4 + length])
                buffer = buffer[head_end + 4 + length :]
                continue
        chunk = sock.recv(1 << 20)
        assert chunk, (bodies, buffer[:200])
        buffer += chunk
    return bodies


GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def test_a_pipelined_request_that_never_sends_its_body_is_cut_off(port: int) -> None:
    """A whole request, then a second one's head and one byte of its 1000-byte body, then
    nothing: the first is answered, and the second is cut off by the body deadlines as a
    first request would be (it was once taken for a head still on its way, whose clock the
    answer before it had stopped: the connection stayed open for good)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(GET + b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
        assert _answers(sock, 1) == [b"0"]
        assert closed_within(sock, 15)


POST_200K = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n"


def test_a_pipelined_request_with_a_large_body_is_answered(port: int) -> None:
    """Two requests in one write, the second with a 200 KB body: both answered; and again with
    most of that body sent after the first answer. Its body was once counted as head bytes
    from the first answer on, and the connection closed past 64 KiB of them."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(GET + POST_200K + b"x" * 200_000 + GET)
        assert _answers(sock, 3) == [b"0", b"200000", b"0"]
        sock.sendall(GET + POST_200K + b"x" * 1000)
        assert _answers(sock, 1) == [b"0"]
        sock.sendall(b"x" * 199_000)
        assert _answers(sock, 1) == [b"200000"]


def _unread(port: int, request: bytes) -> socket.socket:
    """A connection that sends ``request`` and never reads, with a small receive buffer."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def _tcp_state(sock: socket.socket) -> int:
    """The kernel's state of ``sock`` (1: established), read without reading from it."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return int(struct.unpack("B", info[:1])[0])


def _cut_within(sock: socket.socket, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _tcp_state(sock) != 1:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("pipelined", [False, True], ids=["alone", "pipelined"])
def test_a_client_that_does_not_read_its_answer_is_cut_off(port: int, pipelined: bool) -> None:
    """An answer larger than the sockets' buffers, never read: the connection is cut once the
    write deadline is over (it once stayed open for good, the answer in the server's buffer,
    and a request pipelined behind it waiting in ``drain()``); the server answers others."""
    request = b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" + (GET if pipelined else b"")
    with _unread(port, request) as sock:
        assert _cut_within(sock, 15)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as other:
        other.sendall(GET)
        assert _answers(other, 1) == [b"0"]


def test_a_client_that_reads_its_large_answer_gets_it_whole(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" + GET)
        assert _answers(sock, 2) == [bytes(BIG), b"0"]
