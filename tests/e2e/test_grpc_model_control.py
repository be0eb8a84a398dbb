"""Model repository control over gRPC, with the real tritonclient.grpc (sync and asyncio)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from support.batching import (
    FOREVER_US,
    picker_config,
    wait_pending,
    write_picker,
    write_variant,
)
from support.processes import ServerProcess
from support.waiting import wait_for
from tritonclient.grpc import service_pb2, service_pb2_grpc
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


#: Seconds within which a call that must answer has answered (a bounded wait, not a timing).
ANSWERS_WITHIN_S = 30
#: Waits in its batch queue until two more requests join it (a batch of three), for ever else.
WAIT_FOR_THREE = (
    f"dynamic_batching {{ preferred_batch_size: [ 3 ] max_queue_delay_microseconds: {FOREVER_US} }}"
)


class Loader:
    """A client that loads ``simple`` in a loop from its own thread until stopped, and
    records how each load ended (``OK`` or the status)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.outcomes: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with grpcclient.InferenceServerClient(self.url) as client:
            while not self.stopped.is_set():
                try:
                    client.load_model("simple", client_timeout=300)
                    self.outcomes.append("OK")
                except InferenceServerException as error:
                    self.outcomes.append(str(error.status()))


def test_model_loads_never_take_the_capacity_of_health_calls(
    make_server: Callable[..., ServerProcess], model_repository: Path, tmp_path: Path
) -> None:
    """Loads held on purpose: an unload drains a request that waits in its batch queue until its
    client cancels it, and ten clients (more than the cap) load in a loop behind the unload
    (model control takes one at a time). ``ServerLive`` and metadata still answer; loads past
    ``--grpc-max-model-control`` are refused at once."""
    root = tmp_path / "repo"
    simple = (model_repository / "simple" / "config.pbtxt").read_text()
    write_variant(root, model_repository, "simple", "simple", simple)
    write_picker(root, "picker_wait", picker_config("picker_wait", batching=WAIT_FOR_THREE))
    server = make_server(
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--load-model", "picker_wait", repository=root,
    )  # fmt: skip
    unloaded: list[str] = []

    def unload() -> None:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.unload_model("picker_wait", client_timeout=300)
            unloaded.append("OK")

    loaders: list[Loader] = []
    with (
        grpc.insecure_channel(server.grpc_url) as channel,
        grpcclient.InferenceServerClient(server.grpc_url) as client,
    ):
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        held = stub.ModelInfer.future(_pick_request(0), timeout=300)
        wait_pending(server, "picker_wait", 1)
        unloader = threading.Thread(target=unload, daemon=True)
        unloader.start()
        try:
            wait_for(lambda: not client.is_model_ready("picker_wait"), "the unload draining", 60)
            loaders = [Loader(server.grpc_url) for _ in range(10)]
            for _ in range(5):  # the loads keep coming while these are asked
                assert client.is_server_live(client_timeout=ANSWERS_WITHIN_S)
                assert client.get_server_metadata(client_timeout=ANSWERS_WITHIN_S).name

            def refused() -> bool:
                exhausted = "StatusCode.RESOURCE_EXHAUSTED"
                return any(exhausted in loader.outcomes for loader in loaders)

            wait_for(refused, "a load past the cap refused", ANSWERS_WITHIN_S)
            assert not unloaded  # still held: everything above ran while the loads waited
            assert not any("OK" in loader.outcomes for loader in loaders)
        finally:
            held.cancel()  # the drained unload finishes, and the loads go on
            unloader.join(120)
            for loader in loaders:
                loader.stopped.set()
            for loader in loaders:
                loader.thread.join(120)
    assert unloaded == ["OK"]
    assert any("OK" in loader.outcomes for loader in loaders)


def _pick_request(index: int) -> Any:
    """A ``ModelInferRequest`` of ``picker_wait``: one row, INDEX ``index``."""
    return service_pb2.ModelInferRequest(
        model_name="picker_wait",
        inputs=[
            service_pb2.ModelInferRequest.InferInputTensor(
                name="INDEX",
                datatype="INT64",
                shape=[1, 1],
                contents=service_pb2.InferTensorContents(int64_contents=[index]),
            )
        ],
    )
