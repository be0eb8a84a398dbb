"""The HTTP protocol's memo answering, on a real uvicorn with a plain ASGI application whose memo
front knows one body: that body is answered by the protocol without the application, and every
request the front declines, or whose body comes in more than one read, reaches the application
whole, in order, on a connection that stays open for as long as it is answered."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from support import raw_http
from support.uvicorn_thread import serving

from cachefleet.runtime.cache.memo import MemoEntry
from cachefleet.runtime.config import LimitSettings
from cachefleet.runtime.http.httptools_protocol import GuardedHttpToolsProtocol
from cachefleet.runtime.http.infer_codec import HIT_LOCAL, answer_headers
from cachefleet.runtime.http.memo_front import MemoFront, Ticket

KNOWN = b"a body the memo knows"
ANSWER = b'{"outputs":[]}'
#: How long the application takes with a body that asks it to be slow.
SLOW_S = 0.6


class OneBodyFront(MemoFront):
    """A memo front that answers ``KNOWN`` posted to ``/memo`` and nothing else."""

    def __init__(self) -> None:
        self.answered = 0
        self.answer_body = ANSWER

    def ticket(self, target: bytes, headers: list[tuple[bytes, bytes]]) -> Ticket | None:
        return Ticket("m", None, None) if target == b"/memo" else None

    def answer(self, ticket: Ticket, body: list[bytes]) -> MemoEntry | None:
        if b"".join(body) != KNOWN:
            return None
        self.answered += 1
        headers = answer_headers(self.answer_body, None, HIT_LOCAL)
        return MemoEntry(self.answer_body, None, None, "m", "", 0, headers)  # type: ignore[arg-type]


class Application:
    """Answers the body it read; sleeps first for a body that starts with ``slow``."""

    limits = LimitSettings()

    def __init__(self) -> None:
        self.memo_front = OneBodyFront()
        self.bodies: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        if body.startswith(b"slow"):
            await asyncio.sleep(SLOW_S)
        answer = b"app:" + body
        headers = [(b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


@pytest.fixture
def served() -> Iterator[tuple[Application, int]]:
    application = Application()
    config = uvicorn.Config(
        application, host="127.0.0.1", port=0, http=GuardedHttpToolsProtocol,
        lifespan="off", log_level="warning", timeout_keep_alive=0.3,  # type: ignore[arg-type]
        proxy_headers=False,
    )  # fmt: skip
    with serving(config) as port:
        yield application, port


def _post(body: bytes, path: bytes = b"/memo") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (path, len(body), body)


def _read(stream: socket.socket, buffer: bytearray) -> bytes:
    """One response's body (its status checked for a 200)."""
    status, _, body = raw_http.read(stream, buffer)
    assert status == 200
    return body


def test_a_memoized_body_is_answered_without_the_application(
    served: tuple[Application, int],
) -> None:
    application, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stream:
        buffer = bytearray()
        for _ in range(3):
            stream.sendall(_post(KNOWN))
            assert _read(stream, buffer) == ANSWER
        stream.sendall(_post(b"other"))
        assert _read(stream, buffer) == b"app:other"
    assert application.memo_front.answered == 3
    assert application.bodies == [b"other"]


def test_the_answer_carries_the_date_and_the_entrys_headers(
    served: tuple[Application, int],
) -> None:
    _, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stream:
        stream.sendall(_post(KNOWN))
        answer = b""
        while not answer.endswith(ANSWER):
            answer += stream.recv(65536)
    head = answer.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"HTTP/1.1 200 OK"
    names = [line.split(b":")[0] for line in head[1:]]
    assert names == [b"date", b"server", b"content-length", b"content-type", b"x-cache"]
    assert b"content-length: %d" % len(ANSWER) in head


def test_declined_and_split_bodies_reach_the_application_whole(
    served: tuple[Application, int],
) -> None:
    application, port = served
    request = _post(KNOWN)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stream:
        buffer = bytearray()
        stream.sendall(_post(KNOWN, b"/elsewhere"))  # the front gives no ticket
        assert _read(stream, buffer) == b"app:" + KNOWN
        stream.sendall(request[:-5])  # the body in two reads: the application's
        time.sleep(0.1)
        stream.sendall(request[-5:])
        assert _read(stream, buffer) == b"app:" + KNOWN
    assert application.bodies == [KNOWN, KNOWN]
    assert application.memo_front.answered == 0


def test_pipelined_answers_keep_their_requests_order(served: tuple[Application, int]) -> None:
    application, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stream:
        stream.sendall(_post(b"slow first") + _post(KNOWN) + _post(b"third"))
        buffer = bytearray()
        answers = [_read(stream, buffer) for _ in range(3)]
    assert answers[0] == b"app:slow first"
    assert answers[1] in (ANSWER, b"app:" + KNOWN)  # owed behind the first: the application's
    assert answers[2] == b"app:third"
    assert application.bodies[0] == b"slow first"
    assert application.bodies[-1] == b"third"


def test_a_slow_request_after_a_memoized_answer_outlives_the_keep_alive_timeout(
    served: tuple[Application, int],
) -> None:
    application, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stream:
        # One read: the memoized answer arms the keep-alive timeout (0.3 s), and the slow
        # request behind it (0.6 s) must not be cut off by it.
        stream.sendall(_post(KNOWN) + _post(b"slow second"))
        buffer = bytearray()
        assert _read(stream, buffer) == ANSWER
        assert _read(stream, buffer) == b"app:slow second"
    assert application.memo_front.answered == 1


def test_a_client_that_does_not_read_gets_no_more_answers_piled_up(
    served: tuple[Application, int],
) -> None:
    application, port = served
    application.memo_front.answer_body = b"x" * 1_000_000
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stream:
        # 200 small requests in one go, and nothing read: 200 MB of answers if each were
        # written; once the socket's buffers are full the transport pauses writing, the
        # ordinary path waits for the client, and the server stops reading.
        stream.sendall(_post(KNOWN) * 200)
        deadline = time.monotonic() + 1
        answered = -1
        while time.monotonic() < deadline and application.memo_front.answered != answered:
            answered = application.memo_front.answered
            time.sleep(0.2)
        assert 0 < application.memo_front.answered < 50
