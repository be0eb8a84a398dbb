"""Bad input gets the right status and a clear ``{"error": ...}`` message, never a 500."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.processes import ServerProcess

SIMPLE = "/v2/models/simple/infer"
SIXTEEN = list(range(16))


@pytest.fixture(scope="module")
def small_server(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server with a 64 KiB body limit for every test here (none of them change state)."""
    args = ["--model-repository", str(model_repository), "--max-request-size", "64Ki"]
    server = ServerProcess(args, tmp_path_factory.mktemp("server"))
    server.start()
    yield server
    server.stop()


Call = Callable[..., tuple[int, dict[str, object]]]


@pytest.fixture
def call(small_server: ServerProcess) -> Iterator[Call]:
    connection = http.client.HTTPConnection("127.0.0.1", small_server.port, timeout=30)

    def send(
        method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, object]]:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        payload = response.read()
        if response.getheader("Connection", "").lower() == "close":
            connection.close()
        return response.status, json.loads(payload)

    yield send
    connection.close()


def _inputs(**overrides: object) -> dict[str, object]:
    first: dict[str, object] = {
        "name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": SIXTEEN
    }  # fmt: skip
    first.update(overrides)
    second = {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": SIXTEEN}
    return {"inputs": [first, second]}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (_inputs(datatype="FP32"), "input 'INPUT0': datatype 'FP32' does not match the model's"),
        (_inputs(shape=[1, 8]), "input 'INPUT0': shape [1, 8] does not match the model's [-1, 16]"),
        (_inputs(data=SIXTEEN[:10]), "shape [1, 16] needs 16 elements, 'data' has 10"),
        (_inputs(name="INPUT7"), "unknown input 'INPUT7' for model 'simple'"),
        ({**_inputs(), "outputs": [{"name": "OUTPUT7"}]}, "unknown output 'OUTPUT7'"),
        ({"inputs": _inputs()["inputs"][:1]}, "missing input 'INPUT1'"),  # type: ignore[index]
    ],
    ids=["datatype", "shape", "element-count", "unknown-input", "unknown-output", "missing-input"],
)
def test_bad_requests_are_400_with_a_message(
    call: Call, document: dict[str, object], message: str
) -> None:
    status, body = call("POST", SIMPLE, json.dumps(document).encode())
    assert status == 400
    assert message in str(body["error"])


def test_refused_infer_requests_carry_no_x_cache(small_server: ServerProcess) -> None:
    """X-Cache says how the cache answered; a refusal was answered by none of its tiers."""
    refusals = [
        (SIMPLE, b"{", 400),
        ("/v2/models/nope/infer", json.dumps(_inputs()).encode(), 404),
        ("/v2/models/simple/versions/7/infer", json.dumps(_inputs()).encode(), 404),
        (SIMPLE, b" " * (65 * 1024), 413),
    ]
    for path, body, status in refusals:
        connection = http.client.HTTPConnection("127.0.0.1", small_server.port, timeout=30)
        connection.request("POST", path, body=body)
        response = connection.getresponse()
        response.read()
        connection.close()
        assert (response.status, response.getheader("X-Cache")) == (status, None), path


def _binary_request(size0: int, payload: bytes) -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
         "parameters": {"binary_data_size": size0}},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16],
         "parameters": {"binary_data_size": 64}},
    ]}).encode()  # fmt: skip
    return header + payload, {"Inference-Header-Content-Length": str(len(header))}


def test_binary_byte_count_that_does_not_match_the_shape(call: Call) -> None:
    body, headers = _binary_request(60, bytes(124))
    status, answer = call("POST", SIMPLE, body, headers)
    assert status == 400
    assert "INT32[1, 16] needs 64 bytes, binary_data_size is 60" in str(answer["error"])


def test_truncated_binary_body(call: Call) -> None:
    body, headers = _binary_request(64, bytes(100))
    status, answer = call("POST", SIMPLE, body, headers)
    assert status == 400
    assert "truncated" in str(answer["error"])


def test_bad_binary_header_length(call: Call) -> None:
    body, _ = _binary_request(64, bytes(128))
    for value, message in (("100000", "but the body has"), ("abc", "must be an integer")):
        status, answer = call("POST", SIMPLE, body, {"Inference-Header-Content-Length": value})
        assert status == 400
        assert message in str(answer["error"])


@pytest.mark.parametrize("body", [b'{"inputs": [', b"not json", b"[1, 2]", b""])
def test_malformed_json(call: Call, body: bytes) -> None:
    status, answer = call("POST", SIMPLE, body)
    assert status == 400
    assert answer["error"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2/models/nope/infer"),
        ("POST", "/v2/models/simple/versions/7/infer"),
        ("GET", "/v2/models/nope"),
        ("GET", "/v2/models/simple/versions/7"),
        ("GET", "/v2/models/nope/config"),
        ("GET", "/v2/models/nope/ready"),
        ("POST", "/v2/models/nope/cache/flush"),
        ("GET", "/v2/no/such/route"),
    ],
)
def test_unknown_model_version_or_route_is_404(call: Call, method: str, path: str) -> None:
    body = json.dumps(_inputs()).encode() if method == "POST" else None
    status, answer = call(method, path, body)
    assert status == 404
    assert answer["error"]


def test_unknown_model_names_the_model(call: Call) -> None:
    status, answer = call("POST", "/v2/models/nope/infer", json.dumps(_inputs()).encode())
    assert (status, "nope" in str(answer["error"])) == (404, True)


def test_wrong_method_is_405_json(call: Call) -> None:
    status, answer = call("GET", SIMPLE)
    assert status == 405
    assert answer["error"]


def test_body_over_the_limit_by_content_length_is_413(call: Call) -> None:
    document = _inputs(data=[1] * 30000, shape=[1, 30000])
    status, answer = call("POST", SIMPLE, json.dumps(document).encode())
    assert status == 413
    assert "over the limit of 65536 bytes" in str(answer["error"])


def test_chunked_body_over_the_limit_is_413(small_server: ServerProcess) -> None:
    """Without Content-Length the limit applies to the bytes actually received."""
    chunk = b"x" * 32768
    with socket.create_connection(("127.0.0.1", small_server.port), timeout=30) as sock:
        sock.sendall(
            f"POST {SIMPLE} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        for _ in range(3):
            sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        sock.sendall(b"0\r\n\r\n")
        reply = _read_response(sock)
    assert reply.startswith(b"HTTP/1.1 413")
    assert b"over the limit" in reply


def _read_response(sock: socket.socket) -> bytes:
    """One whole HTTP response (headers and a Content-Length body) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_the_server_still_answers_after_bad_input(call: Call) -> None:
    status, answer = call("POST", SIMPLE, json.dumps(_inputs()).encode())
    assert status == 200
    outputs = answer["outputs"]
    assert isinstance(outputs, list)
    assert [output["name"] for output in outputs] == ["OUTPUT0", "OUTPUT1"]
