"""A client cannot take the server down: slow heads and bodies are cut off within their deadline
while other clients are served, connections and requests in flight are capped (503 with
Retry-After), and many maximum-size requests against a small byte budget give 200s and 503s,
every 200 correct, and a server that lives."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from support.processes import ServerProcess
from support.sample_requests import simple_grpc_request
from support.slow_clients import dribble_until_closed
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
