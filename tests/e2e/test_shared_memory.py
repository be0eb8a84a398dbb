"""System shared memory through the real tritonclient.http and its shared_memory module."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from support.processes import ServerProcess
from tritonclient import utils
from tritonclient.utils import InferenceServerException

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples

_counter = itertools.count()


@pytest.fixture
def client(sample_server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    triton = httpclient.InferenceServerClient(sample_server.url)
    yield triton
    triton.unregister_system_shared_memory()
    triton.close()


Region = Callable[[int], tuple[str, str, Any]]


@pytest.fixture
def region(client: httpclient.InferenceServerClient) -> Iterator[Region]:
    """Create (and afterwards destroy) a shared-memory object and register it: (name, key,
    handle). Keys carry the process id, so parallel runs never share an object."""
    made: list[Any] = []

    def make(byte_size: int) -> tuple[str, str, Any]:
        name = f"region{next(_counter)}"
        key = f"/cachefleet-test-{os.getpid()}-{name}"
        handle = shm.create_shared_memory_region(name, key, byte_size)
        made.append(handle)
        client.register_system_shared_memory(name, key, byte_size)
        return name, key, handle

    yield make
    client.unregister_system_shared_memory()
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def _cache_hits(client: httpclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return int(stats["inference_stats"]["cache_hit"]["count"])


def test_simple_through_shared_memory(
    client: httpclient.InferenceServerClient, region: Region
) -> None:
    first = np.arange(16, dtype=np.int32).reshape(1, 16) * 7
    second = np.full((1, 16), -4, dtype=np.int32)
    size = first.nbytes
    in_name, _, in_handle = region(2 * size)
    out_name, _, out_handle = region(2 * size)
    shm.set_shared_memory_region(in_handle, [first])
    shm.set_shared_memory_region(in_handle, [second], offset=size)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_shared_memory(in_name, size)
    inputs[1].set_shared_memory(in_name, size, offset=size)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0"),
        httpclient.InferRequestedOutput("OUTPUT1"),
    ]
    outputs[0].set_shared_memory(out_name, size)
    outputs[1].set_shared_memory(out_name, size, offset=size)

    hits = _cache_hits(client, "simple")
    result = client.infer("simple", inputs, outputs=outputs)
    total = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
    difference = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=size)
    np.testing.assert_array_equal(total, first + second)
    np.testing.assert_array_equal(difference, first - second)
    rendered = result.get_output("OUTPUT1")
    assert rendered["parameters"] == {
        "shared_memory_region": out_name,
        "shared_memory_byte_size": size,
        "shared_memory_offset": size,
    }
    assert "data" not in rendered

    # The same tensors sent in the body are the same cache entry.
    body_inputs = []
    for name, array in (("INPUT0", first), ("INPUT1", second)):
        body_input = httpclient.InferInput(name, [1, 16], "INT32")
        body_input.set_data_from_numpy(array)
        body_inputs.append(body_input)
    again = client.infer("simple", body_inputs)
    np.testing.assert_array_equal(again.as_numpy("OUTPUT0"), first + second)
    assert _cache_hits(client, "simple") == hits + 1

    status = {row["name"]: row for row in client.get_system_shared_memory_status()}
    assert status[in_name]["byte_size"] == 2 * size
    assert status[in_name]["offset"] == 0
    client.unregister_system_shared_memory(in_name)
    assert in_name not in {row["name"] for row in client.get_system_shared_memory_status()}


def test_bytes_tensors_through_shared_memory(
    client: httpclient.InferenceServerClient, region: Region
) -> None:
    numbers = np.arange(16, dtype=np.int32).reshape(1, 16)
    strings = np.array([str(n).encode() for n in numbers.ravel()], dtype=np.object_).reshape(1, 16)
    twos = np.array([b"2"] * 16, dtype=np.object_).reshape(1, 16)
    serialized = [utils.serialize_byte_tensor(array) for array in (strings, twos)]
    sizes = [utils.serialized_byte_size(data) for data in serialized]
    inputs = []
    for input_name, data, size in zip(("INPUT0", "INPUT1"), serialized, sizes, strict=True):
        name, _, handle = region(size)
        shm.set_shared_memory_region(handle, [data])
        infer_input = httpclient.InferInput(input_name, [1, 16], "BYTES")
        infer_input.set_shared_memory(name, size)
        inputs.append(infer_input)
    out_name, _, out_handle = region(256)
    output = httpclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory(out_name, 256)
    client.infer("simple_string", inputs, outputs=[output])
    got = shm.get_contents_as_numpy(out_handle, np.object_, [1, 16])
    assert [int(item) for item in got.ravel()] == (numbers + 2).ravel().tolist()


def test_densenet_input_from_shared_memory_equals_the_body(
    client: httpclient.InferenceServerClient, region: Region
) -> None:
    image = np.random.default_rng(5).random((3, 224, 224), dtype=np.float32)
    name, _, handle = region(image.nbytes)
    shm.set_shared_memory_region(handle, [image])
    from_shm = httpclient.InferInput("data_0", [3, 224, 224], "FP32")
    from_shm.set_shared_memory(name, image.nbytes)
    from_body = httpclient.InferInput("data_0", [3, 224, 224], "FP32")
    from_body.set_data_from_numpy(image)
    no_cache = {"Cache-Control": "no-store"}
    scores_shm = client.infer("densenet_onnx", [from_shm], headers=no_cache).as_numpy("fc6_1")
    scores_body = client.infer("densenet_onnx", [from_body], headers=no_cache).as_numpy("fc6_1")
    assert scores_shm.tobytes() == scores_body.tobytes()


def _simple_inputs(name: str, byte_size: int, offset: int = 0) -> list[Any]:
    inputs = []
    for input_name in ("INPUT0", "INPUT1"):
        infer_input = httpclient.InferInput(input_name, [1, 16], "INT32")
        infer_input.set_shared_memory(name, byte_size, offset=offset)
        inputs.append(infer_input)
    return inputs


def test_bad_regions_offsets_and_sizes_are_400s(
    client: httpclient.InferenceServerClient, region: Region, sample_server: ServerProcess
) -> None:
    def refused(call: Callable[[], Any], message: str) -> None:
        with pytest.raises(InferenceServerException, match=message) as error:
            call()
        assert error.value.status() == "400"

    name, key, _ = region(64)
    refused(lambda: client.register_system_shared_memory(name, key, 64), "already registered")
    refused(
        lambda: client.register_system_shared_memory("x", "/cachefleet-no-such-object", 8),
        "unable to open",
    )
    refused(lambda: client.register_system_shared_memory("x", "/../etc/passwd", 8), "one name")
    link = f"/cachefleet-test-{os.getpid()}-link"
    os.symlink("/etc/hostname", f"/dev/shm{link}")
    try:
        refused(lambda: client.register_system_shared_memory("x", link, 4), "unable to open")
    finally:
        os.unlink(f"/dev/shm{link}")
    refused(lambda: client.register_system_shared_memory("x", key, 65), "past the end")
    refused(lambda: client.register_system_shared_memory("x", key, 8, offset=60), "past the end")
    refused(lambda: client.infer("simple", _simple_inputs("nope", 64)), "unable to find")
    refused(lambda: client.infer("simple", _simple_inputs(name, 64, offset=8)), "region has 64")
    refused(lambda: client.infer("simple", _simple_inputs(name, 32)), "64 bytes")
    output = httpclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory(name, 16)
    refused(
        lambda: client.infer("simple", _simple_inputs(name, 64), outputs=[output]),
        "more than the 16 bytes",
    )

    # A client that shrinks the object after registering gets a 400, not a dead server.
    os.truncate(f"/dev/shm/{key.lstrip('/')}", 16)
    refused(lambda: client.infer("simple", _simple_inputs(name, 64)), "shrank")
    assert client.is_server_live()


def test_cuda_shared_memory_is_reported_unsupported(
    client: httpclient.InferenceServerClient,
) -> None:
    assert client.get_cuda_shared_memory_status() == []
    client.unregister_cuda_shared_memory()  # nothing to do, and not an error
    with pytest.raises(InferenceServerException, match="CUDA shared memory is not supported"):
        client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64)


def test_repeated_shared_memory_requests_read_and_write_the_regions_every_time(
    client: httpclient.InferenceServerClient, region: Region
) -> None:
    """The same request body, sent again after the input region changed, must answer for the
    new contents and write the output region again: its body does not hold its tensors, so
    the memo of rendered responses must never answer it."""
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    size = first.nbytes
    in_name, _, in_handle = region(2 * size)
    out_name, _, out_handle = region(size)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_shared_memory(in_name, size)
    inputs[1].set_shared_memory(in_name, size, offset=size)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0")]
    outputs[0].set_shared_memory(out_name, size)

    for value in (1, 1, 1, 5, 5, 9):  # repeats are cache hits, and candidates for the memo
        shm.set_shared_memory_region(in_handle, [first])
        shm.set_shared_memory_region(in_handle, [np.full((1, 16), value, np.int32)], offset=size)
        shm.set_shared_memory_region(out_handle, [np.zeros((1, 16), np.int32)])
        client.infer("simple", inputs, outputs=outputs)
        total = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
        np.testing.assert_array_equal(total, first + value)


def test_a_file_truncated_during_reads_is_a_400_never_a_crash(
    client: httpclient.InferenceServerClient, region: Region
) -> None:
    """A client shrinks and regrows its object while the server copies 16 MiB out of it: each
    request is a 200 or a 400, and the server lives (a mapped region would die of SIGBUS)."""
    size = 16 << 20
    name, key, handle = region(size)
    element = b"a" * (size - 4)
    shm.set_shared_memory_region(handle, [np.array([[element]], dtype=np.object_)])
    path = f"/dev/shm/{key.lstrip('/')}"
    stop = threading.Event()

    def shrink_and_regrow() -> None:
        while not stop.is_set():
            os.truncate(path, 8)
            os.truncate(path, size)

    flapper = threading.Thread(target=shrink_and_regrow)
    flapper.start()
    statuses = []
    try:
        for _ in range(30):
            infer_input = httpclient.InferInput("INPUT0", [1, 1], "BYTES")
            infer_input.set_shared_memory(name, size)
            try:
                client.infer(
                    "simple_identity", [infer_input], headers={"Cache-Control": "no-store"}
                )
                statuses.append("200")
            except InferenceServerException as error:
                statuses.append(str(error.status()))
    finally:
        stop.set()
        flapper.join()
    assert set(statuses) <= {"200", "400"}, statuses
    assert client.is_server_live()


def test_the_window_is_checked_against_the_tensor_before_any_copy(
    client: httpclient.InferenceServerClient, region: Region
) -> None:
    name, _, _ = region(8 << 20)
    with pytest.raises(InferenceServerException, match="needs 64 bytes") as error:
        client.infer("simple", _simple_inputs(name, 8 << 20))
    assert error.value.status() == "400"


def test_what_one_request_reads_from_shared_memory_is_bounded_like_a_body(
    make_server: Callable[..., ServerProcess],
) -> None:
    """A BYTES window needs only room for its length prefixes, so one element of a megabyte
    in a region of a megabyte would be copied for a request of a few hundred bytes: over
    ``--max-request-size`` it is a 413 naming the flag, over HTTP and gRPC, before any copy."""
    server = make_server("--max-request-size", "64Ki")
    big = np.array([[b"x" * (1 << 20)]], dtype=np.object_)
    small = np.array([[b"y" * 1000]], dtype=np.object_)
    handles = []
    http = httpclient.InferenceServerClient(server.url)
    try:
        for label, array in (("big", big), ("small", small)):
            data = utils.serialize_byte_tensor(array)
            size = utils.serialized_byte_size(data)
            key = f"/cachefleet-test-{os.getpid()}-bound-{label}-{next(_counter)}"
            handle = shm.create_shared_memory_region(label, key, size)
            handles.append(handle)
            shm.set_shared_memory_region(handle, [data])
            http.register_system_shared_memory(label, key, size)
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            for client, module, status in (
                (http, httpclient, "413"),
                (grpc, grpcclient, "StatusCode.RESOURCE_EXHAUSTED"),
            ):
                for label, array in (("big", big), ("small", small)):
                    infer_input = module.InferInput("INPUT0", [1, 1], "BYTES")
                    size = utils.serialized_byte_size(utils.serialize_byte_tensor(array))
                    infer_input.set_shared_memory(label, size)
                    if label == "small":
                        result = client.infer("simple_identity", [infer_input])
                        assert result.as_numpy("OUTPUT0").ravel()[0] == b"y" * 1000
                        continue
                    with pytest.raises(InferenceServerException) as refused:
                        client.infer("simple_identity", [infer_input])
                    assert refused.value.status() == status
                    assert "--max-request-size" in str(refused.value.message())
    finally:
        http.unregister_system_shared_memory()
        http.close()
        for handle in handles:
            shm.destroy_shared_memory_region(handle)
