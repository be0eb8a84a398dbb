"""A client cannot take the server down: slow heads and bodies are cut off within their deadline
while other clients are served, connections and requests in flight are capped (503 with
Retry-After), and many maximum-size requests against a small byte budget give 200s and 503s,
every 200 correct, and a server that lives."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import struct
import time
import urllib.request
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from support import raw_http
from support.processes import ServerProcess
from support.sample_requests import simple_grpc_request
from support.slow_clients import closed_within, dribble_until_closed
from tritonclient.grpc import service_pb2_grpc

pytestmark = pytest.mark.slow

_HEAD = (
    b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
    b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
)


def _connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def _live(server: ServerProcess) -> int:
    with urllib.request.urlopen(f"{server.base_url}/v2/health/live", timeout=5) as response:
        return int(response.status)


def _simple_body(value: int) -> bytes:
    data = [value] * 16
    inputs = [
        {"name": name, "datatype": "INT32", "shape": [1, 16], "data": data}
        for name in ("INPUT0", "INPUT1")
    ]
    return json.dumps({"inputs": inputs}).encode()


def _infer_simple(server: ServerProcess, value: int) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", "/v2/models/simple/infer", body=_simple_body(value))
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.fixture
def strict_server(make_server: Callable[..., ServerProcess]) -> ServerProcess:
    return make_server(
        "--request-head-timeout", "1", "--request-body-timeout", "1", "--grpc-port", "0"
    )


def test_a_slow_head_is_cut_off_within_its_deadline(strict_server: ServerProcess) -> None:
    with _connect(strict_server) as sock:
        took = dribble_until_closed(sock, _HEAD * 10, every_s=0.2)
    assert 0.9 < took < 2.5, took
    status, _, _ = _infer_simple(strict_server, 1)
    assert status == 200


def test_a_slow_body_is_cut_off_while_others_are_served(strict_server: ServerProcess) -> None:
    with _connect(strict_server) as sock:
        sock.sendall(_HEAD)
        started = time.monotonic()
        served = [_infer_simple(strict_server, n)[0] for n in range(3)]  # while it dribbles
        took = dribble_until_closed(sock, b"x" * 1000, every_s=0.2) + time.monotonic() - started
    assert served == [200, 200, 200]
    assert took < 3.5, took
    assert _live(strict_server) == 200


@pytest.mark.parametrize("workers", [1, 2])
def test_a_connection_that_never_speaks_is_closed(
    make_server: Callable[..., ServerProcess], workers: int
) -> None:
    """Also in worker processes, which get the protocol class by pickling, and the limits from
    their own settings."""
    server = make_server("--request-head-timeout", "1", "--workers", str(workers))
    with _connect(server) as sock:
        started = time.monotonic()
        assert sock.recv(10) == b""
        assert time.monotonic() - started < 2.5


def test_connections_over_the_cap_get_503_with_retry_after(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server("--max-connections", "2", "--grpc-port", "0")
    held = [_connect(server), _connect(server)]
    try:
        time.sleep(0.2)
        with _connect(server) as extra:
            answer = extra.recv(65536)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 1" in answer.lower()
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.2)
    assert _infer_simple(server, 2)[0] == 200


def test_requests_over_the_in_flight_cap_get_503_with_retry_after(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server("--max-requests-in-flight", "1", "--grpc-port", "0")
    with _connect(server) as slow:
        slow.sendall(_HEAD + b"{")  # admitted, and waiting for the rest of its body
        time.sleep(0.3)
        status, headers, body = _infer_simple(server, 3)
    assert status == 503
    assert headers["retry-after"] == "1"
    assert "--max-requests-in-flight" in json.loads(body)["error"]
    time.sleep(0.2)
    assert _infer_simple(server, 3)[0] == 200


def test_grpc_shares_the_cap_and_answers_unavailable(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server("--max-requests-in-flight", "1")
    request = simple_grpc_request()
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with _connect(server) as slow:
            slow.sendall(_HEAD + b"{")
            time.sleep(0.3)
            with pytest.raises(grpc.RpcError) as caught:
                stub.ModelInfer(request)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "--max-requests-in-flight" in str(caught.value.details())
        time.sleep(0.2)
        assert stub.ModelInfer(request).outputs


def _identity_body(seed: int, size: int) -> tuple[bytes, bytes, int]:
    """A binary request for simple_identity with one BYTES element of ``size`` bytes."""
    element = bytes([97 + seed % 26]) * size
    raw = struct.pack("<I", len(element)) + element
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [1, 1],
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header + raw, element, len(header)


def test_many_maximum_size_requests_against_a_small_budget(
    make_server: Callable[..., ServerProcess],
) -> None:
    size = 1 << 20
    server = make_server(
        "--max-request-size", "1100Ki", "--max-inflight-bytes", "6Mi", "--grpc-port", "0"
    )

    def call(seed: int) -> tuple[int, bool, str | None]:
        body, element, header_length = _identity_body(seed, size - 200)
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            connection.request(
                "POST",
                "/v2/models/simple_identity/infer",
                body=body,
                headers={
                    "Inference-Header-Content-Length": str(header_length),
                    "Cache-Control": "no-store",
                },
            )
            response = connection.getresponse()
            answer = response.read()
            if response.status != 200:
                return response.status, False, response.getheader("retry-after")
            length = int(response.getheader("inference-header-content-length") or 0)
            correct = answer[length:] == struct.pack("<I", len(element)) + element
            return 200, correct, None
        finally:
            connection.close()

    # A request holding the whole budget (its head admitted it, its body never comes) makes the
    # first wave wait past its 2 s and get 503s; it goes before the second wave's wait is over.
    holder = _connect(server)
    holder.sendall(
        b"POST /v2/models/simple_identity/infer HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 1100000\r\n\r\n"
    )
    with ThreadPoolExecutor(200) as pool:
        first = [pool.submit(call, seed) for seed in range(100)]
        time.sleep(1.5)
        second = [pool.submit(call, seed) for seed in range(100, 200)]
        time.sleep(1.0)
        holder.close()
        results = [future.result() for future in first + second]
    statuses = [status for status, _, _ in results]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(503) > 0, statuses
    assert statuses.count(200) > 0, statuses
    assert all(correct for status, correct, _ in results if status == 200)
    assert all(retry == "1" for status, _, retry in results if status == 503)
    assert _live(server) == 200


def _trickle_until_closed(socks: list[socket.socket], piece: bytes, every_s: float) -> list[int]:
    """Send ``piece`` on each of ``socks`` every ``every_s`` until the server has closed them
    all (at most 30 s); the number of pieces each took."""
    sent = [0] * len(socks)
    open_ = set(range(len(socks)))
    for sock in socks:
        sock.setblocking(False)
    for _ in range(int(30 / every_s)):
        for index in sorted(open_):
            try:
                socks[index].send(piece)
                sent[index] += 1
                if socks[index].recv(65536) == b"":
                    open_.discard(index)
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                open_.discard(index)
        if not open_:
            return sent
        time.sleep(every_s)
    raise AssertionError(f"connections {sorted(open_)} were never cut off")


@pytest.fixture
def budget_server(make_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A 4 MiB body limit, and a budget of bytes in flight that a 2 MiB JSON body (counted
    with its decode, 17 times) fills exactly."""
    return make_server(
        "--max-request-size", "4Mi", "--max-inflight-bytes", "34Mi",
        "--request-body-deadline", "4",
    )  # fmt: skip


def test_trickling_bodies_hold_only_what_they_sent_until_their_deadline(
    budget_server: ServerProcess,
) -> None:
    """A body declaring 2 MiB and a chunked one, both sent a little at a time (fast enough for
    the 1 KiB-per-30 s progress deadline): neither takes the budget (each was once charged its
    declared length or the size limit, so other HTTP and gRPC inferences got 503), and both
    are cut off at the whole-body deadline."""
    declared = _connect(budget_server)
    chunked = _connect(budget_server)
    try:
        declared.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n{"
        )
        chunked.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n"
        )
        time.sleep(0.5)  # both admitted, waiting for the rest of their bodies
        status, _, _ = _infer_simple(budget_server, 4)
        assert status == 200
        with grpc.insecure_channel(budget_server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ModelInfer(simple_grpc_request(), timeout=10).outputs
        _trickle_until_closed([declared, chunked], b" ", every_s=0.2)
    finally:
        declared.close()
        chunked.close()
    assert _live(budget_server) == 200
    assert _infer_simple(budget_server, 5)[0] == 200


def test_a_body_that_could_never_fit_the_budget_is_refused_at_once(
    budget_server: ServerProcess,
) -> None:
    """4 MiB of JSON is within the size limit, but would hold twice the whole budget while it
    is decoded: 413 from its head alone, where it was once admitted to run alone."""
    with _connect(budget_server) as sock:
        sock.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 4194304\r\n\r\n"
        )
        buffer = bytearray()
        status, _, body = raw_http.parse(raw_http.read_response(sock, buffer))
    assert status == 413
    assert "--max-inflight-bytes" in json.loads(body)["error"]
    assert _infer_simple(budget_server, 6)[0] == 200


def test_a_grpc_message_that_could_never_fit_the_budget_is_refused(
    make_server: Callable[..., ServerProcess],
) -> None:
    """A gRPC message is whole before it is counted, at twice its size: one over the whole
    budget is RESOURCE_EXHAUSTED naming the flag, where it was once run alone (holding every
    byte of the budget while other inferences waited and got UNAVAILABLE)."""
    server = make_server("--max-request-size", "4Mi", "--max-inflight-bytes", "2Mi")
    request = simple_grpc_request()
    request.raw_input_contents[0] = bytes(3 * 1024 * 1024)  # 6 MiB counted, 2 MiB budget
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-inflight-bytes" in (refused.value.details() or "")
        assert stub.ModelInfer(simple_grpc_request(), timeout=10).outputs


def _post_raw(sock: socket.socket, body: bytes, encoding: str) -> None:
    sock.sendall(
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s"
        % (encoding.encode(), len(body), body)
    )


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_inflating_bombs_are_refused_while_the_server_answers_others(
    make_server: Callable[..., ServerProcess], encoding: str
) -> None:
    """Bodies of some 64 KiB that inflate to 64 MiB, past the 48 MiB size limit: each is refused
    with 413, and while they are being inflated the server answers its health checks (the
    inflating runs in bounded steps off the event loop, where it once held it). A legitimate
    compressed body is answered as before. (The limit is high so that inflating up to it takes
    longer than a health check on a loaded machine: at 16 MiB a fast host refused all three
    before the first health check was back.)"""
    server = make_server("--max-request-size", "48Mi", "--max-inflight-bytes", "4Gi",
                         "--grpc-port", "0")  # fmt: skip
    compress = gzip.compress if encoding == "gzip" else zlib.compress
    bomb = compress(b"0" * (64 << 20))
    bombs = [_connect(server) for _ in range(3)]
    done: list[tuple[float, str]] = []

    def answer_of(sock: socket.socket) -> int:
        status, _, _ = raw_http.parse(raw_http.read_response(sock, bytearray()))
        done.append((time.monotonic(), "bomb"))
        return status

    try:
        with ThreadPoolExecutor(3) as pool:
            for sock in bombs:
                _post_raw(sock, bomb, encoding)
            answers = [pool.submit(answer_of, sock) for sock in bombs]
            while not all(answer.done() for answer in answers):
                assert _live(server) == 200
                done.append((time.monotonic(), "live"))
            statuses = [answer.result() for answer in answers]
    finally:
        for sock in bombs:
            sock.close()
    assert statuses == [413, 413, 413]
    last_bomb = max(at for at, what in done if what == "bomb")
    assert any(what == "live" and at < last_bomb for at, what in done), done
    with _connect(server) as sock:
        _post_raw(sock, compress(_simple_body(7)), encoding)
        status, _, body = raw_http.parse(raw_http.read_response(sock, bytearray()))
    assert status == 200
    outputs = {item["name"]: item["data"] for item in json.loads(body)["outputs"]}
    assert outputs["OUTPUT0"] == [14] * 16


def test_a_large_json_body_is_decoded_in_a_thread_and_answered_as_before(
    server: ServerProcess,
) -> None:
    """A JSON body past the size decoded in a worker thread (256 KiB): the same answer, and
    the same refusal for a bad one."""
    element = "x" * (300 * 1024)

    def post(shape: list[int]) -> tuple[int, dict[str, object]]:
        inputs = [{"name": "INPUT0", "datatype": "BYTES", "shape": shape, "data": [element]}]
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            connection.request(
                "POST",
                "/v2/models/simple_identity/infer",
                body=json.dumps({"inputs": inputs}).encode(),
                headers={"Cache-Control": "no-store"},
            )
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    status, document = post([1, 1])
    assert status == 200, document
    outputs = document["outputs"]
    assert isinstance(outputs, list)
    assert outputs[0]["data"] == [element]
    status, document = post([2, 1])
    assert status == 400
    assert "needs 2 elements" in str(document["error"])


_LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"


def test_a_pipelined_request_that_never_sends_its_body_gives_its_place_back(
    make_server: Callable[..., ServerProcess],
) -> None:
    """A whole request, then a second one's head and one byte of its body, then nothing: the
    second is cut off at the body deadlines as a first request would be, and the one place of
    ``--max-requests-in-flight 1`` it held goes back (it once held it for good: every HTTP
    inference got 503, every gRPC one UNAVAILABLE)."""
    server = make_server(
        "--max-requests-in-flight", "1", "--request-body-timeout", "1",
        "--request-body-deadline", "3", "--grpc-port", "0",
    )  # fmt: skip
    with _connect(server) as sock:
        sock.sendall(
            _LIVE + b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        assert raw_http.read(sock, bytearray())[0] == 200
        assert closed_within(sock, 20)
    assert _infer_simple(server, 8)[0] == 200


def _identity_request(seed: int, size: int, path: bytes = b"simple_identity") -> bytes:
    body, _, header_length = _identity_body(seed, size)
    return (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nCache-Control: no-store\r\n"
        b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s"
        % (path, header_length, len(body), body)
    )


def test_a_pipelined_request_with_a_200_kb_body_is_answered(server: ServerProcess) -> None:
    """Two requests in one write, the second with a 200 KB body: both answered (the second's
    body was once counted as head bytes and the connection closed past 64 KiB); and again with
    most of the body sent after the first answer."""
    second = _identity_request(1, 200_000)
    with _connect(server) as sock:
        buffer = bytearray()
        sock.sendall(_LIVE + second)
        assert [raw_http.read(sock, buffer)[0] for _ in range(2)] == [200, 200]
        sock.sendall(_LIVE + second[:1000])
        assert raw_http.read(sock, buffer)[0] == 200
        sock.sendall(second[1000:])
        status, _, body = raw_http.read(sock, buffer)
    assert status == 200
    assert body.endswith(b"b" * 1000)


def _unread(server: ServerProcess, request: bytes) -> socket.socket:
    """A connection that sends ``request`` and never reads (a small receive buffer), once the
    server has begun to answer it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(request)
    assert sock.recv(16, socket.MSG_PEEK).startswith(b"HTTP/1.1 200 ")  # peeked, not read
    return sock


def _cut_within(sock: socket.socket, seconds: float) -> bool:
    """Whether ``sock`` is reset within ``seconds``, told without reading from it (the kernel's
    TCP state, 1 while established)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] != 1:
            return True
        time.sleep(0.1)
    return False


def _identity_status(server: ServerProcess, seed: int, size: int) -> tuple[int, str]:
    with _connect(server) as sock:
        sock.settimeout(30)
        sock.sendall(_identity_request(seed, size))
        status, _, body = raw_http.read(sock, bytearray())
    return status, "" if status == 200 else str(json.loads(body)["error"])


def test_answers_nobody_reads_stay_charged_until_their_clients_are_cut_off(
    make_server: Callable[..., ServerProcess],
) -> None:
    """Four connections send 3 MiB to simple_identity and read nothing. Their answers stay
    charged to the 16 MiB budget while they wait to be written (they were once given back as
    soon as they were handed to the transport: 24 such clients took the process from 253 to
    689 MiB under a 64 MiB budget), so a further 3 MiB request (6 MiB while decoded) waits and
    gets 503; once the write deadline cuts the four off, it is answered."""
    size = 3 << 20
    server = make_server(
        "--cache", "none", "--max-request-size", "8Mi", "--max-inflight-bytes", "16Mi",
        "--response-write-timeout", "8", "--grpc-port", "0",
    )  # fmt: skip
    held = [_unread(server, _identity_request(seed, size - 200)) for seed in range(4)]
    try:
        status, error = _identity_status(server, 9, size - 200)
        assert status == 503, "the unread answers were not charged"
        assert "--max-inflight-bytes" in error
        for sock in held:
            assert _cut_within(sock, 30)
    finally:
        for sock in held:
            sock.close()
    assert _identity_status(server, 10, size - 200)[0] == 200


def test_requests_pipelined_behind_unread_answers_give_their_places_back(
    make_server: Callable[..., ServerProcess],
) -> None:
    """Behind an answer its client does not read, a pipelined request waits in ``drain()`` to
    write its own, holding its place: two of them filled ``--max-requests-in-flight 2`` for
    good. The write deadline cuts their connections, and the places go back."""
    server = make_server(
        "--cache", "none", "--max-request-size", "8Mi", "--max-requests-in-flight", "2",
        "--response-write-timeout", "3", "--grpc-port", "0",
    )  # fmt: skip
    pipelined = _identity_request(0, 100)
    held = [
        _unread(server, _identity_request(seed, (3 << 20) - 200) + pipelined) for seed in range(2)
    ]
    try:
        for sock in held:
            assert _cut_within(sock, 30)
    finally:
        for sock in held:
            sock.close()
    assert _infer_simple(server, 11)[0] == 200
