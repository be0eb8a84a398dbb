"""The gRPC protocol through the generated stubs, as a client without tritonclient's helpers
sends it: typed contents of every kind, malformed requests, the cache shared with HTTP (one
entry for the same tensors, whichever transport asked first), cache metadata and statistics."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support.processes import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples

Stub = service_pb2_grpc.GRPCInferenceServiceStub


@pytest.fixture(scope="module")
def stub(sample_server: ServerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(sample_server.grpc_url) as channel:
        yield Stub(channel)


def _request(model: str, **fields: Any) -> Any:
    return service_pb2.ModelInferRequest(model_name=model, **fields)


def _typed(name: str, datatype: str, shape: list[int], **contents: Any) -> Any:
    return service_pb2.ModelInferRequest.InferInputTensor(
        name=name,
        datatype=datatype,
        shape=shape,
        contents=service_pb2.InferTensorContents(**contents),
    )


def _raw_input(name: str, datatype: str, shape: list[int]) -> Any:
    return service_pb2.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)


def _output(response: Any, name: str, dtype: Any) -> np.ndarray:
    for index, tensor in enumerate(response.outputs):
        if tensor.name == name:
            raw = response.raw_output_contents[index]
            shape = list(tensor.shape)
            if tensor.datatype == "BYTES":
                return np.asarray(deserialize_bytes_tensor(raw)).reshape(shape)
            return np.frombuffer(raw, dtype=dtype).reshape(shape)
    raise AssertionError(f"no output {name}")


def _infer(stub: Any, request: Any, metadata: tuple[tuple[str, str], ...] = ()) -> tuple[Any, str]:
    """The response and its x-cache trailing metadata."""
    response, call = stub.ModelInfer.with_call(request, metadata=metadata)
    return response, dict(call.trailing_metadata())["x-cache"]


def test_typed_int32_contents(stub: Any) -> None:
    first = np.arange(16, dtype=np.int32) - 8
    second = np.full(16, 3, dtype=np.int32)
    request = _request(
        "simple",
        id="typed",
        inputs=[
            _typed("INPUT0", "INT32", [1, 16], int_contents=first.tolist()),
            _typed("INPUT1", "INT32", [1, 16], int_contents=second.tolist()),
        ],
    )
    response, _ = _infer(stub, request)
    assert response.id == "typed"
    assert all(not tensor.HasField("contents") for tensor in response.outputs)
    np.testing.assert_array_equal(_output(response, "OUTPUT0", "<i4"), [first + second])
    np.testing.assert_array_equal(_output(response, "OUTPUT1", "<i4"), [first - second])


def test_typed_int8_contents_and_their_range(stub: Any) -> None:
    first = np.array([-100, -1, 0, 1, 50, 60, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], dtype=np.int8)
    second = np.full(16, 2, dtype=np.int8)
    request = _request(
        "simple_int8",
        inputs=[
            _typed("INPUT0", "INT8", [1, 16], int_contents=first.tolist()),
            _typed("INPUT1", "INT8", [1, 16], int_contents=second.tolist()),
        ],
    )
    response, _ = _infer(stub, request)
    np.testing.assert_array_equal(_output(response, "OUTPUT0", "<i1"), [first + second])
    np.testing.assert_array_equal(_output(response, "OUTPUT1", "<i1"), [first - second])
    out_of_range = _request(
        "simple_int8",
        inputs=[
            _typed("INPUT0", "INT8", [1, 16], int_contents=[200] * 16),
            _typed("INPUT1", "INT8", [1, 16], int_contents=[0] * 16),
        ],
    )
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(out_of_range)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "out of range for INT8" in str(caught.value.details())


def test_typed_bytes_contents(stub: Any) -> None:
    numbers = list(range(16))
    request = _request(
        "simple_string",
        inputs=[
            _typed("INPUT0", "BYTES", [1, 16], bytes_contents=[str(n).encode() for n in numbers]),
            _typed("INPUT1", "BYTES", [1, 16], bytes_contents=[b"10"] * 16),
        ],
    )
    response, _ = _infer(stub, request)
    assert [int(v) for v in _output(response, "OUTPUT0", None).ravel()] == [n + 10 for n in numbers]
    elements = [b"a\x00b", b"", "\u00e9t\u00e9".encode()]
    identity = _request(
        "simple_identity", inputs=[_typed("INPUT0", "BYTES", [1, 3], bytes_contents=elements)]
    )
    response, _ = _infer(stub, identity)
    assert _output(response, "OUTPUT0", None).tolist() == [elements]


def test_typed_fp32_matches_raw_fp32(stub: Any) -> None:
    image = np.random.default_rng(11).random((3, 224, 224), dtype=np.float32)
    typed = _request(
        "densenet_onnx",
        inputs=[_typed("data_0", "FP32", [3, 224, 224], fp32_contents=image.ravel().tolist())],
    )
    raw = _request(
        "densenet_onnx",
        inputs=[_raw_input("data_0", "FP32", [3, 224, 224])],
        raw_input_contents=[image.tobytes()],
    )
    typed_response, first = _infer(stub, typed)
    raw_response, second = _infer(stub, raw)
    # The same tensor, whichever way it was written: one cache entry.
    assert (first, second) == ("miss", "hit-local")
    np.testing.assert_array_equal(
        _output(typed_response, "fc6_1", "<f4"), _output(raw_response, "fc6_1", "<f4")
    )


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        (
            {"inputs": [_typed("INPUT0", "INT32", [1, 16], fp32_contents=[1.0] * 16),
                        _typed("INPUT1", "INT32", [1, 16], int_contents=[1] * 16)]},
            "INT32 data belongs in contents.int_contents, not contents.fp32_contents",
        ),
        (
            {"inputs": [_typed("INPUT0", "INT32", [1, 16], int_contents=[1] * 15),
                        _typed("INPUT1", "INT32", [1, 16], int_contents=[1] * 16)]},
            "shape [1, 16] needs 16 elements, contents.int_contents has 15",
        ),
        (
            {"inputs": [_raw_input("INPUT0", "INT32", [1, 16]),
                        _raw_input("INPUT1", "INT32", [1, 16])],
             "raw_input_contents": [bytes(64)]},
            "raw_input_contents has 1 entries, fewer than the inputs",
        ),
        (
            {"inputs": [_raw_input("INPUT0", "INT32", [1, 16]),
                        _raw_input("INPUT1", "INT32", [1, 16])],
             "raw_input_contents": [bytes(64), bytes(60)]},
            "INT32[1, 16] needs 64 bytes, binary_data_size is 60",
        ),
        (
            {"inputs": [_raw_input("INPUT0", "INT32", [1, 16])],
             "raw_input_contents": [bytes(64), bytes(64)]},
            "raw_input_contents has 2 entries for 1 inputs",
        ),
        (
            {"inputs": [_raw_input("INPUT0", "INT32", [1, 16]),
                        _typed("INPUT1", "INT32", [1, 16], int_contents=[1] * 16)],
             "raw_input_contents": [bytes(64)]},
            "contents field must not be specified when using raw_input_contents for 'INPUT1' "
            "for model 'simple'",
        ),
        ({}, "the request needs at least one input"),
    ],
    ids=["wrong-field", "short", "raw-missing", "raw-size", "raw-extra", "mixed", "no-inputs"],
)  # fmt: skip
def test_malformed_requests_are_invalid_arguments(
    stub: Any, request_fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(_request("simple", **request_fields))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in str(caught.value.details())


def _parameter(**choice: Any) -> Any:
    return service_pb2.InferParameter(**choice)


@pytest.mark.parametrize(
    ("model", "request_fields", "message"),
    [
        (
            "simple_identity",
            {"inputs": [_typed("INPUT0", "BYTES", [1, 2], bytes_contents=[b"ok", b"\xff\xfe"])]},
            "BYTES elements must be UTF-8",
        ),
        ("simple", {"parameters": {"priority": _parameter(string_param="high")}},
         "parameter 'priority' must be a non-negative integer"),
        ("simple", {"parameters": {"priority": _parameter(double_param=float("nan"))}},
         "parameter 'priority' must be a finite number"),
        ("simple", {"parameters": {"priority": _parameter(double_param=1.0)}},
         "parameter 'priority' must be a non-negative integer"),
        ("simple", {"parameters": {"timeout": _parameter(int64_param=-1)}},
         "parameter 'timeout' must be a non-negative integer"),
        ("simple", {"parameters": {"seed": _parameter(double_param=float("inf"))}},
         "parameter 'seed' must be a finite number"),
    ],
    ids=["bytes-not-utf8", "priority-string", "priority-nan", "priority-float", "timeout-negative",
         "parameter-infinite"],
)  # fmt: skip
def test_bad_input_is_invalid_argument_never_internal(
    stub: Any, model: str, request_fields: dict[str, Any], message: str
) -> None:
    """Every check happens while decoding, as over HTTP: no bad input reaches the model (where a
    non-UTF-8 element would fail the whole batch it joined) or the scheduler."""
    if "inputs" not in request_fields:
        request_fields = {**request_fields, **_simple_raw_fields(3)}
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(_request(model, **request_fields))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in str(caught.value.details())
    # The server is still there and answers the same model.
    assert _infer(stub, _simple_raw(3))[0].outputs


def _simple_raw_fields(value: int) -> dict[str, Any]:
    data = np.full((1, 16), value, dtype=np.int32).tobytes()
    return {
        "inputs": [_raw_input("INPUT0", "INT32", [1, 16]), _raw_input("INPUT1", "INT32", [1, 16])],
        "raw_input_contents": [data, data],
    }


def _simple_raw(value: int) -> Any:
    return _request("simple", **_simple_raw_fields(value))


def _http(server: ServerProcess, value: int) -> tuple[list[int], str]:
    data = [value] * 16
    body = json.dumps(
        {"inputs": [{"name": n, "datatype": "INT32", "shape": [1, 16], "data": data}
                    for n in ("INPUT0", "INPUT1")]}
    ).encode()  # fmt: skip
    request = urllib.request.Request(
        f"{server.base_url}/v2/models/simple/infer", data=body, method="POST"
    )
    with urllib.request.urlopen(request) as response:
        document = json.loads(response.read())
        return document["outputs"][0]["data"], str(response.headers["X-Cache"])


def test_http_and_grpc_share_one_cache_entry(sample_server: ServerProcess, stub: Any) -> None:
    total, status = _http(sample_server, 41)
    assert (total, status) == ([82] * 16, "miss")
    response, status = _infer(stub, _simple_raw(41))
    assert status == "hit-local"
    np.testing.assert_array_equal(_output(response, "OUTPUT0", "<i4"), np.full((1, 16), 82))
    response, status = _infer(stub, _simple_raw(42))
    assert status == "miss"
    assert _http(sample_server, 42) == ([84] * 16, "hit-local")


def test_cache_control_metadata_and_the_cache_parameter(stub: Any) -> None:
    request = _simple_raw(51)
    assert _infer(stub, request, (("cache-control", "no-store"),))[1] == "bypass"
    assert _infer(stub, request)[1] == "miss"
    assert _infer(stub, request)[1] == "hit-local"
    assert _infer(stub, request, (("cache-control", "no-cache"),))[1] == "bypass"
    uncached = _simple_raw(52)
    uncached.parameters["cache"].bool_param = False
    assert _infer(stub, uncached)[1] == "bypass"
    assert _infer(stub, _simple_raw(52))[1] == "miss"


def test_statistics_count_both_transports(make_server: Any) -> None:
    fresh = make_server()
    _http(fresh, 61)
    with grpcclient.InferenceServerClient(fresh.grpc_url) as client:
        first = np.full((1, 16), 61, dtype=np.int32)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            infer_input = grpcclient.InferInput(name, [1, 16], "INT32")
            infer_input.set_data_from_numpy(first)
            inputs.append(infer_input)
        client.infer("simple", inputs)
        with pytest.raises(InferenceServerException, match="missing input 'INPUT1'"):
            client.infer("simple", inputs[:1])
        statistics = client.get_inference_statistics("simple", as_json=True)
        (stats,) = statistics["model_stats"]
        assert (stats["name"], stats["version"]) == ("simple", "1")
        inference = stats["inference_stats"]
        assert inference["success"]["count"] == "2"
        assert inference["fail"]["count"] == "1"
        assert inference["cache_miss"]["count"] == "1"
        assert inference["cache_hit"]["count"] == "1"
        assert stats["execution_count"] == "1"
        # As in Triton: the gRPC hit is in queue too (perf_analyzer finds the model by it).
        assert inference["queue"]["count"] == "2"
        assert inference["compute_infer"]["count"] == "1"
        everything = client.get_inference_statistics(as_json=True)["model_stats"]
        assert {"simple", "simple_string", "densenet_onnx"} <= {s["name"] for s in everything}
        with pytest.raises(InferenceServerException, match="NOT_FOUND"):
            client.get_inference_statistics("no_such_model")


def test_a_version_that_is_not_a_number_is_invalid(stub: Any) -> None:
    request = _simple_raw(1)
    request.model_version = "latest"
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == (
        "failed to get model version from specified version string 'latest'"
    )
    request.model_version = "7"
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
