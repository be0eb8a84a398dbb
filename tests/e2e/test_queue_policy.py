"""Triton's queue policy through the real server: a full queue and a request past its queue
timeout are answered as Triton answers them (HTTP 503 / gRPC UNAVAILABLE, with Triton's
messages), and the request that waited its turn still gets its answer."""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.processes import ServerProcess
from support.sample_requests import simple_grpc_request
from tritonclient.grpc import service_pb2_grpc

#: ``simple`` with a dynamic batcher that holds a lone request for a second, and a queue of one.
QUEUED = """
dynamic_batching {
  max_queue_delay_microseconds: 1000000
  default_queue_policy { max_queue_size: 1 allow_timeout_override: true }
}
"""


@pytest.fixture
def server(
    model_repository: Path, tmp_path: Path, make_server: Callable[..., ServerProcess]
) -> ServerProcess:
    repository = tmp_path / "repo"
    shutil.copytree(model_repository / "simple", repository / "simple")
    config = repository / "simple" / "config.pbtxt"
    config.write_text(config.read_text() + QUEUED)
    return make_server("--cache", "none", repository=repository)


def _post(server: ServerProcess, parameters: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = [1] * 16
    document: dict[str, Any] = {
        "inputs": [
            {"name": name, "datatype": "INT32", "shape": [1, 16], "data": data}
            for name in ("INPUT0", "INPUT1")
        ]
    }
    if parameters:
        document["parameters"] = parameters
    request = urllib.request.Request(
        f"{server.base_url}/v2/models/simple/infer", data=json.dumps(document).encode()
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, (json.loads(error.read()), error.headers.get("Retry-After"))


def test_a_full_queue_and_a_queue_timeout_answer_as_triton(server: ServerProcess) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_post, server)
        time.sleep(0.3)  # it sits in the queue for its second
        status, (body, retry_after) = _post(server)
        assert (status, body) == (503, {"error": "Exceeds maximum queue size"})
        assert retry_after == "1"
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.ModelInfer(simple_grpc_request())
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert caught.value.details() == "Exceeds maximum queue size"
        status, answer = waiting.result()
    assert status == 200
    assert answer["outputs"][0]["data"] == [2] * 16
    # Alone in the queue, it would wait a second; its own timeout (microseconds) is 0.1 s.
    started = time.monotonic()
    status, (body, _) = _post(server, {"timeout": 100_000})
    assert (status, body) == (503, {"error": "Request timeout expired"})
    assert time.monotonic() - started < 0.9
