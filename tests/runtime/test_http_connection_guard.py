"""The connection guard on both of uvicorn's HTTP protocols (httptools, and h11 where httptools is
not installed), served by a real uvicorn on loopback with a plain ASGI application: a slow head
and a slow body are cut off, a request that keeps its pace is answered, and connections past
the cap get a 503 with Retry-After."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from support.slow_clients import dribble_until_closed
from support.uvicorn_thread import serving

from cachefleet.runtime.config import LimitSettings
from cachefleet.runtime.http.uvicorn_protocol import GuardedH11Protocol, GuardedHttpToolsProtocol

LIMITS = LimitSettings(
    head_timeout_s=0.6, body_timeout_s=0.6, body_deadline_s=2.0, max_connections=3
)


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
        body = b"%d" % size
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
