"""Memo hits answered below ASGI by the HTTP protocol (``uvicorn_protocol``): the real server
application, opened as ``cachefleet serve`` opens it, fed through uvicorn's httptools protocol
with the connection guard, over a transport that records what is written. What a client sees is
the same either way (``tests/e2e/test_http_memo_wire.py`` reads it off real sockets); this reads
the mechanism: a hit whose body came whole is answered before the read returns, in one write,
with no ASGI task, counted as a hit; a request before it in flight, a body still to come or a
miss go to uvicorn as before, in order; the answer's bytes stay charged until written."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.sample_requests import binary_body
from support.served_app import opened_server
from support.waiting import wait_for_async
from uvicorn.config import Config
from uvicorn.server import ServerState

from cachefleet.runtime.http.infer_front import InferFront
from cachefleet.runtime.http.uvicorn_protocol import GuardedHttpToolsProtocol
from harness.recording_transport import RecordingTransport


def _request(seed: int, padding: int = 0) -> bytes:
    """``simple``'s request as tritonclient frames it, its JSON header led by ``padding``
    spaces (past what is answered below ASGI when large)."""
    body, json_size = binary_body("simple", seed)
    assert json_size is not None
    body = b" " * padding + body
    head = (
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: test\r\n"
        b"Content-Type: application/octet-stream\r\n"
        b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
        % (json_size + padding, len(body))
    )
    return bytes(head + body)


class Connection:
    """One connection of uvicorn's protocol to the served application."""

    def __init__(self, app: InferFront) -> None:
        config = Config(app, lifespan="off", proxy_headers=False, http="httptools")
        config.load()
        self.state = ServerState()
        self.protocol = GuardedHttpToolsProtocol(config, self.state, {})
        self.transport = RecordingTransport()
        self.protocol.connection_made(self.transport)

    async def answered(self, count: int) -> None:
        """Until ``count`` answers in all are complete (an ASGI task runs on the loop)."""

        async def done() -> bool:
            return self.state.total_requests >= count

        await wait_for_async(done, f"{count} answers", timeout_s=30)

    def close(self) -> None:
        self.protocol.connection_lost(None)


@pytest.fixture
async def app(light_model_repository: Path) -> AsyncIterator[InferFront]:
    async with opened_server(light_model_repository, "--cache", "local") as served:
        yield served


def _x_cache(answer: bytes) -> bytes:
    head = answer.split(b"\r\n\r\n", 1)[0]
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b": ")
        if name == b"x-cache":
            return value
    return b""


@contextmanager
def _descriptions(app: InferFront) -> Iterator[list[str]]:
    """The paths of the requests the front's ``heads`` describes while in the block."""
    described: list[str] = []
    heads = app.heads

    def counted(scope: Any) -> Any:
        described.append(scope["path"])
        return heads(scope)

    app.heads = counted  # type: ignore[assignment]
    try:
        yield described
    finally:
        app.heads = heads


def _statistics(app: InferFront) -> dict[str, Any]:
    runtime = app.serve.__self__._slot.ready()  # type: ignore[attr-defined]
    stats = runtime.service.statistics("simple", None)["model_stats"][0]
    return dict(stats["inference_stats"])


async def test_a_hit_is_answered_before_the_read_returns_in_one_write(app: InferFront) -> None:
    connection = Connection(app)
    request = _request(0)
    for count in (1, 2):  # a miss, then a local hit, which the memo keeps
        connection.protocol.data_received(request)
        await connection.answered(count)
    hits_before = _statistics(app)["cache_hit"]["count"]
    connection.transport.writes.clear()
    connection.protocol.data_received(request)
    # Answered within data_received: no task, no loop turn, head and body in one write.
    assert connection.state.total_requests == 3
    assert not connection.state.tasks
    (written,) = connection.transport.writes
    assert written.startswith(b"HTTP/1.1 200 OK\r\n")
    assert _x_cache(written) == b"hit-local"
    assert _statistics(app)["cache_hit"]["count"] == hits_before + 1
    connection.close()


async def test_what_it_does_not_answer_goes_to_uvicorn_in_order(app: InferFront) -> None:
    connection = Connection(app)
    hit, miss = _request(0), _request(7)
    for count in (1, 2):
        connection.protocol.data_received(hit)
        await connection.answered(count)
    connection.transport.writes.clear()
    # A miss, then a hit, in one read: the hit waits its turn behind the miss.
    connection.protocol.data_received(miss + hit)
    assert connection.transport.writes == []
    await connection.answered(4)
    answers = b"".join(connection.transport.writes).split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert [_x_cache(a) for a in answers] == [b"miss", b"hit-local"]
    # A hit whose body comes in a later read is uvicorn's from its first read on.
    connection.transport.writes.clear()
    connection.protocol.data_received(hit[:-10])
    assert connection.state.tasks
    connection.protocol.data_received(hit[-10:])
    await connection.answered(5)
    assert _x_cache(b"".join(connection.transport.writes)) == b"hit-local"
    connection.close()


async def test_an_unread_answer_stays_charged_until_written(app: InferFront) -> None:
    connection = Connection(app)
    request = _request(0)
    for count in (1, 2):
        connection.protocol.data_received(request)
        await connection.answered(count)
    budget = app.serve.__self__._slot.ready().budget  # type: ignore[attr-defined]
    held = budget.bytes
    connection.transport.backlog = 1  # the client reads nothing
    connection.protocol.data_received(request)
    assert connection.state.total_requests == 3
    assert budget.bytes > held  # the answer's bytes, while they wait in the buffer
    connection.transport.backlog = 0
    connection.protocol.resume_writing()  # the buffer is empty
    assert budget.bytes == held
    connection.close()


def _memo_figures(app: InferFront) -> tuple[int, int]:
    runtime = app.serve.__self__._slot.ready()  # type: ignore[attr-defined]
    figures = runtime.memo_answers.memo.figures()
    return figures.hits, figures.misses


async def _memoize(connection: Connection, request: bytes, answered: int) -> int:
    """Send ``request`` twice (a miss, then a local hit the memo keeps); the answers so far."""
    for _ in range(2):
        connection.protocol.data_received(request)
        answered += 1
        await connection.answered(answered)
    return answered


async def test_a_miss_asked_below_asgi_is_looked_up_once(app: InferFront) -> None:
    """A small request the memo had no answer for goes to uvicorn with its head and the memo
    key it was looked up by: the ASGI path neither describes it nor looks it up again, and
    keeps its answer under that key once it is a local hit."""
    connection = Connection(app)
    answered = await _memoize(connection, _request(2), 0)  # the memo holds one of simple's
    request = _request(3)
    before = _memo_figures(app)
    connection.protocol.data_received(request)  # a miss: the model runs
    await connection.answered(answered + 1)
    assert _memo_figures(app) == (before[0], before[1] + 1)  # one lookup, not two
    connection.transport.writes.clear()
    connection.protocol.data_received(request)  # a local hit, memoized under the same key
    await connection.answered(answered + 2)
    assert _memo_figures(app) == (before[0], before[1] + 2)
    assert _x_cache(b"".join(connection.transport.writes)) == b"hit-local"
    connection.transport.writes.clear()
    connection.protocol.data_received(request)  # now the memo answers, below ASGI
    assert connection.state.total_requests == answered + 3
    assert _memo_figures(app) == (before[0] + 1, before[1] + 2)
    assert _x_cache(b"".join(connection.transport.writes)) == b"hit-local"
    connection.close()


async def test_a_model_the_memo_holds_nothing_of_is_not_looked_up(app: InferFront) -> None:
    """While the memo keeps no answer of a model, its requests are neither hashed nor looked
    up (each counted as one memo miss, as its lookup would be); a local hit of it is kept all
    the same, and its repeat is answered by the memo below ASGI."""
    connection = Connection(app)
    runtime = app.serve.__self__._slot.ready()  # type: ignore[attr-defined]
    memo = runtime.memo_answers.memo
    looked_up: list[object] = []
    lookup = memo.lookup

    def counted(key: Any) -> Any:
        looked_up.append(key)
        return lookup(key)

    runtime.memo_answers._lookup = counted  # the memo's lookup, as the service binds it
    request = _request(5)
    before = _memo_figures(app)
    connection.protocol.data_received(request)  # a miss
    await connection.answered(1)
    connection.protocol.data_received(request)  # a local hit, kept by the memo
    await connection.answered(2)
    assert looked_up == []  # nothing of simple in the memo: never asked for it
    assert _memo_figures(app) == (before[0], before[1] + 2)
    assert memo.holds("simple")
    connection.transport.writes.clear()
    connection.protocol.data_received(request)  # the memo answers, below ASGI
    assert connection.state.total_requests == 3
    assert len(looked_up) == 1
    assert _memo_figures(app) == (before[0] + 1, before[1] + 2)
    assert _x_cache(b"".join(connection.transport.writes)) == b"hit-local"
    connection.close()


async def test_the_asgi_path_reads_the_head_described_below_it(app: InferFront) -> None:
    """The head the protocol held comes with the request's scope, and the front serves it
    without describing the request a second time."""
    connection = Connection(app)
    with _descriptions(app) as described:
        connection.protocol.data_received(_request(4))
        await connection.answered(1)
    assert described == ["/v2/models/simple/infer"]  # once, below ASGI
    assert _x_cache(b"".join(connection.transport.writes)) == b"miss"
    connection.close()


@pytest.mark.parametrize(
    ("request_bytes", "x_cache"),
    [
        pytest.param(
            _request(5, padding=70 * 1024), b"miss", id="a body too large to answer below ASGI"
        ),
        pytest.param(
            _request(6).replace(b"Host: test\r\n", b"Host: test\r\nCache-Control: no-cache\r\n"),
            b"bypass",
            id="a request the memo may not answer",
        ),
        pytest.param(
            b"POST /v2/repository/index HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\n{}",
            b"",
            id="no infer request",
        ),
    ],
)
async def test_a_request_described_below_asgi_but_not_held_is_described_once(
    app: InferFront, request_bytes: bytes, x_cache: bytes
) -> None:
    """A request the protocol described and then left to uvicorn (too large, not for the
    memo, no infer path) carries that description to the front, which does not make it again."""
    connection = Connection(app)
    with _descriptions(app) as described:
        connection.protocol.data_received(request_bytes)
        await connection.answered(1)
    answer = b"".join(connection.transport.writes)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert len(described) == 1
    assert _x_cache(answer) == x_cache


async def test_a_cheap_model_skipped_by_admission_still_memoizes_its_repeats(
    app: InferFront,
) -> None:
    """``simple`` with every request new: admission skips its local tier (a lookup and an
    insert cost more than they save), and the memo, holding nothing of it, is not asked. A
    request that then repeats is still noticed: admission's probes of the skipped tier keep
    it once and find it again, that local hit is memoized, and from then on the memo answers
    the repeat below ASGI."""
    connection = Connection(app)
    runtime = app.serve.__self__._slot.ready()  # type: ignore[attr-defined]
    admission = runtime.admission
    answered = 0
    while admission.admitted("simple", "local"):
        answered += 1
        assert answered < 1000, "admission never skipped the local tier of an all-miss model"
        connection.protocol.data_received(_request(10_000 + answered))
        await connection.answered(answered)
    assert not runtime.memo_answers.memo.holds("simple")
    hits_before, _ = _memo_figures(app)
    request = _request(5)
    # A skipped tier is probed at least once in ``probe_floor`` requests: two probes (the
    # insert, then the local hit the memo keeps) and one more for the memo's answer.
    for _ in range(2 * 1024 + 1):
        connection.transport.writes.clear()
        connection.protocol.data_received(request)
        answered += 1
        if connection.state.total_requests == answered and not connection.state.tasks:
            break  # answered within data_received: by the memo, below ASGI
        await connection.answered(answered)
    else:
        raise AssertionError("the memo never answered a request repeated 2049 times")
    assert _memo_figures(app)[0] == hits_before + 1
    assert _x_cache(b"".join(connection.transport.writes)) == b"hit-local"
    connection.close()


async def test_a_request_its_head_refuses_is_not_a_memo_miss(light_model_repository: Path) -> None:
    """A request the head refuses (here restricted) is refused before the memo is asked,
    below ASGI as on the ASGI path: it is no memo miss on either."""
    restricted = ("--cache", "local", "--http-restricted-api", "inference:admin-key=s3cret")
    async with opened_server(light_model_repository, *restricted) as served:
        connection = Connection(served)
        before = _memo_figures(served)
        for count in (1, 2):
            connection.protocol.data_received(_request(9))
            await connection.answered(count)
        written = b"".join(connection.transport.writes)
        assert written.count(b"HTTP/1.1 403 ") == 2
        assert _memo_figures(served) == before
        connection.close()
