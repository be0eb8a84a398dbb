"""The budget charges what a request holds, attacked from outside: slow JSON bodies hold what
they sent (a small memo hit is still served next to them), a JSON text over ``--max-json-size``
is refused before it is parsed, compressed or not, and a compressed gRPC message is charged at
its inflated size before it is parsed."""

from __future__ import annotations

import gzip
import json
import socket
import struct
import time
from collections.abc import Callable

import grpc
import pytest
from support import raw_http
from support.processes import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc

pytestmark = pytest.mark.slow

MIB = 1 << 20


def _simple_json(value: int) -> bytes:
    inputs = [
        {"name": name, "datatype": "INT32", "shape": [1, 16], "data": [value] * 16}
        for name in ("INPUT0", "INPUT1")
    ]
    return json.dumps({"inputs": inputs}).encode()


def _post(body: bytes, *headers: bytes) -> bytes:
    head = [
        b"POST /v2/models/simple/infer HTTP/1.1",
        b"Host: x",
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(body),
        *headers,
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _exchange(server: ServerProcess, request: bytes) -> raw_http.Response:
    with raw_http.connect(server) as stream:
        stream.sendall(request)
        return raw_http.read(stream, bytearray())


def test_slow_json_bodies_leave_room_for_a_small_memo_hit(
    make_server: Callable[..., ServerProcess],
) -> None:
    """24 connections declare 3 MB JSON bodies and send 112 bytes each: each once held its next
    256 KiB at the JSON decode's factor (4.25 MiB), so 16 of them filled a 68 MiB budget and a
    300-byte memo hit waited and got 503 (as 240 filled the default 1 GiB). Now each holds
    what it sent and one step ahead: 6 MiB for the 24."""
    server = make_server("--max-inflight-bytes", "68Mi", "--grpc-port", "0")
    hit = _post(_simple_json(3))
    statuses = [_exchange(server, hit) for _ in range(3)]  # a miss, a local hit, memoized
    assert [answer[0] for answer in statuses] == [200, 200, 200]
    slow = []
    try:
        for _ in range(24):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(
                b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 3000000\r\n\r\n"
                + b'{"inputs": ['
                + b" " * 100
            )
            slow.append(sock)
        # Over more than the budget's 2 s wait: every hit is served while the bodies hang.
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            answer = _exchange(server, hit)
            assert answer[0] == 200, answer[2]
            assert answer[1][b"x-cache"] == b"hit-local"
            time.sleep(0.5)
        for sock in slow:  # none of the slow bodies was refused either
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in slow:
            sock.close()


def test_a_compressed_json_body_over_the_json_bound_is_refused_before_it_is_parsed(
    make_server: Callable[..., ServerProcess],
) -> None:
    """A 40 MiB JSON text sent as 40 KiB of gzip: once inflated and parsed (holding the GIL,
    with every other request waiting), now refused with 413 naming the flag; a plain body
    declaring more than the bound is refused from its head, before its body is sent. (The
    default bound, 32 MiB.)"""
    server = make_server("--grpc-port", "0")
    numbers = b",".join([b"0"] * (20 * MIB))
    document = b'{"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": ['
    bomb = gzip.compress(document + numbers + b"]}]}")
    answer = _exchange(server, _post(bomb, b"Content-Encoding: gzip"))
    assert answer[0] == 413, answer[2]
    assert "--max-json-size" in json.loads(answer[2])["error"]
    with raw_http.connect(server) as stream:
        stream.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % (33 * MIB)
        )
        answer = raw_http.read(stream, bytearray())
    assert answer[0] == 413
    assert "--max-json-size" in json.loads(answer[2])["error"]
    small = _exchange(server, _post(gzip.compress(_simple_json(4)), b"Content-Encoding: gzip"))
    assert small[0] == 200
    assert json.loads(small[2])["outputs"][0]["data"] == [8] * 16


def _identity_message(size: int) -> service_pb2.ModelInferRequest:
    element = b"a" * size
    return service_pb2.ModelInferRequest(
        model_name="simple_identity",
        inputs=[
            service_pb2.ModelInferRequest.InferInputTensor(
                name="INPUT0", datatype="BYTES", shape=[1, 1]
            )
        ],
        raw_input_contents=[struct.pack("<I", len(element)) + element],
    )


def test_compressed_grpc_messages_are_charged_at_their_inflated_size(
    make_server: Callable[..., ServerProcess],
) -> None:
    """A gzip message of some 20 KiB that inflates to 20 MiB holds three copies of its bytes
    while it is decoded (the message, the parsed message, the tensor): 60 MiB, over a 48 MiB
    budget, so RESOURCE_EXHAUSTED naming the flag (it was charged twice its size, after it was
    parsed, and run). One inflating past --max-request-size is refused by grpcio itself. The
    server goes on answering."""
    server = make_server("--max-inflight-bytes", "48Mi", "--max-request-size", "32Mi")
    with grpc.insecure_channel(
        server.grpc_url,
        compression=grpc.Compression.Gzip,
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    ) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(_identity_message(20 * MIB), timeout=60)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-inflight-bytes" in (refused.value.details() or "")
        with pytest.raises(grpc.RpcError) as bomb:
            stub.ModelInfer(_identity_message(40 * MIB), timeout=60)
        assert bomb.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        answer = stub.ModelInfer(_identity_message(1000), timeout=60)
        assert answer.raw_output_contents[0][4:] == b"a" * 1000
