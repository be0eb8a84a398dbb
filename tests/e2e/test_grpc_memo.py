"""Repeated gRPC ``ModelInfer`` local hits, answered on the server's threads from encoded
responses: what a client notices is nothing. Every repeat carries the bytes, the ``x-cache``
trailer, the counters and the statistics the first local hit had, and none outlives the cached
entry it came from, however hits, misses and flushes interleave."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from support import loopback
from support.batching import metric
from support.processes import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc

Stub = service_pb2_grpc.GRPCInferenceServiceStub
MakeServer = Callable[..., ServerProcess]


def _server(make_server: MakeServer) -> ServerProcess:
    """A server whose local tier answers every cached model: admission (``auto``) may skip a
    tier for a model as cheap as ``simple``, which would answer ``bypass`` here."""
    return make_server("--cache-admission", "always")


def _request(first: int, second: int, request_id: str = "r1") -> Any:
    request = service_pb2.ModelInferRequest(model_name="simple", id=request_id)
    for name, value in (("INPUT0", first), ("INPUT1", second)):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.full(16, value, dtype=np.int32).tobytes())
    return request


def _infer(stub: Any, request: Any, metadata: tuple[tuple[str, str], ...] = ()) -> tuple[Any, str]:
    response, call = stub.ModelInfer.with_call(request, metadata=metadata, timeout=30)
    return response, dict(call.trailing_metadata())["x-cache"]


def _sums(response: Any) -> np.ndarray:
    return np.frombuffer(response.raw_output_contents[0], dtype=np.int32)


def _flush(server: ServerProcess) -> None:
    answer = loopback.post(f"{server.base_url}/v2/models/simple/cache/flush", timeout=30)
    assert answer.status_code == 200, answer.text


def test_repeats_answer_with_the_same_bytes_trailers_and_statistics(
    make_server: MakeServer,
) -> None:
    server = _server(make_server)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = Stub(channel)
        answers = [_infer(stub, _request(2, 5)) for _ in range(5)]
        statistics = stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name="simple"))

    assert [status for _, status in answers] == ["miss"] + ["hit-local"] * 4
    assert len({response.SerializeToString() for response, _ in answers}) == 1
    response = answers[-1][0]
    assert response.id == "r1"
    assert (_sums(response) == 7).all()
    stats = statistics.model_stats[0].inference_stats
    assert stats.success.count == 5
    assert stats.cache_hit.count == 4
    assert stats.cache_miss.count == 1
    assert stats.cache_hit.ns > 0
    assert metric(server, "cachefleet_requests_total", "simple") == 5
    assert metric(server, "cachefleet_cache_hits_total", "simple") == 4
    assert metric(server, "nv_cache_num_hits_per_model", "simple") == 4


def test_a_read_right_after_a_repeated_answer_counts_it(make_server: MakeServer) -> None:
    """The server's threads only queue their hits; whatever reads the counts (statistics over
    gRPC and HTTP, ``/metrics``) writes the queue down first, so the read a client makes right
    after its answer, whichever it is, counts that answer."""
    server = _server(make_server)
    array = np.full((1, 16), 6, dtype=np.int32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        infer_input = grpcclient.InferInput(name, [1, 16], "INT32")
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)

    def grpc_statistics(client: grpcclient.InferenceServerClient) -> tuple[int, int]:
        (stats,) = client.get_inference_statistics("simple", as_json=True)["model_stats"]
        inference = stats["inference_stats"]
        hits = inference.get("cache_hit", {}).get("count", 0)  # JSON of proto3: 0 is absent
        return int(inference["success"]["count"]), int(hits)

    def http_statistics(client: grpcclient.InferenceServerClient) -> tuple[int, int]:
        answer = loopback.get(f"{server.base_url}/v2/models/simple/stats", timeout=30)
        (stats,) = answer.json()["model_stats"]
        inference = stats["inference_stats"]
        return inference["success"]["count"], inference["cache_hit"]["count"]

    def metrics(client: grpcclient.InferenceServerClient) -> tuple[int, int]:
        assert metric(server, "cachefleet_queue_pending", "simple") == 0
        success = metric(server, "nv_inference_request_success", "simple")
        assert metric(server, "cachefleet_requests_total", "simple") == success
        return int(success), int(metric(server, "cachefleet_cache_hits_total", "simple"))

    readers = [grpc_statistics, http_statistics, metrics]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for answered in range(1, 10):
            result = client.infer("simple", inputs)
            assert (result.as_numpy("OUTPUT0") == 12).all()
            reader = readers[answered % len(readers)]
            assert reader(client) == (answered, answered - 1), reader.__name__


def test_a_flush_ends_the_repeated_answer(make_server: MakeServer) -> None:
    server = _server(make_server)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = Stub(channel)
        request = _request(1, 1)
        assert [_infer(stub, request)[1] for _ in range(3)] == ["miss", "hit-local", "hit-local"]
        _flush(server)
        assert [_infer(stub, request)[1] for _ in range(2)] == ["miss", "hit-local"]


def test_cache_control_metadata_skips_the_repeated_answer(make_server: MakeServer) -> None:
    server = _server(make_server)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = Stub(channel)
        request = _request(3, 4)
        for _ in range(3):
            _infer(stub, request)
        response, status = _infer(stub, request, (("cache-control", "no-cache"),))
    assert status == "bypass"
    assert (_sums(response) == 7).all()


def test_concurrent_hits_misses_and_flushes_never_answer_wrongly(make_server: MakeServer) -> None:
    server = _server(make_server)
    """Eight clients repeat eight requests while the cache is flushed under them: every answer
    is its own request's, and once they stop, a flush makes the next request a miss."""
    failures: list[str] = []
    stop = threading.Event()

    def client(index: int) -> None:
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = Stub(channel)
            rounds = 0
            while not stop.is_set() or rounds < 20:
                value = (index + rounds) % 8
                response, status = _infer(stub, _request(value, 10, f"c{index}"))
                if not (_sums(response) == value + 10).all() or response.id != f"c{index}":
                    failures.append(f"client {index}: wrong answer for {value}")
                if status not in ("miss", "hit-local"):
                    failures.append(f"client {index}: x-cache {status}")
                rounds += 1

    threads = [threading.Thread(target=client, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for _ in range(10):
        _flush(server)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []

    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = Stub(channel)
        request = _request(0, 10, "c0")
        _infer(stub, request)
        assert _infer(stub, request)[1] == "hit-local"
        _flush(server)
        assert _infer(stub, request)[1] == "miss"
