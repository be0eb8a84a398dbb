"""Memoized infer answers on the wire: what a client sees of them.

A repeated request whose answer is memoized is answered by the infer front, a plain ASGI
callable in front of the application (``runtime/http/infer_front.py``), from the answer memo.
Raw sockets against a real server read what goes on the wire byte for byte: the same answer as
the full path gives, counted the same, in request order on a pipelined connection, and every
request the memo must not answer alone (split bodies, ``Connection: close``, restricted
inference, cache directives, compression, a flushed entry) answered as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient
from support import loopback, raw_http
from support.processes import ServerProcess
from support.sample_requests import binary_body, sample_request

PATH = b"/v2/models/simple/infer"


def _body(seed: int = 0) -> tuple[bytes, int]:
    """``simple``'s request as tritonclient encodes it (binary inputs), and its header length."""
    body, json_size = binary_body("simple", seed)
    assert json_size is not None
    return body, json_size


def _request(seed: int = 0, *extra: bytes, path: bytes = PATH) -> bytes:
    body, json_size = _body(seed)
    head = [
        b"POST %s HTTP/1.1" % path,
        b"Host: test",
        b"Content-Type: application/octet-stream",
        b"Inference-Header-Content-Length: %d" % json_size,
        b"Content-Length: %d" % len(body),
        *extra,
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _exchange(server: ServerProcess, *requests: bytes) -> list[raw_http.Response]:
    """Send ``requests`` one after the other on one connection, each after the last answer."""
    answers = []
    with raw_http.connect(server) as stream:
        buffer = bytearray()
        for request in requests:
            stream.sendall(request)
            answers.append(raw_http.read(stream, buffer))
    return answers


def _outputs(answer: raw_http.Response) -> dict[str, np.ndarray]:
    status, headers, body = answer
    assert status == 200, body
    length = headers.get(b"inference-header-content-length")
    result = httpclient.InferResult.from_response_body(
        body, header_length=int(length) if length else None
    )
    return {name: result.as_numpy(name) for name in ("OUTPUT0", "OUTPUT1")}


def _statistics(server: ServerProcess) -> dict[str, int]:
    document = loopback.get(f"{server.base_url}/v2/models/simple/stats").json()
    stats = document["model_stats"][0]
    return {
        "success": stats["inference_stats"]["success"]["count"],
        "cache_hit": stats["inference_stats"]["cache_hit"]["count"],
        "inference_count": stats["inference_count"],
    }


@pytest.fixture
def warmed(sample_server: ServerProcess) -> ServerProcess:
    """The module's server (local cache) whose memo holds seed 0's answer alone: flushed (the
    cache and the memo), then a miss, then a local hit, which the application memoizes."""
    server = sample_server
    assert loopback.post(f"{server.base_url}/v2/models/simple/cache/flush").status_code == 200
    first, second = _exchange(server, _request(), _request())
    assert first[1][b"x-cache"] == b"miss"
    assert second[1][b"x-cache"] == b"hit-local"
    return server


def test_a_memoized_answer_is_the_applications_answer_byte_for_byte(
    warmed: ServerProcess,
) -> None:
    # Accept-Encoding leaves the request to the application (which compresses nothing for
    # "identity"): the same memo entry, answered by the application's path.
    by_protocol, by_application = _exchange(
        warmed, _request(), _request(0, b"Accept-Encoding: identity")
    )
    assert by_protocol[0] == by_application[0] == 200
    assert by_protocol[2] == by_application[2]
    assert by_protocol[1].pop(b"date")
    assert by_application[1].pop(b"date")
    assert by_protocol[1] == by_application[1]
    assert by_protocol[1][b"x-cache"] == b"hit-local"
    expected = sample_request("simple")
    outputs = _outputs(by_protocol)
    np.testing.assert_array_equal(outputs["OUTPUT0"], expected["INPUT0"][0] + 1)
    np.testing.assert_array_equal(outputs["OUTPUT1"], expected["INPUT0"][0] - 1)


def test_memoized_answers_are_counted_as_hits(warmed: ServerProcess) -> None:
    before = _statistics(warmed)
    answers = _exchange(warmed, *[_request()] * 5)
    assert [a[1][b"x-cache"] for a in answers] == [b"hit-local"] * 5
    after = _statistics(warmed)
    assert after["success"] - before["success"] == 5
    assert after["cache_hit"] - before["cache_hit"] == 5
    assert after["inference_count"] == before["inference_count"]  # executions, as Triton counts


def test_pipelined_requests_are_answered_in_order(warmed: ServerProcess) -> None:
    # A miss (seed 1), a memoized hit, a model that does not exist, the memoized hit again:
    # all in one write, so the hits arrive while the miss is still being computed.
    requests = [
        _request(1),
        _request(0),
        _request(0, path=b"/v2/models/nope/infer"),
        _request(0),
    ]
    with raw_http.connect(warmed) as stream:
        stream.sendall(b"".join(requests))
        buffer = bytearray()
        answers = [raw_http.read(stream, buffer) for _ in requests]
    assert [a[0] for a in answers] == [200, 200, 404, 200]
    x_cache = [a[1].get(b"x-cache") for a in answers]
    assert x_cache == [b"miss", b"hit-local", None, b"hit-local"]  # an error carries none
    first = _outputs(answers[0])
    np.testing.assert_array_equal(first["OUTPUT0"], sample_request("simple", 1)["INPUT0"][0] + 1)


def test_a_body_split_across_reads_is_answered(warmed: ServerProcess) -> None:
    request = _request()
    with raw_http.connect(warmed) as stream:
        buffer = bytearray()
        for cut in (len(request) - 10, len(request) - 200, 40):
            stream.sendall(request[:cut])
            time.sleep(0.05)
            stream.sendall(request[cut:])
            status, headers, _ = raw_http.read(stream, buffer)
            assert status == 200
            assert headers[b"x-cache"] == b"hit-local"


def test_keep_alive_and_connection_close(warmed: ServerProcess) -> None:
    with raw_http.connect(warmed) as stream:
        buffer = bytearray()
        for _ in range(20):
            stream.sendall(_request())
            assert raw_http.read(stream, buffer)[0] == 200
        stream.sendall(_request(0, b"Connection: close"))
        status, headers, _ = raw_http.read(stream, buffer)
        assert status == 200
        assert headers[b"connection"] == b"close"
        assert stream.recv(1) == b""  # the server closed the connection


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (b"Cache-Control: no-cache", b"bypass"),
        (b"Cache-Control: no-store", b"bypass"),
        (b"Accept-Encoding: gzip", b"hit-local"),
    ],
)
def test_requests_the_memo_does_not_answer_alone_are_answered_as_before(
    warmed: ServerProcess, extra: bytes, expected: bytes
) -> None:
    ((status, headers, _),) = _exchange(warmed, _request(0, extra))
    assert status == 200
    assert headers[b"x-cache"] == expected
    if extra.startswith(b"Accept-Encoding"):
        assert headers[b"content-encoding"] == b"gzip"


def test_a_flushed_entry_is_not_answered_from_the_memo(warmed: ServerProcess) -> None:
    flushed = loopback.post(f"{warmed.base_url}/v2/models/simple/cache/flush")
    assert flushed.status_code == 200
    ((_, headers, _),) = _exchange(warmed, _request())
    assert headers[b"x-cache"] == b"miss"


def test_bad_requests_are_refused_as_before(warmed: ServerProcess) -> None:
    body, _ = _body()
    bad_length = (
        b"POST %s HTTP/1.1\r\nHost: test\r\nInference-Header-Content-Length: x\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (PATH, len(body), body)
    )
    too_long = (
        b"POST %s HTTP/1.1\r\nHost: test\r\nInference-Header-Content-Length: %d\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (PATH, len(body) + 1, len(body), body)
    )
    answers = _exchange(warmed, bad_length, too_long, _request())
    assert [a[0] for a in answers] == [400, 400, 200]
    assert "Inference-Header-Content-Length" in orjson.loads(answers[0][2])["error"]


def test_restricted_inference_is_refused_before_the_memo(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server("--http-restricted-api", "inference:infer-key=s3cret")
    allowed = _request(0, b"Infer-Key: s3cret")
    assert [a[1][b"x-cache"] for a in _exchange(server, allowed, allowed, allowed)] == [
        b"miss",
        b"hit-local",
        b"hit-local",
    ]
    refused, wrong = _exchange(server, _request(), _request(0, b"Infer-Key: nope"))
    assert refused[0] == wrong[0] == 403
    assert b"This API is restricted" in refused[2]


def _sized_request(size: int) -> tuple[bytes, bytes]:
    """seed 0's request with its body made exactly ``size`` bytes long (the JSON header padded
    with spaces), as a head and a body."""
    body, json_size = _body()
    pad = size - len(body)
    assert pad >= 0
    head = (
        b"POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/octet-stream\r\n"
        b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
        % (PATH, json_size + pad, size)
    )
    return head, body[:json_size] + b" " * pad + body[json_size:]


@pytest.mark.parametrize("size", [65535, 65536, 65537])
@pytest.mark.parametrize("held_back", [None, 1, 40])
def test_bodies_at_the_held_size_are_answered_however_they_are_split(
    sample_server: ServerProcess, size: int, held_back: int | None
) -> None:
    """Bodies around uvicorn's 64 KiB read size, split any way, are answered (memoized or not):
    the connection guard never takes a body for an overlong head and closes the connection.
    ``held_back``: the body's last bytes, sent in a second write (None: the head alone first,
    then the whole body)."""
    head, body = _sized_request(size)
    if held_back is None:
        writes = [head, body]
    else:
        writes = [head + body[: len(body) - held_back], body[len(body) - held_back :]]
    with raw_http.connect(sample_server) as stream:
        buffer = bytearray()
        for _ in range(2):  # a miss, then the same request again (from the memo)
            for write in writes:
                stream.sendall(write)
                time.sleep(0.05)
            status, headers, _ = raw_http.read(stream, buffer)
            assert status == 200
            assert headers[b"x-cache"] in {b"miss", b"hit-local"}
