"""Model repository control over gRPC, with the real tritonclient.grpc (sync and asyncio)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from support.processes import ServerProcess
from tritonclient.utils import InferenceServerException


@pytest.fixture
def explicit(
    make_server: Callable[..., ServerProcess],
) -> Iterator[tuple[ServerProcess, grpcclient.InferenceServerClient]]:
    server = make_server("--model-control-mode", "explicit", "--load-model", "simple")
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield server, client


def _int8_add_sub(client: Any, module: Any = grpcclient) -> Any:
    first = np.arange(-8, 8, dtype=np.int8).reshape(1, 16)
    second = np.full((1, 16), 3, dtype=np.int8)
    inputs = []
    for name, array in (("INPUT0", first), ("INPUT1", second)):
        infer_input = module.InferInput(name, [1, 16], "INT8")
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return first, second, inputs


def test_load_infer_unload(
    explicit: tuple[ServerProcess, grpcclient.InferenceServerClient],
) -> None:
    _, client = explicit
    states = {m.name: m.state for m in client.get_model_repository_index().models}
    assert states["simple"] == "READY"
    assert states["simple_int8"] != "READY"
    assert not client.is_model_ready("simple_int8")

    client.load_model("simple_int8")
    assert client.is_model_ready("simple_int8")
    first, second, inputs = _int8_add_sub(client)
    result = client.infer("simple_int8", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)

    client.unload_model("simple_int8")
    assert not client.is_model_ready("simple_int8")
    with pytest.raises(InferenceServerException) as caught:
        client.infer("simple_int8", inputs)
    assert caught.value.status() == "StatusCode.NOT_FOUND"


def test_load_with_a_config_override_and_a_failed_load(
    explicit: tuple[ServerProcess, grpcclient.InferenceServerClient],
) -> None:
    _, client = explicit
    config = client.get_model_config("simple", as_json=True)["config"]
    config["max_batch_size"] = 2
    client.load_model("simple", config=json.dumps(config))
    assert client.get_model_config("simple").config.max_batch_size == 2
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("no_such_model")
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "failed to load 'no_such_model'" in caught.value.message()
    # Model files in the request load from a private copy; bytes that are no model fail to load.
    with pytest.raises(InferenceServerException, match="failed to load 'simple'"):
        client.load_model("simple", config=json.dumps(config), files={"file:1/model.onnx": b"x"})
    assert client.is_model_ready("simple")


def test_model_control_is_refused_without_explicit_mode(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.unload_model("simple")
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "--model-control-mode explicit" in caught.value.message()
        assert client.is_model_ready("simple")


async def test_asyncio_client_loads_and_unloads(
    explicit: tuple[ServerProcess, grpcclient.InferenceServerClient],
) -> None:
    server, _ = explicit
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        await client.load_model("simple_int8")
        first, second, inputs = _int8_add_sub(client, aioclient)
        result = await client.infer("simple_int8", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
        await client.unload_model("simple_int8", unload_dependents=True)
        assert not await client.is_model_ready("simple_int8")
