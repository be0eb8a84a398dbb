"""The real tritonclient.http against a real `cachefleet serve` on the sample models."""

from __future__ import annotations

import json
import urllib.request
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from support.processes import ServerProcess

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples


@pytest.fixture
def client(sample_server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    triton = httpclient.InferenceServerClient(sample_server.url)
    yield triton
    triton.close()


def _inputs(arrays: dict[str, np.ndarray], datatype: str, binary: bool) -> list[Any]:
    inputs = []
    for name, array in arrays.items():
        infer_input = httpclient.InferInput(name, list(array.shape), datatype)
        infer_input.set_data_from_numpy(array, binary_data=binary)
        inputs.append(infer_input)
    return inputs


def _outputs(names: tuple[str, ...], binary: bool, class_count: int = 0) -> list[Any]:
    return [
        httpclient.InferRequestedOutput(n, binary_data=binary, class_count=class_count)
        for n in names
    ]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_simple_sum_and_difference(client: httpclient.InferenceServerClient, binary: bool) -> None:
    first = np.arange(32, dtype=np.int32).reshape(2, 16)
    second = np.full((2, 16), 5, dtype=np.int32)
    result = client.infer(
        "simple",
        _inputs({"INPUT0": first, "INPUT1": second}, "INT32", binary),
        outputs=_outputs(("OUTPUT0", "OUTPUT1"), binary),
        request_id=f"req-{binary}",
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    response = result.get_response()
    assert response["id"] == f"req-{binary}"
    assert (response["model_name"], response["model_version"]) == ("simple", "1")


def test_simple_without_requested_outputs_returns_all_in_binary(
    client: httpclient.InferenceServerClient,
) -> None:
    first = np.ones((1, 16), dtype=np.int32)
    result = client.infer("simple", _inputs({"INPUT0": first, "INPUT1": first}, "INT32", True))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first * 0)
    assert all("binary_data_size" in o["parameters"] for o in result.get_response()["outputs"])


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(client: httpclient.InferenceServerClient, algorithm: str) -> None:
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = client.infer(
        "simple",
        _inputs({"INPUT0": first, "INPUT1": first}, "INT32", True),
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first * 2)


def test_output_selection(client: httpclient.InferenceServerClient) -> None:
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = client.infer(
        "simple",
        _inputs({"INPUT0": first, "INPUT1": first}, "INT32", True),
        outputs=_outputs(("OUTPUT1",), False),
        model_version="1",
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first * 0)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_simple_string(client: httpclient.InferenceServerClient, binary: bool) -> None:
    numbers = np.arange(16, dtype=np.int32).reshape(1, 16)
    first = np.array([str(n).encode() for n in numbers.ravel()], dtype=np.object_).reshape(1, 16)
    second = np.array([b"2"] * 16, dtype=np.object_).reshape(1, 16)
    result = client.infer(
        "simple_string",
        _inputs({"INPUT0": first, "INPUT1": second}, "BYTES", binary),
        outputs=_outputs(("OUTPUT0", "OUTPUT1"), binary),
    )
    for name, expected in (("OUTPUT0", numbers + 2), ("OUTPUT1", numbers - 2)):
        got = result.as_numpy(name)
        assert got.shape == (1, 16)
        as_ints = [int(item.decode() if isinstance(item, bytes) else item) for item in got.ravel()]
        assert as_ints == expected.ravel().tolist()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_simple_int8_wraps_like_numpy(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    rng = np.random.default_rng(11)
    first = rng.integers(-128, 128, (3, 16), dtype=np.int8)
    second = rng.integers(-128, 128, (3, 16), dtype=np.int8)
    result = client.infer(
        "simple_int8",
        _inputs({"INPUT0": first, "INPUT1": second}, "INT8", binary),
        outputs=_outputs(("OUTPUT0", "OUTPUT1"), binary),
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    assert result.as_numpy("OUTPUT0").dtype == np.int8


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_simple_identity_returns_every_byte(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    """Strings with NUL characters and raw little blobs, as Triton's string example sends."""
    strings = np.array([b"he\x00llo"] * 8 + [b"\x00\x01\x02\x03"] * 8, dtype=np.object_)
    strings = strings.reshape(1, 16)
    result = client.infer(
        "simple_identity",
        _inputs({"INPUT0": strings}, "BYTES", binary),
        outputs=_outputs(("OUTPUT0",), binary),
    )
    got = result.as_numpy("OUTPUT0")
    assert got.shape == (1, 16)
    as_bytes = [item if isinstance(item, bytes) else str(item).encode() for item in got.ravel()]
    assert as_bytes == strings.ravel().tolist()


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(3).random((3, 224, 224), dtype=np.float32)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_densenet_scores_and_classification(
    client: httpclient.InferenceServerClient, image: np.ndarray, binary: bool
) -> None:
    raw = client.infer(
        "densenet_onnx",
        _inputs({"data_0": image}, "FP32", binary),
        outputs=_outputs(("fc6_1",), binary),
    ).as_numpy("fc6_1")
    assert raw.shape == (1000, 1, 1)
    assert raw.dtype == np.float32
    top = client.infer(
        "densenet_onnx",
        _inputs({"data_0": image}, "FP32", binary),
        outputs=_outputs(("fc6_1",), binary, class_count=3),
    ).as_numpy("fc6_1")
    assert top.shape == (3,)
    scores = raw.ravel()
    best = np.argsort(-scores, kind="stable")[:3]
    expected = [f"{float(scores[i]):f}:{i}:class_{i:04d}" for i in best]
    assert [item.decode() if isinstance(item, bytes) else item for item in top] == expected


def test_metadata_config_index_health(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert client.is_model_ready("densenet_onnx", "1")
    assert not client.is_model_ready("no_such_model")
    server_metadata = client.get_server_metadata()
    assert server_metadata["name"] == "triton"  # as Triton, whose clients check it
    assert "binary_tensor_data" in server_metadata["extensions"]
    assert "statistics" in server_metadata["extensions"]
    metadata = client.get_model_metadata("simple")
    assert metadata["versions"] == ["1"]
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    assert client.get_model_metadata("densenet_onnx", "1")["outputs"][0]["shape"] == [1000, 1, 1]
    config = client.get_model_config("densenet_onnx")
    assert config["name"] == "densenet_onnx"
    assert config["max_batch_size"] == 0
    index = client.get_model_repository_index()
    assert {(row["name"], row["version"], row["state"]) for row in index} == {
        ("densenet_batch", "1", "READY"),
        ("densenet_onnx", "1", "READY"),
        ("simple", "1", "READY"),
        ("simple_identity", "1", "READY"),
        ("simple_int8", "1", "READY"),
        ("simple_string", "1", "READY"),
    }


def _simple_json_body(value: int) -> bytes:
    data = str([value] * 16).encode()
    return (
        b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":' + data + b"},"
        b'{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":' + data + b"}]}"
    )


def _post(server: ServerProcess, path: str, body: bytes, headers: dict[str, str]) -> str:
    request = urllib.request.Request(
        f"{server.base_url}{path}", data=body, headers=headers, method="POST"
    )
    with urllib.request.urlopen(request) as response:
        return str(response.headers["X-Cache"])


def test_cache_header_and_directives(sample_server: ServerProcess) -> None:
    server = sample_server
    path, body = "/v2/models/simple/infer", _simple_json_body(3)
    assert _post(server, path, body, {}) == "miss"
    assert _post(server, path, body, {}) == "hit-local"
    assert _post(server, path, body, {"Cache-Control": "no-cache"}) == "bypass"
    other = _simple_json_body(4)
    assert _post(server, path, other, {"Cache-Control": "no-store"}) == "bypass"
    assert _post(server, path, other, {}) == "miss"
    uncached = b'{"parameters":{"cache":false},' + _simple_json_body(5)[1:]
    assert _post(server, path, uncached, {}) == "bypass"
    assert _post(server, path, _simple_json_body(5), {}) == "miss"


def test_flush_and_metrics(server: ServerProcess) -> None:
    path, body = "/v2/models/simple/infer", _simple_json_body(9)
    _post(server, path, body, {})
    request = urllib.request.Request(
        f"{server.base_url}/v2/models/simple/cache/flush", data=b"", method="POST"
    )
    with urllib.request.urlopen(request) as response:
        assert json.loads(response.read()) == {"model": "simple", "removed": 1}
    assert _post(server, path, body, {}) == "miss"
    with urllib.request.urlopen(f"{server.base_url}/metrics") as response:
        text = response.read().decode()
    assert 'cachefleet_request_seconds_count{model="simple",version="1"} 2.0' in text


def test_responses_are_compressed_only_when_asked(sample_server: ServerProcess) -> None:
    body = _simple_json_body(11)
    for accept, encoding in (("gzip", "gzip"), ("deflate", "deflate"), ("identity", None)):
        request = urllib.request.Request(
            f"{sample_server.base_url}/v2/models/simple/infer",
            data=body,
            headers={"Accept-Encoding": accept},
            method="POST",
        )
        with urllib.request.urlopen(request) as response:
            assert response.headers["Content-Encoding"] == encoding
            raw = response.read()
        wbits = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS, None: None}[encoding]
        plain = raw if wbits is None else zlib.decompress(raw, wbits)
        assert json.loads(plain)["outputs"][0]["data"] == [22] * 16
