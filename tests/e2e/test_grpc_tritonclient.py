"""The real tritonclient.grpc (sync, callbacks, streams and asyncio) against a real server.

Numbers are checked against numpy, and densenet against ONNX Runtime run directly on the model
file; errors against the status codes and messages Triton's clients surface.
"""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from support.processes import ServerProcess, free_port
from tritonclient.utils import InferenceServerException

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples


@pytest.fixture
def client(sample_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    triton = grpcclient.InferenceServerClient(sample_server.grpc_url)
    yield triton
    triton.close()


def _inputs(arrays: dict[str, np.ndarray], datatype: str, module: Any = grpcclient) -> list[Any]:
    inputs = []
    for name, array in arrays.items():
        infer_input = module.InferInput(name, list(array.shape), datatype)
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return inputs


def _pair(first: np.ndarray, second: np.ndarray) -> dict[str, np.ndarray]:
    return {"INPUT0": first, "INPUT1": second}


def test_simple_sum_and_difference(client: grpcclient.InferenceServerClient) -> None:
    first = np.arange(32, dtype=np.int32).reshape(2, 16)
    second = np.full((2, 16), 5, dtype=np.int32)
    result = client.infer(
        "simple",
        _inputs(_pair(first, second), "INT32"),
        outputs=[
            grpcclient.InferRequestedOutput("OUTPUT0"),
            grpcclient.InferRequestedOutput("OUTPUT1"),
        ],
        request_id="grpc-1",
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    response = result.get_response()
    assert (response.id, response.model_name, response.model_version) == ("grpc-1", "simple", "1")


def test_all_outputs_without_a_selection_and_one_with(
    client: grpcclient.InferenceServerClient,
) -> None:
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    everything = client.infer("simple", _inputs(_pair(first, first), "INT32"))
    assert [o.name for o in everything.get_response().outputs] == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(everything.as_numpy("OUTPUT0"), first * 2)
    selected = client.infer(
        "simple",
        _inputs(_pair(first, first), "INT32"),
        outputs=[grpcclient.InferRequestedOutput("OUTPUT1")],
        model_version="1",
    )
    assert [o.name for o in selected.get_response().outputs] == ["OUTPUT1"]
    assert selected.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(selected.as_numpy("OUTPUT1"), first * 0)


def test_simple_string_bytes(client: grpcclient.InferenceServerClient) -> None:
    numbers = np.arange(16, dtype=np.int32).reshape(1, 16)
    first = np.array([str(n).encode() for n in numbers.ravel()], dtype=np.object_).reshape(1, 16)
    second = np.array([b"2"] * 16, dtype=np.object_).reshape(1, 16)
    result = client.infer("simple_string", _inputs(_pair(first, second), "BYTES"))
    for name, expected in (("OUTPUT0", numbers + 2), ("OUTPUT1", numbers - 2)):
        got = result.as_numpy(name)
        assert got.shape == (1, 16)
        assert [int(item) for item in got.ravel()] == expected.ravel().tolist()


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(5).random((3, 224, 224), dtype=np.float32)


def test_densenet_matches_onnx_runtime_and_classifies(
    client: grpcclient.InferenceServerClient, image: np.ndarray, model_repository: Path
) -> None:
    session = onnxruntime.InferenceSession(
        str(model_repository / "densenet_onnx" / "1" / "model.onnx"),
        providers=["CPUExecutionProvider"],
    )
    (reference,) = session.run(["fc6_1"], {"data_0": image})
    raw = client.infer("densenet_onnx", _inputs({"data_0": image}, "FP32")).as_numpy("fc6_1")
    assert raw.shape == (1000, 1, 1)
    assert raw.dtype == np.float32
    np.testing.assert_allclose(raw, reference.reshape(1000, 1, 1), rtol=1e-5, atol=1e-6)
    top = client.infer(
        "densenet_onnx",
        _inputs({"data_0": image}, "FP32"),
        outputs=[grpcclient.InferRequestedOutput("fc6_1", class_count=3)],
    ).as_numpy("fc6_1")
    scores = raw.ravel()
    best = np.argsort(-scores, kind="stable")[:3]
    assert [item.decode() for item in top] == [
        f"{float(scores[i]):f}:{i}:class_{i:04d}" for i in best
    ]


def test_async_infer_callbacks(client: grpcclient.InferenceServerClient) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def done(number: int, result: Any, error: Any) -> None:
        results.put((number, result if error is None else error))

    for number in range(4):
        first = np.full((1, 16), number, dtype=np.int32)
        client.async_infer("simple", _inputs(_pair(first, first), "INT32"), partial(done, number))
    answers = dict(results.get(timeout=30) for _ in range(4))
    for number, result in answers.items():
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2 * number))


def test_stream_answers_each_request_and_reports_errors_in_band(
    client: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        first = np.full((1, 16), 7, dtype=np.int32)
        client.async_stream_infer("simple", _inputs(_pair(first, first), "INT32"), request_id="a")
        client.async_stream_infer("no_such_model", _inputs(_pair(first, first), "INT32"))
        client.async_stream_infer("simple", _inputs(_pair(first, first * 2), "INT32"))
        received = [answers.get(timeout=30) for _ in range(3)]
    finally:
        client.stop_stream()
    (ok, _), (_, error), (third, _) = received
    assert ok.get_response().id == "a"
    np.testing.assert_array_equal(ok.as_numpy("OUTPUT0"), first * 2)
    assert "unknown model 'no_such_model'" in str(error)
    np.testing.assert_array_equal(third.as_numpy("OUTPUT1"), -first)


def test_metadata_config_index_health(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert client.is_model_ready("densenet_onnx", "1")
    assert not client.is_model_ready("no_such_model")
    assert not client.is_model_ready("simple", "7")
    server = client.get_server_metadata(as_json=True)
    assert server["name"] == "triton"  # as Triton's example clients require
    assert "binary_tensor_data" in server["extensions"]
    metadata = client.get_model_metadata("simple", as_json=True)
    assert metadata["versions"] == ["1"]
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "16"]}
    config = client.get_model_config("simple").config
    assert (config.name, config.max_batch_size) == ("simple", 8)
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert config.response_cache.enable
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {(row["name"], row["version"], row["state"]) for row in index} >= {
        ("densenet_onnx", "1", "READY"),
        ("simple", "1", "READY"),
        ("simple_string", "1", "READY"),
    }


def _refused(call: Callable[[], Any]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def test_errors_carry_triton_status_codes_and_our_messages(
    client: grpcclient.InferenceServerClient,
) -> None:
    ints = np.zeros((1, 16), dtype=np.int32)
    unknown = _refused(lambda: client.infer("no_such_model", _inputs(_pair(ints, ints), "INT32")))
    assert unknown.status() == "StatusCode.NOT_FOUND"
    assert unknown.message() == "Request for unknown model 'no_such_model': not in the repository"
    strings = np.array([[b"1"] * 16], dtype=np.object_)
    wrong_type = _refused(lambda: client.infer("simple", _inputs(_pair(strings, strings), "BYTES")))
    assert wrong_type.status() == "StatusCode.INVALID_ARGUMENT"
    assert "datatype 'BYTES' does not match the model's INT32" in wrong_type.message()
    long = np.zeros((1, 17), dtype=np.int32)
    wrong_shape = _refused(lambda: client.infer("simple", _inputs(_pair(long, long), "INT32")))
    assert "shape [1, 17] does not match the model's [-1, 16]" in wrong_shape.message()
    missing = _refused(lambda: client.infer("simple", _inputs({"INPUT0": ints}, "INT32")))
    assert "missing input 'INPUT1'" in missing.message()
    no_output = _refused(
        lambda: client.infer(
            "simple",
            _inputs(_pair(ints, ints), "INT32"),
            outputs=[grpcclient.InferRequestedOutput("OUTPUT9")],
        )
    )
    assert "unknown output 'OUTPUT9'" in no_output.message()
    no_meta = _refused(lambda: client.get_model_metadata("no_such_model"))
    assert no_meta.status() == "StatusCode.NOT_FOUND"


async def test_asyncio_client(sample_server: ServerProcess) -> None:
    async with aioclient.InferenceServerClient(sample_server.grpc_url) as client:
        assert await client.is_server_ready()
        assert await client.is_model_ready("simple")
        first = np.arange(16, dtype=np.int32).reshape(1, 16)
        result = await client.infer(
            "simple", _inputs(_pair(first, first * 3), "INT32", aioclient), request_id="aio"
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first * 4)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), -first * 2)
        assert result.get_response().id == "aio"
        metadata = await client.get_model_metadata("simple_string", as_json=True)
        assert metadata["inputs"][0]["datatype"] == "BYTES"
        with pytest.raises(InferenceServerException, match="unknown model"):
            await client.infer("no_such_model", _inputs(_pair(first, first), "INT32", aioclient))


def test_grpc_requests_are_in_the_metrics(make_server: Callable[..., ServerProcess]) -> None:
    server = make_server()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        first = np.ones((1, 16), dtype=np.int32)
        for _ in range(3):
            client.infer("simple", _inputs(_pair(first, first), "INT32"))
        with pytest.raises(InferenceServerException):
            client.infer("simple", _inputs({"INPUT0": first}, "INT32"))
    with urllib.request.urlopen(f"{server.base_url}/metrics") as response:
        text = response.read().decode()
    assert 'cachefleet_request_seconds_count{model="simple",version="1"} 4.0' in text
    assert 'cachefleet_cache_misses_total{model="simple",version="1"} 1.0' in text
    assert 'cachefleet_cache_hits_total{model="simple",tier="local",version="1"} 2.0' in text


def test_two_workers_share_the_grpc_port(make_server: Callable[..., ServerProcess]) -> None:
    server = make_server("--workers", "2")
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    for number in range(6):  # a new connection each time: the kernel spreads them
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("simple", _inputs(_pair(first, first + number), "INT32"))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.full((1, 16), -number))


def test_grpc_port_in_use_stops_the_server_with_a_message(model_repository: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        command = [
            sys.executable, "-P", "-m", "cachefleet.cli.main", "serve",
            "--model-repository", str(model_repository), "--host", "127.0.0.1",
            "--port", str(free_port()), "--grpc-port", str(busy),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr == (
        f"cachefleet serve: error: --grpc-port {busy}: cannot listen on 127.0.0.1:{busy} "
        "(Address already in use; another server there?)\n"
    )


def test_grpc_off_with_port_zero(make_server: Callable[..., ServerProcess]) -> None:
    server = make_server("--grpc-port", "0")
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException, match="UNAVAILABLE"),
    ):
        client.is_server_live(client_timeout=2)


def test_messages_over_the_size_limit_are_refused(
    make_server: Callable[..., ServerProcess], image: np.ndarray
) -> None:
    server = make_server("--max-request-size", "64Ki")
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        refused = _refused(
            lambda: client.infer("densenet_onnx", _inputs({"data_0": image}, "FP32"))
        )
        assert refused.status() == "StatusCode.RESOURCE_EXHAUSTED"
        first = np.ones((1, 16), dtype=np.int32)
        result = client.infer("simple", _inputs(_pair(first, first), "INT32"))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first * 2)
