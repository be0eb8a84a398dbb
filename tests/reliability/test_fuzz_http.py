"""Random bad input against a real server process: never a 500 (unless the model itself fails),
never a crash, and the body limit holds.

Hypothesis writes v2 infer requests as JSON and as Triton binary bodies (random datatypes,
shapes, byte counts, header lengths, parameters, nesting, NaN, invalid UTF-8, garbage headers).
The profile is derandomized, so CI runs the same examples every time.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.processes import ServerProcess

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples

LIMIT = 64 * 1024
settings.register_profile(
    "reliability-ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile("reliability-ci")
#: The one 5xx a request may cause: the model itself failing on values it cannot compute
#: (``simple_string`` given strings that are not numbers).
MODEL_FAILURE = re.compile(r"^model '[^']+' version \d+ failed: ")


@pytest.fixture(scope="module")
def fuzz_server(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server for every example: the point is that it survives all of them."""
    args = ["--model-repository", str(model_repository), "--max-request-size", str(LIMIT)]
    server = ServerProcess(args, tmp_path_factory.mktemp("fuzz"))
    server.start()
    yield server
    server.stop()


def send(
    server: ServerProcess, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def check_answer(status: int, reply: bytes) -> None:
    """2xx/4xx with a JSON error for 4xx; a 500 only when the model failed."""
    if status == 200:
        return
    error = json.loads(reply)["error"]
    assert isinstance(error, str)
    assert error
    assert status in (400, 404, 413) or (status == 500 and MODEL_FAILURE.match(error)), (
        status,
        error,
    )


_paths = st.sampled_from(
    [
        "/v2/models/simple/infer",
        "/v2/models/simple/versions/1/infer",
        "/v2/models/simple_string/infer",
        "/v2/models/densenet_onnx/infer",
        "/v2/models/simple/versions/-1/infer",
        "/v2/models/nope/infer",
    ]
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # NaN and infinities become the non-JSON tokens NaN, Infinity
    st.text(max_size=8),
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)
_datatypes = st.sampled_from(
    ["INT32", "BYTES", "FP32", "FP16", "BOOL", "INT64", "UINT8", "FP64", "TYPE_INT32", "", "int32"]
)
_dims = st.sampled_from([-(2**63), -1, 0, 1, 2, 3, 8, 9, 16, 224, 2**31, 2**62, 2**64])
_shapes = st.lists(_dims, max_size=4) | st.sampled_from([[1, 16], [2, 16], [3, 224, 224]])
_names = st.sampled_from(["INPUT0", "INPUT1", "data_0", "OUTPUT0", "fc6_1", "", "x"])
_numbers = st.lists(st.integers(min_value=-(2**40), max_value=2**40) | st.floats(), max_size=40)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


_input = st.fixed_dictionaries(
    {"name": _names, "datatype": _datatypes, "shape": _shapes},
    optional={
        "data": _numbers | st.lists(st.text(max_size=4), max_size=40) | _json,
        "parameters": _json
        | st.fixed_dictionaries({"binary_data_size": st.sampled_from([-1, 0, 64, 2**62])})
        | st.fixed_dictionaries({"shared_memory_region": st.text(max_size=4)}),
    },
)
_document = st.fixed_dictionaries(
    {"inputs": st.lists(_input, max_size=3) | _json},
    optional={
        "id": _json,
        "parameters": st.dictionaries(st.text(max_size=8), _json, max_size=4)
        | st.integers(0, 600).map(lambda depth: {"deep": _nested(depth)})
        | _json,
        "outputs": st.lists(
            st.fixed_dictionaries(
                {"name": _names},
                optional={
                    "parameters": st.dictionaries(
                        st.sampled_from(["binary_data", "classification", "x"]), _scalars
                    )
                },
            ),
            max_size=3,
        )
        | _json,
    },
)
_header_values = st.one_of(
    st.none(),
    st.integers(min_value=-(2**64), max_value=2**64).map(str),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
)


@FUZZ
@given(path=_paths, document=_document, garbage=st.dictionaries(
    st.sampled_from(["Content-Type", "Cache-Control", "Content-Encoding", "Accept"]),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
    max_size=2,
))  # fmt: skip
def test_json_requests(
    fuzz_server: ServerProcess, path: str, document: dict[str, Any], garbage: dict[str, str]
) -> None:
    body = json.dumps(document).encode()  # allow_nan: NaN/Infinity tokens go out as they are
    check_answer(*send(fuzz_server, path, body, garbage))


@FUZZ
@given(
    path=_paths,
    document=_document,
    payload=st.binary(max_size=2048),
    header_length=st.sampled_from(["exact", "short", "long", "negative", "huge", "text", "none"]),
)
def test_binary_requests(
    fuzz_server: ServerProcess,
    path: str,
    document: dict[str, Any],
    payload: bytes,
    header_length: str,
) -> None:
    header = json.dumps(document).encode()
    size = len(header)
    declared = {
        "exact": str(size), "short": str(max(0, size - 3)), "long": str(size + 5),
        "negative": "-1", "huge": str(2**64), "text": "twelve", "none": None,
    }[header_length]  # fmt: skip
    headers = {"Content-Type": "application/octet-stream"}
    if declared is not None:
        headers["Inference-Header-Content-Length"] = declared
    check_answer(*send(fuzz_server, path, header + payload, headers))


_raw_bodies = st.one_of(
    st.binary(max_size=512),
    st.binary(max_size=64).map(lambda b: b'{"inputs": "' + b"\xff\xfe" + b + b'"}'),
    st.integers(1, 5000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(1, 5000).map(lambda depth: b'{"a":' * depth + b"1" + b"}" * depth),
    st.sampled_from(
        [
            b'{"inputs": [NaN]}',
            b'{"inputs": Infinity}',
            b"\x00" * 100,
            b"{" * 100000,
            b'{"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": '
            + b"1" * 5000
            + b"}]}",
        ]
    ),
)


@FUZZ
@given(
    path=_paths,
    body=_raw_bodies,
    encoding=st.sampled_from([None, "gzip", "deflate", "identity", "br", "gzip, gzip"]),
    header_length=_header_values,
)
def test_raw_bodies(
    fuzz_server: ServerProcess,
    path: str,
    body: bytes,
    encoding: str | None,
    header_length: str | None,
) -> None:
    headers = {}
    if encoding:
        headers["Content-Encoding"] = encoding
    if header_length is not None:
        headers["Inference-Header-Content-Length"] = header_length
    check_answer(*send(fuzz_server, path, body, headers))


@FUZZ
@given(
    name=st.binary(min_size=1, max_size=20),
    value=st.binary(max_size=40),
    target=st.binary(max_size=30),
)
def test_garbage_header_bytes(
    fuzz_server: ServerProcess, name: bytes, value: bytes, target: bytes
) -> None:
    """Whatever bytes arrive as a request line or header, the answer is never a 5xx."""
    request = (
        b"POST /v2/models/simple/infer" + target.replace(b" ", b"") + b" HTTP/1.1\r\n"
        b"Host: x\r\n" + name + b": " + value + b"\r\nContent-Length: 2\r\n\r\n{}"
    )
    with socket.create_connection(("127.0.0.1", fuzz_server.port), timeout=30) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
            if b"\r\n\r\n" in reply:
                break
    # A connection the parser drops without answering is fine; a server error is not.
    if reply:
        assert reply.startswith(b"HTTP/1.1 ")
        assert reply[9:10] != b"5", reply[:200]


@pytest.mark.parametrize("depth", [40, 300, 900])
def test_deeply_nested_parameters_are_a_bad_request(fuzz_server: ServerProcess, depth: int) -> None:
    """Found by the fuzzer: request parameters enter the cache key's JSON encoding, which stops
    at 255 levels; deep nesting answered 500. It is a 400 now."""
    inputs = [{"name": n, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
              for n in ("INPUT0", "INPUT1")]  # fmt: skip
    body = json.dumps({"inputs": inputs, "parameters": {"p": _nested(depth)}}).encode()
    status, reply = send(fuzz_server, "/v2/models/simple/infer", body, {})
    assert status == 400
    assert "nested more than" in json.loads(reply)["error"]


def test_limits_hold(fuzz_server: ServerProcess) -> None:
    """Over the body limit by declaration, by bytes received, or after gzip inflation: 413;
    a tensor declared far larger than the body: 400."""
    path = "/v2/models/simple/infer"
    status, _ = send(fuzz_server, path, b"{" * (LIMIT + 1), {})
    assert status == 413
    bomb = zlib.compress(b"[" * (50 * LIMIT), 9)
    assert len(bomb) < LIMIT
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    gzip_bomb = compressor.compress(b" " * (50 * LIMIT)) + compressor.flush()
    assert send(fuzz_server, path, bomb, {"Content-Encoding": "deflate"})[0] == 413
    assert send(fuzz_server, path, gzip_bomb, {"Content-Encoding": "gzip"})[0] == 413
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [8, 16],
         "parameters": {"binary_data_size": 2**40}},
        {"name": "INPUT1", "datatype": "INT32", "shape": [8, 16],
         "parameters": {"binary_data_size": 512}},
    ]}).encode()  # fmt: skip
    headers = {"Inference-Header-Content-Length": str(len(header))}
    status, reply = send(fuzz_server, path, header + bytes(1024), headers)
    assert status == 400
    assert "binary_data_size is 1099511627776" in json.loads(reply)["error"]
    with socket.create_connection(("127.0.0.1", fuzz_server.port), timeout=30) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {2**62}\r\n\r\n{{".encode()
        )
        assert sock.recv(65536).startswith(b"HTTP/1.1 413")


def test_the_server_is_still_up(fuzz_server: ServerProcess) -> None:
    """Runs last in this module: after every example above, the process answers health."""
    assert fuzz_server.process is not None
    assert fuzz_server.process.poll() is None
    connection = http.client.HTTPConnection("127.0.0.1", fuzz_server.port, timeout=10)
    connection.request("GET", "/v2/health/live")
    assert connection.getresponse().status == 200
    assert "Traceback" not in fuzz_server.log()
