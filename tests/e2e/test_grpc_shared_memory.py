"""System shared memory over gRPC with the real tritonclient.grpc and its shared_memory module."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from support.processes import ServerProcess
from tritonclient import utils
from tritonclient.utils import InferenceServerException

_counter = itertools.count()
Region = Callable[[int], tuple[str, Any]]


@pytest.fixture
def client(sample_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(sample_server.grpc_url) as triton:
        yield triton
        triton.unregister_system_shared_memory()


@pytest.fixture
def region(client: grpcclient.InferenceServerClient) -> Iterator[Region]:
    """Create and register a shared-memory object; (name, handle). Destroyed afterwards."""
    made: list[Any] = []

    def make(byte_size: int) -> tuple[str, Any]:
        name = f"grpc-region{next(_counter)}"
        key = f"/cachefleet-grpc-test-{os.getpid()}-{name}"
        handle = shm.create_shared_memory_region(name, key, byte_size)
        made.append(handle)
        client.register_system_shared_memory(name, key, byte_size)
        return name, handle

    yield make
    client.unregister_system_shared_memory()
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def _simple_inputs(name: str, size: int) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory(name, size)
    inputs[1].set_shared_memory(name, size, offset=size)
    return inputs


def test_inputs_and_outputs_through_shared_memory(
    client: grpcclient.InferenceServerClient, region: Region
) -> None:
    first = np.arange(16, dtype=np.int32).reshape(1, 16) * 3
    second = np.full((1, 16), 5, dtype=np.int32)
    size = first.nbytes
    in_name, in_handle = region(2 * size)
    out_name, out_handle = region(2 * size)
    shm.set_shared_memory_region(in_handle, [first])
    shm.set_shared_memory_region(in_handle, [second], offset=size)
    outputs = [grpcclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory(out_name, size)
    outputs[1].set_shared_memory(out_name, size, offset=size)
    result = client.infer("simple", _simple_inputs(in_name, size), outputs=outputs)
    assert len(result.get_response().raw_output_contents) == 0
    total = result.get_output("OUTPUT0")
    assert total.parameters["shared_memory_region"].string_param == out_name
    assert total.parameters["shared_memory_byte_size"].int64_param == size
    got_sum = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
    got_difference = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=size)
    np.testing.assert_array_equal(got_sum, first + second)
    np.testing.assert_array_equal(got_difference, first - second)


def test_one_output_in_shared_memory_and_one_in_the_response(
    client: grpcclient.InferenceServerClient, region: Region
) -> None:
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    size = first.nbytes
    in_name, in_handle = region(2 * size)
    out_name, out_handle = region(size)
    shm.set_shared_memory_region(in_handle, [first, first])
    outputs = [grpcclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory(out_name, size)
    result = client.infer("simple", _simple_inputs(in_name, size), outputs=outputs)
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(out_handle, np.int32, [1, 16]), first * 2
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first * 0)


def test_bytes_through_shared_memory_and_one_cache_entry_with_raw(
    client: grpcclient.InferenceServerClient, region: Region
) -> None:
    values = np.array([[str(n).encode() for n in range(16)]], dtype=np.object_)
    serialized = utils.serialize_byte_tensor(values)
    size = utils.serialized_byte_size(serialized)
    in_name, in_handle = region(2 * size)
    shm.set_shared_memory_region(in_handle, [serialized, serialized])
    inputs = [grpcclient.InferInput(n, [1, 16], "BYTES") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory(in_name, size)
    inputs[1].set_shared_memory(in_name, size, offset=size)
    from_shm = client.infer("simple_string", inputs)
    assert [int(v) for v in from_shm.as_numpy("OUTPUT0").ravel()] == [2 * n for n in range(16)]
    raw = [grpcclient.InferInput(n, [1, 16], "BYTES") for n in ("INPUT0", "INPUT1")]
    for item in raw:
        item.set_data_from_numpy(values)
    client.infer("simple_string", raw)
    stats = client.get_inference_statistics("simple_string").model_stats[0]
    assert stats.inference_stats.cache_hit.count >= 1


def test_status_lists_regions_and_unregister_forgets_them(
    client: grpcclient.InferenceServerClient, region: Region
) -> None:
    name, _ = region(64)
    status = client.get_system_shared_memory_status(name)
    assert status.regions[name].byte_size == 64
    assert status.regions[name].key.startswith("/cachefleet-grpc-test-")
    client.unregister_system_shared_memory(name)
    assert name not in client.get_system_shared_memory_status().regions


@pytest.mark.parametrize(
    ("offset", "byte_size", "message"),
    [
        (65, 64, "cannot read 64 bytes at offset 65"),
        (0, 8, "needs 64 bytes"),
        (2**40, 64, "cannot read"),
    ],
)
def test_bad_windows_are_invalid_arguments(
    client: grpcclient.InferenceServerClient,
    region: Region,
    offset: int,
    byte_size: int,
    message: str,
) -> None:
    name, _ = region(128)
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory(name, 64)
    inputs[1].set_shared_memory(name, byte_size, offset=offset)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("simple", inputs)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert message in caught.value.message()


def test_unknown_region_and_cuda_are_refused(client: grpcclient.InferenceServerClient) -> None:
    inputs = _simple_inputs("no-such-region", 64)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("simple", inputs)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match="CUDA shared memory is not supported"):
        client.register_cuda_shared_memory("gpu", b"aGFuZGxl", 0, 64)
    assert len(client.get_cuda_shared_memory_status().regions) == 0
    client.unregister_cuda_shared_memory()
